"""Unclipped per-particle gradient norms of a PACD-BO run, to choose the DP clip norm C.

Clipping (paper eq. 12) biases the message when ``C`` is below the typical
norm ``||A_{i,k}||`` and wastes privacy budget when it is far above (the
noise std is ``2 sigma C`` whatever the gradient). :func:`record` runs the
vmap backend without DP and, at every SVGD step of the chosen rounds,
evaluates every client's per-particle gradient norms along the same
trajectory as the run; :func:`plot` draws their distribution. The rule
suggested (README, "Differential privacy") is a quantile of the round-0
norms (default the median), as in DP-SGD practice (Abadi et al. 2016; Andrew
et al. 2021 adapt C to a quantile of the norms).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pacd_jax import client, experiment, io, loop, methods
from pacd_jax.config import RunConfig


def _learn_with_norms(learner: methods.MetaLearner, state, buffers, num_steps: int):
    """The round's SVGD steps (as :func:`methods.pacd` ``learn`` without DP), also returning ``(steps, N, K)`` norms."""

    def one_step(s, _):
        beta = methods.public_count(buffers)
        grads = jax.vmap(client.local_gradients, (None, None, 0))(learner.model, s.particles, buffers)
        norms = jnp.linalg.norm(grads, axis=-1)  # (N, K)
        return learner.coordinator_update(s, grads, beta), norms

    return jax.lax.scan(one_step, state, None, length=num_steps)


def record(config: RunConfig, rounds: Sequence[int], quantile: float = 0.5, on_round=None) -> dict:
    """Per-particle gradient norms at every SVGD step of ``rounds`` and round 0 (DP off), over the config's seeds.

    ``on_round(rounds_done, rounds_total)`` is called after every BO round of every seed (progress).

    Returns a JSON-ready dict: ``{"benchmark", "config", "rounds", "norms": {round: [[...]]}, "summary"}``,
    where ``norms[round]`` is a flat list over seeds, steps, clients and particles.
    """
    if config.method not in ("pacd", "pacoh"):
        raise ValueError("gradient norms exist for the meta-learner (method pacd or pacoh)")
    config = config.replace(dp_sigma=0.0)
    rounds = sorted(set(int(r) for r in rounds) | {0})  # round 0 always: the suggested C is a quantile of its norms
    x64 = jax.enable_x64(True) if config.x64 else contextlib.nullcontext()
    with x64:
        dtype = jnp.result_type(float)
        fams = experiment.build_families(config, None)
        method = methods.build(config, int(fams[0].dim))
        learner = methods.meta_learner(config, int(fams[0].dim))
        norms: dict[int, list] = {r: [] for r in rounds}
        learn_init = jax.jit(lambda st, b: _learn_with_norms(learner, st, b, config.svgd_steps_init))
        learn_rest = jax.jit(lambda st, b: _learn_with_norms(learner, st, b, config.svgd_steps))
        done = 0
        for fam, seed in zip(fams, config.seeds):
            problem, params = loop.problem_from_family(fam, config.iters, config.init_points, config.noise_std)
            seed_arr = jnp.asarray(seed, jnp.int32)
            state = jax.jit(lambda s, p: loop.initial_state(problem, method, s, p, dtype))(seed_arr, params)
            round_fn = jax.jit(lambda st, t, s, p: loop.bo_round(problem, method, st, t, s, p))
            for t in range(max(rounds) + 1):
                if t in norms:
                    fn = learn_init if t == 0 else learn_rest
                    _, n = fn(state.model, state.buffers)  # the same trajectory the round takes
                    norms[t].append(np.asarray(n, np.float64).ravel())
                state, _ = round_fn(state, jnp.asarray(t, jnp.int32), seed_arr, params)
                if on_round is not None:
                    done += 1
                    on_round(done, len(config.seeds) * (max(rounds) + 1))
    flat = {r: np.concatenate(v) if v else np.zeros(0) for r, v in norms.items()}
    first = flat[0]
    per_round = {
        str(r): {
            "count": int(v.size),
            "min": float(v.min()) if v.size else None,
            "q10": float(np.quantile(v, 0.1)) if v.size else None,
            "median": float(np.median(v)) if v.size else None,
            "q90": float(np.quantile(v, 0.9)) if v.size else None,
            "max": float(v.max()) if v.size else None,
        }
        for r, v in flat.items()
    }
    return {
        "benchmark": config.benchmark,
        "config": config.to_dict(),
        "rounds": rounds,
        "quantile": float(quantile),
        "norms": {str(r): v.tolist() for r, v in flat.items()},
        "per_round": per_round,
        "summary": {
            "round0_median": float(np.median(first)),
            "round0_q10": float(np.quantile(first, 0.1)),
            "round0_q90": float(np.quantile(first, 0.9)),
            "suggested_clip": float(np.quantile(first, quantile)),
        },
    }


def plot(doc: dict, path: str | Path) -> None:
    """Histogram (log-spaced bins) of the norms per recorded round, with the suggested C."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    all_norms = np.concatenate([np.asarray(v) for v in doc["norms"].values()])
    all_norms = all_norms[all_norms > 0]
    bins = np.geomspace(all_norms.min(), all_norms.max(), 50)
    for r in doc["rounds"]:
        ax.hist(np.asarray(doc["norms"][str(r)]), bins=bins, histtype="step", density=True, label=f"round {r}")
    c = doc["summary"]["suggested_clip"]
    ax.axvline(c, color="k", ls="--", lw=1, label=f"C = q{doc['quantile']:g} of round 0 = {c:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel(r"$\|A_{i,k}\|_2$ (unclipped, per client and particle, every SVGD step)")
    ax.set_ylabel("density")
    ax.set_title(f"{doc['benchmark']}: per-particle gradient norms")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with io.atomic_path(path) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or "png", dpi=120)
    plt.close(fig)
