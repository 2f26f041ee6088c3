"""The microbenchmark scripts run in --quick mode and write records of the documented schema.

No timing is asserted: only that the scripts work and what they write.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
MPIEXEC = shutil.which("mpiexec", path=str(BIN)) or shutil.which("mpiexec")
RECORD_KEYS = {"name", "config", "median_ms", "min_ms", "compile_s", "baselines", "repeats", "meta"}


def _check_records(records, extra=frozenset()):
    assert isinstance(records, list) and records
    for r in records:
        assert set(r) == RECORD_KEYS | set(extra)
        # compile_s >= 0: full_run estimates it as first run minus second, which noise can make 0
        assert 0 < r["min_ms"] <= r["median_ms"] and r["compile_s"] >= 0
        assert all(v > 0 for v in r["baselines"].values())
        assert set(r["meta"]) == {"command", "commit", "machine"}


@pytest.mark.heavy  # a 6-rank MPI job beside the vmap timing
@pytest.mark.skipif(MPIEXEC is None, reason="no mpiexec (install the mpi extra)")
def test_mpi_step_quick_writes_records(tmp_path):
    out = tmp_path / "mpi.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "mpi_step.py"), "--quick", "--configs", "anchor-5x20x1d",
                           "--transports", "gather", "--json", str(out)], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = json.loads(out.read_text())
    _check_records(records)
    assert [r["name"] for r in records] == ["anchor-5x20x1d/vmap", "anchor-5x20x1d/mpi-gather"]
    assert set(records[1]["baselines"]) == {"vmap"} and records[1]["config"]["ranks"] == 6
    assert records[1]["config"]["mpi_wait"] == "default"


def test_mpi_step_rejects_an_unknown_wait_mode(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "mpi_step.py"), "--mpi-waits", "default,nap",
                           "--json", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown --mpi-waits 'nap'" in proc.stderr
    assert not (tmp_path / "x.json").exists()


def _run_script(name, args, tmp_path, timeout=600):
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / f"{name}.py"), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_svgd_step_quick_writes_named_records_and_sweeps(tmp_path):
    # baselines: only the one-device run that --devices adds (each extra baseline is two more compiles in CI)
    records = _run_script("svgd_step", ["--quick", "--baselines", "", "--devices", "2"], tmp_path)
    _check_records(records)
    names = [r["name"] for r in records]
    assert names[:2] == ["anchor-5x20x1d", "bo-5x110x6d"]
    # the named records split the particles over 2 host devices; one device is a baseline
    assert all(set(r["baselines"]) == {"one-device"} and r["config"]["devices"] == 2 for r in records[:2])
    anchor = records[0]["config"]
    assert (anchor["num_clients"], anchor["points"], anchor["dim"], anchor["num_particles"], anchor["hidden"], anchor["features"]) == (5, 20, 1, 10, [32, 32], 2)
    sweeps = {r["config"]["sweep"] for r in records[2:]}
    assert sweeps == {"K", "N", "m"} and all(np.isfinite(r["config"]["fitted_exponent"]) for r in records[2:])


@pytest.mark.heavy  # a whole run, twice, in a subprocess
def test_full_run_quick_writes_a_record(tmp_path):
    records = _run_script("full_run", ["--quick", "--benchmarks", "sinusoid", "--devices", "2"], tmp_path)
    _check_records(records)
    (rec,) = records
    assert rec["name"] == "run-sinusoid-pacd-T3" and rec["config"]["learn_ms"] > 0 and rec["config"]["propose_ms"] > 0
    assert rec["config"]["devices"] == 2
    by_rows = rec["config"]["round_ms_by_rows"]  # rounds 1-2 of the timed run, all on the 8 rows of the buffer
    assert list(by_rows) == ["8"] and by_rows["8"] > 0


@pytest.mark.heavy  # times a whole round per cell
def test_full_run_table_estimate_sums_its_cells(tmp_path):
    records = _run_script("full_run", ["--quick", "--estimate-table", "--benchmarks", "sinusoid", "--methods",
                                       "pacd", "--seeds", "4"], tmp_path)
    _check_records(records)
    *cells, total = records
    assert [r["name"] for r in cells] == ["estimate-sinusoid-pacd-T3-S4"]
    for r in cells:
        c = r["config"]
        # m0 = 5 in 1-D, capacity 8: one row count, rounds 1-2 on it, timed at its last round (7 points)
        assert c["round0"]["count"] == 5 and list(c["by_rows"]) == ["8"]
        assert c["by_rows"]["8"]["rounds"] == 2 and c["by_rows"]["8"]["count"] == 7
        one_round = lambda h: h["learn_ms"] + h["propose_ms"]  # noqa: E731
        one_seed_ms = one_round(c["round0"]) + sum(v["rounds"] * one_round(v) for v in c["by_rows"].values())
        assert r["median_ms"] == pytest.approx(4 * one_seed_ms)
    assert total["name"] == "estimate-table-T3-S4"
    assert total["median_ms"] == pytest.approx(sum(r["median_ms"] for r in cells))


@pytest.mark.parametrize("devices", [1, 2])
def test_profile_step_quick_sums_time_by_kind_and_counts_flops(tmp_path, devices):
    records = _run_script("profile_step", ["--quick", "--devices", str(devices)], tmp_path)
    _check_records(records)
    # the split round gathers the clients' messages from both devices; one device has nothing to gather
    kinds = ["wall", "matmul", "lapack", "elementwise", "layout"] + (["collective"] if devices == 2 else []) + ["other"]
    name = "profile-anchor-5x20x1d" + ("-devices2" if devices == 2 else "")
    assert [r["name"] for r in records] == [f"{name}/{k}" for k in kinds] + ["profile-gemm-256"]
    wall, matmul, gemm = records[0]["config"], records[1]["config"], records[-1]
    assert wall["top_ops_ms"] and wall["devices"] == devices and wall["busy_ms_by_thread"]
    flops = wall["flops_per_step"]
    assert flops["total"] == pytest.approx(flops["clients"] + flops["coordinator"])
    assert flops["clients"] > flops["coordinator"] > 0
    assert wall["gflops"] == pytest.approx(flops["total"] / records[0]["median_ms"] / 1e6)
    # the products are part of the step's flops, and the trace timed some of them
    assert 0 < matmul["dot_flops_per_step"] < flops["total"]
    assert 0 < matmul["dots_traced"] <= matmul["dots"] and matmul["gflops"] > 0
    assert gemm["config"]["gflops"] == pytest.approx(2 * 256**3 / gemm["median_ms"] / 1e6)


def test_dot_flops_equals_xla_cost_analysis_of_a_program_of_products(monkeypatch):
    import jax
    import jax.numpy as jnp

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import profile_step

    def products(a, b, c, d):
        return jnp.einsum("bij,bjk->bik", a, b).sum() + (c @ d).sum() + jnp.einsum("mi,mk->ik", c, c).sum()

    args = [jnp.ones(s, jnp.float32) for s in ((3, 4, 5), (3, 5, 6), (7, 8), (8, 2))]
    compiled = jax.jit(products).lower(*args).compile()
    counted = profile_step.dot_flops(compiled.as_text())
    # by hand: 2 x output x contraction for each product
    assert sorted(counted.values()) == sorted([2.0 * 3 * 4 * 6 * 5, 2.0 * 7 * 2 * 8, 2.0 * 8 * 8 * 7])
    # XLA's own count of the products, an independent oracle (the sums add their few flops)
    reductions = 3 * 4 * 6 + 7 * 2 + 8 * 8 + 2
    assert sum(counted.values()) == pytest.approx(profile_step._flops(compiled) - reductions, rel=0.005)


def test_dlg_loss_quick_writes_records_with_both_baselines(tmp_path):
    records = _run_script("dlg_loss", ["--quick", "--dtypes", "float64"], tmp_path)  # the attack's precision
    _check_records(records)
    assert [r["name"] for r in records] == ["dlg-12x2d-K3-float64"]
    assert set(records[0]["baselines"]) == {"autodiff", "loop"}
    assert records[0]["config"]["dtype"] == "float64" and records[0]["config"]["points"] == 12


@pytest.mark.heavy  # a benchmark script beside its baseline
def test_gp_fit_quick_writes_a_record_whose_fit_is_no_worse_than_the_baseline(tmp_path):
    records = _run_script("gp_fit", ["--quick"], tmp_path)
    _check_records(records, extra={"objective", "baseline_compile_s"})
    assert [r["name"] for r in records] == ["gp-fit-2x2x12x2d-float32"]
    assert set(records[0]["baselines"]) == {"vmapped-fixed-steps"}
    obj = records[0]["objective"]
    # the early-stopped fit reaches the fixed-step fit's MAP objective (mean over the batch) up to float32 round-off
    assert np.isfinite(obj["ours"]) and obj["ours"] <= obj["vmapped-fixed-steps"] + 1e-3 * abs(obj["vmapped-fixed-steps"]) + 1e-3


@pytest.mark.heavy  # a benchmark script beside its baseline
def test_propose_step_quick_writes_a_record_whose_points_match_the_baseline(tmp_path):
    records = _run_script("propose_step", ["--quick"], tmp_path)
    _check_records(records, extra={"point_difference"})
    assert [r["name"] for r in records] == ["propose-2x20x2d"]
    assert set(records[0]["baselines"]) == {"lapack-trsm"}
    # the blocked L^-1 and the triangular solve give the same proposal up to float32 round-off
    assert 0 <= records[0]["point_difference"] < 1e-3
