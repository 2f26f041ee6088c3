"""The standard GP of the Independent baseline (DESIGN.md section 5).

A fair single-task GP in the spirit of BoTorch's ``SingleTaskGP``: inputs in
the unit box, outputs standardised per client, constant mean, ARD Matern-5/2
(or SE) kernel with a learned output scale, Gaussian noise. Hyperparameters
are the MAP estimate under BoTorch's dimension-scaled priors
(lengthscale ``LogNormal(sqrt(2) + ln(d)/2, sqrt(3))``, noise variance
``LogNormal(-4, 1)`` floored at 1e-4) plus ``LogNormal(0, 1)`` on the output
scale, found by L-BFGS (optax, zoom line search, stopped by scipy's
relative-decrease rule) from a warm start and a default start, on the same
masked buffers and GP core as the meta-learned prior (:mod:`pacd_jax.gp`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from pacd_jax import linalg, optim
from pacd_jax.config import OUTPUT_WARPS
from pacd_jax.gp import (
    DEFAULT_JITTER,
    GPData,
    PosteriorCache,
    masked_gram,
    posterior_cache,
    posterior_from_cache,
)

Array = jax.Array

NOISE_FLOOR = 1e-4
KERNELS = ("matern52", "rbf")


class GPHyper(NamedTuple):
    """Unconstrained hyperparameters: mean, log lengthscales ``(d,)``, log output scale, log noise excess."""

    mean: Array
    log_lengthscale: Array
    log_outputscale: Array
    log_noise: Array

    @property
    def lengthscale(self) -> Array:
        return jnp.exp(self.log_lengthscale)

    @property
    def outputscale(self) -> Array:
        return jnp.exp(self.log_outputscale)

    @property
    def noise(self) -> Array:
        """Noise variance ``NOISE_FLOOR + exp(log_noise)``."""
        return NOISE_FLOOR + jnp.exp(self.log_noise)


@dataclasses.dataclass(frozen=True)
class StandardGPConfig:
    """Kernel choice, priors and fitting budget of the Independent GP.

    ``fit_steps`` caps the L-BFGS iterations per start; ``fit_ftol`` is the
    relative-decrease tolerance that ends a fit earlier (None: scipy
    L-BFGS-B's 2.2e-9, or 10 eps of the data's dtype where larger).
    ``output_warp`` is the client's transform of its observations before the
    GP models them (:mod:`pacd_jax.warping`; applied by
    :func:`pacd_jax.client.model_data`).
    """

    dim: int
    kernel: str = "matern52"
    fit_steps: int = 50
    fit_ftol: float | None = None
    outputscale_prior: tuple[float, float] = (0.0, 1.0)
    noise_prior: tuple[float, float] = (-4.0, 1.0)
    output_warp: str = "none"

    def __post_init__(self):
        if not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")
        if self.kernel not in KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; choose one of {KERNELS}")
        if self.output_warp not in OUTPUT_WARPS:
            raise ValueError(f"unknown output_warp {self.output_warp!r}; choose one of {', '.join(OUTPUT_WARPS)}")
        if not isinstance(self.fit_steps, int) or self.fit_steps < 1:
            raise ValueError(f"fit_steps must be a positive integer, got {self.fit_steps!r}")
        if self.fit_ftol is not None and not (math.isfinite(self.fit_ftol) and self.fit_ftol >= 0):
            raise ValueError(f"fit_ftol must be a non-negative number or None, got {self.fit_ftol!r}")

    @property
    def lengthscale_prior(self) -> tuple[float, float]:
        """BoTorch's dimension-scaled lengthscale prior (Hvarfner et al., 2024)."""
        return math.sqrt(2.0) + 0.5 * math.log(self.dim), math.sqrt(3.0)


def default_hyper(config: StandardGPConfig, dtype=None) -> GPHyper:
    """Start of the fit: prior-mode lengthscales, unit output scale, noise 1e-2."""
    dtype = dtype or jnp.result_type(float)
    loc, scale = config.lengthscale_prior
    # mode of a LogNormal(loc, scale) is exp(loc - scale^2)
    return GPHyper(
        mean=jnp.zeros((), dtype),
        log_lengthscale=jnp.full((config.dim,), loc - scale**2, dtype),
        log_outputscale=jnp.zeros((), dtype),
        log_noise=jnp.asarray(math.log(1e-2), dtype),
    )


def kernel_matrix(config: StandardGPConfig, hyper: GPHyper, X1: Array, X2: Array) -> Array:
    """ARD Matern-5/2 or SE covariance ``(A, d), (B, d) -> (A, B)``."""
    diff = (X1[:, None, :] - X2[None, :, :]) / hyper.lengthscale
    r2 = jnp.sum(diff * diff, axis=-1)
    if config.kernel == "rbf":
        return hyper.outputscale * jnp.exp(-0.5 * r2)
    # safe sqrt: finite gradient at r = 0
    positive = r2 > 0
    r = jnp.where(positive, jnp.sqrt(jnp.where(positive, r2, 1.0)), 0.0)
    s5r = math.sqrt(5.0) * r
    return hyper.outputscale * (1.0 + s5r + 5.0 / 3.0 * r2) * jnp.exp(-s5r)


def _lognormal_logpdf_of_log(log_x: Array, loc: float, scale: float) -> Array:
    """``ln p(x)`` of ``x ~ LogNormal(loc, scale)`` written in terms of ``ln x``."""
    z = (log_x - loc) / scale
    return -0.5 * z**2 - log_x - math.log(scale) - 0.5 * math.log(2 * math.pi)


def log_prior(config: StandardGPConfig, hyper: GPHyper) -> Array:
    """Log density of the hyper-priors (lengthscales, output scale, noise)."""
    loc, scale = config.lengthscale_prior
    lp = jnp.sum(_lognormal_logpdf_of_log(hyper.log_lengthscale, loc, scale))
    lp += _lognormal_logpdf_of_log(hyper.log_outputscale, *config.outputscale_prior)
    lp += _lognormal_logpdf_of_log(jnp.log(hyper.noise), *config.noise_prior)
    return lp


def log_marginal(config: StandardGPConfig, hyper: GPHyper, data: GPData, jitter: float = DEFAULT_JITTER) -> Array:
    """Exact log marginal likelihood of the (masked) buffer.

    Differentiable in ``hyper`` with a closed-form gradient
    (:func:`_log_marginal_fwd`/``_bwd``); ``data`` gets a zero cotangent.
    """
    return _log_marginal(config, jitter, hyper, data)


def _scaled_differences(hyper: GPHyper, X: Array) -> tuple[Array, Array]:
    """``(u_i - u_j)^2`` per input dimension, ``(M, M, d)``, and ``r2_ij = |u_i - u_j|^2``, for ``u = X / l``.

    Differences first: the expanded ``|u_i|^2 + |u_j|^2 - 2 u_i.u_j`` cancels
    catastrophically in float32 for the clustered late queries of a BO run
    (kernel errors of 1e-4 to 1e-3, above the noise floor, and a MAP fit
    10 nats short at a cluster of spread 0.01), while the posterior used the
    accurate form; the fit and the proposal now see the same kernel.
    """
    u = X / hyper.lengthscale
    sq = (u[:, None, :] - u[None, :, :]) ** 2
    return sq, jnp.sum(sq, axis=-1)


def _kernel_and_slope(config: StandardGPConfig, hyper: GPHyper, r2: Array) -> tuple[Array, Array]:
    """``k(r2)`` and ``dk/dr2`` of the stationary kernel (both finite at r = 0)."""
    s = hyper.outputscale
    if config.kernel == "rbf":
        k = s * jnp.exp(-0.5 * r2)
        return k, -0.5 * k
    # Matern-5/2: k = s (1 + sqrt5 r + 5 r^2 / 3) e^{-sqrt5 r},  dk/dr2 = -5/6 s (1 + sqrt5 r) e^{-sqrt5 r}
    r = jnp.sqrt(r2)
    e = jnp.exp(-math.sqrt(5.0) * r)
    return s * (1.0 + math.sqrt(5.0) * r + 5.0 / 3.0 * r2) * e, -5.0 / 6.0 * s * (1.0 + math.sqrt(5.0) * r) * e


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _log_marginal(config: StandardGPConfig, jitter: float, hyper: GPHyper, data: GPData) -> Array:
    return _log_marginal_fwd(config, jitter, hyper, data)[0]


def _log_marginal_fwd(config, jitter, hyper, data):
    _, r2 = _scaled_differences(hyper, data.X)
    kxx, _ = _kernel_and_slope(config, hyper, r2)
    mean = jnp.full(data.y.shape, hyper.mean, data.y.dtype)
    gram = masked_gram(kxx, data.mask, hyper.noise + jitter)
    # K = L L^T, a = K^-1 r
    chol = jnp.linalg.cholesky(gram)
    resid = jnp.where(data.mask, data.y - mean, 0.0)
    alpha = cho_solve((chol, True), resid)
    n = jnp.sum(data.mask)
    value = -0.5 * jnp.dot(resid, alpha) - jnp.sum(jnp.log(jnp.diagonal(chol))) - 0.5 * n * math.log(2.0 * math.pi)
    return value, (hyper, data, gram, alpha)


def _log_marginal_bwd(config, jitter, res, g):
    """Closed form: with ``G = 1/2 (a a^T - K^-1)`` on the valid block,

    ``d/d mean = sum a``, ``d/d log s = sum G.K``, ``d/d log noise = tr G exp(log noise)``,
    ``d/d log l_d = -2 sum_ij G_ij k'(r2_ij) (u_id - u_jd)^2`` with ``k' = dk/dr2``.
    """
    del jitter
    hyper, data, gram, alpha = res
    valid = data.mask[:, None] & data.mask[None, :]
    sq, r2 = _scaled_differences(hyper, data.X)
    kxx, slope = _kernel_and_slope(config, hyper, r2)
    grad_k = jnp.where(valid, 0.5 * (jnp.outer(alpha, alpha) - linalg.spd_inverse(gram)), 0.0)
    w = grad_k * slope
    spread = jnp.sum(w[:, :, None] * sq, axis=(0, 1))  # sum_ij W_ij (u_id - u_jd)^2, one fused reduction
    d_hyper = GPHyper(
        mean=jnp.sum(alpha),
        log_lengthscale=-2.0 * spread,
        log_outputscale=jnp.sum(grad_k * kxx),
        log_noise=jnp.trace(grad_k) * jnp.exp(hyper.log_noise),
    )
    d_hyper = jax.tree_util.tree_map(lambda a: (g * a).astype(a.dtype), d_hyper)
    return d_hyper, jax.tree_util.tree_map(jnp.zeros_like, data)


_log_marginal.defvjp(_log_marginal_fwd, _log_marginal_bwd)


def neg_log_posterior(config: StandardGPConfig, hyper: GPHyper, data: GPData) -> Array:
    """MAP objective: ``-(ln p(y | theta) + ln p(theta))``."""
    return -(log_marginal(config, hyper, data) + log_prior(config, hyper))


def _fit_from(config: StandardGPConfig, data: GPData, hyper0: GPHyper) -> tuple[GPHyper, Array]:
    """L-BFGS from one start until converged; the fit and its objective (inf if non-finite).

    Batched calls (starts, clients, seeds) run one after another, each
    stopping on its own: a vmapped while loop would run every member until
    the slowest had converged, which made the fit ~60x slower on a 50-GP batch
    at m = 110 (Hartmann-6, round 100).
    """

    @jax.custom_batching.sequential_vmap
    def run(data, hyper0):
        fun = lambda h: neg_log_posterior(config, h, data)  # noqa: E731
        ftol = optim.default_ftol(data.y.dtype) if config.fit_ftol is None else config.fit_ftol
        h = optim.lbfgs_until_converged(fun, hyper0, config.fit_steps, ftol, initial_guess="keep").params
        value = fun(h)
        return h, jnp.where(jnp.isfinite(value), value, jnp.inf)

    return run(data, hyper0)


def fit(config: StandardGPConfig, data: GPData, warm: GPHyper | None = None) -> GPHyper:
    """MAP hyperparameters by L-BFGS from the default start and, if given, a warm start; the lower objective wins.

    Each start runs until its objective stops decreasing (relative tolerance
    ``config.fit_ftol``) or ``config.fit_steps`` iterations.
    """
    dtype = data.y.dtype
    best, best_value = _fit_from(config, data, default_hyper(config, dtype))
    if warm is not None:
        h, value = _fit_from(config, data, jax.tree_util.tree_map(lambda a: a.astype(dtype), warm))
        # ties keep the default start, as argmin over (default, warm) did
        take = value < best_value
        best = jax.tree_util.tree_map(lambda a, b: jnp.where(take, a, b), h, best)
    return best


class StandardPosterior(NamedTuple):
    hyper: GPHyper
    X: Array
    mask: Array
    cache: PosteriorCache


def posterior(config: StandardGPConfig, hyper: GPHyper, data: GPData, jitter: float = DEFAULT_JITTER) -> StandardPosterior:
    """Condition the GP on ``data`` (one Cholesky, reused by :func:`predict`)."""
    mean = jnp.full(data.y.shape, hyper.mean, data.y.dtype)
    kxx = kernel_matrix(config, hyper, data.X, data.X)
    return StandardPosterior(hyper, data.X, data.mask, posterior_cache(mean, kxx, data, hyper.noise + jitter))


def predict(config: StandardGPConfig, post: StandardPosterior, X_test: Array) -> tuple[Array, Array]:
    """Latent posterior mean and variance at ``(T, d)`` test points."""
    k_cross = kernel_matrix(config, post.hyper, post.X, X_test)
    mean_test = jnp.full(X_test.shape[:1], post.hyper.mean, X_test.dtype)
    k_diag = jnp.full(X_test.shape[:1], post.hyper.outputscale, X_test.dtype)
    return posterior_from_cache(post.cache, post.mask, mean_test, k_cross, k_diag)
