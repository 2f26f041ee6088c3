"""DLG loss and its gradient for one target (paper eq. 11), against a per-particle Python loop.

The attacker's inner loop evaluates ``L(X^, y^) = sum_k |g_k(X^, y^) - A_k|^2``
and its gradient with respect to the dummy data; each evaluation
differentiates the GMLL gradient of every broadcast particle once more
(second order through the Cholesky). This script times that evaluation as
:func:`pacd_jax.attack.dlg_loss` does it (one jit: the clients' hand-written
GMLL gradient, differentiated once more by JAX) next to two baselines in
the same run: ``autodiff`` (the GMLL gradient by ``jax.grad`` through the
Cholesky, vmapped over particles, so the loss gradient is second-order
autodiff) and ``loop`` (the straightforward version: one jitted
``value_and_grad`` per particle, summed in a Python loop), in float32 and
float64 (the attack experiment runs in float64).

    python bench/dlg_loss.py --json bench/results/dlg_loss.json     # m = 105, d = 2, K = 10
    python bench/dlg_loss.py --quick --json /tmp/dlg.json           # small settings (tests)

Records: ``dlg-<m>x<d>d-K<K>-<dtype>``, ``median_ms`` per evaluation of the
loss and its gradient with respect to ``(X^, y^)``; ``baselines.autodiff``
and ``baselines.loop``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def time_dlg(points: int, dim: int, num_particles: int, hidden: tuple[int, ...], dtype_name: str,
             repeats: int, min_seconds: float, baselines: bool) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from pacd_jax import attack, methods
    from pacd_jax.config import RunConfig

    dtype = jnp.float64 if dtype_name == "float64" else jnp.float32
    model = methods.meta_gp(RunConfig(num_particles=num_particles, hidden=hidden), dim)
    key_p, key_x, key_d = jax.random.split(jax.random.PRNGKey(0), 3)
    particles = model.sample_hyperprior(key_p, num_particles, dtype)
    rng = np.random.default_rng(0)
    X_true = jnp.asarray(rng.uniform(size=(points, dim)), dtype)
    y_true = jnp.asarray(rng.normal(size=points), dtype)
    grads = jax.jit(lambda p, X, y: attack.dummy_gradients(model, p, X, y))(particles, X_true, y_true)
    X_dummy = jnp.asarray(rng.uniform(size=(points, dim)), dtype)
    y_dummy = jnp.asarray(rng.normal(size=points), dtype)

    ours = jax.jit(jax.value_and_grad(lambda X, y: attack.dlg_loss(model, X, y, particles, grads), argnums=(0, 1)))
    compile_s, times = common.time_call(lambda: ours(X_dummy, y_dummy), repeats, min_seconds)
    value, _ = ours(X_dummy, y_dummy)
    rec = common.record(
        f"dlg-{points}x{dim}d-K{num_particles}-{dtype_name}",
        {"points": points, "dim": dim, "num_particles": num_particles, "hidden": list(hidden),
         "num_params": int(model.num_params), "dtype": dtype_name},
        times, compile_s,
    )

    if baselines:
        # (a) the same loss with the GMLL gradient by autodiff (second order through the Cholesky), vmapped
        def autodiff_loss(X, y):
            return jnp.sum((attack.dummy_gradients_autodiff(model, particles, X, y) - grads) ** 2)

        auto = jax.jit(jax.value_and_grad(autodiff_loss, argnums=(0, 1)))
        _, auto_times = common.time_call(lambda: auto(X_dummy, y_dummy), repeats, min_seconds)
        rec["baselines"]["autodiff"] = common.record("autodiff", {}, auto_times, 0.0)["median_ms"]

        # (b) one particle's squared mismatch, differentiated on its own; the Python loop sums them
        grad_phi = jax.grad(attack.attack_gmll, argnums=1)

        def one_loss(X, y, phi, target):
            return jnp.sum((grad_phi(model, phi, X, y) - target) ** 2)

        one = jax.jit(jax.value_and_grad(one_loss, argnums=(0, 1)))

        def loop():
            total, gX, gy = 0.0, 0.0, 0.0
            for k in range(num_particles):
                v, (dx, dy) = one(X_dummy, y_dummy, particles[k], grads[k])
                total, gX, gy = total + v, gX + dx, gy + dy
            return total, gX, gy

        _, loop_times = common.time_call(loop, max(3, repeats // 4), min_seconds)
        loop_value = float(loop()[0])
        # the two must compute the same loss, or the ratio means nothing
        rtol = 1e-3 if dtype_name == "float32" else 1e-9
        if not np.isclose(loop_value, float(value), rtol=rtol):
            raise SystemExit(f"loop baseline disagrees: {loop_value} vs {float(value)}")
        rec["baselines"]["loop"] = common.record("loop", {}, loop_times, 0.0)["median_ms"]
    return rec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="output file (a JSON list of records)")
    parser.add_argument("--points", type=int, default=105, help="m, the target's number of points (default 105)")
    parser.add_argument("--dim", type=int, default=2, help="input dimension d (default 2, Branin)")
    parser.add_argument("--particles", type=int, default=10, help="K (default 10)")
    parser.add_argument("--dtypes", default="float32,float64", help="comma-separated (default float32,float64)")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--no-baselines", action="store_true", help="time only the library's loss")
    parser.add_argument("--quick", action="store_true", help="m = 12, K = 3, hidden (8, 8), few repeats (for tests)")
    args = parser.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)  # float64 records need it; float32 arrays stay float32
    hidden = (8, 8) if args.quick else (32, 32)
    if args.quick:
        args.points, args.particles, args.repeats = 12, 3, 5
    records = []
    for dtype_name in args.dtypes.split(","):
        rec = time_dlg(args.points, args.dim, args.particles, hidden, dtype_name, args.repeats,
                       0.0 if args.quick else 2.0, not args.no_baselines)
        records.append(rec)
        extra = "".join(f"   {k} {v:8.3f} ms ({v / rec['median_ms']:.1f}x)" for k, v in rec["baselines"].items())
        print(f"{rec['name']:28s} {rec['median_ms']:8.3f} ms (min {rec['min_ms']:.3f}; compile {rec['compile_s']:.1f} s){extra}",
              flush=True)
    common.write(args.json, records, "bench/dlg_loss.py", argv)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
