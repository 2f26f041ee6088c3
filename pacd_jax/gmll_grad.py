"""The client's message, fast: ``A_k = grad_phi_k ln Z(S, P_phi_k)`` for all K particles at once (paper eq. 6).

:meth:`pacd_jax.gp.MetaGP.gmll_grad` gets the same vector by reverse-mode
autodiff of the GMLL with a closed-form Cholesky backward; it stays as the
readable reference the tests compare against. This module writes the whole
backward pass out by hand, batched over particles, in the shapes that XLA's
CPU backend runs fastest (measured with ``bench/svgd_step.py``):

* forward: the two tanh MLPs (mean and kernel features, paper eq. 5; with
  ``input_kernel`` the scaled inputs ``x / l_x`` join the features), the
  Gram matrix ``K = s exp(-1/2 |h_i - h_j|^2) + sigma^2 I`` on the valid rows
  (``s`` fixed, or learned per particle with ``learn_outputscale``),
  its Cholesky factor and inverse by blocked matrix products
  (:mod:`pacd_jax.linalg`), ``a = K^-1 (y - m)``;
* the GP part in closed form (DESIGN.md section 3):
  ``G = d ln Z / dK = 1/2 (a a^T - K^-1)``, ``d ln Z / dm = a``,
  ``d ln Z / d sigma^2 = tr G`` and, through the SE kernel,
  ``d ln Z / dh_i = 2 sum_j G_ij K_ij (h_j - h_i)``;
* backward through both MLPs layer by layer (``dW = a_prev^T dz``,
  ``dz = da * (1 - tanh^2)``).

Inputs of dimension d <= ``_SMALL_DIM`` enter the first layer as a sum of d
scaled rows rather than a matrix product: a contraction of length 6 ran as a
badly shaped GEMM that cost more than the rest of the forward pass.

Padding rows need no masks in the backward pass: the masked Gram matrix is
block diagonal (valid block, identity), so ``K^-1`` and ``a`` vanish on the
cross blocks and the padding's own ``G`` is ``-1/2 I``, whose diagonal
meets ``h_i - h_i = 0``; only the trace for the noise and the mean
gradient are masked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from pacd_jax import linalg
from pacd_jax.gp import feature_kernel, feature_kernel_weight

if TYPE_CHECKING:  # pragma: no cover
    from pacd_jax.gp import GPData, MetaGP

Array = jax.Array

#: Up to this input dimension the first layer is computed as a sum of rows.
_SMALL_DIM = 16


def _first_layer(x: Array, weight: Array, bias: Array) -> Array:
    """``x W + b`` for ``x (M, d)`` and per-particle ``W (K, d, H)`` -> ``(K, M, H)``."""
    dim = x.shape[-1]
    if dim > _SMALL_DIM:
        return jnp.einsum("md,kdh->kmh", x, weight) + bias[:, None, :]
    out = bias[:, None, :] + x[None, :, 0, None] * weight[:, None, 0, :]
    for j in range(1, dim):
        out = out + x[None, :, j, None] * weight[:, None, j, :]
    return out


def _mlp_forward(layers: list[dict], x: Array) -> tuple[Array, list[Array]]:
    """tanh MLP with per-particle weights; returns the output and each hidden activation."""
    acts = []
    a = jnp.tanh(_first_layer(x, layers[0]["kernel"], layers[0]["bias"]))
    acts.append(a)
    for layer in layers[1:-1]:
        a = jnp.tanh(jnp.einsum("kmh,khg->kmg", a, layer["kernel"]) + layer["bias"][:, None, :])
        acts.append(a)
    last = layers[-1]
    return jnp.einsum("kmh,kho->kmo", a, last["kernel"]) + last["bias"][:, None, :], acts


def _mlp_backward(layers: list[dict], x: Array, acts: list[Array], d_out: Array) -> list[dict]:
    """Gradients of every layer's kernel and bias given ``d_out = d ln Z / d output``, ``(K, M, O)``."""
    grads: list[dict] = [None] * len(layers)  # type: ignore[list-item]
    grads[-1] = {"kernel": jnp.einsum("kmh,kmo->kho", acts[-1], d_out), "bias": jnp.sum(d_out, axis=1)}
    d_a = jnp.einsum("kmo,kho->kmh", d_out, layers[-1]["kernel"])
    for i in range(len(layers) - 2, -1, -1):
        d_z = d_a * (1.0 - acts[i] * acts[i])
        inputs = acts[i - 1] if i > 0 else None
        if inputs is None:
            d_w = jnp.einsum("md,kmh->kdh", x, d_z)
        else:
            d_w = jnp.einsum("kmh,kmg->khg", inputs, d_z)
            d_a = jnp.einsum("kmg,khg->kmh", d_z, layers[i]["kernel"])
        grads[i] = {"kernel": d_w, "bias": jnp.sum(d_z, axis=1)}
    return grads


def _dense_layers(tree: dict) -> list[dict]:
    return [tree[f"Dense_{i}"] for i in range(len(tree))]


def _as_dense_tree(layers: list[dict]) -> dict:
    return {f"Dense_{i}": layer for i, layer in enumerate(layers)}


def gmll_grads(model: "MetaGP", particles: Array, data: "GPData", jitter: float) -> Array:
    """``(K, P)``: ``grad_phi ln Z_beta(S, P_phi)`` at each of the K particles (eq. 6).

    Equal to ``jax.vmap(model.gmll_grad, (0, None, None))`` to round-off
    (tested in float64), about twice as fast on the CPU.

    Args:
        model: the meta-learned prior (its configuration fixes the layout of ``phi``).
        particles: ``(K, P)``.
        data: one client's buffer (unit-box ``X``, standardised ``y``, ``mask``).
        jitter: added to the noise variance on the valid diagonal.
    """
    cfg = model.config
    params = model.unravel(particles)
    x = model._net_input(data.X)
    mask = data.mask
    valid = mask[:, None] & mask[None, :]
    size = mask.shape[0]
    eye = jnp.eye(size, dtype=particles.dtype)

    mean_layers = _dense_layers(params["mean"])
    feat_layers = _dense_layers(params["features"])
    mean_out, mean_acts = _mlp_forward(mean_layers, x)
    feat_out, feat_acts = _mlp_forward(feat_layers, x)
    mean = mean_out[..., 0]  # (K, M)
    if cfg.learn_lengthscale:
        scale = jax.nn.softplus(params["lengthscale_raw"])  # (K, F)
        h = feat_out / scale[:, None, :]
    else:
        h = feat_out
    num_feat = h.shape[-1]
    if cfg.input_kernel:
        # the stationary ARD factor: the scaled inputs are F+1..F+d more features
        in_scale = jax.nn.softplus(params["input_lengthscale_raw"])  # (K, d)
        h = jnp.concatenate([h, x[None, :, :] / in_scale[:, None, :]], axis=-1)

    # K_ij = s exp(-1/2 sum_f (h_if - h_jf)^2), one elementwise pass per feature
    d2 = jnp.zeros(particles.shape[:1] + (size, size), particles.dtype)
    for f in range(h.shape[-1]):
        diff = h[:, :, None, f] - h[:, None, :, f]
        d2 = d2 + diff * diff
    if cfg.learn_outputscale:
        variance = cfg.kernel_variance * jnp.exp(params["outputscale_raw"])[:, :, None]  # (K, 1, 1)
    else:
        variance = cfg.kernel_variance
    kxx = feature_kernel(d2, variance, cfg.kernel)
    noise = jax.nn.softplus(params["noise_raw"][:, 0]) + cfg.noise_floor
    gram = jnp.where(valid, kxx + (noise + jitter)[:, None, None] * eye, eye)

    # a = K^-1 r with one step of iterative refinement (a + K^-1 (r - K a)):
    # the explicit inverse alone loses an order of magnitude of float32
    # accuracy in a against a triangular solve; two matrix-vector products
    # win it back.
    gram_inv = linalg.spd_inverse(gram)
    resid = jnp.where(mask, data.y - mean, 0.0)
    alpha = jnp.einsum("kij,kj->ki", gram_inv, resid)
    alpha = alpha + jnp.einsum("kij,kj->ki", gram_inv, resid - jnp.einsum("kij,kj->ki", gram, alpha))
    g = 0.5 * (alpha[:, :, None] * alpha[:, None, :] - gram_inv)

    # through the kernel: d/dh_if = 2 sum_j G_ij w_ij (h_jf - h_if), w = -2 dk/d(d2) (= K for SE)
    # (differences first: sum_j G_ij w_ij h_j - h_i sum_j G_ij w_ij cancels badly in float32)
    gk = g * feature_kernel_weight(d2, kxx, variance, cfg.kernel)
    d_h = 2.0 * jnp.sum(gk[..., None] * (h[:, None, :, :] - h[:, :, None, :]), axis=-2)
    d_noise = jnp.sum(jnp.where(mask, jnp.diagonal(g, axis1=-2, axis2=-1), 0.0), axis=-1)

    grads = {
        "mean": _as_dense_tree(_mlp_backward(mean_layers, x, mean_acts, alpha[..., None])),
        "noise_raw": (d_noise * jax.nn.sigmoid(params["noise_raw"][:, 0]))[:, None],
    }
    if cfg.learn_outputscale:
        # k = s k_1 with s = s_0 exp(raw): d/draw = sum_ij G_ij K_ij on the valid block
        grads["outputscale_raw"] = jnp.sum(jnp.where(valid, g * kxx, 0.0), axis=(-2, -1))[:, None]
    if cfg.input_kernel:
        # h_x = x / l_x: d/dl_x = -sum_m d_h h_x / l_x (as for the feature lengthscales below)
        d_hx, h_x = d_h[..., num_feat:], h[..., num_feat:]
        grads["input_lengthscale_raw"] = (
            -jnp.sum(d_hx * h_x, axis=1) / in_scale * jax.nn.sigmoid(params["input_lengthscale_raw"])
        )
        d_h, h = d_h[..., :num_feat], h[..., :num_feat]
    if cfg.learn_lengthscale:
        # h = h_raw / l: d/dh_raw = d_h / l, d/dl = -sum_m d_h h / l
        grads["features"] = _as_dense_tree(_mlp_backward(feat_layers, x, feat_acts, d_h / scale[:, None, :]))
        grads["lengthscale_raw"] = -jnp.sum(d_h * h, axis=1) / scale * jax.nn.sigmoid(params["lengthscale_raw"])
    else:
        grads["features"] = _as_dense_tree(_mlp_backward(feat_layers, x, feat_acts, d_h))
    return model.ravel(grads)

