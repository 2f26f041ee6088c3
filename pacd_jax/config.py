"""Run configuration: one frozen, validated dataclass for every option of a run."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

METHODS = ("pacd", "pacoh", "independent", "cboc-u", "cboc-l")
BACKENDS = ("vmap", "mpi")
#: Stationary kernels of the meta-GP's scaled feature distance (:func:`pacd_jax.gp.feature_kernel`).
FEATURE_KERNELS = ("se", "matern52")
#: Monotone transforms of a client's observations before its GP (:mod:`pacd_jax.warping`).
OUTPUT_WARPS = ("none", "log", "yeo-johnson")
TRANSPORTS = ("gather", "p2p")
BAD_VALUE_POLICIES = ("stop", "skip")
BENCHMARKS = ("sinusoid", "branin", "hartmann6", "wingweight")
#: Options added after results were first committed, with the value that
#: computes exactly what runs did before the option existed (see
#: :meth:`RunConfig.identity`). A new option that changes nothing at its
#: default belongs here.
ADDED_OPTIONS = {"input_kernel": False, "feature_kernel": "se", "learn_outputscale": False, "devices": 1,
                 "output_warp": "none"}


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value!r}")


def _check_float(name: str, value: Any, low: float, strict: bool = True, high: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if (strict and value <= low) or (not strict and value < low) or (high is not None and value > high):
        op = ">" if strict else ">="
        bound = f"{op} {low}" if high is None else f"{op} {low} and <= {high}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")


#: The most seeds one run (or one table cell) takes.
MAX_SEEDS = 100_000


def seeds_from_options(count: int, seed_list=None) -> tuple[int, ...]:
    """The seeds of ``--seeds N`` (0..N-1) or ``--seed-list`` (when given): the count is checked
    against :data:`MAX_SEEDS` before a range is built (a huge N would exhaust memory first)."""
    if seed_list is not None:
        return tuple(int(s) for s in seed_list)
    if count > MAX_SEEDS:
        raise ValueError(f"--seeds must be at most {MAX_SEEDS}, got {count}")
    return tuple(range(count))


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run; ``run.json`` records all of it.

    Problem:
        benchmark: a registered task family name (see :func:`pacd_jax.tasks.known_families`).
        method: ``pacd`` (PACD-BO), ``pacoh`` (centralised PACOH-BO: one
            learner holding every client's data), ``independent``, or the
            consensus baselines ``cboc-u`` / ``cboc-l`` (DESIGN.md section 5).
        num_clients, iters (BO rounds T), seeds, init_points (per client; None:
            5 for d <= 2, 10 otherwise), noise_std (None: the family's default),
            output_warp (``none``, ``log`` or ``yeo-johnson``: a monotone
            transform each client applies to its own observations before its
            GP models them, in every method alike; :mod:`pacd_jax.warping`).
    Meta-learner (DESIGN.md section 3):
        num_particles K, hidden, features, kernel_variance, learn_lengthscale,
        noise_prior (mean, std of the raw noise), noise_floor, input_kernel
        (multiply eq. 5's feature kernel by an ARD SE kernel on the inputs,
        see :class:`pacd_jax.gp.MetaGPConfig`), feature_kernel (``se`` as in
        eq. 5, or ``matern52``, on the scaled feature distance),
        learn_outputscale (learn the kernel's output scale per particle,
        centred on kernel_variance),
        svgd_steps per round (svgd_steps_init in round 0), learning_rate
        (Adam), prior_factor, meta_lambda (None: N).
    Acquisition:
        kappa, num_candidates, num_local, num_refine, refine_steps.
    Independent and CBOC baselines:
        gp_kernel (``matern52`` or ``rbf``), gp_fit_steps (cap on the L-BFGS steps per GP fit and round),
        consensus_steps (CBOC's n_c; None: T).
    Execution:
        backend (``vmap``: one process; ``mpi``: coordinator on rank 0, one
        client per rank), transport (MPI: ``gather`` collects the gradients
        with MPI_Gather as the paper does; ``p2p`` with one point-to-point
        message per client, so no gradient passes through another client's
        process), share_results (MPI: clients also send their queried points
        and values to rank 0 at the end; a privacy choice, off by default),
        x64 (float64 everywhere), devices (vmap backend, PACD-BO: split the
        K particles of every client's gradient computation, the bulk of a
        meta-learning step, over this many local JAX devices, e.g. the cores
        of a CPU or several GPUs; K must be a multiple of it; the result equals
        the one-device run to round-off), on_bad_value (``stop``: a NaN/inf
        observation ends the run naming client and round; ``skip``: the value
        is dropped and recorded per client in ``run.json``).
    Differential privacy (paper section VI, :mod:`pacd_jax.dp`):
        dp_sigma (noise multiplier sigma; 0 switches DP off), dp_clip (clip
        norm C of each per-particle gradient). Each client clips and adds
        N(0, sigma^2 (2C)^2 I) to its gradients before they leave it.
    """

    benchmark: str = "branin"
    method: str = "pacd"
    num_clients: int = 5
    iters: int = 30
    seeds: tuple[int, ...] = (0,)
    init_points: int | None = None
    noise_std: float | None = None
    output_warp: str = "none"
    backend: str = "vmap"
    transport: str = "gather"
    share_results: bool = False
    x64: bool = False
    devices: int = 1
    # meta-learner
    num_particles: int = 10
    hidden: tuple[int, ...] = (32, 32)
    features: int = 2
    kernel_variance: float = 0.5
    learn_lengthscale: bool = True
    noise_prior: tuple[float, float] = (-4.0, 1.0)
    noise_floor: float = 1e-3
    input_kernel: bool = False
    feature_kernel: str = "se"
    learn_outputscale: bool = False
    svgd_steps: int = 50
    svgd_steps_init: int = 500
    learning_rate: float = 1e-2
    prior_factor: float = 0.01
    meta_lambda: float | None = None
    # acquisition
    kappa: float = 2.0
    num_candidates: int = 1024
    num_local: int = 256
    num_refine: int = 5
    refine_steps: int = 50
    # independent baseline
    gp_kernel: str = "matern52"
    gp_fit_steps: int = 50
    # differential privacy (paper eq. 12-13; applied on the client, off when dp_sigma == 0)
    dp_sigma: float = 0.0
    dp_clip: float = 1.0
    consensus_steps: int | None = None
    # reliability
    on_bad_value: str = "stop"

    def __post_init__(self):
        if not isinstance(self.benchmark, str) or not self.benchmark:
            raise ValueError(f"benchmark must be a non-empty string, got {self.benchmark!r}")
        if self.method not in METHODS:
            raise ValueError(f"unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {self.transport!r}; choose one of {', '.join(TRANSPORTS)}")
        if not isinstance(self.share_results, bool):
            raise ValueError(f"share_results must be a bool, got {self.share_results!r}")
        _check_int("num_clients", self.num_clients, 1, 4096)
        _check_int("iters", self.iters, 1, 100_000)
        seeds = tuple(self.seeds)
        if not seeds:
            raise ValueError(f"seeds must not be empty, got {self.seeds!r}")
        if len(seeds) > MAX_SEEDS:
            raise ValueError(f"at most {MAX_SEEDS} seeds per run, got {len(seeds)}")
        for s in seeds:
            _check_int("seed", s, 0, 2**31 - 1)
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct, got {seeds}")
        object.__setattr__(self, "seeds", tuple(int(s) for s in seeds))
        if self.init_points is not None:
            _check_int("init_points", self.init_points, 1, 100_000)
        if self.noise_std is not None:
            _check_float("noise_std", self.noise_std, 0.0, strict=False, high=1e12)
        if not isinstance(self.x64, bool):
            raise ValueError(f"x64 must be a bool, got {self.x64!r}")
        _check_int("num_particles", self.num_particles, 1, 100_000)
        hidden = tuple(self.hidden)
        if not hidden:
            raise ValueError(f"hidden must name at least one layer width, got {self.hidden!r}")
        for h in hidden:
            _check_int("hidden width", h, 1, 100_000)
        object.__setattr__(self, "hidden", tuple(int(h) for h in hidden))
        _check_int("features", self.features, 1, 10_000)
        _check_float("kernel_variance", self.kernel_variance, 0.0)
        if not isinstance(self.learn_lengthscale, bool):
            raise ValueError(f"learn_lengthscale must be a bool, got {self.learn_lengthscale!r}")
        for name in ("input_kernel", "learn_outputscale"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.output_warp not in OUTPUT_WARPS:
            raise ValueError(f"unknown output_warp {self.output_warp!r}; choose one of {', '.join(OUTPUT_WARPS)}")
        if self.feature_kernel not in FEATURE_KERNELS:
            raise ValueError(f"unknown feature_kernel {self.feature_kernel!r}; choose one of {', '.join(FEATURE_KERNELS)}")
        noise_prior = tuple(self.noise_prior)
        if len(noise_prior) != 2:
            raise ValueError(f"noise_prior must be (mean, std), got {self.noise_prior!r}")
        _check_float("noise_prior mean", noise_prior[0], -math.inf, strict=False)
        _check_float("noise_prior std", noise_prior[1], 0.0)
        object.__setattr__(self, "noise_prior", tuple(float(v) for v in noise_prior))
        _check_float("noise_floor", self.noise_floor, 0.0)
        _check_int("svgd_steps", self.svgd_steps, 0, 10**7)
        _check_int("svgd_steps_init", self.svgd_steps_init, 0, 10**7)
        _check_float("learning_rate", self.learning_rate, 0.0, high=100.0)
        _check_float("prior_factor", self.prior_factor, 0.0, strict=False)
        if self.meta_lambda is not None:
            _check_float("meta_lambda", self.meta_lambda, 0.0)
        _check_float("kappa", self.kappa, 0.0, strict=False)
        _check_int("num_candidates", self.num_candidates, 1, 10**7)
        _check_int("num_local", self.num_local, 0, 10**7)
        _check_int("num_refine", self.num_refine, 1, self.num_candidates)
        _check_int("refine_steps", self.refine_steps, 0, 10**6)
        if self.gp_kernel not in ("matern52", "rbf"):
            raise ValueError(f"unknown gp_kernel {self.gp_kernel!r}; choose matern52 or rbf")
        _check_int("gp_fit_steps", self.gp_fit_steps, 1, 10**6)
        # the ranges keep float32 arithmetic finite (noise 2 sigma C, squared over P coordinates)
        # and the privacy accounting defined; sigma 0 switches DP off
        _check_float("dp_sigma", self.dp_sigma, 0.0, strict=False, high=1e6)
        if 0 < self.dp_sigma < 1e-6:
            raise ValueError(f"dp_sigma must be 0 (no DP) or at least 1e-6, got {self.dp_sigma!r}")
        _check_float("dp_clip", self.dp_clip, 0.0, high=1e6)
        if self.consensus_steps is not None:
            _check_int("consensus_steps", self.consensus_steps, 1, 10**7)
        if self.method in ("cboc-u", "cboc-l", "pacoh") and self.backend != "vmap":
            raise ValueError(f"method {self.method} runs in one process only (--backend vmap)")
        _check_int("devices", self.devices, 1, 4096)
        if self.devices > 1:
            if self.method != "pacd":
                raise ValueError(f"devices > 1 spreads PACD-BO's particles over devices; method {self.method} runs on one")
            if self.backend != "vmap":
                raise ValueError("devices > 1 shards the vmap backend; the MPI backend already spreads clients over ranks")
            if self.num_particles % self.devices:
                raise ValueError(f"num_particles ({self.num_particles}) must be a multiple of devices ({self.devices})")
        if self.on_bad_value not in BAD_VALUE_POLICIES:
            raise ValueError(f"unknown on_bad_value {self.on_bad_value!r}; choose one of {', '.join(BAD_VALUE_POLICIES)}")

    def identity(self) -> dict:
        """The options that define what a run computes: :meth:`to_dict` without
        the options of :data:`ADDED_OPTIONS` that hold their neutral value.

        Finished table cells, privacy-sweep cells and checkpoints are keyed by
        this, so a run made before an option existed still matches a run made
        after it with the option left at the value that computes the same thing.
        """
        return {k: v for k, v in self.to_dict().items() if not (k in ADDED_OPTIONS and v == ADDED_OPTIONS[k])}

    @classmethod
    def from_dict(cls, options: dict) -> "RunConfig":
        """The configuration of a :meth:`to_dict` or :meth:`identity` dict (lists back to tuples; options left out keep
        their defaults, which is what :meth:`identity` leaves out)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()})

    def to_dict(self) -> dict:
        """JSON-ready dict of every option (tuples as lists)."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out

    @property
    def n_c(self) -> int:
        """CBOC's consensus horizon: ``consensus_steps``, or T when unset."""
        return self.iters if self.consensus_steps is None else self.consensus_steps

    def replace(self, **changes) -> "RunConfig":
        return dataclasses.replace(self, **changes)
