#!/usr/bin/env bash
# The strongest current attacker (uniform init, dummy points kept in the unit box:
# --attack-init uniform --box) over the sigma sweep, 4 seeds; otherwise the options
# of benchmarks/privacy_branin.sh. Results in benchmarks/results/privacy_branin_box/.
# Three partitions of the sigmas run side by side (one XLA thread each) and write
# their (sigma, seed) cells into one folder; the last command reuses every cell
# and writes privacy.json / privacy.md / the figures with its own command line,
# commit and machine. Rerunning reuses finished cells.
# Run from the repository root:  bash benchmarks/privacy_branin_box.sh
set -euo pipefail
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" OMP_NUM_THREADS=1
PY=${PYTHON:-python}
COMMON=(--benchmark branin --seeds 0,1,2,3 --iters 40 --rounds 1,20,39 --restarts 2 --steps 200
        --attack-init uniform --box --clip 22.14 --quiet --out benchmarks/results/privacy_branin_box)
"$PY" -m pacd_jax.cli privacy --sigmas 0,8 --operating-sigma 8 "${COMMON[@]}" &
A=$!
"$PY" -m pacd_jax.cli privacy --sigmas 1,16 --operating-sigma 1 "${COMMON[@]}" &
B=$!
"$PY" -m pacd_jax.cli privacy --sigmas 2,4 --operating-sigma 2 "${COMMON[@]}" &
C=$!
wait "$A"
wait "$B"
wait "$C"
"$PY" -m pacd_jax.cli privacy --sigmas 0,1,2,4,8,16 --operating-sigma 8 "${COMMON[@]}"
