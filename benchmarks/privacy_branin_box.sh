#!/usr/bin/env bash
# The strongest current attacker (uniform init, dummy points kept in the box) on the
# must-show pair only: no DP and the operating sigma 8; otherwise the options of
# benchmarks/privacy_branin.sh. Results in benchmarks/results/privacy_branin_box/.
# Run from the repository root:  bash benchmarks/privacy_branin_box.sh  (reuses finished cells)
set -euo pipefail
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" OMP_NUM_THREADS=1
PY=${PYTHON:-python}
"$PY" -m pacd_jax.cli privacy --benchmark branin --sigmas 0,8 --operating-sigma 8 --seeds 0,1 --iters 40 \
    --rounds 1,20,39 --restarts 2 --steps 200 --attack-init uniform --box --clip 22.14 --quiet \
    --out benchmarks/results/privacy_branin_box
