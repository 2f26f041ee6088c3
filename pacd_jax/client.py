"""What a client computes: on its own data, with nothing but particles coming in.

Every function here takes one client's :class:`ClientBuffer` and returns
either what the client sends (its ``K`` gradient vectors, paper eq. 6) or what
it keeps (its next query, eq. 10). Backends stack clients on a leading axis
and ``vmap`` these functions (one process) or call them on each client rank
(MPI); the functions are the same.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from pacd_jax import acquisition, dp, standard_gp, warping
from pacd_jax.gp import GPData, MetaGP, gmll_grads, make_mask, standardise

Array = jax.Array


class ClientBuffer(NamedTuple):
    """A client's private data: a preallocated buffer of ``M`` rows, ``count`` valid.

    Attributes:
        X: ``(M, d)`` queried points in the unit box (model space).
        y: ``(M,)`` observed values, original units.
        count: number of valid rows (scalar int).
    """

    X: Array
    y: Array
    count: Array

    @property
    def mask(self) -> Array:
        return make_mask(self.count, self.X.shape[-2])


def empty_buffer(capacity: int, dim: int, dtype=None) -> ClientBuffer:
    dtype = dtype or jnp.result_type(float)
    return ClientBuffer(jnp.zeros((capacity, dim), dtype), jnp.zeros((capacity,), dtype), jnp.zeros((), jnp.int32))


def append(buf: ClientBuffer, x: Array, y: Array) -> ClientBuffer:
    """Write ``(x, y)`` into row ``count`` (no reallocation, no retrace).

    ``x`` may be ``(d,)`` or ``(n, d)`` with ``y`` of shape ``()`` or ``(n,)``.
    """
    x = jnp.atleast_2d(x).astype(buf.X.dtype)
    y = jnp.atleast_1d(y).astype(buf.y.dtype)
    X = jax.lax.dynamic_update_slice(buf.X, x, (buf.count, jnp.zeros_like(buf.count)))
    Y = jax.lax.dynamic_update_slice(buf.y, y, (buf.count,))
    return ClientBuffer(X, Y, buf.count + x.shape[0])


def leading_rows(buf: ClientBuffer, rows: int) -> ClientBuffer:
    """The first ``rows`` rows of a (possibly client-stacked) buffer; ``rows >= count``.

    The masked GMLL and posterior ignore padded rows exactly, so a model built
    on this view equals the full buffer's up to round-off, at the cost of
    ``rows`` rather than the capacity.
    """
    return ClientBuffer(buf.X[..., :rows, :], buf.y[..., :rows], buf.count)


def model_data(buf: ClientBuffer, output_warp: str = "none") -> GPData:
    """The buffer as GP training data, ``y`` standardised with the client's own statistics.

    ``output_warp`` (:mod:`pacd_jax.warping`) transforms ``y`` monotonically
    first, on the client; ``none`` keeps it as observed.
    """
    mask = buf.mask
    y_std, _, _ = standardise(warping.warp_outputs(buf.y, mask, output_warp), mask)
    return GPData(buf.X, y_std, mask)


def incumbent(buf: ClientBuffer) -> Array:
    """The valid row with the lowest observed value (centre of local candidates)."""
    y = jnp.where(buf.mask, buf.y, jnp.inf)
    return buf.X[jnp.argmin(y)]


# -- PACD-BO -------------------------------------------------------------------


def local_gradients(
    model: MetaGP,
    particles: Array,
    buf: ClientBuffer,
    dp_config: dp.DPConfig | None = None,
    dp_key: Array | None = None,
) -> Array:
    """``{A_{i,k}}_k = grad_phi_k ln Z_beta(S_i, P_phi_k)`` (paper eq. 6): the ``(K, P)`` message.

    With ``dp_config`` enabled (sigma > 0) the message is privatised here, on
    the client, before it leaves: each particle's gradient is clipped to norm C
    and gets ``N(0, sigma^2 (2C)^2 I)`` noise drawn with ``dp_key`` (eq. 12-13),
    the key of (seed, client, round, step) from :func:`dp_step_key`.
    """
    return privatise(gmll_grads(model, particles, model_data(buf, model.config.output_warp)), dp_config, dp_key)


def privatise(grads: Array, dp_config: dp.DPConfig | None = None, dp_key: Array | None = None) -> Array:
    """The client's DP transform of its ``(K, P)`` message (eq. 12-13); the identity when DP is off."""
    if dp_config is None or not dp_config.enabled:
        return grads
    if dp_key is None:
        raise ValueError("differential privacy needs a PRNG key for the noise")
    return dp.clip_and_noise(grads, dp_key, dp_config.sigma, dp_config.clip)


def dp_step_key(round_key: Array, step: Array) -> Array:
    """The DP noise key of one SVGD step from the client's round key ``keys.client_key(seed, "dp", i, t)``.

    Equal to ``keys.step_key(seed, "dp", i, t, step)``, so every backend draws the same noise.
    """
    return jax.random.fold_in(round_key, step)


def meta_acquisition(model: MetaGP, particles: Array, buf: ClientBuffer, kappa: float):
    """UCB on the K-particle mixture posterior (eq. 8-10), as a batched function of ``(T, d)``."""
    data = model_data(buf, model.config.output_warp)
    posts = jax.vmap(model.posterior, (0, None))(particles, data)

    def acq(X):
        mu, var = model.predict_mixture(posts, X)
        return acquisition.ucb(mu, var, kappa)

    return acq


def propose_meta(
    model: MetaGP,
    particles: Array,
    buf: ClientBuffer,
    key: Array,
    kappa: float,
    maximiser: acquisition.MaximiserConfig,
) -> Array:
    """Next query ``x_{t+1} = argmax_x kappa sigma~(x) - mu~(x)`` in the unit box (eq. 10)."""
    acq = meta_acquisition(model, particles, buf, kappa)
    x, _ = acquisition.maximise(acq, key, buf.X.shape[-1], maximiser, incumbent(buf), buf.X.dtype)
    return x


# -- Independent baseline ------------------------------------------------------------


def fit_standard_gp(config: standard_gp.StandardGPConfig, warm: standard_gp.GPHyper, buf: ClientBuffer):
    """Refit the client's own GP hyperparameters (MAP, warm-started)."""
    return standard_gp.fit(config, model_data(buf, config.output_warp), warm)


def propose_standard(
    config: standard_gp.StandardGPConfig,
    hyper: standard_gp.GPHyper,
    buf: ClientBuffer,
    key: Array,
    kappa: float,
    maximiser: acquisition.MaximiserConfig,
) -> Array:
    """Next query of the Independent baseline: UCB on the client's own GP."""
    post = standard_gp.posterior(config, hyper, model_data(buf, config.output_warp))

    def acq(X):
        mu, var = standard_gp.predict(config, post, X)
        return acquisition.ucb(mu, var, kappa)

    x, _ = acquisition.maximise(acq, key, buf.X.shape[-1], maximiser, incumbent(buf), buf.X.dtype)
    return x


# -- CBOC baselines ------------------------------------------------------------------


def propose_ei(
    config: standard_gp.StandardGPConfig,
    hyper: standard_gp.GPHyper,
    buf: ClientBuffer,
    key: Array,
    maximiser: acquisition.MaximiserConfig,
) -> tuple[Array, Array]:
    """A CBOC agent's own proposal ``x_hat_i = argmax EI`` on its own GP (DESIGN.md section 5).

    The GP is the Independent baseline's (same fit, same maximiser). EI is taken
    below the best standardised observation. Returns ``(x_hat, EI(x_hat))``; the
    value picks the CBOC-L leader.
    """
    data = model_data(buf, config.output_warp)
    post = standard_gp.posterior(config, hyper, data)
    best = jnp.min(jnp.where(data.mask, data.y, jnp.inf))

    def acq(X):
        mu, var = standard_gp.predict(config, post, X)
        return acquisition.expected_improvement(mu, var, best)

    return acquisition.maximise(acq, key, buf.X.shape[-1], maximiser, incumbent(buf), buf.X.dtype)
