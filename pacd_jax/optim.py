"""L-BFGS (optax, zoom line search) with a guard against non-finite steps.

One loop for every inner optimisation of the package: the Independent
baseline's GP hyperparameter fit (:mod:`pacd_jax.standard_gp`) and the
gradient-inversion attack (:mod:`pacd_jax.attack`).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
import optax.tree_utils as otu


def _all_finite(tree: Any) -> jax.Array:
    leaves = [jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(tree)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.asarray(True)


def lbfgs(loss_of: Callable[[Any], jax.Array], params: Any, steps: int, memory_size: int = 10,
          initial_guess: str = "one") -> Any:
    """``steps`` L-BFGS iterations on ``loss_of`` from ``params``; returns the last accepted iterate.

    ``initial_guess`` is the zoom line search's first step size: ``"one"``
    (optax's L-BFGS default) or ``"keep"`` (the previous step's).

    A step whose new parameters or objective value (the line search has
    evaluated it) is NaN/inf is not taken: the iterate stays where it was, so
    a diverging start ends at its last finite point and is scored there.
    Works under ``jit`` and ``vmap`` (restarts); ``loss_of`` needs only to be differentiable.
    """
    opt = optax.lbfgs(memory_size=memory_size, linesearch=optax.scale_by_zoom_linesearch(
        max_linesearch_steps=20, initial_guess_strategy=initial_guess))
    value_and_grad = optax.value_and_grad_from_state(loss_of)

    def body(_, carry):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=loss_of)
        new = optax.apply_updates(params, updates)
        ok = _all_finite(new) & jnp.isfinite(otu.tree_get(state, "value"))
        params = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, params)
        return params, state

    params, _ = jax.lax.fori_loop(0, steps, body, (params, opt.init(params)))
    return params
