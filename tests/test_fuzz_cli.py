"""Property-based: random argument lists for ``pacd-bo run`` and random input to the public API.

Every CLI call ends with exit code 0 (run.json and the figure written) or 2
(exactly one line on stderr, no traceback, no output file, no temporary file);
every bad API value raises ValueError/TypeError whose message shows the value.
"""

import json
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pacd_jax import cli, tasks
from pacd_jax.config import RunConfig

BASE = ["--benchmark", "sinusoid", "--clients", "2", "--iters", "1", "--particles", "2", "--hidden", "4",
        "--svgd-steps", "1", "--svgd-steps-init", "2", "--candidates", "16", "--local-candidates", "4", "--refine", "1",
        "--refine-steps", "1", "--gp-fit-steps", "2", "--quiet"]

# option -> (valid values, invalid values); invalid ones outnumber valid ones so that most examples are quick
OPTIONS = {
    "--benchmark": (["sinusoid", "branin"], ["", "nope", "Branin", "1"]),
    "--method": (["pacd", "independent"], ["PACD", "cboc", "", "x"]),
    "--clients": (["1", "2"], ["0", "-3", "1.5", "two", "", "99999999999999999999"]),
    "--iters": (["1"], ["0", "-1", "nan", "1e3", ""]),
    "--seeds": (["1"], ["0", "-2", "x"]),
    "--seed-list": (["3", "0,5"], [",", "a,b", "1,,x", "-1", "2,2"]),
    "--init-points": (["2", "3"], ["0", "-4", "inf"]),
    "--noise-std": (["0", "0.1"], ["-1", "nan", "inf", "-inf", "abc"]),
    "--particles": (["2"], ["0", "-1", "2.5"]),
    "--hidden": (["4", "4,4"], ["", "0", "4,-1", "a"]),
    "--kernel-variance": (["0.5"], ["0", "-1", "nan", "1e999"]),
    "--noise-prior": (["-4,1"], ["-4", "-4,0", "-4,1,2", "nan,1", "a,b"]),
    "--lr": (["0.01"], ["0", "-0.1", "inf"]),
    "--kappa": (["2"], ["-1", "nan"]),
    "--candidates": (["16"], ["0", "-16"]),
    "--refine": (["1"], ["0", "17"]),
    "--gp-kernel": (["rbf"], ["matern", "RBF"]),
    "--backend": (["vmap"], ["gpu", "MPI"]),
    "--on-bad-value": (["skip", "stop"], ["ignore", ""]),
    "--meta-lambda": (["2"], ["0", "-1", "nan"]),
}
FLAGS = ["--x64", "--resume", "--share-results"]


@st.composite
def argument_lists(draw):
    names = draw(st.lists(st.sampled_from(sorted(OPTIONS)), min_size=1, max_size=3, unique=True))
    args = []
    for name in names:
        valid, invalid = OPTIONS[name]
        args += [name, draw(st.sampled_from(valid + invalid))]
    args += draw(st.lists(st.sampled_from(FLAGS), max_size=1))
    if draw(st.integers(0, 9)) == 0:
        args += [draw(st.sampled_from(["--bogus", "-x", "--iters"]))]  # unknown option, or one without its value
    return args


OUTCOMES: list = []


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=argument_lists())
def test_every_run_command_succeeds_or_fails_with_one_clear_line(tmp_path_factory, capsys, args):
    out = tmp_path_factory.mktemp("run")
    target = out / "out"
    code = cli.main(["run", *BASE, *args, "--out", str(target)])
    stdout, stderr = capsys.readouterr()
    OUTCOMES.append((tuple(args), code, stderr.strip()))
    assert code in (0, 2), (args, code, stderr)
    assert "Traceback" not in stderr and "Traceback" not in stdout, args
    if code == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("pacd-bo"), (args, stderr)
        assert "error:" in lines[0], (args, stderr)
        assert _files(target) == [], (args, _files(target))  # no partial output
    else:
        assert sorted(_files(target)) == ["convergence.png", "run.json"], (args, _files(target))
        doc = json.loads((target / "run.json").read_text())
        assert all(math.isfinite(c["final_regret"]) for r in doc["results"] for c in r["clients"])


def test_fuzz_tried_both_outcomes():
    """Runs after the property (file order): the examples were not all failures or all successes."""
    if not OUTCOMES:
        pytest.skip("run with the property test")
    codes = [c for _, c, _ in OUTCOMES]
    print(f"{len(codes)} argument lists: {codes.count(0)} ran, {codes.count(2)} refused")
    for args, code, err in OUTCOMES:
        print(code, " ".join(args), "->", err)
    assert 0 in codes and 2 in codes


# -- the public API ---------------------------------------------------------------------------

BAD_CONFIG = [
    ("num_clients", 0), ("num_clients", -1), ("num_clients", 2.5), ("num_clients", True), ("num_clients", "3"),
    ("iters", 0), ("iters", None), ("seeds", ()), ("seeds", (1, 1)), ("seeds", (-1,)), ("seeds", (1.5,)),
    ("init_points", 0), ("noise_std", -0.1), ("noise_std", float("nan")), ("noise_std", float("inf")),
    ("method", "cboc"), ("backend", "gpu"), ("transport", "udp"), ("num_particles", 0), ("hidden", ()),
    ("hidden", (8, 0)), ("features", 0), ("kernel_variance", 0.0), ("kernel_variance", float("nan")),
    ("noise_prior", (0.0,)), ("noise_prior", (0.0, 0.0)), ("noise_floor", 0.0), ("svgd_steps", -1),
    ("learning_rate", 0.0), ("learning_rate", "0.1"), ("prior_factor", -1.0), ("meta_lambda", 0.0),
    ("kappa", -1.0), ("num_candidates", 0), ("num_local", -1), ("num_refine", 0), ("refine_steps", -1),
    ("gp_kernel", "linear"), ("gp_fit_steps", 0), ("on_bad_value", "ignore"), ("x64", 1), ("share_results", "yes"),
    ("benchmark", ""), ("benchmark", 3),
]


@pytest.mark.parametrize("field,value", BAD_CONFIG)
def test_run_config_names_the_offending_value(field, value):
    with pytest.raises((ValueError, TypeError)) as info:
        RunConfig(**{field: value})
    text = str(info.value)
    shown = [repr(value)] + ([repr(v) for v in value] if isinstance(value, tuple) else [])
    assert any(v in text for v in shown), text


@given(st.one_of(st.text(max_size=12), st.integers(), st.none(), st.lists(st.integers(), max_size=2)),
       st.one_of(st.integers(-3, 4), st.floats(allow_nan=True), st.text(max_size=3), st.booleans()),
       st.one_of(st.integers(-3, 3), st.floats(allow_nan=True), st.none()))
@settings(max_examples=80, deadline=None, derandomize=True)
def test_tasks_make_succeeds_or_names_the_bad_value(name, num_clients, seed):
    try:
        fam = tasks.make(name, num_clients, seed)
    except (ValueError, TypeError) as exc:
        assert any(repr(v) in str(exc) for v in (name, num_clients, seed)), str(exc)
    else:
        assert fam.num_clients == num_clients and name in tasks.known_families()
