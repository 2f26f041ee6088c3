"""Gaussian processes on masked, preallocated data buffers, and the meta-learned prior.

Two layers live here:

* A GP core that works for any mean vector and Gram matrix: the masked Gram
  matrix, the Gaussian log marginal likelihood with its closed-form gradient
  (``d ln Z / dK = 1/2 (a a^T - K^-1)``, ``d ln Z / dmu = a``), and the
  posterior of one GP from a cached Cholesky factor. The Independent baseline
  (:mod:`pacd_jax.standard_gp`) uses the same core.
* :class:`MetaGP`, the prior ``P_phi`` of the paper (eq. 5): a GP with an MLP
  mean and an SE kernel on MLP features, flattened into one parameter vector
  ``phi`` per SVGD particle, with its diagonal Gaussian hyper-prior.

Data convention (shared with the clients): a client's buffer holds ``M`` rows
of which the first ``count`` are valid. Masked rows and columns of the Gram
matrix are replaced by the identity and masked residuals by zero, so the
Cholesky, the quadratic form and the log-determinant equal those of the
unpadded GP exactly and nothing recompiles as data grows (DESIGN.md section 3).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from pacd_jax import linalg
from pacd_jax.config import FEATURE_KERNELS, OUTPUT_WARPS

Array = jax.Array

#: Added to the diagonal of every valid Gram block (on top of the noise
#: variance) so that near-duplicate inputs stay positive definite in float32.
DEFAULT_JITTER = 1e-6

_LOG_2PI = math.log(2.0 * math.pi)


class GPData(NamedTuple):
    """One client's data buffer in model space.

    Attributes:
        X: ``(M, d)`` inputs in the unit box; rows ``>= count`` are padding.
        y: ``(M,)`` targets (standardised by the caller); padding is ignored.
        mask: ``(M,)`` boolean, True for valid rows.
    """

    X: Array
    y: Array
    mask: Array

    @property
    def count(self) -> Array:
        return jnp.sum(self.mask)


def make_mask(count: Array | int, size: int) -> Array:
    """Boolean mask of length ``size`` with the first ``count`` entries True."""
    return jnp.arange(size) < count


def standardise(y: Array, mask: Array, min_std: float = 1e-6) -> tuple[Array, Array, Array]:
    """Standardise the valid entries of ``y`` with their own mean and std.

    Each client standardises with its own statistics, which never leave it
    (DESIGN.md section 3). Padding becomes 0. A (near) constant ``y`` has its
    spread floored at ``min_std`` times its magnitude (or 1) instead of
    dividing by zero.

    Returns:
        ``(y_std, mean, std)`` with ``y = y_std * std + mean`` on valid rows.
    """
    n = jnp.maximum(jnp.sum(mask), 1)
    mean = jnp.sum(jnp.where(mask, y, 0.0)) / n
    var = jnp.sum(jnp.where(mask, (y - mean) ** 2, 0.0)) / n
    scale = jnp.maximum(jnp.abs(mean), 1.0)
    std = jnp.maximum(jnp.sqrt(var), min_std * scale)
    return jnp.where(mask, (y - mean) / std, 0.0), mean, std


def masked_gram(kxx: Array, mask: Array, diag: Array | float) -> Array:
    """``K = k(X, X) + diag * I`` on the valid block, identity on the padding.

    Args:
        kxx: ``(M, M)`` kernel matrix of the buffer (padding rows arbitrary).
        mask: ``(M,)`` valid rows.
        diag: noise variance plus jitter added to the valid diagonal.
    """
    m = kxx.shape[-1]
    eye = jnp.eye(m, dtype=kxx.dtype)
    valid = mask[:, None] & mask[None, :]
    return jnp.where(valid, kxx + diag * eye, eye)


@jax.custom_vjp
def _quad_logdet(gram: Array, resid: Array) -> Array:
    """``-1/2 r^T K^-1 r - 1/2 ln|K|`` with a closed-form backward pass."""
    value, _ = _quad_logdet_fwd(gram, resid)
    return value


def _quad_logdet_fwd(gram, resid):
    # K = L L^T, a = K^-1 r
    chol = jnp.linalg.cholesky(gram)
    alpha = cho_solve((chol, True), resid)
    value = -0.5 * jnp.dot(resid, alpha) - jnp.sum(jnp.log(jnp.diagonal(chol)))
    return value, (chol, alpha)


def _quad_logdet_bwd(res, g):
    chol, alpha = res
    eye = jnp.eye(chol.shape[-1], dtype=chol.dtype)
    gram_inv = cho_solve((chol, True), eye)
    # d/dK = 1/2 (a a^T - K^-1);  d/dr = -a  (so d/dmu = +a for r = y - mu)
    d_gram = 0.5 * g * (jnp.outer(alpha, alpha) - gram_inv)
    d_resid = -g * alpha
    return d_gram, d_resid


_quad_logdet.defvjp(_quad_logdet_fwd, _quad_logdet_bwd)


def gaussian_log_marginal(mean: Array, kxx: Array, data: GPData, diag: Array | float) -> Array:
    """Exact GP log marginal likelihood ``ln N(y | mean, k(X,X) + diag I)`` on valid rows.

    This is ``ln Z_beta`` of the paper (eq. 3 and 6) with ``beta = m``, for which
    the generalised marginal likelihood of a GP with Gaussian noise is the
    exact marginal likelihood. Its gradient with respect to ``mean`` and
    ``kxx`` is closed form (one Cholesky per call, no Cholesky backward).

    Args:
        mean: ``(M,)`` prior mean at the buffer inputs.
        kxx: ``(M, M)`` prior covariance at the buffer inputs.
        data: the buffer; only ``data.y`` and ``data.mask`` are read.
        diag: noise variance (plus jitter) on the valid diagonal.
    """
    gram = masked_gram(kxx, data.mask, diag)
    resid = jnp.where(data.mask, data.y - mean, 0.0)
    n = jnp.sum(data.mask)
    return _quad_logdet(gram, resid) - 0.5 * n * _LOG_2PI


class PosteriorCache(NamedTuple):
    """Inverse Cholesky factor ``L^-1`` of the masked Gram matrix and ``a = K^-1 (y - m(X))``."""

    chol_inv: Array
    alpha: Array


def posterior_cache(mean: Array, kxx: Array, data: GPData, diag: Array | float) -> PosteriorCache:
    """Factorise once; reuse for every test point of a proposal.

    ``L^-1`` is formed explicitly so that the variance at the thousands of
    candidate and refinement points is a matrix product, ``v = L^-1 k(X, x)``,
    rather than a triangular solve each time (the solves were 60 % of a
    PACD-BO proposal on the CPU). It comes from the blocked factorisation of
    :func:`pacd_jax.linalg.cholesky_inverse`, mostly batched matrix products:
    with LAPACK's triangular solve with M right-hand sides instead, which XLA
    runs one matrix at a time, a proposal on 5 x 110 x 6-D took 1.26x as long
    (``bench/propose_step.py``).
    ``a = L^-T L^-1 r`` takes one step of iterative refinement,
    ``a + L^-T L^-1 (r - K a)``, which wins back the float32 accuracy an explicit
    inverse loses against a triangular solve.
    """
    gram = masked_gram(kxx, data.mask, diag)
    chol_inv = linalg.cholesky_inverse(gram)
    resid = jnp.where(data.mask, data.y - mean, 0.0)

    def solve(r):
        return jnp.swapaxes(chol_inv, -1, -2) @ (chol_inv @ r)

    alpha = solve(resid)
    alpha = alpha + solve(resid - gram @ alpha)
    return PosteriorCache(chol_inv, alpha)


def posterior_from_cache(
    cache: PosteriorCache,
    mask: Array,
    mean_test: Array,
    k_cross: Array,
    k_test_diag: Array,
) -> tuple[Array, Array]:
    """Latent posterior mean and variance at test points.

    ``mu(x) = m(x) + k(X, x)^T a`` and ``s2(x) = k(x, x) - v^T v`` with
    ``v = L^-1 k(X, x)`` (masked rows of ``k(X, x)`` set to zero).

    Args:
        cache: from :func:`posterior_cache`.
        mask: ``(M,)`` valid rows.
        mean_test: ``(T,)`` prior mean at the test points.
        k_cross: ``(M, T)`` prior covariance between buffer and test points.
        k_test_diag: ``(T,)`` prior variance at the test points.
    """
    k_cross = jnp.where(mask[:, None], k_cross, 0.0)
    mu = mean_test + k_cross.T @ cache.alpha
    v = cache.chol_inv @ k_cross
    var = jnp.maximum(k_test_diag - jnp.sum(v * v, axis=0), 0.0)
    return mu, var


def mixture_moments(means: Array, variances: Array) -> tuple[Array, Array]:
    """Moments of the equal-weight mixture of K GP posteriors (paper eq. 8-9).

    Args:
        means, variances: ``(K, T)`` per-particle posterior moments.

    Returns:
        ``(mu, var)`` of shape ``(T,)``: ``mu = mean_k mu_k`` and
        ``var = mean_k s2_k + mean_k (mu_k - mu)^2``.
    """
    mu = jnp.mean(means, axis=0)
    var = jnp.mean(variances, axis=0) + jnp.mean((means - mu) ** 2, axis=0)
    return mu, var


# --------------------------------------------------------------------------
# The meta-learned prior P_phi (paper eq. 5) and its hyper-prior.
# --------------------------------------------------------------------------


class MLP(nn.Module):
    """tanh MLP, ``d -> hidden... -> out`` (PACOH's mean and feature networks)."""

    hidden: Sequence[int]
    out: int

    @nn.compact
    def __call__(self, x):
        for width in self.hidden:
            x = jnp.tanh(nn.Dense(width)(x))
        return nn.Dense(self.out)(x)


_SQRT5 = math.sqrt(5.0)


def _safe_sqrt(d2: Array) -> Array:
    """``sqrt(d2)`` whose autodiff gradient is 0, not NaN, at ``d2 = 0`` (coincident points contribute no gradient)."""
    positive = d2 > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, d2, 1.0)), 0.0)


def feature_kernel(d2: Array, variance: Array | float, kind: str = "se") -> Array:
    """``k(d2)`` of the squared scaled feature distance ``d2 = |h - h'|^2``.

    ``se``: ``s exp(-d2 / 2)`` (paper eq. 5). ``matern52``: ``s (1 + sqrt5 r +
    5/3 r^2) exp(-sqrt5 r)``, ``r = sqrt(d2)``, the Matérn-5/2 kernel that the
    Independent baseline's GP uses on the inputs (twice differentiable sample
    paths rather than infinitely smooth ones).
    """
    if kind == "se":
        return variance * jnp.exp(-0.5 * d2)
    r = _safe_sqrt(d2)
    return variance * (1.0 + _SQRT5 * r + (5.0 / 3.0) * d2) * jnp.exp(-_SQRT5 * r)


def feature_kernel_weight(d2: Array, kxx: Array, variance: Array | float, kind: str = "se") -> Array:
    """``w = -2 dk/d(d2)``, so that ``dk(h_i, h_j)/dh_i = -w (h_i - h_j)`` (for the hand-written GMLL gradient).

    ``se``: ``w = k``; ``matern52``: ``w = 5/3 s (1 + sqrt5 r) exp(-sqrt5 r)``, finite at ``r = 0``.
    """
    if kind == "se":
        return kxx
    r = _safe_sqrt(d2)
    return variance * (5.0 / 3.0) * (1.0 + _SQRT5 * r) * jnp.exp(-_SQRT5 * r)


@dataclasses.dataclass(frozen=True)
class MetaGPConfig:
    """Options of the meta-learned GP prior (DESIGN.md section 3).

    Attributes:
        dim: input dimension d.
        hidden: hidden widths of both MLPs.
        features: output dimension F of the kernel feature MLP.
        kernel_variance: output scale s of ``s exp(-1/2 ||h(x)-h(x')||^2)``;
            the paper's eq. 5 uses 1/2 (PACOH's code uses 1).
        learn_lengthscale: learn one lengthscale per feature (PACOH), so that
            ``k = s exp(-1/2 ||(h(x)-h(x'))/l||^2)``, ``l = softplus(raw)``.
        weight_prior_std, bias_prior_std: hyper-prior std of network weights
            and biases (PACOH: 0.5 and 3).
        lengthscale_prior: (mean, std) of the raw lengthscale (PACOH: N(0, 1)).
        noise_prior: (mean, std) of the raw noise. Default N(-4, 1), i.e. a
            noise variance near softplus(-4) = 0.018 of the standardised y, as
            BoTorch's LogNormal(-4, 1) noise prior; PACOH's N(-1, 1) suits its
            noisy regression tasks but keeps the BO surrogate from
            interpolating nearly noise-free objectives.
        noise_floor: the noise variance is ``softplus(raw) + noise_floor``.
        input_kernel: also give the SE kernel the (network-standardised)
            inputs themselves, each over its own learned lengthscale:
            ``k = s exp(-1/2 ||(h(x)-h(x'))/l||^2 - 1/2 ||(x-x')/l_x||^2)``,
            the product of eq. 5's feature kernel and a stationary ARD SE
            kernel, ``l_x = softplus(raw_x)`` (one per input dimension). The
            feature map alone can only shorten the kernel's reach where the
            tanh network is steep; the ARD factor gives the prior a reach of
            its own in input space, as a plain GP has. Off by default
            (eq. 5; measured in the README's "PACD-BO vs Independent BO").
        input_lengthscale_prior: (mean, std) of the raw input lengthscales.
        learn_outputscale: learn the kernel's output scale per particle,
            ``s = kernel_variance * exp(raw_s)``, as the Independent baseline's
            GP learns its outputscale; ``kernel_variance`` is then the prior's
            centre. Off by default (eq. 5 fixes s).
        outputscale_prior: (mean, std) of ``raw_s`` (default N(0, 1): s within
            a factor e of ``kernel_variance`` at one standard deviation).
        kernel: ``se`` (paper eq. 5) or ``matern52``, the stationary kernel
            applied to the scaled feature distance (see :func:`feature_kernel`).
        output_warp: the monotone transform of the client's observations
            before they are standardised and modelled (``none``, ``log``,
            ``yeo-johnson``; :mod:`pacd_jax.warping`). The model's formulas
            do not change; :func:`pacd_jax.client.model_data` applies it.
        standardise_inputs: feed the networks ``(x - 1/2) * sqrt(12)``, the
            unit box standardised to zero mean and unit variance under a
            uniform design, as PACOH standardises its inputs; the GP data and
            everything that crosses the wire stay in the unit box.
    """

    dim: int
    hidden: tuple[int, ...] = (32, 32)
    features: int = 2
    kernel_variance: float = 0.5
    learn_lengthscale: bool = True
    weight_prior_std: float = 0.5
    bias_prior_std: float = 3.0
    lengthscale_prior: tuple[float, float] = (0.0, 1.0)
    noise_prior: tuple[float, float] = (-4.0, 1.0)
    noise_floor: float = 1e-3
    standardise_inputs: bool = True
    input_kernel: bool = False
    input_lengthscale_prior: tuple[float, float] = (0.0, 1.0)
    learn_outputscale: bool = False
    outputscale_prior: tuple[float, float] = (0.0, 1.0)
    kernel: str = "se"
    output_warp: str = "none"

    def __post_init__(self):
        if not isinstance(self.dim, int) or self.dim < 1:
            raise ValueError(f"dim must be a positive integer, got {self.dim!r}")
        if not self.hidden or any(int(h) < 1 for h in self.hidden):
            raise ValueError(f"hidden widths must be positive integers, got {self.hidden!r}")
        if not isinstance(self.features, int) or self.features < 1:
            raise ValueError(f"features must be a positive integer, got {self.features!r}")
        for name in ("kernel_variance", "weight_prior_std", "bias_prior_std", "noise_floor"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be positive and finite, got {value!r}")
        for name in ("input_kernel", "learn_outputscale"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.kernel not in FEATURE_KERNELS:
            raise ValueError(f"unknown kernel {self.kernel!r}; choose one of {', '.join(FEATURE_KERNELS)}")
        if self.output_warp not in OUTPUT_WARPS:
            raise ValueError(f"unknown output_warp {self.output_warp!r}; choose one of {', '.join(OUTPUT_WARPS)}")
        for name in ("lengthscale_prior", "noise_prior", "input_lengthscale_prior", "outputscale_prior"):
            mean, std = getattr(self, name)
            if not (np.isfinite(mean) and np.isfinite(std) and std > 0):
                raise ValueError(f"{name} must be (mean, std>0), got {getattr(self, name)!r}")


class MetaGP:
    """GP prior ``P_phi`` with an MLP mean and an MLP-feature SE kernel (paper eq. 5).

    One particle ``phi`` is a flat vector of length :attr:`num_params`; this is
    what SVGD moves, what clients differentiate (eq. 6) and what crosses the
    wire. ``unravel`` maps it back to the network parameters.
    """

    def __init__(self, config: MetaGPConfig):
        self.config = config
        self._mean_net = MLP(tuple(config.hidden), 1)
        self._feature_net = MLP(tuple(config.hidden), config.features)
        x0 = jnp.zeros((config.dim,), jnp.float32)
        key_m, key_f = jax.random.split(jax.random.key(0))
        template = {
            "mean": self._mean_net.init(key_m, x0)["params"],
            "features": self._feature_net.init(key_f, x0)["params"],
            "noise_raw": jnp.zeros((1,), jnp.float32),
        }
        if config.learn_lengthscale:
            template["lengthscale_raw"] = jnp.zeros((config.features,), jnp.float32)
        if config.input_kernel:
            template["input_lengthscale_raw"] = jnp.zeros((config.dim,), jnp.float32)
        if config.learn_outputscale:
            template["outputscale_raw"] = jnp.zeros((1,), jnp.float32)
        leaves, self._treedef = jax.tree_util.tree_flatten(template)
        self._shapes = tuple(leaf.shape for leaf in leaves)
        self._offsets = tuple(int(o) for o in np.cumsum([0] + [leaf.size for leaf in leaves]))
        self.num_params = self._offsets[-1]
        prior_mean, prior_std = self._hyperprior_arrays(template)
        self._prior_mean = prior_mean
        self._prior_std = prior_std

    def _hyperprior_arrays(self, template):
        cfg = self.config

        def leaf_prior(path, leaf):
            names = [getattr(p, "key", "") for p in path]
            if names[0] == "noise_raw":
                mean, std = cfg.noise_prior
            elif names[0] == "lengthscale_raw":
                mean, std = cfg.lengthscale_prior
            elif names[0] == "input_lengthscale_raw":
                mean, std = cfg.input_lengthscale_prior
            elif names[0] == "outputscale_raw":
                mean, std = cfg.outputscale_prior
            elif names[-1] == "kernel":  # flax's name for a Dense weight matrix
                mean, std = 0.0, cfg.weight_prior_std
            elif names[-1] == "bias":
                mean, std = 0.0, cfg.bias_prior_std
            else:  # pragma: no cover - guards a change of the template
                raise AssertionError(f"no hyper-prior for {names}")
            return np.full(leaf.shape, mean), np.full(leaf.shape, std)

        pairs = jax.tree_util.tree_map_with_path(leaf_prior, template)
        is_pair = lambda x: isinstance(x, tuple)
        means = jax.tree_util.tree_map(lambda p: p[0], pairs, is_leaf=is_pair)
        stds = jax.tree_util.tree_map(lambda p: p[1], pairs, is_leaf=is_pair)
        flat = lambda tree: np.concatenate([np.ravel(a) for a in jax.tree_util.tree_leaves(tree)])
        return flat(means).astype(np.float64), flat(stds).astype(np.float64)

    # -- hashing by configuration so jitted closures over equal models agree --
    def __eq__(self, other):
        return isinstance(other, MetaGP) and other.config == self.config

    def __hash__(self):
        return hash(self.config)

    def __repr__(self):
        return f"MetaGP({self.config}, num_params={self.num_params})"

    # -- parameters --------------------------------------------------------
    def unravel(self, phi: Array) -> dict:
        """Flat particle ``(P,)`` -> dict of network parameters."""
        # Static slices keep the particle's dtype (ravel_pytree's unravel would
        # cast float64 particles back to the float32 template).
        leaves = [
            phi[..., start:stop].reshape(phi.shape[:-1] + shape)
            for start, stop, shape in zip(self._offsets[:-1], self._offsets[1:], self._shapes)
        ]
        return jax.tree_util.tree_unflatten(self._treedef, leaves)

    def ravel(self, tree: dict) -> Array:
        """Inverse of :meth:`unravel`: a parameter dict (leading axes allowed) -> ``(..., P)``."""
        leaves = self._treedef.flatten_up_to(tree)
        batch = leaves[0].shape[: leaves[0].ndim - len(self._shapes[0])]
        return jnp.concatenate([leaf.reshape(batch + (-1,)) for leaf in leaves], axis=-1)

    @property
    def hyperprior_mean(self) -> np.ndarray:
        return self._prior_mean

    @property
    def hyperprior_std(self) -> np.ndarray:
        return self._prior_std

    def sample_hyperprior(self, key: Array, num_particles: int, dtype=None) -> Array:
        """``(K, P)`` independent draws from the hyper-prior (the SVGD initial particles)."""
        dtype = dtype or jnp.result_type(float)
        z = jax.random.normal(key, (num_particles, self.num_params), dtype)
        return jnp.asarray(self._prior_mean, dtype) + jnp.asarray(self._prior_std, dtype) * z

    def log_hyperprior(self, phi: Array) -> Array:
        """``ln P(phi)`` of the diagonal Gaussian hyper-prior (batched over leading axes)."""
        mean = jnp.asarray(self._prior_mean, phi.dtype)
        std = jnp.asarray(self._prior_std, phi.dtype)
        z = (phi - mean) / std
        return jnp.sum(-0.5 * z**2 - jnp.log(std) - 0.5 * _LOG_2PI, axis=-1)

    def hyperprior_score(self, phi: Array) -> Array:
        """``grad ln P(phi) = -(phi - mean) / std^2`` (closed form, batched)."""
        mean = jnp.asarray(self._prior_mean, phi.dtype)
        std = jnp.asarray(self._prior_std, phi.dtype)
        return -(phi - mean) / std**2

    # -- the GP prior of one particle ---------------------------------------
    def _net_input(self, X: Array) -> Array:
        if self.config.standardise_inputs:
            return (X - 0.5) * math.sqrt(12.0)
        return X

    def mean(self, phi: Array, X: Array) -> Array:
        """Prior mean ``m_phi(X)``, ``(..., d) -> (...)``."""
        params = self.unravel(phi)
        return self._mean_net.apply({"params": params["mean"]}, self._net_input(X))[..., 0]

    def features(self, phi: Array, X: Array) -> Array:
        """Scaled kernel features ``h_phi(X) / l``, ``(..., d) -> (..., F)``.

        With ``input_kernel`` the scaled inputs ``x / l_x`` follow, ``(..., F + d)``.
        """
        params = self.unravel(phi)
        x = self._net_input(X)
        h = self._feature_net.apply({"params": params["features"]}, x)
        if self.config.learn_lengthscale:
            h = h / jax.nn.softplus(params["lengthscale_raw"])
        if self.config.input_kernel:
            h = jnp.concatenate([h, x / jax.nn.softplus(params["input_lengthscale_raw"])], axis=-1)
        return h

    def network_outputs(self, phi: Array, X: Array) -> Array:
        """Both networks' raw outputs at one or more points: ``[m_phi(x), h_phi(x) before 1/l]``, ``(..., 1 + F)``.

        The client's message depends on its data only through these (paper
        eq. 5-6 by the chain rule); :mod:`pacd_jax.pursuit` uses their
        Jacobians as a dictionary.
        """
        params = self.unravel(phi)
        x = self._net_input(X)
        mean = self._mean_net.apply({"params": params["mean"]}, x)
        return jnp.concatenate([mean, self._feature_net.apply({"params": params["features"]}, x)], axis=-1)

    def network_coordinates(self) -> np.ndarray:
        """Sorted indices of the mean and feature networks' weights in a flat particle ``phi``."""
        index = self.unravel(jnp.arange(self.num_params))
        leaves = jax.tree_util.tree_leaves({"mean": index["mean"], "features": index["features"]})
        return np.sort(np.concatenate([np.ravel(np.asarray(leaf)) for leaf in leaves]))

    def noise_variance(self, phi: Array) -> Array:
        """``softplus(raw) + noise_floor`` (in standardised-y units)."""
        raw = self.unravel(phi)["noise_raw"][0]
        return jax.nn.softplus(raw) + self.config.noise_floor

    def outputscale(self, phi: Array) -> Array:
        """The kernel's output scale ``s``: ``kernel_variance``, times ``exp(raw_s)`` when learned (batched)."""
        s = jnp.asarray(self.config.kernel_variance, phi.dtype)
        if self.config.learn_outputscale:
            s = s * jnp.exp(self.unravel(phi)["outputscale_raw"][..., 0])
        return s

    def kernel_from_features(self, h1: Array, h2: Array, variance: Array | float | None = None) -> Array:
        """``s exp(-1/2 ||h1 - h2||^2)`` (or the Matérn-5/2 form) for ``(A, F)`` and ``(B, F)`` -> ``(A, B)``.

        ``variance`` is the output scale ``s`` (default ``kernel_variance``;
        pass :meth:`outputscale` of the particle when it is learned).
        """
        diff = h1[:, None, :] - h2[None, :, :]
        s = self.config.kernel_variance if variance is None else variance
        return feature_kernel(jnp.sum(diff * diff, axis=-1), s, self.config.kernel)

    def prior_moments(self, phi: Array, X: Array) -> tuple[Array, Array]:
        """``(m_phi(X), k_phi(X, X))`` for ``X`` of shape ``(M, d)``."""
        h = self.features(phi, X)
        return self.mean(phi, X), self.kernel_from_features(h, h, self.outputscale(phi))

    # -- GMLL (eq. 6) and posterior (eq. 8-9) -------------------------------
    def gmll(self, phi: Array, data: GPData, jitter: float = DEFAULT_JITTER) -> Array:
        """``ln Z_beta(S_i, P_phi)`` with ``beta = m_i``: the exact GP log marginal likelihood."""
        mean, kxx = self.prior_moments(phi, data.X)
        return gaussian_log_marginal(mean, kxx, data, self.noise_variance(phi) + jitter)

    def gmll_grad(self, phi: Array, data: GPData, jitter: float = DEFAULT_JITTER) -> Array:
        """``A = grad_phi ln Z_beta(S, P_phi)`` (paper eq. 6), shape ``(P,)``."""
        return jax.grad(self.gmll)(phi, data, jitter)

    def posterior(self, phi: Array, data: GPData, jitter: float = DEFAULT_JITTER) -> "MetaPosterior":
        """Condition particle ``phi`` on ``data``; the result predicts at any test points."""
        mean, kxx = self.prior_moments(phi, data.X)
        cache = posterior_cache(mean, kxx, data, self.noise_variance(phi) + jitter)
        return MetaPosterior(phi, self.features(phi, data.X), data.mask, cache)

    def predict(self, post: "MetaPosterior", X_test: Array) -> tuple[Array, Array]:
        """Latent posterior mean and variance of one particle at ``(T, d)`` test points."""
        h_test = self.features(post.phi, X_test)
        s = self.outputscale(post.phi)
        k_cross = self.kernel_from_features(post.features, h_test, s)
        k_diag = jnp.full(X_test.shape[:1], s, X_test.dtype)
        return posterior_from_cache(post.cache, post.mask, self.mean(post.phi, X_test), k_cross, k_diag)

    def predict_mixture(self, posts: "MetaPosterior", X_test: Array) -> tuple[Array, Array]:
        """Mixture mean and variance over the K particles (paper eq. 8-9).

        Args:
            posts: a :class:`MetaPosterior` batched over particles (from
                ``jax.vmap(model.posterior, (0, None))``).
            X_test: ``(T, d)`` test points.
        """
        means, variances = jax.vmap(self.predict, (0, None))(posts, X_test)
        return mixture_moments(means, variances)


class MetaPosterior(NamedTuple):
    """A particle conditioned on a client's data (features of the buffer cached)."""

    phi: Array
    features: Array
    mask: Array
    cache: PosteriorCache


def gmll_grads(model: MetaGP, particles: Array, data: GPData, jitter: float = DEFAULT_JITTER) -> Array:
    """All ``A_{i,k}`` of one client: ``(K, P)`` gradients of eq. 6 for the K particles.

    Computed by the hand-written, particle-batched backward pass of
    :mod:`pacd_jax.gmll_grad`; equal to ``jax.vmap(model.gmll_grad)`` (the
    autodiff reference) to round-off.
    """
    from pacd_jax import gmll_grad

    return gmll_grad.gmll_grads(model, particles, data, jitter)
