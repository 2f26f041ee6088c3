"""benchmarks/compare_methods.py: a tiny run end to end, its --set overrides, and the README table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import compare_methods  # noqa: E402

TINY = ["--set", "num_particles=3", "--set", "hidden=[8,8]", "--set", "svgd_steps=3", "--set", "svgd_steps_init=10",
        "--set", "num_candidates=64", "--set", "num_refine=2", "--set", "refine_steps=5", "--set", "gp_fit_steps=5"]


def test_settings_reach_every_cell_and_the_table(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text("<!-- cm:begin -->\n<!-- cm:end -->\n")
    monkeypatch.setattr(compare_methods, "ROOT", tmp_path)
    out = tmp_path / "cm.json"
    code = compare_methods.main(["--benchmarks", "branin", "--clients", "2", "--seeds", "1", "--iters", "2",
                                 "--set", "input_kernel=true", "--set", "noise_floor=1e-4", *TINY,
                                 "--out", str(out), "--readme-block", "cm"])
    assert code == 0
    doc = json.loads(out.read_text())
    for method in ("independent", "pacd"):
        config = doc["cells"]["branin"][method]["config"]
        assert config["input_kernel"] is True and config["noise_floor"] == 1e-4 and config["hidden"] == [8, 8]
    assert doc["meta"]["settings"]["input_kernel"] is True
    text = readme.read_text()
    assert "| branin | pacd |" in text and "`input_kernel=true`" in text and "`noise_floor=0.0001`" in text


def test_unknown_setting_is_an_argument_error(capsys):
    with pytest.raises(SystemExit) as exc:
        compare_methods.main(["--set", "no_such_option=1"])
    assert exc.value.code == 2 and "no_such_option" in capsys.readouterr().err
