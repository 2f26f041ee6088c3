"""provenance.commit: which changes make a run '+dirty'."""

import subprocess

from pacd_jax import provenance


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_commit_ignores_results_and_readme_but_not_code(tmp_path):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    files = {"README.md": "a", "benchmarks/results/r.json": "{}", "code.py": "x = 1"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    rev = provenance.commit(tmp_path)
    assert len(rev) >= 7 and not rev.endswith("+dirty")
    (tmp_path / "README.md").write_text("b")
    (tmp_path / "benchmarks/results/r.json").write_text('{"a": 1}')
    assert provenance.commit(tmp_path) == rev
    (tmp_path / "code.py").write_text("x = 2")
    assert provenance.commit(tmp_path) == rev + "+dirty"
