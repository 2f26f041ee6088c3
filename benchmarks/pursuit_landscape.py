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
got. Writes JSON with provenance; ``--readme`` then puts a table of it,
next to the attack's residuals from ``--attack``, in README.md between the
``pursuit-landscape`` markers (``--render`` does only that, from ``--out``).

    PYTHONPATH=. python benchmarks/pursuit_landscape.py --rounds 20,40 --collapse 1,3 \
        --cache /tmp/bo.pkl --out benchmarks/results/pursuit_landscape.json --readme
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy.spatial.distance import cdist  # noqa: E402

from benchmarks import attack_report  # noqa: E402
from pacd_jax import io, methods, metrics, pursuit  # noqa: E402
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
    parser.add_argument("--cache", help="attack_report.py's --cache pickle: loaded if present, else the BO run is made and written there")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pursuit_landscape.json"))
    parser.add_argument("--attack", default=str(ROOT / "benchmarks" / "results" / "attack_branin_pursuit.json"),
                        help="attack_report.py's pursuit results, for the table's last column")
    parser.add_argument("--readme", action="store_true", help="put the table in README.md (pursuit-landscape markers)")
    parser.add_argument("--render", action="store_true", help="only write the README table from --out (no computation)")
    args = parser.parse_args(argv)
    if args.render:
        return write_readme(args.out, args.attack)
    rounds = tuple(int(t) for t in args.rounds.split(","))
    start = time.perf_counter()
    config = RunConfig(benchmark="branin", iters=100, seeds=(args.seed,), x64=True)
    rng = np.random.default_rng(args.seed)
    with jax.enable_x64(True):
        records, truths, _ = attack_report.bo_records(config, rounds, args.cache)
        model = methods.meta_gp(config, 2)
        coords = jnp.asarray(model.network_coordinates())
        cfg = pursuit.PursuitConfig()
        out = []
        for rec, truth in zip(records, truths):
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
    return write_readme(args.out, args.attack) if args.readme else 0


def landscape_table(landscape: dict, attack: dict | None) -> str:
    """Markdown: per round, the truth's and each decoy's refined residual (and ratio), and the attack's, with provenance."""
    decoys = [dec["collapsed_pairs"] for dec in landscape["entries"][0]["decoys"]]
    rounds = {e["round"]: e for e in attack["variants"]["pursuit"]["rounds"]} if attack else {}
    head = ["round", "truth"] + [f"{n} closest pair{'s' if n > 1 else ''} merged" for n in decoys] + (["the attack"] if attack else [])
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for e in landscape["entries"]:
        cells = [str(e["round"]), f"{e['truth_residual']:.1e}"]
        cells += [f"{dec['refined_residual']:.1e} (ratio {dec['refined_rmse_ratio']:.2f}; pairs <= {max(dec['pair_spacings']):.0e} apart)"
                  for dec in e["decoys"]]
        if attack:
            a = rounds.get(e["round"])
            cells.append(f"{a['loss']:.1e} (ratio {a['rmse_ratio']:.2f})" if a else "not run")
        lines.append("| " + " | ".join(cells) + " |")
    meta = landscape["meta"]
    lines += ["", f"Generated by `{meta['command']}` at commit `{meta['commit']}` on {meta['machine']} ({meta['wall_time_s'] / 60:.0f} min)"
              + (f"; the attack's column from `{attack['meta']['command']}`." if attack else ".")]
    return "\n".join(lines)


def write_readme(path, attack_path) -> int:
    with open(path) as fh:
        landscape = json.load(fh)
    attack = None
    if attack_path and Path(attack_path).exists():
        with open(attack_path) as fh:
            attack = json.load(fh)
    io.replace_marked_block(ROOT / "README.md", "pursuit-landscape", landscape_table(landscape, attack))
    print("updated README.md (pursuit-landscape)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
