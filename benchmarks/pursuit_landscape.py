"""How far apart right and nearly-right point sets are in the pursuit attack's residual.

For each listed round of the run of ``benchmarks/attack_report.py`` (Branin,
seed 0, float64, client 0) it scores, by the attack's own relative residual
(:class:`pacd_jax.pursuit.PursuitConfig` defaults, every particle):

* the target's true points;
* decoys: the true points with their ``n`` closest pairs each kept as one
  point (the other point of the pair moved to a uniform random place in the
  box), before and after the attack's final L-BFGS refinement
  (``final_steps``).

A decoy is what a greedy search tends to return when the target's points
cluster: one point where there are two, a spare one elsewhere. If refined
decoys leave residuals far above the truth's, the residual identifies the
points and a failing attack is a search failure; comparing them with the
residual the attack reached (``attack_branin_pursuit.json``) says how far it
got. Writes JSON with provenance.

    PYTHONPATH=. python benchmarks/pursuit_landscape.py --rounds 20,40 --collapse 1,3 \
        --cache /tmp/bo.pkl --out benchmarks/results/pursuit_landscape.json
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.spatial.distance import cdist  # noqa: E402

from pacd_jax import intercept, io, methods, metrics, pursuit  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402
from pacd_jax.provenance import command, commit, machine  # noqa: E402


def collapse_pairs(X: np.ndarray, n: int, rng: np.random.Generator) -> tuple[np.ndarray, list[float]]:
    """``X`` with one point of each of its ``n`` closest disjoint pairs moved to a uniform random place; also the pairs' spacings."""
    D = cdist(X, X) + np.diag(np.full(len(X), np.inf))
    Z, used, spacings = X.copy(), set(), []
    for i, j in zip(*np.unravel_index(np.argsort(D, axis=None), D.shape)):
        if len(spacings) == n or not np.isfinite(D[i, j]):
            break
        if i in used or j in used:
            continue
        used |= {int(i), int(j)}
        spacings.append(float(D[i, j]))
        Z[j] = rng.uniform(size=X.shape[1])
    return Z, spacings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default="20,40")
    parser.add_argument("--collapse", default="1,3", help="numbers of closest pairs to collapse, one decoy each")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", help="attack_report.py's --cache pickle: loaded if present, else the BO run is made")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pursuit_landscape.json"))
    args = parser.parse_args(argv)
    rounds = tuple(int(t) for t in args.rounds.split(","))
    start = time.perf_counter()
    config = RunConfig(benchmark="branin", iters=100, seeds=(args.seed,), x64=True)
    rng = np.random.default_rng(args.seed)
    with jax.enable_x64(True):
        if args.cache and Path(args.cache).exists():
            with open(args.cache, "rb") as fh:
                pairs = [(r, t) for r, t in zip(*pickle.load(fh)) if r.round in rounds]
        else:
            pairs = list(zip(*intercept.run_vmap(config, intercept.InterceptSpec(0, rounds))[:2]))
        model = methods.meta_gp(config, 2)
        coords = jnp.asarray(model.network_coordinates())
        cfg = pursuit.PursuitConfig()
        out = []
        for rec, truth in pairs:
            prog = pursuit._Programs(model, cfg, jnp.asarray(rec.particles), jnp.asarray(rec.grads)[:, coords], coords)
            ones = jnp.ones((rec.m,))
            guess = metrics.no_information_baseline(truth.X, np.random.default_rng(args.seed), "uniform")["matched_rmse"]
            entry = {"round": rec.round, "m": rec.m, "truth_residual": float(prog.loss(jnp.asarray(truth.X), ones)),
                     "uniform_guess_rmse": guess, "decoys": []}
            for n in (int(k) for k in args.collapse.split(",")):
                t0 = time.perf_counter()
                Z, spacings = collapse_pairs(np.asarray(truth.X), n, rng)
                refined = prog.final(jnp.asarray(Z), ones)
                X_ref = np.clip(np.asarray(refined), 0.0, 1.0)
                entry["decoys"].append({
                    "collapsed_pairs": n, "pair_spacings": spacings,
                    "residual": float(prog.loss(jnp.asarray(Z), ones)), "refined_residual": float(prog.loss(refined, ones)),
                    "refined_rmse_ratio": metrics.matched_rmse(X_ref, np.asarray(truth.X)) / guess,
                    "time_s": time.perf_counter() - t0,
                })
                print(rec.round, entry["decoys"][-1], flush=True)
            out.append(entry)
            io.write_json(args.out, {"entries": out, "meta": {"command": command("benchmarks/pursuit_landscape.py", argv), "commit": commit(),
                                                              "machine": machine(), "wall_time_s": time.perf_counter() - start}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
