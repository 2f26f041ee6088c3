"""L-BFGS (optax, zoom line search) with a guard against non-finite steps.

One loop for every inner optimisation of the package: the Independent
baseline's GP hyperparameter fit (:mod:`pacd_jax.standard_gp`) and the
gradient-inversion attack (:mod:`pacd_jax.attack`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.tree_utils as otu

#: scipy's L-BFGS-B stopping rule ``factr * eps`` with its default ``factr = 1e7`` in float64.
SCIPY_FTOL = 1e7 * float(np.finfo(np.float64).eps)


def default_ftol(dtype) -> float:
    """Relative-decrease tolerance for ``dtype``: scipy's 2.2e-9, or ``10 eps`` where that is larger (float32: 1.2e-6)."""
    return max(SCIPY_FTOL, 10.0 * float(jnp.finfo(dtype).eps))


class LBFGSResult(NamedTuple):
    params: Any
    steps: jax.Array  # iterations taken


def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def lbfgs(loss_of: Callable[[Any], jax.Array], params: Any, steps: int, memory_size: int = 10,
          initial_guess: str = "one", ftol: float | None = None) -> Any:
    """L-BFGS on ``loss_of`` from ``params``; returns the last accepted iterate.

    Runs exactly ``steps`` iterations when ``ftol`` is None; otherwise at most
    ``steps`` (see :func:`lbfgs_until_converged`). ``initial_guess`` is the
    zoom line search's first step size: ``"one"`` (optax's L-BFGS default) or
    ``"keep"`` (the previous step's). Works under ``jit`` and ``vmap``
    (restarts); ``loss_of`` needs only to be differentiable.
    """
    if ftol is None:
        return _fixed(loss_of, params, steps, memory_size, initial_guess)
    return lbfgs_until_converged(loss_of, params, steps, ftol, memory_size, initial_guess).params


def _optimiser(memory_size: int, initial_guess: str):
    return optax.lbfgs(memory_size=memory_size, linesearch=optax.scale_by_zoom_linesearch(
        max_linesearch_steps=20, initial_guess_strategy=initial_guess))


def _step(opt, loss_of, params, state):
    """One guarded iteration: returns the new params (or the old ones), the state, and the values before/after.

    A step whose new parameters or objective value (the line search has
    evaluated it) is NaN/inf is not taken: the iterate stays where it was, so
    a diverging start ends at its last finite point and is scored there.
    """
    value, grad = optax.value_and_grad_from_state(loss_of)(params, state=state)
    updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=loss_of)
    new = optax.apply_updates(params, updates)
    new_value = otu.tree_get(state, "value")
    ok = _all_finite(new) & jnp.isfinite(new_value)
    params = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, params)
    return params, state, ok, value, new_value


def _fixed(loss_of, params, steps, memory_size, initial_guess):
    """Exactly ``steps`` guarded iterations (:func:`_step`)."""
    opt = _optimiser(memory_size, initial_guess)

    def body(_, carry):
        params, state = carry
        params, state, *_ = _step(opt, loss_of, params, state)
        return params, state

    params, _ = jax.lax.fori_loop(0, steps, body, (params, opt.init(params)))
    return params


def lbfgs_until_converged(loss_of: Callable[[Any], jax.Array], params: Any, max_steps: int, ftol: float,
                          memory_size: int = 10, initial_guess: str = "one", floor: float = 1.0) -> LBFGSResult:
    """L-BFGS until the objective stops decreasing, at most ``max_steps`` iterations.

    Stops after the first iteration whose decrease ``f_k - f_{k+1}`` is at most
    ``ftol * max(|f_k|, |f_{k+1}|, floor)`` (with ``floor = 1``, scipy
    L-BFGS-B's ``ftol`` rule; ``floor = 0`` makes it purely relative, for
    objectives that are driven towards 0 through many orders of magnitude),
    or whose step was non-finite and not taken. Without this, a converged fit
    in float32 keeps spending the line search's 20 evaluations per iteration
    on round-off. Under ``vmap`` the loop runs until every member has stopped
    (wrap the caller in :func:`jax.custom_batching.sequential_vmap` to let
    each stop on its own).
    """
    opt = _optimiser(memory_size, initial_guess)

    def cond(carry):
        i, _, _, done = carry
        return (i < max_steps) & ~done

    def body(carry):
        i, params, state, _ = carry
        params, state, ok, before, after = _step(opt, loss_of, params, state)
        scale = jnp.maximum(jnp.maximum(jnp.abs(before), jnp.abs(after)), floor)
        done = ~ok | (before - after <= ftol * scale)
        return i + 1, params, state, done

    init = (jnp.asarray(0), params, opt.init(params), jnp.asarray(False))
    steps, params, _, _ = jax.lax.while_loop(cond, body, init)
    return LBFGSResult(params, steps)
