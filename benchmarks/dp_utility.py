"""The utility cost of differential privacy (paper Figure 5 and the sigma sweep of section VI).

Runs PACD-BO on one benchmark for each noise multiplier sigma in ``--sigmas``
(sigma = 0: no DP) at clip norm ``--clip``, over ``--seeds`` seeds, and the
Independent baseline (no collaboration, nothing released) as the floor DP
should not fall below. Writes ``benchmarks/results/dp_utility.json`` and
``dp_utility.png`` (normalised regret vs round with and without DP at the
chosen sigma; final regret, AUC and epsilon vs sigma) with the command,
commit and machine. Results are saved after every cell, so an interrupted
sweep keeps what it finished.

Per sigma, ``results["sigmas"][str(sigma)]`` is a dict; columns can be added
later (e.g. ``"attack"``: the matched-RMSE ratio of the DLG attack at that
sigma) without changing the others.

Run single-threaded on a shared machine:

    XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" OMP_NUM_THREADS=1 \\
        python benchmarks/dp_utility.py --seeds 3 --iters 30
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacd_jax import accounting, experiment, io  # noqa: E402
from pacd_jax.config import RunConfig  # noqa: E402
from pacd_jax.plotting import METHOD_COLOURS  # noqa: E402
from pacd_jax.provenance import command, commit, machine  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
#: The README block (``<!-- dp-utility:begin -->`` ... ``end``) that ``--readme`` rewrites.
README_BLOCK = "dp-utility"
DELTA = 1e-5
FLOOR = 1e-6  # regret 0 (optimum found) drawn at this height on the log axes


def paper_epsilon(sigma: float, particles: int = 10, steps_init: int = 500, steps: int = 50, rounds: int = 100) -> dict:
    """epsilon at delta = 1e-5 of the paper's full run (T = 100 rounds, 500 + 99 x 50 SVGD steps, K = 10)."""
    n = particles * accounting.total_steps(steps, rounds, steps_init)
    eps, name = accounting.pld_or_exact(sigma, n, DELTA)  # "pld" holds the exact mu-GDP value where the PLD grid is too coarse
    return {"pld": eps, "accountant": name, "rdp": accounting.epsilon(sigma, n, DELTA, "rdp"), "compositions": n}


def cell(config: RunConfig) -> dict:
    doc = experiment.run(config)
    curves = experiment.regret_curves(doc).mean(axis=1)  # (S, T+1): client-averaged per seed
    per_seed = [
        {"seed": r["seed"], "final_regret": float(np.mean([c["final_regret"] for c in r["clients"]])),
         "auc": float(np.mean([c["auc"] for c in r["clients"]])), "mean_regret": float(curves[j].mean())}
        for j, r in enumerate(doc["results"])
    ]
    return {
        "summary": doc["summary"],
        "mean_regret_over_rounds": {"mean": float(curves.mean()), "std": float(curves.mean(axis=1).std())},
        "per_seed": per_seed,
        "regret_curve_mean": curves.mean(axis=0).tolist(),
        "regret_curve_std": curves.std(axis=0).tolist(),
        "epsilon_run": doc["epsilon"],
        "wall_time_s": doc["wall_time_s"],
    }


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    meta = result["meta"]
    sig = result["sigmas"]
    chosen = str(meta["chosen_sigma"])
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    ax = axes[0]
    # the shared method colours (pacd_jax.plotting); DP is PACD-BO too, told apart by the line style
    pacd, independent = METHOD_COLOURS["pacd"], METHOD_COLOURS["independent"]
    series = [("0.0", "PACD-BO, no DP", pacd, "-"), (chosen, f"PACD-BO, DP sigma={meta['chosen_sigma']:g}, C={meta['clip']:.3g}", pacd, ":")]
    for key, label, color, style in series:
        if key in sig:
            m = np.maximum(np.asarray(sig[key]["regret_curve_mean"]), FLOOR)
            s = np.asarray(sig[key]["regret_curve_std"])
            t = np.arange(m.size)
            ax.plot(t, m, color=color, ls=style, label=label)
            ax.fill_between(t, np.maximum(m - s, FLOOR), m + s, color=color, alpha=0.15)
    if result.get("independent"):
        m = np.maximum(np.asarray(result["independent"]["regret_curve_mean"]), FLOOR)
        ax.plot(np.arange(m.size), m, color=independent, ls="--", label="Independent (no sharing)")
    ax.set_yscale("log")
    ax.set_xlabel("BO round")
    ax.set_ylabel("normalised regret (mean over clients; ± std over seeds)")
    ax.set_title(f"{meta['benchmark']}: utility cost of DP")
    ax.legend(fontsize=8)

    keys_ = sorted(sig, key=float)
    sigmas = np.asarray([float(k) for k in keys_])
    x = np.where(sigmas == 0, 0.5, sigmas)  # sigma = 0 drawn at 0.5 on the log axis
    ax = axes[1]
    fr = np.maximum([sig[k]["summary"]["final_regret_mean"] for k in keys_], FLOOR)
    fr_s = np.asarray([sig[k]["summary"]["final_regret_std"] for k in keys_])
    mr = np.maximum([sig[k]["mean_regret_over_rounds"]["mean"] for k in keys_], FLOOR)
    mr_s = np.asarray([sig[k]["mean_regret_over_rounds"]["std"] for k in keys_])
    ax.errorbar(x, fr, fr_s, marker="o", capsize=3, color=pacd, label="PACD-BO final regret")
    ax.errorbar(x, mr, mr_s, marker="s", capsize=3, color=pacd, ls=":", label="PACD-BO mean regret over all rounds")
    if result.get("independent"):
        ax.axhline(max(result["independent"]["summary"]["final_regret_mean"], FLOOR), color=independent, ls="--", lw=1, label="Independent final regret")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(x, ["0 (off)" if s == 0 else f"{s:g}" for s in sigmas])
    ax.set_xlabel("noise multiplier sigma")
    ax.set_ylabel("normalised regret (mean over clients)")
    ax.set_title(f"regret after {meta['iters']} rounds (mean ± std, {len(meta['seeds'])} seeds)")
    ax.legend(fontsize=8)

    ax = axes[2]
    pos = sigmas > 0
    ax.plot(sigmas[pos], [sig[k]["epsilon_run"]["epsilon"] for k, p in zip(keys_, pos) if p], marker="o", label=f"this run ({meta['iters']} rounds)")
    ax.plot(sigmas[pos], [sig[k]["epsilon_paper"]["pld"] for k, p in zip(keys_, pos) if p], marker="s", label="paper setting (100 rounds, 5450 steps)")
    if pos.any():
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("noise multiplier sigma")
    ax.set_ylabel("epsilon at delta = 1e-5 (PLD)")
    ax.set_title("privacy per client (K = 10 releases per step)")
    ax.legend(fontsize=8)
    fig.suptitle(f"generated by {meta['command']} at {meta['commit']}", fontsize=7)
    fig.tight_layout()
    with io.atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def table(result: dict) -> str:
    """The sigma -> epsilon, final regret, AUC table (markdown) of a results document."""
    meta = result["meta"]
    rows = [
        f"| sigma | noise std 2σC | ε (this run, {meta['iters']} rounds) | ε (paper: 100 rounds, 5450 steps) | "
        "final regret | AUC (first 10%) | mean regret, all rounds |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in sorted(result["sigmas"], key=float):
        e = result["sigmas"][key]
        s, m = e["summary"], e["mean_regret_over_rounds"]
        run_eps = f"{e['epsilon_run']['epsilon']:.1f}" if e["epsilon_run"] else "∞ (no DP)"
        paper_eps = f"{e['epsilon_paper']['pld']:.1f}" if e["epsilon_paper"] else "∞"
        rows.append(f"| {e['sigma']:g} | {e['noise_std']:.3g} | {run_eps} | {paper_eps} | "
                    f"{s['final_regret_mean']:.4f} ± {s['final_regret_std']:.4f} | {s['auc_mean']:.3f} ± {s['auc_std']:.3f} | "
                    f"{m['mean']:.3f} ± {m['std']:.3f} |")
    ind = result.get("independent")
    if ind:
        s, m = ind["summary"], ind["mean_regret_over_rounds"]
        rows.append(f"| Independent (nothing shared) | – | 0 | 0 | {s['final_regret_mean']:.4f} ± {s['final_regret_std']:.4f} | "
                    f"{s['auc_mean']:.3f} ± {s['auc_std']:.3f} | {m['mean']:.3f} ± {m['std']:.3f} |")
    rows.append("")
    rows.append(f"{meta['benchmark']}, {meta['clients']} clients, seeds {meta['seeds']}, {meta['iters']} rounds, C = {meta['clip']:.4g} "
                f"({meta['clip_source']}); ε at δ = {meta['delta']:g} (PLD). Generated by `{meta['command']}` at commit "
                f"`{meta['commit']}` on {meta['machine']} ({meta['wall_time_s']:.0f} s).")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="branin")
    parser.add_argument("--sigmas", default="0,1,2,4,8,16")
    parser.add_argument("--chosen-sigma", type=float, default=8.0, help="the operating sigma drawn against no DP (paper: 8)")
    parser.add_argument("--clip", type=float, default=None,
                        help="clip norm C (default: suggested_clip of benchmarks/results/gradnorms/gradnorms.json, else 1)")
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--no-independent", action="store_true", help="skip the Independent baseline")
    parser.add_argument("--out", default=str(RESULTS / "dp_utility.json"))
    parser.add_argument("--table", action="store_true", help="only print the markdown table of the existing --out file")
    parser.add_argument("--readme", nargs="?", const=str(ROOT / "README.md"), default=None, metavar="PATH",
                        help="write the table of --out into the dp-utility block of README.md (or PATH); with --table, "
                             "without running anything")
    args = parser.parse_args(argv)
    if args.table:
        text = table(json.loads(Path(args.out).read_text()))
        print(text)
        if args.readme:
            io.replace_marked_block(args.readme, README_BLOCK, text)
        return 0

    clip = args.clip
    clip_source = "--clip"
    if clip is None:
        gn = RESULTS / "gradnorms" / "gradnorms.json"
        if gn.exists():
            clip = float(json.loads(gn.read_text())["summary"]["suggested_clip"])
            clip_source = f"{gn.relative_to(ROOT)} suggested_clip (median of round-0 norms)"
        else:
            clip, clip_source = 1.0, "default 1.0"
    sigmas = [float(s) for s in args.sigmas.split(",")]
    out = Path(args.out)
    start = time.perf_counter()
    result = {
        "sigmas": {},
        "independent": None,
        "meta": {
            "command": command("benchmarks/dp_utility.py", argv), "commit": commit(), "machine": machine(),
            "benchmark": args.benchmark, "clients": args.clients, "seeds": list(range(args.seeds)), "iters": args.iters,
            "clip": clip, "clip_source": clip_source, "chosen_sigma": args.chosen_sigma, "delta": DELTA,
            "note": "AUC is the paper's (mean regret over the first ceil(0.1 T) rounds); mean_regret_over_rounds averages all T+1 values.",
            "wall_time_s": 0.0,
        },
    }
    base = dict(benchmark=args.benchmark, num_clients=args.clients, seeds=tuple(range(args.seeds)), iters=args.iters)

    def save():
        result["meta"]["wall_time_s"] = time.perf_counter() - start
        io.write_json(out, result)
        plot(result, out.with_suffix(".png"))

    order = sorted(sigmas, key=lambda s: (s not in (0.0, args.chosen_sigma), s))  # the Figure 5 pair first
    for sigma in order:
        entry = cell(RunConfig(method="pacd", dp_sigma=sigma, dp_clip=clip, **base))
        entry["sigma"] = sigma
        entry["noise_std"] = 2 * sigma * clip
        entry["epsilon_paper"] = paper_epsilon(sigma) if sigma > 0 else None
        result["sigmas"][str(sigma)] = entry
        s = entry["summary"]
        eps = entry["epsilon_run"]["epsilon"] if entry["epsilon_run"] else float("inf")
        print(f"sigma {sigma:5g}: final {s['final_regret_mean']:.4f} ± {s['final_regret_std']:.4f}  AUC {s['auc_mean']:.3f}  "
              f"eps(run) {eps:.1f}  ({entry['wall_time_s']:.0f} s)", flush=True)
        save()
    if not args.no_independent:
        result["independent"] = cell(RunConfig(method="independent", **base))
        print(f"independent: final {result['independent']['summary']['final_regret_mean']:.4f}", flush=True)
        save()
    print(f"wrote {out} and {out.with_suffix('.png')}")
    if args.readme:
        io.replace_marked_block(args.readme, README_BLOCK, table(result))
        print(f"updated the {README_BLOCK} block of {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
