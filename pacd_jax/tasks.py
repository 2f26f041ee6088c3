"""Benchmark task families: N related client objectives on a shared box (DESIGN.md §4).

A *task family* holds the private objectives ``f_1 … f_N`` of ``N`` clients.
All share one box domain ``bounds`` (original units) and are minimised. The
four built-in families come from the Virtual Library of Simulation
Experiments (VLSE, Surjanovic & Bingham, https://www.sfu.ca/~ssurjano/) with
client heterogeneity as fixed in DESIGN.md §4:

=============  ===  =====================================================
name           d    what differs between clients
=============  ===  =====================================================
``sinusoid``   1    frequency ω (Gramacy & Lee family), seed-independent
``branin``     2    all six Branin constants, drawn per seed
``hartmann6``  6    the weights α, drawn per seed (the optimum can jump basin)
``wingweight`` 6    four operating conditions, stratified per seed
=============  ===  =====================================================

Usage::

    fam = tasks.make("branin", num_clients=5, seed=0)
    f = fam.evaluate(0, x)                # noise-free f_0(x), x: (..., 2)
    y = tasks.add_noise(key, f, fam.noise_std)   # paper eq. 1
    x_star, f_star = fam.optimum(0)

    params, evaluate_fn = fam.split()     # for vmapping over seeds
    evaluate_fn(params, 0, x)             # == fam.evaluate(0, x)

``evaluate`` is pure ``jax.numpy``: it batches over leading axes of ``x``,
can be jitted, and takes a Python or traced integer client index. Its output
has the floating dtype of ``x``. Optima are computed once, on the host, in
float64 numpy.

Users add their own family by subclassing :class:`TaskFamily` and calling
:func:`register`.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from scipy import optimize
from threadpoolctl import threadpool_limits

__all__ = [
    "TaskFamily",
    "SinusoidFamily",
    "BraninFamily",
    "Hartmann6Family",
    "WingWeightFamily",
    "make",
    "register",
    "known_families",
    "check_family",
    "collaborative_lhs",
    "default_init_points",
    "add_noise",
    "validate_points",
    "wing_weight_10d",
    "sinusoid_omegas",
    "WING_WEIGHT_BOUNDS",
]

Params = Mapping[str, np.ndarray]
EvaluateFn = Callable[[Any, Any, ArrayLike], jax.Array]


# --------------------------------------------------------------------------
# The interface
# --------------------------------------------------------------------------


class TaskFamily:
    """THE interface of a task family; subclass it to add your own.

    A family is ``N`` related objectives ``f_i: box -> R`` (to be minimised)
    on one box domain shared by all clients. A subclass provides:

    Attributes:
        name: the family's name (``str``).
        dim: the input dimension ``d`` (``int``).
        num_clients: the number of clients ``N`` (``int``).
        bounds: ``np.ndarray`` float64 of shape ``(d, 2)``, ``[lower, upper]``
            per dimension in original units, ``lower < upper``.
        noise_std: the default observation-noise standard deviation in
            original units (default ``0.0``: noise-free observations). Noise is
            added by :func:`add_noise`, never by ``evaluate`` (paper eq. 1).

    Methods:
        evaluate(i, x): the noise-free ``f_i(x)``; ``x`` has shape ``(..., d)``
            in original units and the result shape ``(...)``. It should be
            written in ``jax.numpy`` so that it can be jitted and vmapped, with
            ``i`` a Python int or a traced integer scalar.
        optimum(i): ``(x_star, f_star)`` of client ``i``: the minimiser as a
            float64 array of shape ``(d,)`` and the minimum as a ``float``.
            Regret is measured against it.
        split(): ``(params, evaluate_fn)`` with ``evaluate_fn(params, i, x) ==
            evaluate(i, x)``. The default, ``((), lambda params, i, x:
            self.evaluate(i, x))``, bakes the family into the function, which
            works but recompiles per seed. Override it with a module-level
            ``evaluate_fn`` and an array pytree ``params`` (leading client
            axis) to let seeds share one compiled, vmapped run.

    Example::

        class Shifted(tasks.TaskFamily):
            name, dim, noise_std = "shifted", 1, 0.01

            def __init__(self, num_clients, seed):
                self.num_clients = num_clients
                self.bounds = np.array([[-1.0, 1.0]])
                self.shift = np.linspace(-0.5, 0.5, num_clients)

            def evaluate(self, i, x):
                return (jnp.asarray(x)[..., 0] - jnp.asarray(self.shift)[i]) ** 2

            def optimum(self, i):
                return np.array([self.shift[i]]), 0.0

        tasks.register("shifted", Shifted)
        fam = tasks.make("shifted", num_clients=3)
    """

    name: str = "custom"
    dim: int
    num_clients: int
    bounds: np.ndarray
    noise_std: float = 0.0

    def evaluate(self, i: Any, x: ArrayLike) -> jax.Array:
        """Noise-free ``f_i(x)``: ``x`` ``(..., d)`` in original units -> ``(...)``."""
        raise NotImplementedError

    def optimum(self, i: int) -> tuple[np.ndarray, float]:
        """``(x_star (d,), f_star)`` of client ``i`` (minimisation)."""
        raise NotImplementedError

    def split(self) -> tuple[Any, EvaluateFn]:
        """``(params, evaluate_fn)`` with ``evaluate_fn(params, i, x) == self.evaluate(i, x)``."""
        return (), lambda params, i, x: self.evaluate(i, x)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={getattr(self, 'name', '?')!r}, dim={getattr(self, 'dim', '?')}, "
            f"num_clients={getattr(self, 'num_clients', '?')})"
        )


# --------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _as_float_array(x: ArrayLike) -> jax.Array:
    """``x`` as a jax array of a floating dtype (integers go to the default float)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def _check_last_axis(x: jax.Array, dim: int, name: str) -> None:
    """Shapes are static, so this check also runs (once) under ``jit``/``vmap``."""
    if x.ndim == 0 or x.shape[-1] != dim:
        raise ValueError(
            f"x has shape {tuple(x.shape)} but {name} has dim {dim}; "
            f"pass points of shape (..., {dim}) in original units"
        )


def _client_params(params: Params, i: Any, dtype) -> dict[str, jax.Array]:
    """Client ``i``'s row of every array in ``params``, cast to ``dtype``."""
    return {k: jnp.asarray(v, dtype)[i] for k, v in params.items()}


def _frozen(params: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """float64 numpy copies, read-only so a shared ``params`` cannot be mutated."""
    out = {}
    for k, v in params.items():
        a = np.array(v, dtype=np.float64)
        a.setflags(write=False)
        out[k] = a
    return out


class _ParametricFamily(TaskFamily):
    """A built-in family: per-client arrays ``params`` and a module-level ``_fn``.

    Subclasses set ``name``, ``dim``, ``noise_std``, ``_bounds``, ``_fn`` (a
    ``staticmethod`` around the module-level evaluate function) and
    ``_param_shapes`` (trailing shape of each parameter), and implement
    ``_compute_optima() -> (x_star (N, d), f_star (N,))``.
    """

    _bounds: tuple[tuple[float, float], ...]
    _param_shapes: dict[str, tuple[int, ...]]
    _fn: EvaluateFn

    def __init__(self, params: Mapping[str, ArrayLike]):
        params = _frozen(params)
        if set(params) != set(self._param_shapes):
            raise ValueError(f"{self.name} params need keys {sorted(self._param_shapes)}, got {sorted(params)}")
        sizes = {v.shape[0] if v.ndim else 0 for v in params.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"{self.name} params need one shared leading client axis, got shapes "
                             f"{ {k: v.shape for k, v in params.items()} }")
        (n,) = sizes
        for k, tail in self._param_shapes.items():
            if params[k].shape != (n, *tail):
                raise ValueError(f"{self.name} param {k!r} must have shape {(n, *tail)}, got {params[k].shape}")
            if not np.all(np.isfinite(params[k])):
                raise ValueError(f"{self.name} param {k!r} has non-finite entries")
        self.params = params
        self.num_clients = int(n)
        self.bounds = np.array(self._bounds, dtype=np.float64)
        x_star, f_star = self._compute_optima()
        self.x_star = np.asarray(x_star, np.float64).reshape(n, self.dim)
        self.f_star = np.asarray(f_star, np.float64).reshape(n)

    def _compute_optima(self) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _check_client(self, i: Any) -> None:
        if isinstance(i, (bool, np.bool_)):
            raise ValueError(f"client index must be an integer, got {i!r}")
        if _is_int(i) and not 0 <= int(i) < self.num_clients:
            raise ValueError(f"client index {int(i)} out of range for {self.name} with {self.num_clients} clients")

    def evaluate(self, i: Any, x: ArrayLike) -> jax.Array:
        """Noise-free ``f_i(x)``; ``x`` ``(..., d)`` in original units -> ``(...)``.

        ``i`` may be traced; a traced index is not range-checked (JAX clamps it).
        """
        self._check_client(i)
        return self._fn(self.params, i, x)

    def optimum(self, i: int) -> tuple[np.ndarray, float]:
        """``(x_star (d,), f_star)`` of client ``i``, computed in float64 at construction."""
        if not _is_int(i):
            raise ValueError(f"optimum() needs a Python int client index, got {i!r}")
        self._check_client(i)
        return self.x_star[int(i)].copy(), float(self.f_star[int(i)])

    def split(self) -> tuple[dict[str, np.ndarray], EvaluateFn]:
        """``(params, evaluate_fn)``; ``evaluate_fn`` is the same module-level function for every seed."""
        return dict(self.params), self._fn


# --------------------------------------------------------------------------
# Sinusoid (VLSE Gramacy & Lee 2012 family, frequency-varying; DESIGN.md §4)
# --------------------------------------------------------------------------

_SINUSOID_OMEGA_5 = (9.0, 9.5, 10.0, 10.5, 12.0)
# For ω in [11, ≈11.37] the minimum sits on the boundary x = 0.5, and just
# below 11 it is within 0.01 of it; other N avoid this band.
_SINUSOID_GAP = (10.75, 11.5)


def _sinusoid_formula(x, omega, xp):
    """f(x) = sin(ωπx)/(2x) + (x − 1)⁴ (VLSE Gramacy & Lee with ω in place of 10)."""
    return xp.sin(omega * np.pi * x) / (2.0 * x) + (x - 1.0) ** 4


def sinusoid_omegas(num_clients: int) -> np.ndarray:
    """Client frequencies: DESIGN.md's five for ``N = 5``; otherwise evenly spaced.

    For ``N != 5`` the ω are evenly spaced over ``[9, 12]`` with the band
    ``(10.75, 11.5)`` cut out (the spacing is measured along the remaining
    length 2.25), so no client has its minimum on (or hugging) the boundary
    ``x = 0.5``: that happens for ω ∈ [11, ≈11.37]. ``N = 1`` gives ω = 9.
    """
    if num_clients == 5:
        return np.array(_SINUSOID_OMEGA_5)
    lo, hi = 9.0, 12.0
    g0, g1 = _SINUSOID_GAP
    u = np.linspace(0.0, (hi - lo) - (g1 - g0), num_clients)
    return np.where(lo + u <= g0, lo + u, g1 + (u - (g0 - lo)))


def _sinusoid_fn(params: Params, i: Any, x: ArrayLike) -> jax.Array:
    x = _as_float_array(x)
    _check_last_axis(x, 1, "sinusoid")
    p = _client_params(params, i, x.dtype)
    return _sinusoid_formula(x[..., 0], p["omega"], jnp)


class SinusoidFamily(_ParametricFamily):
    """Frequency-varying sinusoid (1-D), DESIGN.md §4; VLSE Gramacy & Lee family.

    ``f_i(x) = sin(ω_i π x)/(2x) + (x − 1)⁴`` on ``[0.5, 2.5]``. For ``N = 5``
    the client frequencies are ω = (9, 9.5, 10, 10.5, 12); other ``N`` see
    :func:`sinusoid_omegas`. The functions do not depend on the seed.
    Optima: a 200 001-point float64 grid, refined by bounded Brent
    (``scipy.optimize.minimize_scalar``) within one grid step of the best point.
    Default ``noise_std = 0.01`` (≈0.2 % of the spread, ≈6, over the box).

    Args:
        params: ``{"omega": (N,)}``.
    """

    name = "sinusoid"
    dim = 1
    noise_std = 0.01
    _bounds = ((0.5, 2.5),)
    _param_shapes = {"omega": ()}
    _fn = staticmethod(_sinusoid_fn)

    def _compute_optima(self):
        lo, hi = self._bounds[0]
        grid = np.linspace(lo, hi, 200_001)
        step = grid[1] - grid[0]
        xs, fs = [], []
        for omega in self.params["omega"]:
            j = int(np.argmin(_sinusoid_formula(grid, omega, np)))
            res = optimize.minimize_scalar(
                lambda t: _sinusoid_formula(t, omega, np),
                bounds=(max(lo, grid[j] - step), min(hi, grid[j] + step)),
                method="bounded",
                options={"xatol": 1e-13},
            )
            x = res.x if res.fun <= _sinusoid_formula(grid[j], omega, np) else grid[j]
            xs.append([x])
            fs.append(_sinusoid_formula(x, omega, np))
        return np.array(xs), np.array(fs)


def _make_sinusoid(num_clients: int, seed: int) -> SinusoidFamily:
    del seed  # the sinusoid clients are fixed
    return SinusoidFamily({"omega": sinusoid_omegas(num_clients)})


# --------------------------------------------------------------------------
# Branin (VLSE; DESIGN.md §4)
# --------------------------------------------------------------------------

# SeedSequence stream constants keep the families' draws independent.
_STREAM = {"branin": 0xB5A1, "hartmann6": 0x4A76, "wingweight": 0x3161}

_BRANIN_RANGES = {
    "a": (0.5, 1.5),
    "b": (0.1, 0.15),
    "c": (1.0, 2.0),
    "r": (5.0, 7.0),
    "s": (8.0, 12.0),
    "t": (0.03, 0.05),
}


def _branin_fn(params: Params, i: Any, x: ArrayLike) -> jax.Array:
    # f = a(x₂ − b x₁² + c x₁ − r)² + s(1 − t) cos x₁ + s   (VLSE Branin)
    x = _as_float_array(x)
    _check_last_axis(x, 2, "branin")
    p = _client_params(params, i, x.dtype)
    x1, x2 = x[..., 0], x[..., 1]
    return p["a"] * (x2 - p["b"] * x1**2 + p["c"] * x1 - p["r"]) ** 2 + p["s"] * (1.0 - p["t"]) * jnp.cos(x1) + p["s"]


class BraninFamily(_ParametricFamily):
    """Branin (2-D) with per-client constants, DESIGN.md §4; formula from VLSE.

    ``f_i(x) = a(x₂ − b x₁² + c x₁ − r)² + s(1 − t) cos x₁ + s`` on
    ``[−5, 10] × [0, 15]``. ``make`` draws a~U(0.5,1.5), b~U(0.1,0.15),
    c~U(1,2), r~U(5,7), s~U(8,12), t~U(0.03,0.05) per client and seed. Since
    the square is ≥ 0 and cos ≥ −1, ``f* = s·t`` exactly, attained at
    ``x₁ = −π, x₂ = bπ² + cπ + r`` (in [9.1, 14.8], always inside; other
    minimisers at x₁ = π, 3π may also exist). Default ``noise_std = 0.3``
    (≈0.1 % of the spread, ≈300, over the box).

    Args:
        params: ``{"a", "b", "c", "r", "s", "t"}``, each ``(N,)``; the
            standard Branin is a=1, b=5.1/(4π²), c=5/π, r=6, s=10, t=1/(8π).
    """

    name = "branin"
    dim = 2
    noise_std = 0.3
    _bounds = ((-5.0, 10.0), (0.0, 15.0))
    _param_shapes = {k: () for k in _BRANIN_RANGES}
    _fn = staticmethod(_branin_fn)

    def _compute_optima(self):
        p = self.params
        x_star = np.stack([np.full_like(p["a"], -np.pi), p["b"] * np.pi**2 + p["c"] * np.pi + p["r"]], axis=-1)
        return x_star, p["s"] * p["t"]


def _make_branin(num_clients: int, seed: int) -> BraninFamily:
    rng = np.random.default_rng([seed, _STREAM["branin"]])
    return BraninFamily({k: rng.uniform(lo, hi, num_clients) for k, (lo, hi) in _BRANIN_RANGES.items()})


# --------------------------------------------------------------------------
# Hartmann-6 (VLSE; DESIGN.md §4)
# --------------------------------------------------------------------------

_HARTMANN_A = np.array(
    [
        [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
        [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
        [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
        [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
    ]
)
_HARTMANN_P = 1e-4 * np.array(
    [
        [1312.0, 1696.0, 5569.0, 124.0, 8283.0, 5886.0],
        [2329.0, 4135.0, 8307.0, 3736.0, 1004.0, 9991.0],
        [2348.0, 1451.0, 3522.0, 2883.0, 3047.0, 6650.0],
        [4047.0, 8828.0, 8732.0, 5743.0, 1091.0, 381.0],
    ]
)
_HARTMANN_X_STAR = np.array([0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573])
_HARTMANN_ALPHA_RANGES = ((1.0, 1.02), (1.18, 1.2), (2.8, 3.0), (3.2, 3.4))
_HARTMANN_RANDOM_STARTS = 48


def _hartmann_fn(params: Params, i: Any, x: ArrayLike) -> jax.Array:
    # f = −Σᵢ αᵢ exp(−Σⱼ Aᵢⱼ (xⱼ − Pᵢⱼ)²)   (VLSE Hartmann 6-D)
    x = _as_float_array(x)
    _check_last_axis(x, 6, "hartmann6")
    alpha = _client_params(params, i, x.dtype)["alpha"]
    a = jnp.asarray(_HARTMANN_A, x.dtype)
    p = jnp.asarray(_HARTMANN_P, x.dtype)
    inner = jnp.sum(a * (x[..., None, :] - p) ** 2, axis=-1)  # (..., 4)
    return -jnp.sum(alpha * jnp.exp(-inner), axis=-1)


def _hartmann_value_and_grad(x: np.ndarray, alpha: np.ndarray) -> tuple[float, np.ndarray]:
    """float64 f and ∇f = Σᵢ αᵢ eᵢ · 2Aᵢ(x − Pᵢ), eᵢ = exp(−Σⱼ Aᵢⱼ(xⱼ − Pᵢⱼ)²)."""
    diff = x - _HARTMANN_P
    e = np.exp(-np.sum(_HARTMANN_A * diff**2, axis=1))
    value = -float(alpha @ e)
    grad = np.sum((alpha * e)[:, None] * 2.0 * _HARTMANN_A * diff, axis=0)
    return value, grad


def _hartmann_minimise(alpha: np.ndarray) -> tuple[np.ndarray, float]:
    """Global minimum by multistart L-BFGS-B (float64, analytic gradient).

    Starts: the standard minimiser, the four bump centres Pᵢ and 48 uniform
    points (fixed stream, so the result depends only on α).
    """
    starts = np.concatenate(
        [
            _HARTMANN_X_STAR[None],
            _HARTMANN_P,
            np.random.default_rng(_STREAM["hartmann6"]).random((_HARTMANN_RANDOM_STARTS, 6)),
        ]
    )
    best_x, best_f = None, np.inf
    # One BLAS thread: L-BFGS-B makes thousands of tiny BLAS calls, and a
    # threaded OpenBLAS spent 10-100x longer synchronising its threads than
    # computing (0.35 s vs 2.8 s for five clients on an idle 2-core machine,
    # a minute under load).
    with threadpool_limits(limits=1, user_api="blas"):
        results = [_hartmann_local_minimum(x0, alpha) for x0 in starts]
    for x, f in results:
        if f < best_f:
            best_x, best_f = x, f
    return best_x, best_f


def _hartmann_local_minimum(x0: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, float]:
    """One L-BFGS-B descent from ``x0`` in the unit box."""
    res = optimize.minimize(
        _hartmann_value_and_grad,
        x0,
        args=(alpha,),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, 1.0)] * 6,
        options={"ftol": 1e-15, "gtol": 1e-11, "maxiter": 1000},
    )
    x = np.clip(res.x, 0.0, 1.0)
    return x, _hartmann_value_and_grad(x, alpha)[0]


class Hartmann6Family(_ParametricFamily):
    """Hartmann-6 with per-client weights α, DESIGN.md §4; formula from VLSE.

    ``f_i(x) = −Σ_k α_{ik} exp(−Σ_j A_kj (x_j − P_kj)²)`` on ``[0, 1]⁶`` with
    the standard ``A``, ``P``. ``make`` draws α₁~U(1.0,1.02), α₂~U(1.18,1.2),
    α₃~U(2.8,3.0), α₄~U(3.2,3.4) per client and seed. The optimum is not
    where the standard one is: for most clients the basin around
    P₄ ≈ (0.40, 0.88, 0.85, 0.57, 0.14, 0.04) becomes the global one, so each
    ``f_i*`` is found by multistart L-BFGS-B in float64 (53 starts).
    Default ``noise_std = 0.01`` (≈0.3 % of the spread, ≈3.3).

    Args:
        params: ``{"alpha": (N, 4)}``; the standard Hartmann-6 is α = (1, 1.2, 3, 3.2).
    """

    name = "hartmann6"
    dim = 6
    noise_std = 0.01
    _bounds = ((0.0, 1.0),) * 6
    _param_shapes = {"alpha": (4,)}
    _fn = staticmethod(_hartmann_fn)

    def _compute_optima(self):
        results = [_hartmann_minimise(alpha) for alpha in self.params["alpha"]]
        return np.array([r[0] for r in results]), np.array([r[1] for r in results])


def _make_hartmann6(num_clients: int, seed: int) -> Hartmann6Family:
    rng = np.random.default_rng([seed, _STREAM["hartmann6"]])
    alpha = np.stack([rng.uniform(lo, hi, num_clients) for lo, hi in _HARTMANN_ALPHA_RANGES], axis=-1)
    return Hartmann6Family({"alpha": alpha})


# --------------------------------------------------------------------------
# Wing Weight (VLSE, 10 variables; DESIGN.md §4)
# --------------------------------------------------------------------------

# VLSE order: S_w, W_fw, A, Λ[deg], q, λ, t_c, N_z, W_dg, W_p
WING_WEIGHT_BOUNDS = np.array(
    [
        [150.0, 200.0],
        [220.0, 300.0],
        [6.0, 10.0],
        [-10.0, 10.0],
        [16.0, 45.0],
        [0.5, 1.0],
        [0.08, 0.18],
        [2.5, 6.0],
        [1700.0, 2500.0],
        [0.025, 0.08],
    ]
)
_WING_DESIGN = (0, 2, 3, 5, 6, 9)  # S_w, A, Λ, λ, t_c, W_p: the clients' inputs
_WING_OPERATING = (1, 4, 7, 8)  # W_fw, q, N_z, W_dg: fixed per client
_WING_X_STAR = np.array([150.0, 6.0, 0.0, 0.5, 0.18, 0.025])


def _wing_weight_formula(s_w, w_fw, a, sweep_deg, q, taper, t_c, n_z, w_dg, w_p, xp):
    """VLSE Wing Weight: 0.036 S_w^0.758 W_fw^0.0035 (A/cos²Λ)^0.6 q^0.006 λ^0.04
    (100 t_c/cos Λ)^−0.3 (N_z W_dg)^0.49 + S_w W_p, with Λ in degrees."""
    cos_sweep = xp.cos(sweep_deg * (np.pi / 180.0))
    return (
        0.036
        * s_w**0.758
        * w_fw**0.0035
        * (a / cos_sweep**2) ** 0.6
        * q**0.006
        * taper**0.04
        * (100.0 * t_c / cos_sweep) ** -0.3
        * (n_z * w_dg) ** 0.49
        + s_w * w_p
    )


def wing_weight_10d(z: ArrayLike) -> jax.Array:
    """The 10-variable VLSE Wing Weight, ``z`` ``(..., 10)`` -> ``(...)``.

    Variables in VLSE order (S_w, W_fw, A, Λ[deg], q, λ, t_c, N_z, W_dg, W_p),
    ranges in ``WING_WEIGHT_BOUNDS``. Equals BoTorch's
    ``WingWeightMultiFidelity`` at fidelity 0.
    """
    z = _as_float_array(z)
    _check_last_axis(z, 10, "wing_weight_10d")
    return _wing_weight_formula(*(z[..., k] for k in range(10)), jnp)


def _wingweight_fn(params: Params, i: Any, x: ArrayLike) -> jax.Array:
    x = _as_float_array(x)
    _check_last_axis(x, 6, "wingweight")
    op = _client_params(params, i, x.dtype)["operating"]  # (W_fw, q, N_z, W_dg)
    s_w, a, sweep, taper, t_c, w_p = (x[..., k] for k in range(6))
    return _wing_weight_formula(s_w, op[0], a, sweep, op[1], taper, t_c, op[2], op[3], w_p, jnp)


class WingWeightFamily(_ParametricFamily):
    """Wing Weight with per-client operating conditions, DESIGN.md §4; formula from VLSE.

    Inputs are the six design variables (S_w, A, Λ[deg], λ, t_c, W_p) with
    their VLSE ranges; each client fixes the operating conditions
    (W_fw, q, N_z, W_dg) = lb + u·(ub − lb). ``make`` stratifies u: for every
    operating variable the clients take u ∈ {(j + ½)/N : j < N} in a random
    permutation of their own (0.1, 0.3, …, 0.9 for N = 5). The weight grows
    with S_w, A, |Λ|, λ and W_p and falls with t_c, so every client's
    minimiser is (150, 6, 0°, 0.5, 0.18, 0.025) and
    ``f* = 1.923302·W_fw^0.0035·q^0.006·(N_z W_dg)^0.49 + 3.75``.
    Default ``noise_std = 0.5`` (≈0.15 % of the spread, ≈330).

    Args:
        params: ``{"operating": (N, 4)}``, (W_fw, q, N_z, W_dg) in original units.
    """

    name = "wingweight"
    dim = 6
    noise_std = 0.5
    _bounds = tuple(tuple(WING_WEIGHT_BOUNDS[k]) for k in _WING_DESIGN)
    _param_shapes = {"operating": (4,)}
    _fn = staticmethod(_wingweight_fn)

    def _compute_optima(self):
        op = self.params["operating"]
        s_w, a, sweep, taper, t_c, w_p = _WING_X_STAR
        f_star = _wing_weight_formula(s_w, op[:, 0], a, sweep, op[:, 1], taper, t_c, op[:, 2], op[:, 3], w_p, np)
        return np.tile(_WING_X_STAR, (len(op), 1)), f_star


def _make_wingweight(num_clients: int, seed: int) -> WingWeightFamily:
    rng = np.random.default_rng([seed, _STREAM["wingweight"]])
    strata = (np.arange(num_clients) + 0.5) / num_clients
    u = np.stack([strata[rng.permutation(num_clients)] for _ in _WING_OPERATING], axis=-1)  # (N, 4)
    lb, ub = WING_WEIGHT_BOUNDS[list(_WING_OPERATING)].T
    return WingWeightFamily({"operating": lb + u * (ub - lb)})


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------

Factory = Callable[[int, int], TaskFamily]

_REGISTRY: dict[str, Factory] = {
    "sinusoid": _make_sinusoid,
    "branin": _make_branin,
    "hartmann6": _make_hartmann6,
    "wingweight": _make_wingweight,
}


def known_families() -> tuple[str, ...]:
    """Names accepted by :func:`make`, built-ins first, then registered ones."""
    return tuple(_REGISTRY)


def register(name: str, factory: Factory) -> None:
    """Add a family to :func:`make`: ``factory(num_clients, seed) -> TaskFamily``.

    Raises:
        ValueError: ``name`` is empty, not a string, or already known, or
            ``factory`` is not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"family name must be a non-empty string, got {name!r}")
    if name in _REGISTRY:
        raise ValueError(f"task family {name!r} is already registered; known: {', '.join(_REGISTRY)}")
    if not callable(factory):
        raise ValueError(f"factory for {name!r} must be callable as factory(num_clients, seed)")
    _REGISTRY[name] = factory


def make(name: str, num_clients: int = 5, seed: int = 0) -> TaskFamily:
    """The task family ``name`` with ``num_clients`` clients; deterministic in (name, N, seed).

    Args:
        name: one of :func:`known_families` (``sinusoid``, ``branin``,
            ``hartmann6``, ``wingweight`` and any registered ones).
        num_clients: ``N >= 1``.
        seed: non-negative int; draws the clients' parameters (the sinusoid
            ignores it).

    Raises:
        ValueError: unknown name or invalid ``num_clients``/``seed``.
    """
    if not isinstance(name, str):
        raise TypeError(f"the task family name must be a string, got {name!r}")
    if name not in _REGISTRY:
        raise ValueError(f"unknown task family {name!r}; known families: {', '.join(_REGISTRY)}")
    if not _is_int(num_clients) or num_clients < 1:
        raise ValueError(f"num_clients must be an int >= 1, got {num_clients!r}")
    if not _is_int(seed) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return _REGISTRY[name](int(num_clients), int(seed))


def check_family(fam: Any) -> None:
    """Check that ``fam`` implements the :class:`TaskFamily` interface sensibly.

    Evaluates every client at the box centre (checking the output shape; a
    non-finite value is left for the loop to report with client and round)
    and asks for every optimum.

    Raises:
        ValueError: with what is wrong.
    """
    label = f"task family {getattr(fam, 'name', type(fam).__name__)!r}"
    for attr in ("name", "dim", "num_clients", "bounds", "noise_std", "evaluate", "optimum", "split"):
        if not hasattr(fam, attr):
            raise ValueError(f"{label} has no attribute {attr!r} (see pacd_jax.tasks.TaskFamily)")
    if not isinstance(fam.name, str):
        raise ValueError(f"{label}: name must be a str, got {fam.name!r}")
    for attr in ("dim", "num_clients"):
        value = getattr(fam, attr)
        if not _is_int(value) or value < 1:
            raise ValueError(f"{label}: {attr} must be an int >= 1, got {value!r}")
    bounds = np.asarray(fam.bounds, dtype=np.float64)
    if bounds.shape != (fam.dim, 2):
        raise ValueError(f"{label}: bounds must have shape ({fam.dim}, 2), got {bounds.shape}")
    if not np.all(np.isfinite(bounds)) or not np.all(bounds[:, 0] < bounds[:, 1]):
        raise ValueError(f"{label}: bounds must be finite with lower < upper, got {bounds.tolist()}")
    noise = fam.noise_std
    if not isinstance(noise, (int, float, np.floating, np.integer)) or not math.isfinite(noise) or noise < 0:
        raise ValueError(f"{label}: noise_std must be a finite float >= 0, got {noise!r}")
    centre = np.broadcast_to(bounds.mean(axis=1), (2, fam.dim))
    for i in range(fam.num_clients):
        try:
            f = np.asarray(fam.evaluate(i, centre))
        except NotImplementedError as exc:
            raise ValueError(f"{label}: evaluate(i, x) is not implemented{': ' + str(exc) if str(exc) else ''}") from None
        if f.shape != (2,):
            raise ValueError(f"{label}: evaluate(i, x) with x of shape {centre.shape} must return shape (2,), got {f.shape}")
        # Non-finite values are reported by the loop, with client, round and seed.
        try:
            x_star, f_star = fam.optimum(i)
        except NotImplementedError as exc:
            raise ValueError(f"{label}: optimum(i) is not implemented (regret needs each client's f*)"
                             f"{': ' + str(exc) if str(exc) else ''}") from None
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{label}: optimum({i}) must return (x_star, f_star): {exc}") from None
        if np.shape(x_star) != (fam.dim,) or not np.isfinite(float(f_star)):
            raise ValueError(f"{label}: optimum({i}) must return (x_star of shape ({fam.dim},), finite f_star)")


# --------------------------------------------------------------------------
# Initial designs, noise, input checks
# --------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("num_clients", "n_per_client", "dim"))
def collaborative_lhs(key: jax.Array, num_clients: int, n_per_client: int, dim: int) -> jax.Array:
    """Collaborative Latin hypercube design in the unit box (DESIGN.md §4).

    Per dimension ``[0, 1]`` is cut into ``M = N·n`` strata. A random
    permutation π of the clients (one per dimension) gives client π(s) the
    strata ``s, s + N, …, s + (n − 1)N``; they go to its ``n`` points in a
    random order (again per dimension), and each point is uniform inside its
    stratum. So the union over clients is an ``M``-point LHS, and stratum
    ``s + kN`` lies inside ``[k/n, (k + 1)/n)``, so each client's ``n``
    points are an ``n``-point LHS too.

    Args:
        key: a PRNG key.
        num_clients, n_per_client, dim: static ``N``, ``n``, ``d`` (>= 1).

    Returns:
        ``(N, n, d)`` points in ``[0, 1]^d`` of the default float dtype.
    """
    for label, value in (("num_clients", num_clients), ("n_per_client", n_per_client), ("dim", dim)):
        if not _is_int(value) or value < 1:
            raise ValueError(f"{label} must be an int >= 1, got {value!r}")
    n_clients, n, d = num_clients, n_per_client, dim
    k_slot, k_order, k_jitter = jax.random.split(key, 3)
    # slot[c, j] = s with π_j(s) = c; argsort of iid uniforms is a uniform permutation.
    slot = jnp.argsort(jax.random.uniform(k_slot, (d, n_clients)), axis=-1).T  # (N, d)
    # order[c, p, j] = k: point p of client c takes the client's k-th stratum in dim j.
    order = jnp.argsort(jax.random.uniform(k_order, (n_clients, d, n)), axis=-1).transpose(0, 2, 1)  # (N, n, d)
    stratum = slot[:, None, :] + n_clients * order  # (N, n, d), values in [0, M)
    jitter = jax.random.uniform(k_jitter, (n_clients, n, d))
    return (stratum + jitter) / (n_clients * n)


def default_init_points(dim: int) -> int:
    """Initial-design size per client: 5 for ``d <= 2``, else 10 (paper §IV)."""
    return 5 if dim <= 2 else 10


def add_noise(key: jax.Array, f: ArrayLike, noise_std: ArrayLike) -> jax.Array:
    """Observation ``y = f + σ ε``, ε ~ N(0, 1) iid (paper eq. 1); same shape and dtype as ``f``."""
    if isinstance(noise_std, (int, float, np.integer, np.floating)) and not noise_std >= 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std!r}")
    f = _as_float_array(f)
    return f + jnp.asarray(noise_std, f.dtype) * jax.random.normal(key, f.shape, f.dtype)


def validate_points(fam: TaskFamily, x: ArrayLike) -> None:
    """Check points for ``fam.evaluate`` on the host: shape ``(..., d)``, float, finite.

    Under tracing only the shape and dtype are checked.

    Raises:
        ValueError: with the offending shape, dtype or entries.
    """
    shape = tuple(np.shape(x))
    dtype = np.result_type(x) if not isinstance(x, jax.Array) else x.dtype
    if len(shape) == 0 or shape[-1] != fam.dim:
        raise ValueError(f"x has shape {shape} but {fam.name} has dim {fam.dim}; expected shape (..., {fam.dim})")
    if not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"x has dtype {dtype} but {fam.name} needs floating-point points")
    if isinstance(x, jax.core.Tracer):
        return
    bad = ~np.isfinite(np.asarray(x))
    if bad.any():
        first = tuple(int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"x has {int(bad.sum())} non-finite entries (first at index {first}) for {fam.name}")
