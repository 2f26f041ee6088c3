"""Table I and Figure 2 of the paper: every method on every benchmark (paper section IV).

Runs the grid with the same code as ``pacd-bo table`` (:func:`pacd_jax.table.run_grid`;
resumable: finished cells under ``--cells`` are reused), then writes
``benchmarks/results/table1.{md,json,png}`` with the command, commit, machine
and wall time, and rewrites the block between the ``table1`` markers in README.md.

    python benchmarks/table1.py                                   # the full grid: 10 seeds x 100 rounds
    python benchmarks/table1.py --seeds 2 --iters 30 --jobs 2     # a reduced grid
    python benchmarks/table1.py --seeds 2 --iters 30 --collect-only   # tables from the cells done so far
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacd_jax import io, table  # noqa: E402  (imports no JAX: workers set their XLA flags first)
from pacd_jax.provenance import command  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def readme_block(doc: dict, md: str) -> str:
    cfg = doc["meta"]["config"]
    full = len(cfg["seeds"]) >= 10 and cfg["iters"] >= 100 and not doc["meta"]["missing_cells"]
    label = "Full grid" if full else (
        f"**Reduced grid** ({len(cfg['seeds'])} seeds, {cfg['iters']} rounds; the paper uses 10 seeds and 100 rounds)"
    )
    return "\n".join([
        f"{label}. Files: `benchmarks/results/table1.md`, `table1.json`, `table1.png`.",
        "",
        md.rstrip(),
        "",
        "![Figure 2: normalised regret vs round](benchmarks/results/table1.png)",
    ])


def update_readme(block: str, readme: Path = ROOT / "README.md") -> bool:
    try:
        io.replace_marked_block(readme, "table1", block)
    except ValueError:
        return False
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmarks", default=",".join(table.DEFAULT_BENCHMARKS))
    parser.add_argument("--methods", default=",".join(table.DEFAULT_METHODS))
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--run-first", default="", help="benchmarks whose cells are scheduled first")
    parser.add_argument("--cells", default=str(RESULTS / "table1_cells"), help="cell folder (not committed; lets a run resume)")
    parser.add_argument("--collect-only", action="store_true", help="write the tables from the finished cells, run nothing")
    parser.add_argument("--more-seeds", action="append", default=[], metavar="DIR",
                        help="with --collect-only: a `pacd-bo table` folder whose cells' seeds are added (repeatable)")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)

    from pacd_jax.config import RunConfig

    benchmarks = args.benchmarks.split(",")
    methods = args.methods.split(",")
    base = RunConfig(seeds=tuple(range(args.seeds)), iters=args.iters, num_clients=args.clients)
    cmd = command("benchmarks/table1.py", argv)
    if args.collect_only:
        previous = Path(args.cells) / "table.json"
        extra = {"collected_by": cmd}
        if previous.exists():  # keep the command and elapsed time of the run that made the cells
            meta = io.read_json(previous).get("meta", {})
            cmd = meta.get("command", cmd)
            extra.update({k: meta[k] for k in ("elapsed_s", "cells_run", "cells_reused", "failed_cells") if k in meta})
        for more in args.more_seeds:
            more_meta = Path(more) / "table.json"
            if more_meta.exists():
                extra.setdefault("more_seeds_commands", []).append(io.read_json(more_meta)["meta"]["command"])
        doc = table.summarise_grid(base, benchmarks, methods, args.cells, cmd, table.WORKER_XLA_FLAGS, extra,
                                   more=args.more_seeds)
    else:
        doc = table.run_grid(base, benchmarks, methods, args.cells, args.jobs, progress=True, command=cmd,
                             run_first=[b for b in args.run_first.split(",") if b])
    cells = Path(args.cells)
    RESULTS.mkdir(parents=True, exist_ok=True)
    for src, dst in (("table.json", "table1.json"), ("table.md", "table1.md"), ("convergence.png", "table1.png")):
        with io.atomic_path(RESULTS / dst) as tmp:
            shutil.copyfile(cells / src, tmp)
    md = (RESULTS / "table1.md").read_text()
    print(md)
    if not args.no_readme and update_readme(readme_block(doc, md)):
        print("updated README.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
