#!/usr/bin/env bash
# The reduced sigma sweep committed under benchmarks/results/privacy_branin/ (README "Differential privacy").
#
# Two partitions of the sigmas run side by side (one XLA thread each), writing their
# (sigma, seed) cells into the same folder; the last command finds every cell
# finished, reuses them and writes privacy.json / privacy.md / the figures with its
# own command line, commit and machine. Rerunning this script reuses finished cells.
# Run from the repository root:  bash benchmarks/privacy_branin.sh
set -euo pipefail
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" OMP_NUM_THREADS=1
OUT=benchmarks/results/privacy_branin
COMMON=(--benchmark branin --seeds 0,1 --iters 40 --rounds 1,20,39 --restarts 2 --steps 200 --clip 22.14 --quiet --out "$OUT")
PY=${PYTHON:-python}
"$PY" -m pacd_jax.cli privacy --sigmas 0,8,16 --operating-sigma 8 "${COMMON[@]}" &
A=$!
"$PY" -m pacd_jax.cli privacy --sigmas 1,2,4 --operating-sigma 4 "${COMMON[@]}" &
B=$!
wait "$A"
wait "$B"
"$PY" -m pacd_jax.cli privacy --sigmas 0,1,2,4,8,16 --operating-sigma 8 "${COMMON[@]}"
