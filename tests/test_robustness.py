"""Numerical robustness: degenerate data never gives NaN (meta GP and standard GP).

Duplicated and near-duplicated query points, constant y, and y at 1e-8 and 1e8
scale go through what a client computes (its standardisation, the GMLL, its
gradient message, the mixture posterior and the acquisition) and through the
Independent baseline's GP (log-marginal, its gradient, the L-BFGS fit, the
posterior). What keeps them finite: every client standardises its own y
(spread floored at 1e-6 of its magnitude, gp.standardise), the noise variance
has a floor (meta GP: ``noise_floor``, default 1e-3; standard GP:
``NOISE_FLOOR``) and ``DEFAULT_JITTER`` (1e-6) is added to the diagonal, so
the Gram matrix's smallest eigenvalue is at least floor + jitter whatever the
inputs (README, Reliability).
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from helpers import run_fully_optimised, small_config
from pacd_jax import client, experiment, methods, standard_gp
from pacd_jax.client import ClientBuffer

M, D = 24, 3


def _points(kind, rng):
    if kind == "duplicated":
        return np.repeat(rng.random((1, D)), M, axis=0)
    if kind == "near-duplicated":
        return np.clip(rng.random((1, D)) + 1e-7 * rng.standard_normal((M, D)), 0, 1)
    if kind == "pairs":  # every point twice
        half = rng.random((M // 2, D))
        return np.concatenate([half, half])
    return rng.random((M, D))


def _values(kind, rng):
    base = rng.standard_normal(M)
    return {"constant": np.full(M, 3.0), "tiny": 1e-8 * base, "huge": 1e8 * base, "normal": base}[kind]


CASES = [(xk, yk) for xk in ("duplicated", "near-duplicated", "pairs", "random") for yk in ("constant", "tiny", "huge", "normal")]


def _buffer(xk, yk, dtype, count=M - 4):
    rng = np.random.default_rng(0)
    X, y = _points(xk, rng), _values(yk, rng)
    return ClientBuffer(jnp.asarray(X, dtype), jnp.asarray(y, dtype), jnp.asarray(count, jnp.int32))


@pytest.mark.parametrize("x64", [False, True])
def test_meta_gp_gmll_gradients_and_posterior_are_finite(x64):
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        config = small_config()
        learner = methods.meta_learner(config, D)
        particles = learner.init(jnp.asarray(0), dtype).particles

        @jax.jit
        def everything(buf):
            data = client.model_data(buf)
            gmll = jax.vmap(learner.model.gmll, (0, None))(particles, data)
            grads = client.local_gradients(learner.model, particles, buf)
            acq = client.meta_acquisition(learner.model, particles, buf, 2.0)
            posts = jax.vmap(learner.model.posterior, (0, None))(particles, data)
            mu, var = learner.model.predict_mixture(posts, jnp.concatenate([buf.X[:4], jnp.full((2, D), 0.5, dtype)]))
            return gmll, grads, mu, var, acq(buf.X[:4])

        for xk, yk in CASES:
            out = everything(_buffer(xk, yk, dtype))
            for name, value in zip(("gmll", "gradients", "mean", "variance", "acquisition"), out):
                assert np.all(np.isfinite(np.asarray(value))), (xk, yk, name)
            assert np.all(np.asarray(out[3]) >= 0), (xk, yk)


@pytest.mark.parametrize("x64", [False, True])
def test_standard_gp_marginal_gradient_fit_and_posterior_are_finite(x64):
    with jax.enable_x64(x64):
        dtype = jnp.float64 if x64 else jnp.float32
        config = standard_gp.StandardGPConfig(dim=D, kernel="matern52", fit_steps=10)
        hyper0 = standard_gp.default_hyper(config, dtype)

        @jax.jit
        def everything(buf):
            data = client.model_data(buf)
            lml, grad = jax.value_and_grad(standard_gp.log_marginal, argnums=1)(config, hyper0, data)
            hyper = standard_gp.fit(config, data, hyper0)
            post = standard_gp.posterior(config, hyper, data)
            mu, var = standard_gp.predict(config, post, jnp.concatenate([buf.X[:4], jnp.full((2, D), 0.5, dtype)]))
            return lml, grad, hyper, mu, var

        for xk, yk in CASES:
            out = everything(_buffer(xk, yk, dtype))
            for leaf in jax.tree_util.tree_leaves(out):
                assert np.all(np.isfinite(np.asarray(leaf))), (xk, yk)


@pytest.mark.slow  # the paper's T = 100 rounds (200 and 300 ran clean too, but cost CI a fourth and fifth buffer size)
def test_six_dimensional_task_with_100_rounds_has_no_nan(tmp_path):
    out = tmp_path / "run.json"
    code = (
        "import json; from helpers import run_fully_optimised, small_config; from pacd_jax import experiment, io\n"
        "config = small_config(benchmark='hartmann6', num_clients=2, iters=100, svgd_steps=2, svgd_steps_init=10,"
        " num_candidates=32, num_local=8, refine_steps=2)\n"
        f"io.write_json({str(out)!r}, experiment.run(config))\n"
    )
    proc = run_fully_optimised(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    for c in doc["results"][0]["clients"]:
        assert len(c["regret"]) == 101
        for key in ("X", "y", "f", "regret"):
            assert np.all(np.isfinite(np.asarray(c[key], np.float64))), key
