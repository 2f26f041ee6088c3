"""Spreading the clients' gradient computation over several local devices (the vmap backend's ``devices``).

A PACD-BO meta-learning step is dominated by every client's ``K`` GMLL
gradients (paper eq. 6): ``N x K`` independent Gram matrices, inverses and
MLP backward passes. One XLA CPU program runs them on one core; with
``devices = D`` the particle axis is split into ``D`` blocks of ``K / D``
particles, each computed on its own device by :func:`jax.shard_map`, and the
``(N, K, P)`` messages are gathered back (one all-gather per step) before
anything else sees them. The DP transform, the coordinator's check and the
SVGD update then run on the whole message as before, replicated on every
device, so the noise drawn and everything downstream are the same as on one
device; the gradients agree to round-off (tested).

On a CPU, JAX shows one device unless asked for more before it starts:
``XLA_FLAGS=--xla_force_host_platform_device_count=D`` (``pacd-bo run
--devices D`` sets it). With several GPUs, their devices are used as they are.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from pacd_jax import client, dp
from pacd_jax.client import ClientBuffer, model_data
from pacd_jax.gp import MetaGP, gmll_grads

Array = jax.Array

#: The mesh axis the particles are split over.
AXIS = "particles"

HOST_DEVICES_FLAG = "--xla_force_host_platform_device_count"


def device_mesh(devices: int) -> Mesh:
    """A one-axis mesh over the first ``devices`` local devices (a clear error when there are fewer)."""
    available = jax.local_devices()
    if len(available) < devices:
        platform = available[0].platform
        hint = (
            f"; on a CPU start Python with XLA_FLAGS={HOST_DEVICES_FLAG}={devices} (pacd-bo run --devices sets it)"
            if platform == "cpu"
            else ""
        )
        raise ValueError(f"devices={devices} needs {devices} local JAX devices, found {len(available)} ({platform}){hint}")
    return Mesh(np.asarray(available[:devices]), (AXIS,))


def client_messages(model: MetaGP, devices: int = 1, dp_config: dp.DPConfig | None = None) -> Callable:
    """``(particles (K, P), buffers (N, ...), step_keys (N,) or None) -> (N, K, P)``: every client's message as sent.

    ``devices = 1``: ``vmap`` over clients of :func:`pacd_jax.client.local_gradients`,
    the function the MPI backend's client ranks call. ``devices > 1``: its two
    halves, the eq.-6 gradients on ``K / D`` particles per device
    (:func:`client_gradients`), then each client's DP transform
    (:func:`pacd_jax.client.privatise`) on its whole ``(K, P)`` message, so the
    noise is the one-device draw.
    """
    private = dp_config is not None and dp_config.enabled
    if devices == 1:

        def on_one(particles, buffers, step_keys=None):
            axes = (None, None, 0, None, 0 if private else None)
            return jax.vmap(client.local_gradients, axes)(model, particles, buffers, dp_config, step_keys)

        return on_one
    gradients = client_gradients(model, devices)

    def sharded(particles, buffers, step_keys=None):
        grads = gradients(particles, buffers)
        if private:
            grads = jax.vmap(client.privatise, (0, None, 0))(grads, dp_config, step_keys)
        return grads

    return sharded


def client_gradients(model: MetaGP, devices: int = 1) -> Callable[[Array, ClientBuffer], Array]:
    """``(particles (K, P), buffers (N, ...)) -> (N, K, P)``: every client's eq.-6 gradients, before DP.

    ``devices = 1``: ``vmap`` over clients of :func:`pacd_jax.gp.gmll_grads`.
    ``devices = D > 1``: the same function on ``K / D`` particles per device.
    """

    def on_all(particles, buffers):
        return jax.vmap(lambda buf: gmll_grads(model, particles, model_data(buf, model.config.output_warp)))(buffers)

    if devices == 1:
        return on_all
    mesh = device_mesh(devices)

    def on_my_block(particles, buffers):
        # Particles come in and messages go out replicated, so the coordinator's
        # step (median heuristic, SVGD kernel, Adam, the finiteness check) runs
        # whole on every device: one all-gather per step. With the particle axis
        # left sharded, XLA partitioned that step too: seven collectives per step
        # (counted in the compiled round; tests/test_sharding.py), each a
        # rendezvous of the devices that cost more than the step's arithmetic.
        # The device's block is picked by selects between static slices: a
        # dynamic slice by axis_index was fused into the first MLP layer and
        # made it four times slower.
        block = particles.shape[0] // devices
        me = jax.lax.axis_index(AXIS)
        mine = particles[:block]
        for d in range(1, devices):
            mine = jnp.where(me == d, particles[d * block : (d + 1) * block], mine)
        return jax.lax.all_gather(on_all(mine, buffers), AXIS, axis=1, tiled=True)

    return jax.shard_map(
        on_my_block,
        mesh=mesh,
        in_specs=(PartitionSpec(), PartitionSpec()),
        out_specs=PartitionSpec(),
        check_vma=False,
    )


def split_particles(particles: Array, devices: int = 1) -> Array:
    """``particles`` (``(K, P)``, inside a jitted function) marked as split over ``devices`` along K.

    The learning step hands the particles back whole on every device
    (:func:`client_gradients`); the proposal, whose work is per particle up to
    the mixture's average (eq. 8-9), is then spread over the devices by XLA
    again, as it was when the particles stayed split (the last round of a
    Hartmann-6 run: 218 ms replicated against 105 ms split). The identity
    for ``devices = 1``.
    """
    if devices == 1:
        return particles
    spec = PartitionSpec(*((None,) * (particles.ndim - 2)), AXIS)
    return jax.lax.with_sharding_constraint(particles, NamedSharding(device_mesh(devices), spec))


def replicator(devices: int = 1) -> Callable | None:
    """``tree -> tree`` replicated over the ``devices`` mesh (None for one device), in or out of ``jit``.

    ``jax.jit`` keys its cache on input shardings: a state made by the
    (unsharded) initialisation, a checkpoint or a host-side edit lives on one
    device, while a round left it on the mesh (its particles split, from the
    proposal), so the round compiled a second time at round 1. The backend
    replicates the state it starts from and the state each round returns.
    """
    if devices == 1:
        return None
    replicated = NamedSharding(device_mesh(devices), PartitionSpec())
    # a constraint inside the jitted round (its output stays whole: the proposal's split of the
    # particles would otherwise propagate into the returned state), a transfer outside it
    return lambda tree: jax.lax.with_sharding_constraint(tree, replicated)


def request_host_devices(devices: int) -> None:
    """Ask XLA's CPU platform for ``devices`` host devices; only effective before JAX's backends start.

    Adds ``--xla_force_host_platform_device_count`` to ``XLA_FLAGS`` unless the
    flag is already there (the user's value wins). GPUs are unaffected.
    """
    import os

    flags = os.environ.get("XLA_FLAGS", "")
    if devices > 1 and HOST_DEVICES_FLAG not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {HOST_DEVICES_FLAG}={devices}".strip()
