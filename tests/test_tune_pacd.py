"""benchmarks/tune_pacd.py --collect: the table's statistics against hand computation, and the README block."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import tune_pacd  # noqa: E402


def _doc(cells, seeds, commit="abc1234"):
    meta = {"command": f"python benchmarks/tune_pacd.py --variants {','.join(cells)}", "commit": commit,
            "machine": "test machine", "seeds": seeds}
    return {"cells": cells, "meta": meta}


def test_collect_table_rows_follow_the_files(tmp_path):
    rng = np.random.default_rng(0)
    indep, xkern, other = rng.uniform(0, 0.01, 6), rng.uniform(0, 0.01, 6), rng.uniform(0, 0.01, 3)
    cell = lambda per: {"per_seed_final_regret": per.tolist(), "per_seed_auc": (per + 0.5).tolist(), "wall_time_s": 1.0}
    docs = [
        _doc({"indep/branin": cell(indep)}, list(range(110, 116))),
        _doc({"xkern/branin": cell(xkern)}, list(range(110, 116)), commit="def5678"),
        _doc({"xkern/branin": cell(other)}, [200, 201, 202]),  # other seeds: no Independent cell to compare with
    ]
    lines = tune_pacd.collect_table(docs).splitlines()
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:3]): line for line in lines if line.startswith("| `")}
    row = rows[("`xkern`", "branin", "110-115")]
    assert f"{xkern.mean():.4f} ± {xkern.std():.4f}" in row and f"{np.median(xkern):.4f}" in row
    assert f"| {int(np.sum(xkern < indep))} of 6 |" in row and f"{np.mean(xkern + 0.5):.3f}" in row and "`def5678`" in row
    assert "| — |" in rows[("`xkern`", "branin", "200-202")] and "| — |" in rows[("`indep`", "branin", "110-115")]
    assert lines[2].startswith("| `indep` | branin | 110-115")  # Independent BO first within its seeds


def test_collect_table_pairs_a_variant_with_its_own_independent_run():
    """``yj`` is also counted against ``indep-yj`` (Independent BO with the same options); other rows get a dash."""
    rng = np.random.default_rng(1)
    indep, indep_yj, yj, xkern = (rng.uniform(0, 0.01, 5) for _ in range(4))
    cell = lambda per: {"per_seed_final_regret": per.tolist(), "per_seed_auc": per.tolist()}
    seeds = list(range(110, 115))
    docs = [_doc({"indep/branin": cell(indep), "indep-yj/branin": cell(indep_yj)}, seeds),
            _doc({"yj/branin": cell(yj), "xkern/branin": cell(xkern)}, seeds)]
    lines = tune_pacd.collect_table(docs).splitlines()
    assert "seeds below `indep-V` (same options)" in lines[0] and lines[1].count("---") == lines[0].count("|") - 1
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| `")}
    assert rows["`yj`"][5:7] == [f"{int(np.sum(yj < indep))} of 5", f"{int(np.sum(yj < indep_yj))} of 5"]
    assert rows["`xkern`"][6] == "—" and rows["`indep`"][5:7] == ["—", "—"]
    # without such a pair the table keeps its usual columns
    assert "same options" not in tune_pacd.collect_table(docs[1:])


def test_collect_writes_the_readme_block(tmp_path, monkeypatch, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("head\n<!-- tune-kernels:begin -->\nold\n<!-- tune-kernels:end -->\ntail\n")
    monkeypatch.setattr(tune_pacd, "ROOT", tmp_path)
    files = []
    for name, per in (("indep", [0.1, 0.2]), ("pacd-default", [0.3, 0.05])):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(_doc({f"{name}/sinusoid": {"per_seed_final_regret": per, "per_seed_auc": per}}, [110, 111])))
        files.append(str(path))
    assert tune_pacd.main(["--collect", *files, "--readme"]) == 0
    text = readme.read_text()
    assert text.startswith("head\n") and text.endswith("tail\n") and "old" not in text
    assert "| `pacd-default` | sinusoid | 110-111 | 0.1750 ± 0.1250 | 0.1750 | 1 of 2 |" in text
    assert "| `pacd-default` | sinusoid" in capsys.readouterr().out
    # the block's own provenance line names the command that regenerates this very block
    assert f"--collect {' '.join(files)} --readme --block tune-kernels`." in text


def test_collect_table_compares_pacoh_with_pacd_seed_by_seed():
    from scipy.stats import wilcoxon

    rng = np.random.default_rng(3)
    pacd, pacoh = rng.uniform(0, 0.02, 8), rng.uniform(0, 0.02, 8)
    cell = lambda per: {"per_seed_final_regret": per.tolist(), "per_seed_auc": (per + 0.5).tolist(), "wall_time_s": 1.0}
    seeds = list(range(110, 118))
    docs = [_doc({"pacd-default/branin": cell(pacd)}, seeds), _doc({"pacoh/branin": cell(pacoh)}, seeds)]
    text = tune_pacd.collect_table(docs)
    line = next(l for l in text.splitlines() if l.startswith("- `pacoh` against"))
    assert f"lower on {int(np.sum(pacd < pacoh))} of 8 seeds, higher on {int(np.sum(pacd > pacoh))}" in line
    assert f"p = {wilcoxon(pacd, pacoh).pvalue:.2g}" in line
    # without PACD-BO's default run on the same seeds there is nothing to pair
    assert "against" not in tune_pacd.collect_table(docs[1:])
