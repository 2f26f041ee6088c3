#!/usr/bin/env bash
# The pursuit attacker against DP on Branin (README "Differential privacy"; issue 7's check):
# sigma 0 (no DP) against the operating sigma 8, seeds 0 and 1, 40 rounds, attacked at rounds
# 1, 20 and 39, BO in float64 (as benchmarks/attack_report.py; the attack is float64 either way).
#
# The two sigmas run side by side (one XLA thread each) into one folder of (sigma, seed)
# cells; the last command finds them finished, reuses them and writes privacy.json /
# privacy.md / the figures with its own command line, commit and machine. Rerunning reuses
# finished cells.  Run from the repository root:  bash benchmarks/privacy_branin_pursuit.sh
set -euo pipefail
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" OMP_NUM_THREADS=1
COMMON=(--benchmark branin --seeds 0,1 --iters 40 --rounds 1,20,39 --attack-mode pursuit --x64
        --clip 22.14 --quiet --out benchmarks/results/privacy_branin_pursuit)
PY=${PYTHON:-python}
"$PY" -m pacd_jax.cli privacy --sigmas 0 --operating-sigma 0 "${COMMON[@]}" &
A=$!
"$PY" -m pacd_jax.cli privacy --sigmas 8 --operating-sigma 8 "${COMMON[@]}" &
B=$!
wait "$A"
wait "$B"
"$PY" -m pacd_jax.cli privacy --sigmas 0,8 --operating-sigma 8 "${COMMON[@]}"
