"""`pacd-bo info`: versions, MPI library, devices, precision."""

import json
import subprocess
import sys

import jax
import jaxlib.version
import pytest

from pacd_jax import cli, info


def test_info_json_matches_the_running_installation(capsys):
    assert cli.main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["versions"]["jax"] == jax.__version__
    assert data["versions"]["jaxlib"] == jaxlib.version.__version__
    assert data["jax_backend"] == jax.default_backend()
    assert len(data["devices"]) == len(jax.devices())
    assert data["x64"] == bool(jax.config.read("jax_enable_x64"))
    assert set(info.PACKAGES) == set(data["versions"])


def test_info_text_names_every_package(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for name in ("pacd-jax", "jax", "mpi4jax", "MPI library", "devices", "float64"):
        assert name in out


def test_info_reports_the_mpi_library_without_starting_mpi():
    pytest.importorskip("mpi4py")
    code = (
        "from pacd_jax import info; lib = info.mpi_library(); "
        "from mpi4py import MPI; print(lib); print(MPI.Is_initialized())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout.split("\n")
    assert "MPI" in out[0] or "Open MPI" in out[0]
    assert out[1] == "False"


def test_info_reports_float64_when_enabled():
    code = "import jax; jax.config.update('jax_enable_x64', True); from pacd_jax import info; print(info.collect()['x64'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    assert out == "True"
