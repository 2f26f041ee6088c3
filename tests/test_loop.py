"""The vmap backend: fixed-shape rounds that never retrace, seeds vectorised, bad values caught."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import nan_round_factory, nan_factory, shifted_factory, small_config, wrong_shape_factory
from pacd_jax import client, experiment, keys, loop, methods, tasks


def _problem(config, fam):
    return loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)


@pytest.mark.parametrize("method", ["pacd", "independent"])
def test_round_traces_once_as_data_grows(monkeypatch, method):
    config = small_config(method=method, iters=4)
    fam = tasks.make("branin", config.num_clients, 0)
    problem, params = _problem(config, fam)
    traces = []
    original = loop.bo_round_aux

    def counting(*args, **kwargs):
        traces.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(loop, "bo_round_aux", counting)
    res = loop.run_batch(problem, methods.build(config, fam.dim), [0], jax.tree_util.tree_map(lambda a: a[None], params), True, jnp.float32)
    assert len(traces) == 1  # one trace for 4 rounds with buffers filling from 5 to 9 rows
    assert res.X.shape == (1, 5, 5 + 4, 2)


def test_row_sizes_double_from_32_and_end_at_the_capacity():
    assert loop.row_sizes(35) == (35,)  # a short run: one size
    assert loop.row_sizes(110) == (32, 64, 110)
    assert loop.row_sizes(210) == (32, 64, 128, 210)
    assert loop.row_sizes(96) == (32, 64, 96)
    assert loop.row_sizes(95) == (32, 95)  # 64 is within 1.5x of 95: not worth a branch
    fam = tasks.make("branin", 5, 0)
    problem, _ = _problem(small_config(iters=4), fam)
    with pytest.raises(ValueError, match="capacity 9"):
        _ = dataclasses.replace(problem, row_sizes=(4, 8)).sizes


# cboc-l fits the same per-client GP as independent, so it covers that path too
@pytest.mark.parametrize("method", ["pacd", "cboc-l"])
def test_rounds_on_fewer_rows_equal_rounds_on_the_whole_buffer(method):
    """Each round computes on the smallest row count that holds the data; the masked
    model ignores the padded rows exactly, so the run is the full-buffer run (float64)."""
    with jax.enable_x64(True):
        config = small_config(method=method, iters=6, x64=True)
        fam = tasks.make("branin", config.num_clients, 0)
        problem, params = _problem(config, fam)
        params = jax.tree_util.tree_map(lambda a: a[None], params)
        method_fns = methods.build(config, fam.dim)
        traces = []
        original = loop.bo_round_aux

        def counting(*args, **kwargs):
            traces.append(1)
            return original(*args, **kwargs)

        runs = {}
        for sizes in [(11,), (6, 11)]:  # capacity 5 + 6; rounds 0-1 on 6 rows, 2-5 on 11
            p = dataclasses.replace(problem, row_sizes=sizes)
            traces.clear()
            loop.bo_round_aux = counting
            try:
                runs[sizes] = loop.run_batch(p, method_fns, [0], params, True, jnp.float64)
            finally:
                loop.bo_round_aux = original
            assert len(traces) == 1  # one program for all rounds, whichever size a round uses
    full, cut = runs[(11,)], runs[(6, 11)]
    np.testing.assert_allclose(cut.X, full.X, rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(cut.y, full.y, rtol=1e-7, atol=1e-7)


def test_round_program_holds_no_host_callback():
    """The coordinator's non-finite-gradient record is returned by the round, not sent by a host
    callback, so JAX's persistent compilation cache can keep the round's program."""
    config = small_config(iters=2)
    fam = tasks.make("branin", config.num_clients, 0)
    problem, params = _problem(config, fam)
    method = methods.build(config, fam.dim)
    state = loop.initial_state(problem, method, jnp.asarray(0), params, jnp.float32)
    args = (state, jnp.asarray(0, jnp.int32), jnp.asarray(0, jnp.int32))
    reporting = lambda m, b, t, k: (method.learn(m, b, t, k), ())  # noqa: E731
    hlo = {name: jax.jit(lambda st, t, s: loop.bo_round_aux(problem, method, st, t, s, params, learn)).lower(*args).as_text()
           for name, learn in [("checked", method.learn_checked), ("reporting", reporting)]}
    assert "callback" not in hlo["checked"]
    assert "callback" in hlo["reporting"]  # the check can fail: learn's host callback shows in the program


def test_buffers_hold_design_then_queries():
    config = small_config(iters=3, noise_std=0.5)
    doc = experiment.run(config)
    fam = tasks.make("branin", 5, 0)
    lo, hi = fam.bounds[:, 0], fam.bounds[:, 1]
    for c in doc["results"][0]["clients"]:
        X, y, f = np.asarray(c["X"]), np.asarray(c["y"]), np.asarray(c["f"])
        assert X.shape == (5 + 3, 2) and y.shape == f.shape == (8,)
        assert np.all(X >= lo - 1e-4) and np.all(X <= hi + 1e-4)
        # f is the noise-free objective at X (float32 evaluation, float64 check)
        np.testing.assert_allclose(f, np.asarray(fam.evaluate(c["client"], X), np.float64), rtol=1e-5, atol=1e-4)
        assert 0.0 < np.std(y - f) < 2.0  # noise was added, with the requested scale
        assert len(c["regret"]) == 4 and c["regret"][0] == 1.0


def test_initial_design_is_the_collaborative_lhs():
    config = small_config(iters=1)
    doc = experiment.run(config)
    fam = tasks.make("branin", 5, 0)
    unit = np.asarray(tasks.collaborative_lhs(keys.stream(0, "design"), 5, 5, 2))
    got = np.stack([np.asarray(c["X"])[:5] for c in doc["results"][0]["clients"]])
    np.testing.assert_allclose((got - fam.bounds[:, 0]) / (fam.bounds[:, 1] - fam.bounds[:, 0]), unit, atol=1e-5)


def test_vectorised_seeds_match_single_seed_runs():
    config = small_config(seeds=(0, 3), iters=2)
    both = experiment.run(config)
    alone = experiment.run(config.replace(seeds=(3,)))
    a = both["results"][1]
    b = alone["results"][0]
    assert a["seed"] == b["seed"] == 3
    for ca, cb in zip(a["clients"], b["clients"]):
        np.testing.assert_allclose(ca["X"], cb["X"], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ca["y"], cb["y"], rtol=1e-4, atol=1e-3)


def test_user_family_runs_seeds_sequentially():
    config = small_config(benchmark="custom", seeds=(0, 1), iters=2, num_clients=3)
    doc = experiment.run(config, shifted_factory)
    assert doc["benchmark"] == "shifted" and len(doc["results"]) == 2
    assert {c["client"] for c in doc["results"][1]["clients"]} == {0, 1, 2}
    # seed 1 shifts the optima by 0.01: the regret uses each seed's own family
    assert all(np.isfinite(c["final_regret"]) for r in doc["results"] for c in r["clients"])


@pytest.mark.parametrize("method", ["pacd", "independent"])
def test_non_finite_value_in_initial_design_names_client(method):
    with pytest.raises(loop.NonFiniteObjectiveError, match=r"client 1 .*nan.* in the initial design \(seed 0\)"):
        experiment.run(small_config(method=method, num_clients=3), nan_factory)


@pytest.mark.parametrize("method", ["pacd", "independent"])
def test_non_finite_value_during_a_round_names_client_and_round(method):
    # the task is finite at the initial design and NaN at any new point of client 1
    with pytest.raises(loop.NonFiniteObjectiveError, match=r"client 1 .*nan.* at round 0 \(seed 0\)"):
        experiment.run(small_config(method=method, iters=3, num_clients=3), nan_round_factory)


def test_wrong_client_count_and_shape_are_value_errors():
    with pytest.raises(ValueError, match="clients"):
        experiment.run(small_config(num_clients=4), lambda n, s: shifted_factory(3, s))
    with pytest.raises(ValueError, match="shape"):
        experiment.run(small_config(num_clients=2), wrong_shape_factory)


def test_x64_run_computes_in_float64():
    doc = experiment.run(small_config(iters=1, x64=True))
    assert doc["config"]["x64"] is True
    fam = tasks.make("branin", 5, 0)
    with jax.enable_x64(True):
        for c in doc["results"][0]["clients"]:
            exact = np.asarray(fam.evaluate(c["client"], jnp.asarray(c["X"], jnp.float64)))
            np.testing.assert_allclose(c["f"], exact, rtol=1e-12)
