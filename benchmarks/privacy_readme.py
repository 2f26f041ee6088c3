"""Put a ``pacd-bo privacy`` folder's table (``DIR/privacy.md``, with its own provenance line) into README.md.

    python benchmarks/privacy_readme.py benchmarks/results/privacy_branin_follow privacy-sweep-follow

replaces the text between ``<!-- BLOCK:begin -->`` and ``<!-- BLOCK:end -->``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pacd_jax import io  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a pacd-bo privacy --out folder")
    parser.add_argument("block", help="README marker name")
    parser.add_argument("--readme", default=str(ROOT / "README.md"))
    args = parser.parse_args(argv)
    table = Path(args.folder) / "privacy.md"
    if not table.is_file():
        print(f"error: {table} not found (run pacd-bo privacy --out {args.folder} first)", file=sys.stderr)
        return 2
    try:
        io.replace_marked_block(args.readme, args.block, table.read_text().rstrip("\n"))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"updated {args.readme} ({args.block})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
