# Set-up in two commands: `make run` and `make test`. Both create .venv on
# first use, so a fresh machine needs nothing else.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.installed-stamp
# mpi4jax builds from source; it needs the mpicc of the `mpich` wheel on PATH
# and, where nvcc is installed without its toolkit on the default path,
# CUDA_PATH pointing at the toolkit (DESIGN.md section 8).
CUDA_ENV := $(if $(wildcard /usr/local/cuda/include/cuda_runtime.h),CUDA_PATH=/usr/local/cuda,)

RUN_OUT ?= runs/quickstart
RUN_ITERS ?= 100

.PHONY: run test test-all venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade "pip>=24"
	$(BIN)/pip install -q "mpich>=5.0.2" "mpi4py>=4.1.2"
	PATH=$(BIN):$$PATH $(CUDA_ENV) $(BIN)/pip install -q -e ".[mpi,dev,bench]"
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/pacd-bo run --benchmark branin --method pacd --clients 5 --seeds 1 \
	    --iters $(RUN_ITERS) --out $(RUN_OUT)

# The suite (two pytest-xdist workers: most tests wait on compiles and MPI
# subprocesses, so two workers keep both cores busy; work stealing keeps a
# long test at the end from idling the other worker), then the rank-level
# channel tests inside MPI jobs of 2, 3 and 6 ranks (each rank runs pytest; a
# hang is cut off by the timeout). The tests compile far more than they run,
# so XLA's backend (LLVM) optimisation is off for them: 763 s instead of
# 1007 s for the pytest part on the 2-core machine, same results (the HLO
# graph and its numerics are unchanged; only the machine code is less tuned).
# Tests that time or run long loops opt back in (tests/helpers.py).
TEST_XLA_FLAGS := --xla_backend_optimization_level=0
# The suite compiles the same programs in many processes (CLI subprocesses, MPI
# ranks, table workers): JAX's persistent compilation cache, emptied at the start
# of each run, lets them share the work (pytest part: 925 s with it against
# 1116 s without, measured one after the other on the 2-core machine, the latter before
# two tests were merged, worth about 40 s). A cache hit makes XLA's C++ loader log
# an error-level note (tuning features it does not know, on the machine that
# compiled them); TF_CPP_MIN_LOG_LEVEL=3 keeps such lines out of the stderr the
# tests read.
TEST_CACHE := $(CURDIR)/.cache/jax-tests
# MPI ranks outnumber the cores in the MPI tests (up to 6 on 2): a rank that waits in
# MPICH sleeps between polls instead of spinning, so it leaves the cores to the ranks
# and tests that compute (user CPU of the 6-rank comm-log test: 96 s against 106 s)
TEST_MPI_ENV := MPIR_CVAR_ENABLE_HEAVY_YIELD=1
# CI's `make test` leaves out the tests marked `heavy` (whole attacks, the benchmark
# scripts' MPI and whole-run modes, a killed MPI job): on a slower instance of the
# 2-core machine the whole suite took 1283 s of pytest, over CI's 20 minutes. On
# another slow instance the rest took 948-1046 s of pytest (1117 s for all of
# `make test`), so the pursuit attacker's unit runs, three benchmark scripts beside
# their baselines, the warp through every method and the example under MPI joined
# them (255 s of the two workers' time in that run; `make test` then took 870 s).
PYTEST_SELECT ?= -m "not heavy"
test: $(STAMP)
	rm -rf $(TEST_CACHE); \
	export PATH=$(BIN):$$PATH XLA_FLAGS="$$XLA_FLAGS $(TEST_XLA_FLAGS)" TF_CPP_MIN_LOG_LEVEL=3 \
	    JAX_COMPILATION_CACHE_DIR=$(TEST_CACHE) JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.1 $(TEST_MPI_ENV); \
	$(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=30 $(PYTEST_SELECT) || exit 1; \
	for n in 2 3 6; do \
	    timeout 300 $(BIN)/mpiexec -n $$n $(BIN)/python -m pytest -q -p no:cacheprovider tests/mpi || exit 1; \
	done

# Everything, the `heavy` tests included (about 5 more minutes on 2 cores).
test-all:
	$(MAKE) test PYTEST_SELECT=

clean:
	rm -rf $(VENV) runs .pytest_cache
