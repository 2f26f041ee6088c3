"""Can the message tell the follow attacker's reconstruction from the truth? Residuals where its ratio jumps.

Reads a follow report of ``benchmarks/attack_report.py`` (``every_round``:
each round's reconstruction) and, at the rounds where the matched-RMSE ratio
rose by more than ``--rise`` over the round before (or ``--rounds``),
evaluates the relative residual (QR at ``ridge_lm``, all particles) that
three point sets leave on that round's message:

* ``truth``: the target's true points;
* ``attack``: the attacker's reconstruction of the round;
* ``alternative``: the attacker's reconstruction of the round before plus
  the *true* new query, placed alone and polished as the attacker's own
  rounds are (``place_iters`` then Levenberg-Marquardt on all points): what
  the attacker would have had if it had picked the right candidate.

If ``attack`` is within a small factor of ``alternative`` (or below it), no
acceptance rule on the residual could have preferred the right candidate:
at that round the message, in float64, does not pin the new query down given
the earlier reconstruction. Writes JSON with provenance.

    PYTHONPATH=. python benchmarks/follow_identifiability.py --cache /tmp/bo.pkl \\
        --report benchmarks/results/attack_branin_follow.json \\
        --out benchmarks/results/follow_identifiability.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.optimize import linear_sum_assignment  # noqa: E402

import attack_report  # noqa: E402
from pacd_jax import io, leakage, methods, metrics, pursuit  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402
from pacd_jax.provenance import command, commit, machine  # noqa: E402


def jump_rounds(every: list[dict], rise: float) -> list[int]:
    """Rounds whose ratio rose by more than ``rise`` over the round before's (consecutive rounds only)."""
    out = []
    for prev, cur in zip(every, every[1:]):
        if cur["round"] == prev["round"] + 1 and cur["rmse_ratio"] > prev["rmse_ratio"] + rise:
            out.append(int(cur["round"]))
    return out


def worst_point(X_rec: np.ndarray, X_true: np.ndarray) -> tuple[float, list[float], list[float]]:
    """The largest Hungarian-matched distance, with its true point and the reconstruction's."""
    D = np.linalg.norm(X_rec[:, None] - X_true[None], axis=-1)
    i, j = linear_sum_assignment(D)
    k = int(np.argmax(D[i, j]))
    return float(D[i[k], j[k]]), X_true[j[k]].tolist(), X_rec[i[k]].tolist()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", default=str(ROOT / "benchmarks" / "results" / "attack_branin_follow.json"))
    parser.add_argument("--rounds", help="comma-separated rounds (default: the ratio's jumps, --rise)")
    parser.add_argument("--rise", type=float, default=0.01, help="a jump: the ratio above the round before's by more than this")
    parser.add_argument("--cache", help="pickle of (records, truths) as attack_report.py --cache writes it")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "follow_identifiability.json"))
    args = parser.parse_args(argv)
    if not args.rise > 0.0:
        parser.error(f"--rise must be positive, got {args.rise}")
    start = time.perf_counter()
    try:
        with open(args.report) as fh:
            report = json.load(fh)
        every = report["variants"]["pursuit_follow"]["every_round"]
    except (OSError, json.JSONDecodeError, KeyError) as exc:
        parser.exit(2, f"error: --report {args.report}: not a follow report ({exc})\n")
    by_round = {e["round"]: e for e in every}
    rounds = [int(t) for t in args.rounds.split(",")] if args.rounds else jump_rounds(every, args.rise)
    missing = [t for t in rounds if t not in by_round or t - 1 not in by_round or "X_rec" not in by_round[t - 1]]
    if missing:
        parser.exit(2, f"error: rounds {missing}: the report lacks them or the round before's reconstruction\n")
    config = RunConfig(benchmark="branin", iters=100, seeds=(report["seed"],), x64=True)
    records, truths, _ = attack_report.bo_records(config, tuple(range(max(rounds) + 1)), args.cache)
    records = dict(zip([r.round for r in records], leakage._float64_records(records)))
    truths = {r: t for r, t in zip(records, truths)}
    model = methods.meta_gp(config, 2)
    entries = []
    with jax.enable_x64(True):
        cfg = pursuit.PursuitConfig(**attack_report.FOLLOW)
        fns = pursuit._Functions(model, cfg, jnp.asarray(model.network_coordinates()))
        for t in rounds:
            rec, X_true = records[t], np.asarray(truths[t].X, np.float64)
            prev, X_att = np.asarray(by_round[t - 1]["X_rec"]), np.asarray(by_round[t]["X_rec"])
            msg = pursuit._Message(fns, jnp.asarray(rec.particles), rec.grads, jax.random.key(0))
            m_prev, m = len(prev), int(rec.m)
            size = 16 * -(-(m + 1) // 16)
            active = (jnp.arange(size) < m).astype(jnp.float64)
            fresh = ((jnp.arange(size) >= m_prev) & (jnp.arange(size) < m)).astype(jnp.float64)
            blank = jnp.full((size, 2), 0.5)

            def residual(X):
                return float(msg.all.loss_lm(blank.at[: len(X)].set(jnp.asarray(X)), active))

            alt = blank.at[:m_prev].set(prev).at[m_prev:m].set(X_true[m_prev:])
            alt, _ = pursuit._levenberg_marquardt(msg.all, alt, active, 20, 0.0, movable=fresh)
            alt, alt_loss = pursuit._levenberg_marquardt(msg.all, alt, active, 100, 1e-28, max_step=0.02)
            X_alt = np.asarray(alt[:m])
            worst, worst_true, worst_rec = worst_point(X_att, X_true)
            entry = {"round": t, "m": m, "ratio_before": by_round[t - 1]["rmse_ratio"], "ratio": by_round[t]["rmse_ratio"],
                     "residual": {"truth": residual(X_true), "attack": residual(X_att), "alternative": float(alt_loss)},
                     "matched_rmse": {"attack": metrics.matched_rmse(X_att, X_true), "alternative": metrics.matched_rmse(X_alt, X_true)},
                     "attack_worst_point": {"distance": worst, "true": worst_true, "reconstructed": worst_rec}}
            entries.append(entry)
            print(json.dumps(entry), flush=True)
    io.write_json(args.out, {"report": args.report, "report_meta": report["meta"], "rise": args.rise, "entries": entries,
                             "meta": {"command": command("benchmarks/follow_identifiability.py", argv), "commit": commit(),
                                      "machine": machine(), "wall_time_s": time.perf_counter() - start}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
