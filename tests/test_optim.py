"""The package's one L-BFGS loop (optax, zoom line search) with its non-finite guard."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize, rosen, rosen_der

from pacd_jax import optim


@pytest.mark.parametrize("guess", ["one", "keep"])
def test_lbfgs_finds_the_rosenbrock_minimum_scipy_finds(guess):
    with jax.enable_x64(True):
        x0 = np.array([-1.2, 1.0, -0.5, 0.8])
        loss = lambda x: jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)  # noqa: E731
        ours = np.asarray(jax.jit(lambda p: optim.lbfgs(loss, p, 200, initial_guess=guess))(jnp.asarray(x0)))
    ref = minimize(rosen, x0, method="BFGS", jac=rosen_der, options={"gtol": 1e-10}).x
    np.testing.assert_allclose(ours, ref, atol=1e-6)
    np.testing.assert_allclose(ours, np.ones(4), atol=1e-6)  # the known minimiser


def test_a_step_into_non_finite_values_is_not_taken():
    """The objective is NaN for x > 0.5; its unconstrained minimum is at 2. The iterate must
    stay finite and at a point where the objective is finite, for every vmapped start."""
    with jax.enable_x64(True):
        loss = lambda p: jnp.where(p["x"] > 0.5, jnp.nan, (p["x"] - 2.0) ** 2).sum()  # noqa: E731
        starts = {"x": jnp.asarray([[-3.0], [0.0], [0.4]])}
        out = jax.jit(jax.vmap(lambda p: optim.lbfgs(loss, p, 30)))(starts)
        x = np.asarray(out["x"])[:, 0]
        assert np.all(np.isfinite(x)) and np.all(x <= 0.5)
        assert np.all(x >= np.asarray(starts["x"])[:, 0] - 1e-12)  # no step went downhill-away from 2
        values = np.asarray(jax.vmap(loss)(out))
        assert np.all(np.isfinite(values))
        # and it still made progress: the line search backs off to the edge of the finite region
        np.testing.assert_allclose(x, 0.5, atol=1e-4)


def test_until_converged_stops_early_at_the_scipy_minimum():
    """A 4-D Rosenbrock from the classic start: the tolerance rule stops well before the cap,
    at scipy's minimiser, with as many iterations as scipy's own rule needs (within a factor)."""
    with jax.enable_x64(True):
        x0 = np.array([-1.2, 1.0, -0.5, 0.8])
        loss = lambda x: jnp.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)  # noqa: E731
        res = jax.jit(lambda p: optim.lbfgs_until_converged(loss, p, 500, optim.SCIPY_FTOL))(jnp.asarray(x0))
    ref = minimize(rosen, x0, method="L-BFGS-B", jac=rosen_der)
    assert int(res.steps) < 500
    assert int(res.steps) <= 3 * ref.nit
    np.testing.assert_allclose(np.asarray(res.params), ref.x, atol=1e-4)
    assert float(rosen(np.asarray(res.params))) <= ref.fun + 1e-8


def test_until_converged_stops_at_a_non_finite_step_and_keeps_the_last_finite_point():
    with jax.enable_x64(True):
        loss = lambda p: jnp.where(p["x"] > 0.5, jnp.nan, (p["x"] - 2.0) ** 2).sum()  # noqa: E731
        res = jax.jit(lambda p: optim.lbfgs_until_converged(loss, p, 30, 1e-12))({"x": jnp.asarray([0.0])})
    assert int(res.steps) < 30
    x = float(res.params["x"][0])
    assert np.isfinite(x) and 0.0 <= x <= 0.5


def test_default_ftol_is_scipys_in_float64_and_above_round_off_in_float32():
    assert optim.default_ftol(jnp.float64) == pytest.approx(2.220446049250313e-09)
    assert optim.default_ftol(jnp.float32) == pytest.approx(10 * np.finfo(np.float32).eps)


def test_relative_stop_follows_an_objective_towards_zero():
    """``floor=0``: a residual driven from 1 to round-off is not stopped by the
    absolute scipy rule's ``ftol * 1`` once it is small, and it stops once
    iterations no longer lower it (far before ``max_steps``)."""
    with jax.enable_x64(True):
        target = jnp.array([0.3, -1.2, 2.0])
        loss = lambda x: jnp.sum((x - target) ** 2) * (1.0 + jnp.sum(x**2))
        x0 = jnp.zeros(3)
        absolute = optim.lbfgs_until_converged(loss, x0, 500, 1e-6)
        relative = optim.lbfgs_until_converged(loss, x0, 500, 1e-6, floor=0.0)
        f_abs, f_rel = float(loss(absolute.params)), float(loss(relative.params))
    assert f_abs > 1e-12 and f_rel < 1e-20  # measured: 7e-11 after 4 steps, 0 after 8
    assert int(relative.steps) < 500
