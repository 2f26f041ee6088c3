"""Which surrogate locates a client's optimum better, given the same data? (PACD-BO vs Independent BO, offline.)

The end-to-end comparison (``benchmarks/compare_methods.py``) mixes two
things: the model each method builds from its data, and the data each
method's own queries produced. This script holds the data fixed. For every
seed it runs one BO method (``--source``, default Independent) for ``--iters``
rounds, keeps every client's queries and observations, and then builds on
exactly those data, per client:

* ``independent``: the Independent baseline's GP (ARD Matérn-5/2, MAP fit,
  ``pacd_jax.standard_gp``), as its BO round does;
* ``pacd[:variant]``: the meta-learned K-particle mixture (paper eq. 8-9)
  after as many SVGD steps on all clients' data as PACD-BO's learner has
  taken by the end of the run (``svgd_steps_init + iters * svgd_steps``,
  2000 by default; the run takes them on growing data), from the
  hyper-prior draw of the seed (``variant`` changes RunConfig options, see
  ``VARIANTS``);
* ``pacd-own[:variant]``: the same learner trained on the client's own data
  alone (N = 1): the meta-GP model class without collaboration.

For each model it reports, over ``--candidates`` uniform points of the box
plus the data points:

* ``argmin_regret``: the normalised regret (DESIGN.md section 6) of the
  posterior mean's minimiser, ``(f(x_hat) - f*) / (f(best initial) - f*)``:
  how well the model says where the optimum is (what exploitation needs);
* ``argmin_distance``: the unit-box distance from that minimiser to the
  nearest data point (large: the model puts its minimum where it has no
  data, so UCB explores there);
* ``rmse_near``: RMSE of the posterior mean, in the objective's units,
  against the noise-free objective on the candidates within 5 % of the
  normalisation gap of the optimum (the region BO must refine).

Writes JSON (with command, commit, machine) and, with ``--readme``, a table
between the ``surrogate-quality`` markers of README.md (``--block`` names
another; ``--collect-only``: from ``--out``, computing nothing).

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
        python benchmarks/surrogate_quality.py --seeds 110,120 --out benchmarks/results/surrogate_quality.json --readme
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from pacd_jax import client, experiment, io, methods, standard_gp, tasks  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402
from pacd_jax.provenance import command, commit, machine  # noqa: E402

README_BLOCK = "surrogate-quality"
#: RunConfig changes a ``pacd:NAME`` / ``pacd-own:NAME`` model may name.
VARIANTS = {
    "default": {},
    "noise-6": dict(noise_prior=(-6.0, 1.0), noise_floor=1e-4),
    "feat4": dict(features=4),
    "kvar1": dict(kernel_variance=1.0),
    "feat8": dict(features=8),
    "feat4-hidden64": dict(features=4, hidden=(64, 64)),
    "xkern": dict(input_kernel=True),
    "xkern-feat4": dict(input_kernel=True, features=4),
    "matern": dict(feature_kernel="matern52"),
    "matern-xkern": dict(feature_kernel="matern52", input_kernel=True),
}
VARIANT_NOTES = {
    "noise-6": "noise prior N(-6, 1), floor 1e-4",
    "feat4": "4 kernel features",
    "kvar1": "kernel variance 1",
    "feat8": "8 kernel features",
    "feat4-hidden64": "4 kernel features, hidden layers 64-64",
    "xkern": "feature kernel times an ARD SE kernel on the inputs",
    "xkern-feat4": "4 kernel features, times an ARD SE kernel on the inputs",
    "matern": "Matérn-5/2 on the features",
    "matern-xkern": "Matérn-5/2 on the features and the scaled inputs",
}
KIND_NOTES = {
    "independent": "Independent BO's GP (ARD Matérn-5/2, MAP)",
    "pacd": "PACD-BO's K-particle mixture, learned on all clients",
    "pacd-own": "the same meta-GP learned on the client's own data alone",
}
NEAR = 0.05  # "near the optimum": f - f* below this share of the normalisation gap


@dataclasses.dataclass(frozen=True)
class Dataset:
    """One seed's fixed data: every client's unit-box queries and observations."""

    seed: int
    X: np.ndarray  # (N, m, d), unit box
    y: np.ndarray  # (N, m), observed
    f_star: np.ndarray  # (N,)
    gap: np.ndarray  # (N,): f(best initial point) - f*


def parse_models(text: str) -> list[tuple[str, str]]:
    """``"independent,pacd,pacd:feat4,pacd-own"`` -> ``[(kind, variant), ...]``; one clear ValueError otherwise."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        kind, _, variant = item.partition(":")
        variant = variant or "default"
        if kind not in ("independent", "pacd", "pacd-own"):
            raise ValueError(f"unknown model {item!r}: expected independent, pacd[:variant] or pacd-own[:variant]")
        if kind == "independent" and variant != "default":
            raise ValueError(f"the independent model has no variants ({item!r})")
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r} in {item!r}: one of {', '.join(VARIANTS)}")
        out.append((kind, variant))
    if not out:
        raise ValueError("--models names no model")
    return out


def model_name(kind: str, variant: str) -> str:
    return kind if variant == "default" else f"{kind}:{variant}"


def describe(name: str) -> str:
    """A model's table label: its name and what it is."""
    kind, _, variant = name.partition(":")
    note = KIND_NOTES.get(kind, kind)
    if variant:
        note += f"; {VARIANT_NOTES.get(variant, variant)}"
    return f"`{name}`: {note}"


def collect(benchmark: str, source: str, seed: int, iters: int, clients: int, init_points: int | None) -> tuple[Dataset, tasks.TaskFamily, RunConfig]:
    """Run ``source`` BO for one seed and keep the clients' data (unit box)."""
    base = RunConfig(benchmark=benchmark, method=source, num_clients=clients, seeds=(seed,), iters=iters,
                     **({"init_points": init_points} if init_points else {}))
    doc = experiment.run(base)
    family = tasks.make(benchmark, num_clients=clients, seed=seed)
    bounds = np.asarray(family.bounds, np.float64)
    lo, hi = bounds[:, 0], bounds[:, 1]
    rows = doc["results"][0]["clients"]
    m0 = doc["config"]["init_points"]
    X = np.stack([(np.asarray(c["X"]) - lo) / (hi - lo) for c in rows])
    y = np.stack([np.asarray(c["y"]) for c in rows])
    f = np.stack([np.asarray(c["f"]) for c in rows])
    f_star = np.array([family.optimum(i)[1] for i in range(clients)], np.float64)
    gap = f[:, :m0].min(axis=1) - f_star
    return Dataset(seed, X, y, f_star, gap), family, base


def candidates(family: tasks.TaskFamily, data: Dataset, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(N, C, d)`` unit-box candidates (``n`` uniform, shared, plus each client's data) and their noise-free values."""
    rng = np.random.default_rng([data.seed, 7])
    uniform = rng.uniform(size=(n, data.X.shape[-1]))
    bounds = np.asarray(family.bounds, np.float64)
    cand = np.stack([np.concatenate([uniform, data.X[i]]) for i in range(data.X.shape[0])])
    values = np.stack([np.asarray(family.evaluate(i, jnp.asarray(bounds[:, 0] + c * (bounds[:, 1] - bounds[:, 0]))), np.float64)
                       for i, c in enumerate(cand)])
    return cand, values


def _buffers(X: np.ndarray, y: np.ndarray, dtype) -> client.ClientBuffer:
    n, m = y.shape
    return client.ClientBuffer(jnp.asarray(X, dtype), jnp.asarray(y, dtype), jnp.full((n,), m, jnp.int32))


def independent_means(config: RunConfig, bufs: client.ClientBuffer, cand: np.ndarray) -> np.ndarray:
    """Each client's Independent-GP posterior mean (standardised units) at its candidates."""
    gp_config = standard_gp.StandardGPConfig(dim=bufs.X.shape[-1], kernel=config.gp_kernel, fit_steps=config.gp_fit_steps)
    h0 = standard_gp.default_hyper(gp_config, bufs.X.dtype)

    def one(buf, c):
        hyper = client.fit_standard_gp(gp_config, h0, buf)
        post = standard_gp.posterior(gp_config, hyper, client.model_data(buf))
        return standard_gp.predict(gp_config, post, c)[0]

    return np.asarray(jax.jit(jax.vmap(one))(bufs, jnp.asarray(cand, bufs.X.dtype)))


def meta_means(config: RunConfig, bufs: client.ClientBuffer, cand: np.ndarray, seed: int) -> np.ndarray:
    """The K-particle mixture's posterior mean at each client's candidates after round 0's SVGD steps on ``bufs``."""
    dim = bufs.X.shape[-1]
    method = methods.pacd(config, dim)
    learner = methods.meta_learner(config, dim)
    state = jax.jit(method.learn)(method.init(jnp.asarray(seed), bufs), bufs, jnp.asarray(0))

    def one(buf, c):
        posts = jax.vmap(learner.model.posterior, (0, None))(state.particles, client.model_data(buf))
        return learner.model.predict_mixture(posts, c)[0]

    return np.asarray(jax.jit(jax.vmap(one))(bufs, jnp.asarray(cand, bufs.X.dtype)))


def scores(mean_std: np.ndarray, data: Dataset, cand: np.ndarray, values: np.ndarray) -> list[dict]:
    """Per client: regret of the mean's minimiser, its distance to the data, RMSE near the optimum."""
    out = []
    for i in range(data.X.shape[0]):
        y = data.y[i]
        mean = mean_std[i] * y.std() + y.mean()  # back to the objective's units (model_data's statistics)
        j = int(np.argmin(mean_std[i]))
        near = values[i] - data.f_star[i] < NEAR * data.gap[i]
        out.append({
            "client": i,
            "argmin_regret": float((values[i, j] - data.f_star[i]) / data.gap[i]),
            "argmin_distance": float(np.min(np.linalg.norm(data.X[i] - cand[i, j], axis=-1))),
            "rmse_near": float(np.sqrt(np.mean((mean[near] - values[i][near]) ** 2))) if near.any() else None,
            "near_points": int(near.sum()),
        })
    return out


def evaluate_seed(args, models: list[tuple[str, str]], seed: int) -> dict:
    data, family, base = collect(args.benchmark, args.source, seed, args.iters, args.clients, args.init_points)
    cand, values = candidates(family, data, args.candidates)
    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    bufs = _buffers(data.X, data.y, dtype)
    record = {"seed": seed, "points": int(data.X.shape[1]),
              "incumbent_regret": ((data_min_f(family, data) - data.f_star) / data.gap).tolist(), "models": {}}
    for kind, variant in models:
        start = time.perf_counter()
        config = dataclasses.replace(base, method="pacd", **VARIANTS[variant])
        # the steps the run's learner has taken by its end, all on the final data here
        config = dataclasses.replace(config, svgd_steps_init=config.svgd_steps_init + args.iters * config.svgd_steps)
        if kind == "independent":
            means = independent_means(base, bufs, cand)
        elif kind == "pacd":
            means = meta_means(config, bufs, cand, seed)
        else:  # pacd-own: one learner per client, on its own data (N = 1)
            own = dataclasses.replace(config, num_clients=1)
            means = np.concatenate([meta_means(own, jax.tree_util.tree_map(lambda a: a[i:i + 1], bufs), cand[i:i + 1], seed)
                                    for i in range(args.clients)])
        per_client = scores(means, data, cand, values)
        record["models"][model_name(kind, variant)] = {"clients": per_client, "seconds": time.perf_counter() - start}
        regrets = [c["argmin_regret"] for c in per_client]
        print(f"seed {seed} {model_name(kind, variant):20s} argmin regret {np.mean(regrets):.4f} "
              f"({', '.join(f'{r:.4f}' for r in regrets)})", flush=True)
    return record


def data_min_f(family: tasks.TaskFamily, data: Dataset) -> np.ndarray:
    """Each client's best noise-free value among its queries (the BO run's own final incumbent)."""
    bounds = np.asarray(family.bounds, np.float64)
    return np.array([np.min(np.asarray(family.evaluate(i, jnp.asarray(bounds[:, 0] + x * (bounds[:, 1] - bounds[:, 0]))), np.float64))
                     for i, x in enumerate(data.X)])


def summary(records: list[dict]) -> dict:
    """Per model: mean and median over seeds of the client-averaged scores, and the share of far minimisers."""
    names = list(records[0]["models"])
    out = {}
    for name in names:
        reg = np.array([np.mean([c["argmin_regret"] for c in r["models"][name]["clients"]]) for r in records])
        allc = [c for r in records for c in r["models"][name]["clients"]]
        rmse = [c["rmse_near"] for c in allc if c["rmse_near"] is not None]
        out[name] = {
            "argmin_regret_mean": float(reg.mean()), "argmin_regret_std": float(reg.std()),
            "argmin_regret_median_client": float(np.median([c["argmin_regret"] for c in allc])),
            "far_share": float(np.mean([c["argmin_regret"] > 1.0 for c in allc])),
            "argmin_distance_median": float(np.median([c["argmin_distance"] for c in allc])),
            "rmse_near_median": float(np.median(rmse)) if rmse else None,
            "per_seed": reg.tolist(),
        }
    inc = np.array([np.mean(r["incumbent_regret"]) for r in records])
    out["_incumbent"] = {"argmin_regret_mean": float(inc.mean()), "argmin_regret_std": float(inc.std())}
    return out


def table(result: dict) -> str:
    meta, summ = result["meta"], result["summary"]
    rows = ["| model (on the same data) | regret of the mean's minimiser (mean ± std over seeds) | median client | "
            "clients whose minimiser is worse than their best initial point | median distance to the nearest data point "
            "| median RMSE near the optimum |", "|---|---|---|---|---|---|"]
    for name, s in summ.items():
        if name.startswith("_"):
            continue
        rmse = f"{s['rmse_near_median']:.3g}" if s["rmse_near_median"] is not None else "–"
        rows.append(f"| {describe(name)} | {s['argmin_regret_mean']:.4f} ± {s['argmin_regret_std']:.4f} | "
                    f"{s['argmin_regret_median_client']:.4f} | {100 * s['far_share']:.0f} % | "
                    f"{s['argmin_distance_median']:.3f} | {rmse} |")
    inc = summ["_incumbent"]
    rows.append("")
    rows.append(f"{meta['benchmark']}, {meta['clients']} clients, seeds {meta['seeds']}, data of {meta['source']} BO after "
                f"{meta['iters']} rounds (its own final regret: {inc['argmin_regret_mean']:.4f} ± {inc['argmin_regret_std']:.4f}); "
                f"minimiser over {meta['candidates']} uniform points plus the data; RMSE in the objective's units on the "
                f"candidates within {NEAR:g} of the normalisation gap of f*. Generated by `{meta['command']}` at commit "
                f"`{meta['commit']}` on {meta['machine']} ({meta['wall_time_s']:.0f} s).")
    return "\n".join(rows)


def parse_seeds(text: str) -> list[int]:
    """Half-open range ``START,STOP`` (as ``benchmarks/tune_pacd.py``); one clear ValueError otherwise."""
    try:
        start, stop = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--seeds wants START,STOP (a half-open range), got {text!r}") from None
    if stop <= start:
        raise ValueError(f"--seeds {text!r} is an empty range")
    return list(range(start, stop))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="branin")
    parser.add_argument("--source", default="independent", help="the BO method whose queries are the fixed data (default independent)")
    parser.add_argument("--seeds", default="110,120", help="half-open range START,STOP (default 110,120: tuning seeds, never the table's 0-9)")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--init-points", type=int, default=None)
    parser.add_argument("--candidates", type=int, default=20000)
    parser.add_argument("--models", default="independent,pacd,pacd-own", help="comma-separated: independent, pacd[:variant], pacd-own[:variant]")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "surrogate_quality.json"))
    parser.add_argument("--readme", action="store_true", help="put the table in README.md (between the --block markers)")
    parser.add_argument("--block", default=README_BLOCK, help=f"README block name (default {README_BLOCK})")
    parser.add_argument("--collect-only", action="store_true", help="compute nothing: print (and with --readme write) the table of --out")
    args = parser.parse_args(argv)
    if args.collect_only:
        text = table(io.read_json(args.out))
        print(text)
        if args.readme:
            io.replace_marked_block(ROOT / "README.md", args.block, text)
        return 0
    try:
        models = parse_models(args.models)
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        parser.error(str(exc))
    start = time.perf_counter()
    records = [evaluate_seed(args, models, seed) for seed in seeds]
    result = {
        "meta": {"command": command("benchmarks/surrogate_quality.py", argv), "commit": commit(), "machine": machine(),
                 "benchmark": args.benchmark, "source": args.source, "seeds": seeds, "iters": args.iters,
                 "clients": args.clients, "candidates": args.candidates, "models": [model_name(*m) for m in models],
                 "variants": {v: {k: list(x) if isinstance(x, tuple) else x for k, x in VARIANTS[v].items()} for _, v in models},
                 "wall_time_s": time.perf_counter() - start},
        "summary": summary(records),
        "records": records,
    }
    io.write_json(args.out, result)
    text = table(result)
    print(text)
    if args.readme:
        io.replace_marked_block(ROOT / "README.md", args.block, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
