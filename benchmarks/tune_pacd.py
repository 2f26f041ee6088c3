"""PACD-BO settings against Independent BO on tuning seeds (never the table's seeds 0-9).

Each variant changes the library defaults by the keyword arguments below and
runs 5 clients x 30 rounds on the seeds given; one line per (variant,
benchmark) with the mean, std and per-seed client-averaged final normalised
regret and AUC. Results go to ``--out`` (JSON with command, commit, machine).

``--collect FILE [FILE ...]`` computes nothing: it reads result files and
prints (with ``--readme``, writes into README.md's ``--block``) one table row
per (variant, benchmark, seeds), with the per-seed comparison against the
``indep`` cell of the same benchmark and seeds where one of the files has it.

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \
        python benchmarks/tune_pacd.py --variants indep,pacd-default,kappa1.5 --benchmarks branin --seeds 100,106
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacd_jax import experiment, io  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402
from pacd_jax.provenance import command, commit, machine  # noqa: E402

VARIANTS = {
    "indep": dict(method="independent"),
    "indep-kappa1": dict(method="independent", kappa=1.0),
    "indep-rbf": dict(method="independent", gp_kernel="rbf"),
    "pacd-default": dict(),
    "pacoh": dict(method="pacoh"),
    "noisefree": dict(noise_std=0.0),
    "indep-noisefree": dict(method="independent", noise_std=0.0),
    "noise0.03": dict(noise_std=0.03),
    "indep-noise0.03": dict(method="independent", noise_std=0.03),
    "kappa0.5": dict(kappa=0.5),
    "kappa1": dict(kappa=1.0),
    "kappa1.5": dict(kappa=1.5),
    "kappa3": dict(kappa=3.0),
    "steps100": dict(svgd_steps=100),
    "steps20": dict(svgd_steps=20),
    "steps10": dict(svgd_steps=10),
    "steps5": dict(svgd_steps=5),
    "steps20-kappa1.5": dict(svgd_steps=20, kappa=1.5),
    "steps20-init100": dict(svgd_steps=20, svgd_steps_init=100),
    "lambda50": dict(meta_lambda=50.0),
    "lambda500": dict(meta_lambda=500.0),
    "lambda1": dict(meta_lambda=1.0),
    "lambda0.2": dict(meta_lambda=0.2),
    "hidden16": dict(hidden=(16, 16)),
    "pf1": dict(prior_factor=1.0),
    "indep-kappa1.5": dict(method="independent", kappa=1.5),
    "lr1e-3": dict(learning_rate=1e-3),
    "pf0.1": dict(prior_factor=0.1),
    "noise-1": dict(noise_prior=(-1.0, 1.0)),
    "feat4": dict(features=4),
    "xkern": dict(input_kernel=True),
    "xkern-feat4": dict(input_kernel=True, features=4),
    "xkern-floor1e-4": dict(input_kernel=True, noise_floor=1e-4),
    "xkern-floor1e-4-noise-6": dict(input_kernel=True, noise_floor=1e-4, noise_prior=(-6.0, 1.0)),
    "matern": dict(feature_kernel="matern52"),
    "matern-xkern": dict(feature_kernel="matern52", input_kernel=True),
    "matern-feat4": dict(feature_kernel="matern52", features=4),
    "floor1e-4": dict(noise_floor=1e-4),
    "noise-8-floor1e-5": dict(noise_prior=(-8.0, 1.0), noise_floor=1e-5),
    "noise-6-floor1e-4": dict(noise_prior=(-6.0, 1.0), noise_floor=1e-4),
    "kvar1": dict(kernel_variance=1.0),
    "kvar0.2": dict(kernel_variance=0.2),
    "kvar0.05": dict(kernel_variance=0.05),
    "outscale": dict(learn_outputscale=True),
    "outscale-kvar0.2": dict(learn_outputscale=True, kernel_variance=0.2),
    "outscale-xkern-floor1e-4-noise-6": dict(learn_outputscale=True, input_kernel=True, noise_floor=1e-4, noise_prior=(-6.0, 1.0)),
    "yj": dict(output_warp="yeo-johnson"),
    "log": dict(output_warp="log"),
    "indep-yj": dict(method="independent", output_warp="yeo-johnson"),
    "indep-log": dict(method="independent", output_warp="log"),
    "particles5": dict(num_particles=5),
    "particles20": dict(num_particles=20),
    "x64": dict(x64=True),
    "x64-floor1e-4": dict(x64=True, noise_floor=1e-4),
    "x64-noise-8-floor1e-6": dict(x64=True, noise_prior=(-8.0, 1.0), noise_floor=1e-6),
}


def _pacoh_pairs(per_variant: dict) -> list[str]:
    """Seed-by-seed comparison of centralised PACOH-BO with PACD-BO's defaults (the same learner; issue 5's check)."""
    from pacd_jax.table import paired_comparison

    out = []
    for (variant, bench, seeds), pacoh in sorted(per_variant.items()):
        pacd = per_variant.get(("pacd-default", bench, seeds))
        if variant != "pacoh" or pacd is None:
            continue
        as_runs = lambda per: [{"seed": s, "final_regret": float(v)} for s, v in zip(seeds, per)]
        pair = paired_comparison(as_runs(pacd), as_runs(pacoh))
        out.append(
            f"- `pacoh` against `pacd-default`, {bench}, seeds {seeds[0]}-{seeds[-1]}: PACD-BO ends lower on "
            f"{pair['reference_lower']} of {len(pacd)} seeds, higher on {pair['reference_higher']} "
            f"(two-sided Wilcoxon signed-rank p = {pair['p_value']:.2g})."
        )
    return out + [""] if out else out


def collect_table(docs: list[dict], files: list[str] | None = None, block: str | None = None) -> str:
    """Markdown table of every cell in ``docs`` (tune_pacd result files, read from ``files``), with provenance lines.

    ``block`` names the README block the table is written into, so that the
    command line it prints regenerates that block.
    """
    cells = []  # (variant, bench, seeds, cell, meta)
    for doc in docs:
        seeds = tuple(doc["meta"]["seeds"])
        for key, cell in doc["cells"].items():
            variant, bench = key.split("/")
            cells.append((variant, bench, seeds, cell, doc["meta"]))
    indep = {(b, s): np.asarray(c["per_seed_final_regret"]) for v, b, s, c, _ in cells if v == "indep"}
    # Independent BO run with a variant's own options (``indep-V`` for ``V``, e.g. an output warp both use)
    per_variant = {(v, b, s): np.asarray(c["per_seed_final_regret"]) for v, b, s, c, _ in cells}
    paired = {(v[len("indep-"):], b, s): ref for (v, b, s), ref in per_variant.items()
              if v.startswith("indep-") and (v[len("indep-"):], b, s) in per_variant}
    extra = " seeds below `indep-V` (same options) |" if paired else ""
    lines = [
        "| variant | benchmark | seeds | final regret, mean ± std | median seed | seeds below Independent BO |" + extra
        + " AUC (first 10 %) | commit |",
        "|---|---|---|---|---|---|" + ("---|" if paired else "") + "---|---|",
    ]
    order = sorted(cells, key=lambda c: (c[1], c[2], c[0] != "indep", c[0] != "pacd-default", c[0]))
    for variant, bench, seeds, cell, meta in order:
        per = np.asarray(cell["per_seed_final_regret"])
        ref = indep.get((bench, seeds))
        below = "—" if ref is None or variant == "indep" else f"{int(np.sum(per < ref))} of {len(per)}"
        if paired:
            own = paired.get((variant, bench, seeds))
            below += " | " + ("—" if own is None else f"{int(np.sum(per < own))} of {len(per)}")
        lines.append(
            f"| `{variant}` | {bench} | {seeds[0]}-{seeds[-1]} | {per.mean():.4f} ± {per.std():.4f} | {np.median(per):.4f} "
            f"| {below} | {np.mean(cell['per_seed_auc']):.3f} | `{meta['commit']}` |"
        )
    lines.append("")
    lines.extend(_pacoh_pairs(per_variant))
    # files written before ``iters`` was recorded ran the default 30 rounds
    rounds = " / ".join(str(r) for r in sorted({c[4].get("iters", 30) for c in cells}))
    lines.append(f"5 clients, {rounds} rounds, single-threaded XLA; mean and median over seeds of the client-averaged final normalised regret. Commands:")
    lines.append("")
    for command_line in sorted({c[4]["command"] for c in cells}):
        lines.append(f"- `{command_line}`")
    machines = sorted({c[4]["machine"] for c in cells})
    lines.append("")
    names = " ".join(files) if files else "FILES"
    target = f" --readme --block {block}" if block else ""
    lines.append(f"Machine: {'; '.join(machines)}. Table by `python benchmarks/tune_pacd.py --collect {names}{target}`.")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="indep,pacd-default", help=f"comma-separated of {','.join(VARIANTS)}")
    parser.add_argument("--benchmarks", default="branin,sinusoid")
    parser.add_argument("--seeds", default="100,106", help="half-open range START,STOP (default 100,106); must avoid 0-9")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--out", default=None, help="JSON output (optional)")
    parser.add_argument("--collect", nargs="+", metavar="FILE", help="only tabulate these result files")
    parser.add_argument("--readme", action="store_true", help="with --collect: write the table into README.md")
    parser.add_argument("--block", default="tune-kernels", help="README block name (default %(default)s)")
    args = parser.parse_args(argv)
    if args.collect:
        text = collect_table([io.read_json(f) for f in args.collect], args.collect, args.block if args.readme else None)
        print(text)
        if args.readme:
            io.replace_marked_block(ROOT / "README.md", args.block, text)
        return 0
    start, stop = (int(v) for v in args.seeds.split(","))
    seeds = tuple(range(start, stop))
    if set(seeds) & set(range(10)):
        parser.error("tuning seeds must not overlap the table's seeds 0-9")
    cells = {}
    for name in args.variants.split(","):
        for bench in args.benchmarks.split(","):
            t0 = time.perf_counter()
            doc = experiment.run(RunConfig(benchmark=bench, num_clients=5, seeds=seeds, iters=args.iters, **VARIANTS[name]))
            per = [float(np.mean([c["final_regret"] for c in r["clients"]])) for r in doc["results"]]
            auc = [float(np.mean([c["auc"] for c in r["clients"]])) for r in doc["results"]]
            cells[f"{name}/{bench}"] = {"per_seed_final_regret": per, "per_seed_auc": auc, "wall_time_s": time.perf_counter() - t0}
            print(f"{name:14s} {bench:9s} final {np.mean(per):.4f}±{np.std(per):.4f} auc {np.mean(auc):.3f} "
                  f"per-seed {np.round(per, 4).tolist()} {time.perf_counter() - t0:.0f}s", flush=True)
    if args.out:
        meta = {"command": command("benchmarks/tune_pacd.py", argv), "commit": commit(), "machine": machine(), "seeds": list(seeds),
                "iters": args.iters}
        io.write_json(args.out, {"cells": cells, "meta": meta})
    return 0


if __name__ == "__main__":
    sys.exit(main())
