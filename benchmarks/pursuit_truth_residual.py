"""The pursuit attack's floor: the relative residual the *true* points leave, per ridge.

Reruns the run of ``benchmarks/attack_report.py`` (Branin, seed 0, float64,
client 0), and at each listed round fits the message's atoms at the target's
true points (:func:`pacd_jax.pursuit.fit_coefficients`) with each ridge. If
the truth's residual is not far below the reconstruction's, the attack's
residual cannot tell them apart at that ridge. Writes JSON with provenance.

    PYTHONPATH=. python benchmarks/pursuit_truth_residual.py --rounds 20,99 \
        --out benchmarks/results/pursuit_truth_residual.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from pacd_jax import intercept, io, methods, pursuit  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402
from pacd_jax.provenance import command, commit, machine  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default="20,99")
    parser.add_argument("--ridges", default="1e-9,1e-11,1e-14")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pursuit_truth_residual.json"))
    args = parser.parse_args(argv)
    rounds = tuple(int(t) for t in args.rounds.split(","))
    ridges = [float(r) for r in args.ridges.split(",")]
    start = time.perf_counter()
    config = RunConfig(benchmark="branin", iters=100, seeds=(args.seed,), x64=True)
    with jax.enable_x64(True):
        records, truths, _ = intercept.run_vmap(config, intercept.InterceptSpec(0, rounds))
        model = methods.meta_gp(config, 2)
        coords = jnp.asarray(model.network_coordinates())
        out = []
        for rec, truth in zip(records, truths):
            target = jnp.asarray(rec.grads)[:, coords]
            J = pursuit.atoms(model, jnp.asarray(rec.particles), jnp.asarray(truth.X), coords)
            for ridge in ridges:
                _, resid = pursuit.fit_coefficients(J, target, jnp.ones(rec.m), ridge)
                rel = float(jnp.sum(resid * resid) / jnp.sum(target * target))
                out.append({"round": rec.round, "m": rec.m, "ridge": ridge, "truth_relative_residual": rel})
                print(out[-1], flush=True)
    io.write_json(args.out, {"entries": out, "meta": {"command": command("benchmarks/pursuit_truth_residual.py", argv), "commit": commit(),
                                                      "machine": machine(), "wall_time_s": time.perf_counter() - start}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
