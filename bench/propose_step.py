"""Proposal throughput: every client's UCB maximiser on the K-particle mixture (paper eq. 8-10), side by side.

A proposal is the other half of a PACD-BO round (the first is the SVGD
steps, ``bench/svgd_step.py``): each client conditions the K particles on
its data (one Gram factorisation per particle), scores the maximiser's
random and local candidates on the mixture and refines the best few by
projected Adam (:func:`pacd_jax.acquisition.maximise`).

Implementations, on the same data, particles and keys, float32:

* ``ours``: the library's proposal (``methods.pacd(...).propose``), whose
  posterior cache forms ``L^-1`` by the blocked factorisation of
  :func:`pacd_jax.linalg.cholesky_inverse` (batched matrix products).
* ``lapack-trsm``: the same proposal with the cache it replaced, LAPACK's
  Cholesky and ``L^-1 = solve_triangular(L, I)``, ``a = cho_solve(L, r)``.

The two choose the same points up to float32 round-off; the record's
``point_difference`` is the largest coordinate difference (unit box).

Records (DESIGN.md section 9): ``propose-<N>x<m>x<d>d`` per configuration,
with the baseline's median.

    python bench/propose_step.py --json bench/results/propose_step.json
    python bench/propose_step.py --quick --json /tmp/propose_step.json
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def trsm_cache(mean, kxx, data, diag):
    """The previous posterior cache: LAPACK Cholesky, ``L^-1`` by a triangular solve with M right-hand sides."""
    import jax.numpy as jnp
    from jax.scipy.linalg import cho_solve, solve_triangular

    from pacd_jax import gp

    gram = gp.masked_gram(kxx, data.mask, diag)
    chol = jnp.linalg.cholesky(gram)
    resid = jnp.where(data.mask, data.y - mean, 0.0)
    eye = jnp.eye(gram.shape[-1], dtype=gram.dtype)
    return gp.PosteriorCache(solve_triangular(chol, eye, lower=True), cho_solve((chol, True), resid))


@contextlib.contextmanager
def _cache(fn):
    """Trace with ``gp.posterior_cache`` replaced by ``fn`` (module attribute, looked up at trace time)."""
    from pacd_jax import gp

    saved = gp.posterior_cache
    gp.posterior_cache = fn
    try:
        yield
    finally:
        gp.posterior_cache = saved


def proposal(cfg: common.StepConfig, candidates: int | None = None):
    """``(call, compile)``: a jitted proposal of every client on ``cfg``'s data, and its arguments."""
    import jax

    from pacd_jax import methods

    import svgd_step

    config, learner, buffers, state = svgd_step._setup(cfg, 1)
    if candidates is not None:
        config = dataclasses.replace(config, num_candidates=candidates)
    keys = jax.random.split(jax.random.key(0), cfg.num_clients)
    return jax.jit(methods.pacd(config, cfg.dim).propose), (state, buffers, keys)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="a small configuration, 3 repeats (for tests)")
    args = parser.parse_args(argv)
    import numpy as np

    if args.quick:
        configs, args.repeats, candidates = [common.StepConfig("propose-quick", 2, 20, 2, num_particles=3, hidden=(8, 8))], 3, 64
    else:
        configs, candidates = [common.StepConfig("bo-5x110x6d", 5, 110, 6), common.StepConfig("branin-5x55x2d", 5, 55, 2)], None
    records = []
    for cfg in configs:
        fn, call_args = proposal(cfg, candidates)
        compile_s, times = common.time_call(lambda: fn(*call_args), args.repeats)
        ours = np.asarray(fn(*call_args))
        base_fn, _ = proposal(cfg, candidates)
        with _cache(trsm_cache):
            _, base_times = common.time_call(lambda: base_fn(*call_args), args.repeats)
            base = np.asarray(base_fn(*call_args))
        name = f"propose-{cfg.num_clients}x{cfg.points}x{cfg.dim}d"
        rec = common.record(name, cfg.to_dict(), times, compile_s,
                            baselines={"lapack-trsm": 1e3 * float(np.median(base_times))},
                            point_difference=float(np.max(np.abs(ours - base))))
        records.append(rec)
        print(f"{name:22s} median {rec['median_ms']:9.3f} ms  min {rec['min_ms']:9.3f}  baselines {rec['baselines']}")
    common.write(args.json, records, "bench/propose_step.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
