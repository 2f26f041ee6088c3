"""The distributed backend: PACD-BO across MPI ranks with mpi4jax (paper section III-D).

Rank 0 is the coordinator, ranks 1..N are the clients. Modules:

* :mod:`~pacd_jax.distributed.process` pins each rank to one core before JAX
  starts (import it before anything that imports JAX);
* :mod:`~pacd_jax.distributed.channel` the jit-compatible messages (particles
  down, gradients up) and their log;
* :mod:`~pacd_jax.distributed.backend` the coordinator's and the clients'
  programs and :func:`~pacd_jax.distributed.backend.run`.

Nothing here is imported by the single-process code, and this package's
``__init__`` imports neither JAX nor MPI.
"""
