"""Test-session settings.

tests/mpi holds rank-level tests that only make sense inside an MPI job; the
Makefile runs them with `mpiexec -n 2`, `-n 3` and `-n 6`. A plain pytest
session (no MPI launcher in the environment) does not collect them.
"""

import os

collect_ignore = [] if "PMI_SIZE" in os.environ or "OMPI_COMM_WORLD_SIZE" in os.environ else ["mpi"]
