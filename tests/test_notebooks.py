"""Every notebook under notebooks/ runs top to bottom (small settings), so a notebook that breaks fails CI."""

import os
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

#: wall-time budget of one notebook with PACD_NOTEBOOK_SMALL=1 (measured 50-90 s each on the shared 2-core
#: machine, mostly XLA compilation of a BO round; generous, because other jobs share the cores)
SMALL_BUDGET_S = 300

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_notebooks_are_found_and_committed_without_outputs():
    assert len(NOTEBOOKS) >= 3
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name}: strip outputs before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch):
    monkeypatch.setenv("PACD_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError with the failing cell and traceback
    elapsed = time.perf_counter() - start
    assert elapsed < SMALL_BUDGET_S, f"{path.name} took {elapsed:.0f} s with PACD_NOTEBOOK_SMALL=1"
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
