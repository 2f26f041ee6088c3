"""Table I on more seeds: a grid run on fresh seeds, alone and pooled with the full grid's seeds 0-9.

Ten seeds leave Table I's paired tests weak (the smallest two-sided Wilcoxon
p-value with 8 of 10 seeds one way is about 0.05). This script reads a
``pacd-bo table`` folder run on other seeds (nothing is tuned on them), and
writes two tables: the fresh seeds alone (an independent replication) and
all seeds pooled with the full grid's cells (``benchmarks/results/table1_cells_full``,
seeds 0-9). Cells are reused, never rerun here.

    pacd-bo table --benchmarks sinusoid,branin,hartmann6,wingweight --methods independent,pacd,cboc-u,cboc-l \\
        --seed-list 10,11,...,29 --iters 100 --jobs 2 --out benchmarks/results/table1_seeds10-29
    python benchmarks/table1_more_seeds.py          # pooled table and the two README blocks

Outputs: ``--out`` (``table.{md,json}``, ``convergence.png`` of the pooled
seeds) and the README blocks ``table1-more-seeds`` (fresh seeds) and
``table1-pooled-seeds`` (pooled).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacd_jax import io, table  # noqa: E402
from pacd_jax.provenance import command  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def grid_axes(doc: dict) -> tuple[list[str], list[str]]:
    """Benchmarks and methods of a ``table.json`` body, in Table I's order."""
    benchmarks = [b for b in table.DEFAULT_BENCHMARKS if isinstance(doc.get(b), dict) and doc[b]]
    methods = [m for m in table.DEFAULT_METHODS if any(m in doc[b] for b in benchmarks)]
    return benchmarks, methods


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def cell_provenance(folder: Path, benchmarks, methods) -> str:
    """Commits and machines the folder's cells were run on, as recorded in each ``run.json``."""
    found = set()
    for b in benchmarks:
        for m in methods:
            path = table.cell_path(folder, b, m)
            if path.exists():
                cell = io.read_json(path).get("table_cell", {})
                found.add((cell.get("commit", "unknown"), cell.get("machine", "unknown")))
    return ", ".join(f"`{c}` on {machine}" for c, machine in sorted(found))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", default=str(RESULTS / "table1_seeds10-29"),
                        help="a finished `pacd-bo table` folder on seeds other than 0-9")
    parser.add_argument("--base", default=str(RESULTS / "table1_cells_full"), help="the full grid's cell folder")
    parser.add_argument("--out", default=str(RESULTS / "table1_seeds_pooled"), help="folder for the pooled table")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)

    from pacd_jax.config import RunConfig

    extra, base, out = Path(args.extra), Path(args.base), Path(args.out)
    extra_doc = io.read_json(extra / "table.json")
    benchmarks, methods = grid_axes(extra_doc)
    if not benchmarks:
        parser.error(f"{extra / 'table.json'} holds no finished cell")
    extra_seeds = sorted({s for b in benchmarks for m in methods if m in extra_doc[b] for s in extra_doc[b][m]["seeds"]})
    base_doc = table.collect(base, benchmarks, methods)
    base_seeds = sorted({s for b in benchmarks for m in methods if m in base_doc[b] for s in base_doc[b][m]["seeds"]})
    if set(extra_seeds) & set(base_seeds):
        parser.error(f"{extra} repeats seeds of {base}: {sorted(set(extra_seeds) & set(base_seeds))}")
    meta = extra_doc["meta"]
    pooled_config = RunConfig(seeds=tuple(base_seeds + extra_seeds), iters=meta["config"]["iters"],
                              num_clients=meta["config"]["num_clients"])
    out.mkdir(parents=True, exist_ok=True)
    doc = table.summarise_grid(pooled_config, benchmarks, methods, out, command("benchmarks/table1_more_seeds.py", argv),
                               meta.get("xla_flags"), {"extra_command": meta["command"]}, more=[extra, base])
    pooled_md = (out / "table.md").read_text()
    fresh_md = (extra / "table.md").read_text()
    print(pooled_md)

    if not args.no_readme:
        fresh = "\n".join([
            f"Seeds {extra_seeds[0]}-{extra_seeds[-1]} only. Files: `{rel(extra)}/` "
            "(`table.md`, `table.json`, `convergence.png`, the cells).",
            "",
            fresh_md.rstrip(),
        ])
        pooled = "\n".join([
            f"Seeds {base_seeds[0]}-{base_seeds[-1]} (the full grid's cells, `{rel(base)}/`) and "
            f"{extra_seeds[0]}-{extra_seeds[-1]} (`{rel(extra)}/`) pooled. Files: `{rel(out)}/`.",
            "",
            pooled_md.rstrip(),
            "",
            f"Seeds {extra_seeds[0]}-{extra_seeds[-1]} were run by `{meta['command']}`. "
            f"Cells by folder: {'; '.join(f'`{rel(d)}` at {cell_provenance(d, benchmarks, methods)}' for d in (base, extra))}.",
        ])
        io.replace_marked_block(ROOT / "README.md", "table1-more-seeds", fresh)
        io.replace_marked_block(ROOT / "README.md", "table1-pooled-seeds", pooled)
        print("updated README.md")
    return 0 if doc else 1


if __name__ == "__main__":
    sys.exit(main())
