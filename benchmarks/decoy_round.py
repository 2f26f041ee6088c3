"""More decoys for one attacked round of a ``pacd-bo privacy`` folder: a sharper decoy p-value there.

The sweep's decoy band (``--decoys``, :mod:`pacd_jax.decoys`) runs every decoy
for the whole run. A round-t decoy only needs the first t rounds, so many more
decoys are affordable for an early round:

    python benchmarks/decoy_round.py benchmarks/results/privacy_branin_follow --sigma 8 --round 1 \\
        --decoys 200 --out benchmarks/results/privacy_branin_follow/decoys_round1.json

runs ``--decoys`` plain runs of t + 1 rounds with the folder's options at
``--sigma`` and the seeds from ``--first-seed`` (disjoint from the sweep's
decoy seeds), and scores every (seed) attack of that sigma at round t against
them (band, rank p-value, verdict). Before the decoys it reruns the attacked
seeds for t + 1 rounds and checks that their queries equal the attacked
run's (the shorter run draws the data as the full run does). Writes JSON with
the command, commit and machine.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacd_jax import decoys, io, privacy_sweep, provenance  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a pacd-bo privacy --out folder (its cells/ are read)")
    parser.add_argument("--sigma", type=float, required=True)
    parser.add_argument("--round", type=int, required=True, help="an attacked round of the folder")
    parser.add_argument("--decoys", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=2_000_000)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    cells = sorted(Path(args.folder, "cells").glob(f"sigma={args.sigma:g}_seed=*.json"))
    if not cells:
        print(f"error: no cells of sigma {args.sigma:g} in {args.folder}/cells", file=sys.stderr)
        return 2
    docs = [io.read_json(p) for p in cells]
    config = RunConfig.from_dict(docs[0]["key"]["config"]).replace(iters=args.round + 1)
    target = int(docs[0]["key"]["target"])
    entries = []
    for d in docs:
        (e,) = [x for x in d["result"]["rounds"] if x["round"] == args.round]
        entries.append((int(d["result"]["seed"]), e))
    start = time.perf_counter()
    own = decoys.target_trajectories(config, target, [s for s, _ in entries])
    reproduce = max(float(np.max(np.abs(X[: e["m"]] - np.asarray(e["X_true"])))) for X, (_, e) in zip(own, entries))
    seeds = list(range(args.first_seed, args.first_seed + args.decoys))
    trajectories = decoys.target_trajectories(config, target, seeds)
    scored = []
    for seed, e in entries:
        b = decoys.band(e["X_rec"], e.get("matched_rmse"), trajectories, int(e["m"]), privacy_sweep.BAND_Q)
        scored.append({"seed": seed, "m": int(e["m"]), "matched_rmse": e.get("matched_rmse"), "decoy_band": b["matched_rmse"],
                       "p_value": b["p_value"], "verdict": b["verdict"], "uniform_band": e["band"]["matched_rmse"],
                       "uniform_verdict": e["verdict"]})
    doc = {
        "folder": str(args.folder), "sigma": args.sigma, "round": args.round, "target_client": target, "decoys": args.decoys,
        "decoy_seeds": [seeds[0], seeds[-1]], "decoy_iters": config.iters,
        "attacked_seeds_reproduced_max_abs_diff": reproduce,
        "attacks": scored,
        "meta": {"command": "python benchmarks/decoy_round.py " + shlex.join(sys.argv[1:] if argv is None else argv),
                 "commit": provenance.commit(), "machine": provenance.machine(), "wall_time_s": time.perf_counter() - start},
    }
    io.write_json(args.out, doc)
    for a in scored:
        lo, hi = a["decoy_band"]
        print(f"seed {a['seed']} round {args.round}: matched RMSE {a['matched_rmse']:.3f}, decoy band [{lo:.3f}, {hi:.3f}], "
              f"p {a['p_value']:.4f}: {a['verdict']}")
    print(f"wrote {args.out} ({doc['meta']['wall_time_s']:.0f} s; attacked seeds reproduced to {reproduce:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
