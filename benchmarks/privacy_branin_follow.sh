#!/usr/bin/env bash
# The follow attacker (pursuit attack following the target through every round) against DP on
# Branin (README "Differential privacy"; issue 7's check): sigma 0 (no DP) against the operating
# sigma 8, seeds 0, 1 and 3 (seed 2 was left out for time when this ran; add it to a partition and
# to the last call to extend the sweep), 40 rounds, followed from round 1 to 39 and scored at rounds 1, 20 and 39, BO
# in float64 (the attack is float64 either way). Two single-threaded processes fill the (sigma,
# seed) cells side by side; then two processes run the DECOYS decoy runs (default 180, the fewest the
# family-wise decoy reading of these 9 attacks per sigma can resolve with; pacd_jax/decoys.py, seeds
# 1000000 on; 20-35 s per run single-threaded, 49 and 81 min for 140 of them at sigma 0 and 8) of one
# sigma each for the decoy band, saving them 20 at a time; the last call reuses everything, writes the
# aggregate with its command, commit and machine, and the table goes into README.md between the
# privacy-sweep-follow markers. Rerunning reuses finished cells and saved decoy runs, so a larger
# DECOYS adds only the new decoy runs, and a smaller one reads the first DECOYS of those saved.
# Run from the repository root:  bash benchmarks/privacy_branin_follow.sh   (or DECOYS=N bash ...)
set -euo pipefail
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" OMP_NUM_THREADS=1
PY=${PYTHON:-python}
DECOYS=${DECOYS:-180}
OUT=benchmarks/results/privacy_branin_follow
COMMON=(--attack-mode pursuit-follow --benchmark branin --iters 40
        --rounds 1,20,39 --clip 22.14 --x64 --quiet --out "$OUT")
"$PY" -m pacd_jax.cli privacy --sigmas 0,8 --operating-sigma 8 --seeds 0,1 --decoys 0 "${COMMON[@]}" &
A=$!
"$PY" -m pacd_jax.cli privacy --sigmas 0,8 --operating-sigma 8 --seeds 3 --decoys 0 "${COMMON[@]}" &
B=$!
wait "$A"
wait "$B"
"$PY" -m pacd_jax.cli privacy --sigmas 0 --operating-sigma 0 --seeds 0,1,3 --decoys "$DECOYS" "${COMMON[@]}" &
A=$!
"$PY" -m pacd_jax.cli privacy --sigmas 8 --operating-sigma 8 --seeds 0,1,3 --decoys "$DECOYS" "${COMMON[@]}" &
B=$!
wait "$A"
wait "$B"
"$PY" -m pacd_jax.cli privacy --sigmas 0,8 --operating-sigma 8 --seeds 0,1,3 --decoys "$DECOYS" "${COMMON[@]}"
"$PY" benchmarks/privacy_readme.py "$OUT" privacy-sweep-follow
