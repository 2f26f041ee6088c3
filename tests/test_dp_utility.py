"""benchmarks/dp_utility.py: its table and the README block it writes (no BO is run)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import dp_utility  # noqa: E402


def _summary(final, auc):
    return {"final_regret_mean": final, "final_regret_std": final / 2, "auc_mean": auc, "auc_std": 0.01}


def _result():
    entry = lambda sigma, final, eps: {  # noqa: E731
        "sigma": sigma, "noise_std": 2 * sigma * 22.14, "summary": _summary(final, 0.7),
        "mean_regret_over_rounds": {"mean": 0.2 + sigma / 100, "std": 0.03},
        "epsilon_run": {"epsilon": eps} if eps else None,
        "epsilon_paper": dp_utility.paper_epsilon(sigma) if sigma else None,
    }
    return {
        "sigmas": {"0.0": entry(0.0, 0.0123, None), "8.0": entry(8.0, 0.4566, 273.9)},
        "independent": {"summary": _summary(0.0088, 0.8), "mean_regret_over_rounds": {"mean": 0.25, "std": 0.04}},
        "meta": {"benchmark": "branin", "clients": 5, "seeds": [0, 1], "iters": 40, "clip": 22.14, "clip_source": "--clip",
                 "delta": 1e-5, "command": "python benchmarks/dp_utility.py --seeds 2", "commit": "abc1234",
                 "machine": "test", "wall_time_s": 12.0},
    }


def test_readme_block_holds_the_table_of_the_results_file(tmp_path):
    results = tmp_path / "dp_utility.json"
    results.write_text(json.dumps(_result()))
    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- dp-utility:begin -->\nold table\n<!-- dp-utility:end -->\nafter\n")

    assert dp_utility.main(["--table", "--out", str(results), "--readme", str(readme)]) == 0

    text = readme.read_text()
    assert "old table" not in text
    assert text.startswith("before\n<!-- dp-utility:begin -->\n") and text.endswith("<!-- dp-utility:end -->\nafter\n")
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ")}
    assert "0.0123 ± 0.0062" in rows["0"] and "∞ (no DP)" in rows["0"]
    assert "0.4566 ± 0.2283" in rows["8"] and "273.9" in rows["8"]
    # the paper-schedule epsilon of sigma = 8 is the accountant's, not a typed number
    assert f"{dp_utility.paper_epsilon(8.0)['pld']:.1f}" in rows["8"]
    assert "0.0088 ± 0.0044" in rows["Independent (nothing shared)"]
    assert "`python benchmarks/dp_utility.py --seeds 2` at commit `abc1234`" in text
