"""SVGD-step throughput: one full PACD-BO meta-learning step against straightforward baselines, side by side.

A step is what the coordinator and the N clients do once per SVGD iteration
(paper eq. 6-7): every client's ``K`` GMLL gradients on its own data, their
sum, the hyper-prior score and the SVGD/Adam update of the ``(K, P)``
particles. Each timed call runs ``--steps`` steps in one jitted ``fori_loop``
(as a BO round does); the reported figure is the time per step.

Implementations, all on the same data and particles, float32:

* ``ours``: the library's own round (``methods.pacd(...).learn``): clients'
  gradients by the hand-written particle-batched backward pass
  (:mod:`pacd_jax.gmll_grad`), matmul-form SVGD.
* ``autodiff``: the same, with each client's gradients by ``jax.grad`` of
  the GMLL with the closed-form Cholesky backward (``MetaGP.gmll_grad``,
  the readable reference), vmapped over particles and clients.
* ``naive``: a straightforward JAX version: autodiff through the Cholesky
  (``jnp.linalg.cholesky`` + ``solve_triangular``, no custom rule) and a
  Python loop over particles (clients vmapped), jitted as a whole.
* ``blackjax``: BlackJAX's SVGD step (``blackjax.vi.svgd``, which builds
  ``(K, K, P)`` intermediates) on the same eq.-7 score, with our median
  heuristic bandwidth; only when ``blackjax`` is installed
  (``pip install -e '.[bench]'``).
* ``mpi``: with ``--mpi``, the MPI backend with 1 + N ranks (``bench/mpi_step.py``).
* ``one-device``: ours on one device, when the named records run on more
  (``--devices D``: the particle axis of the clients' gradients is split over
  D local devices, e.g. the cores of a CPU, :mod:`pacd_jax.sharding`). The
  baselines above run on one device; the sweeps too.

Records (DESIGN.md section 9) ``anchor-5x20x1d`` and ``bo-5x110x6d`` carry
the baselines' medians; the scaling sweeps (``scale-K*``, ``scale-N*``,
``scale-m*``, ours only) vary K, N or m around ``bo-5x110x6d`` (around the
anchor with ``--quick``).

    python bench/svgd_step.py --json bench/results/svgd_step.json --mpi --devices 2
    python bench/svgd_step.py --quick --json /tmp/svgd_step.json
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

SWEEPS = {
    "K": ("num_particles", (5, 10, 20, 50)),
    "N": ("num_clients", (5, 10, 20, 50, 100)),
    "m": ("points", (20, 55, 110, 220)),
}
QUICK_SWEEPS = {"K": ("num_particles", (5, 10)), "N": ("num_clients", (5, 10)), "m": ("points", (20, 55))}


def _setup(cfg: common.StepConfig, steps: int, devices: int = 1):
    import jax
    import jax.numpy as jnp

    from pacd_jax import methods
    from pacd_jax.config import RunConfig

    config = RunConfig(num_clients=cfg.num_clients, num_particles=cfg.num_particles, hidden=cfg.hidden,
                       features=cfg.features, svgd_steps=steps, svgd_steps_init=steps, init_points=cfg.points, iters=1,
                       devices=devices)
    learner = methods.meta_learner(config, cfg.dim)
    buffers = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[_buffer(cfg, i) for i in range(cfg.num_clients)])
    state = learner.init(jnp.asarray(0), jnp.float32)
    return config, learner, buffers, state


def _buffer(cfg: common.StepConfig, client_id: int):
    from mpi_step import _client_buffer

    return _client_buffer(cfg, client_id)


def _loop(learner, client_grads, steps: int):
    """``steps`` SVGD steps with the coordinator's update and the given client-gradient function."""
    import jax

    def run(state, buffers):
        beta = buffers.count[0].astype(buffers.X.dtype)

        def one(_, s):
            return learner.coordinator_update(s, client_grads(s.particles, buffers), beta)

        return jax.lax.fori_loop(0, steps, one, state)

    return jax.jit(run)


def ours_program(cfg, steps, devices: int = 1):
    """The jitted round ``ours`` times and its arguments (``bench/profile_step.py`` reads its HLO)."""
    import jax
    import jax.numpy as jnp

    from pacd_jax import methods

    config, learner, buffers, state = _setup(cfg, steps, devices)
    # the round as the loop runs it (pacd_jax.loop): the coordinator's record of non-finite
    # gradients comes back as an output, with no host callback inside the program
    method = methods.pacd(config, cfg.dim)
    if method.placement is not None:  # on the devices' mesh, as pacd_jax.loop places a round's state
        state = method.placement(state)
    learn = jax.jit(method.learn_checked)
    return learn, (state, buffers, jnp.asarray(1, jnp.int32))


def ours(cfg, steps, devices: int = 1):
    learn, args = ours_program(cfg, steps, devices)
    return lambda: learn(*args)[0].particles


def autodiff(cfg, steps):
    import jax

    from pacd_jax import client

    _, learner, buffers, state = _setup(cfg, steps)
    model = learner.model

    def grads(particles, bufs):
        per_client = lambda b: jax.vmap(model.gmll_grad, (0, None))(particles, client.model_data(b))
        return jax.vmap(per_client)(bufs)

    run = _loop(learner, grads, steps)
    return lambda: run(state, buffers).particles


def _plain_gmll(model, phi, data):
    """The GMLL as one would first write it: Cholesky, triangular solve, autodiff does the rest."""
    import jax.numpy as jnp
    from jax.scipy.linalg import solve_triangular

    from pacd_jax import gp

    mean, kxx = model.prior_moments(phi, data.X)
    gram = gp.masked_gram(kxx, data.mask, model.noise_variance(phi) + gp.DEFAULT_JITTER)
    chol = jnp.linalg.cholesky(gram)
    a = solve_triangular(chol, jnp.where(data.mask, data.y - mean, 0.0), lower=True)
    return -0.5 * a @ a - jnp.sum(jnp.log(jnp.diagonal(chol)))


def naive(cfg, steps):
    import jax
    import jax.numpy as jnp

    from pacd_jax import client

    _, learner, buffers, state = _setup(cfg, steps)
    model = learner.model
    grad_fn = jax.grad(lambda phi, data: _plain_gmll(model, phi, data))

    def grads(particles, bufs):
        per_particle = [jax.vmap(lambda b: grad_fn(particles[k], client.model_data(b)))(bufs) for k in range(particles.shape[0])]
        return jnp.stack(per_particle, axis=1)  # (N, K, P)

    run = _loop(learner, grads, steps)
    return lambda: run(state, buffers).particles


def blackjax_step(cfg, steps):
    try:
        from blackjax.vi import svgd as bj_svgd
    except ImportError:
        return None
    import jax
    import jax.numpy as jnp
    import optax

    from pacd_jax import client
    from pacd_jax.svgd import median_bandwidth, squared_distances

    config, learner, buffers, state = _setup(cfg, steps)
    model, objective = learner.model, learner.objective
    beta = buffers.count[0].astype(jnp.float32)
    weight = objective.data_weight(beta)

    def score(phi):  # eq. 7 at one particle
        data_grads = jax.vmap(lambda b: model.gmll_grad(phi, client.model_data(b)))(buffers)
        return objective.prior_factor * model.hyperprior_score(phi) + weight * jnp.sum(data_grads, axis=0)

    kernel = bj_svgd.build_kernel(optax.adam(config.learning_rate))

    def run(particles):
        def one(_, s):
            gamma = median_bandwidth(squared_distances(s.particles))  # same bandwidth as ours
            s = bj_svgd.SVGDState(s.particles, {"length_scale": 1.0 / gamma}, s.opt_state)
            return kernel(s, score, bj_svgd.rbf_kernel)

        init = bj_svgd.init(particles, {"length_scale": 1.0}, optax.adam(config.learning_rate))
        return jax.lax.fori_loop(0, steps, one, init).particles

    run = jax.jit(run)
    return lambda: run(state.particles)


BASELINES = {"autodiff": autodiff, "naive": naive, "blackjax": blackjax_step}


def time_impl(make, cfg, steps, repeats, min_seconds, **kwargs):
    call = make(cfg, steps, **kwargs)
    if call is None:
        return None
    compile_s, times = common.time_call(call, repeats, min_seconds)
    return compile_s, times


def sweep_configs(sweeps, base: common.StepConfig) -> list[tuple[str, str, int, common.StepConfig]]:
    out = []
    for axis, (field, values) in sweeps.items():
        for v in values:
            out.append((axis, field, v, dataclasses.replace(base, name=f"scale-{axis}{v}", **{field: v})))
    return out


def fit_exponent(xs, ys) -> float:
    """Least-squares slope of log(time) on log(size)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="output file (a JSON list of records)")
    parser.add_argument("--steps", type=int, default=20, help="SVGD steps per timed call (default 20)")
    parser.add_argument("--repeats", type=int, default=15, help="timed calls per record, at least (default 15)")
    parser.add_argument("--min-seconds", type=float, default=1.0, help="keep timing a record at least this long (default 1)")
    parser.add_argument("--baselines", default="autodiff,naive,blackjax", help="comma-separated baselines (default all)")
    parser.add_argument("--no-sweeps", action="store_true", help="only the two named configurations")
    parser.add_argument("--mpi", action="store_true", help="also time the MPI backend (1 + N ranks) as a baseline")
    parser.add_argument("--quick", action="store_true", help="5 steps, 3 repeats, short sweeps (for tests)")
    parser.add_argument("--devices", type=int, default=1,
                        help="local devices the named records split the particles over, e.g. this machine's cores "
                             "(default %(default)s; more adds the one-device time as a baseline)")
    args = parser.parse_args(argv)
    if args.devices < 1 or any(c.num_particles % args.devices for c in common.NAMED.values()):
        parser.error(f"--devices must divide K = {common.ANCHOR.num_particles}, got {args.devices}")
    from pacd_jax.sharding import request_host_devices

    request_host_devices(args.devices)  # before JAX starts
    baselines = [b for b in args.baselines.split(",") if b]
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        parser.error(f"unknown baseline {unknown[0]!r}; choose from {', '.join(BASELINES)}")
    if args.quick:
        args.steps, args.repeats, args.min_seconds = 5, 3, 0.0

    records = []
    # a sweep point equal to a named configuration (K = 10, N = 5 and the base m) is
    # the same program: its timing is reused rather than compiled and timed again
    timed = {}

    def time_ours(cfg):
        key = dataclasses.replace(cfg, name="")
        if key not in timed:
            timed[key] = time_impl(ours, cfg, args.steps, args.repeats, args.min_seconds)
        return timed[key]

    for cfg in (common.ANCHOR, common.BO):
        if args.devices > 1:
            compile_s, times = time_impl(ours, cfg, args.steps, args.repeats, args.min_seconds, devices=args.devices)
        else:
            compile_s, times = time_ours(cfg)
        rec = common.record(cfg.name, {**cfg.to_dict(), "steps_per_call": args.steps, "dtype": "float32", "devices": args.devices},
                            times, compile_s, per=args.steps)
        if args.devices > 1:
            got = time_ours(cfg)
            rec["baselines"]["one-device"] = common.record("one-device", {}, got[1], got[0], per=args.steps)["median_ms"]
        for name in baselines:
            got = time_impl(BASELINES[name], cfg, args.steps, max(3, args.repeats // 3), 0.0)
            if got is not None:
                rec["baselines"][name] = common.record(name, {}, got[1], got[0], per=args.steps)["median_ms"]
        records.append(rec)
        print(f"{rec['name']:20s} median {rec['median_ms']:8.3f} ms/step  min {rec['min_ms']:8.3f}  baselines {rec['baselines']}", flush=True)
    if args.mpi:
        from mpi_step import run_mpi

        mpi_steps, mpi_repeats = (5, 3) if args.quick else (args.steps, args.repeats)
        for rec_mpi in run_mpi([c.name for c in (common.ANCHOR, common.BO)], ["gather"], mpi_steps, mpi_repeats):
            base = rec_mpi["name"].split("/")[0]
            next(r for r in records if r["name"] == base)["baselines"]["mpi"] = rec_mpi["median_ms"]

    if not args.no_sweeps:
        sweeps = QUICK_SWEEPS if args.quick else SWEEPS
        for axis, field, value, cfg in sweep_configs(sweeps, common.ANCHOR if args.quick else common.BO):
            compile_s, times = time_ours(cfg)
            rec = common.record(cfg.name, {**cfg.to_dict(), "steps_per_call": args.steps, "sweep": axis, "value": value},
                                times, compile_s, per=args.steps)
            records.append(rec)
            print(f"{rec['name']:20s} median {rec['median_ms']:8.3f} ms/step", flush=True)
        for axis in sweeps:
            rows = [r for r in records if r["config"].get("sweep") == axis]
            exponent = fit_exponent([r["config"]["value"] for r in rows], [r["median_ms"] for r in rows])
            for r in rows:
                r["config"]["fitted_exponent"] = round(exponent, 3)
            print(f"cost per step ~ {axis}^{exponent:.2f}")
    common.write(args.json, records, "bench/svgd_step.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
