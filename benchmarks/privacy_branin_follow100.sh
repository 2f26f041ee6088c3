#!/usr/bin/env bash
# The follow attacker against DP over the paper's whole run (README "Differential privacy"; issue 7's
# check at the paper's attacked rounds, DESIGN.md section 7): Branin, 100 rounds, the coordinator
# following target client 0 from round 1 to 99 and scored at rounds 1, 5, 20, 40, 60, 80 and 99, the
# operating sigma 8 against no DP, seeds 0 and 1, BO in float64 (the attack is float64 either way).
# A cell takes hours here (the 40-round cells took 30-40 min, and a round costs more as the data
# grow), so every cell keeps its progress after each followed round in
# $OUT/cells/sigma=S_seed=N.progress.json, and its BO run (.records.npz, .run.json): stopping this
# script (or the machine) loses at most one round, and rerunning it, here or on another machine,
# resumes each unfinished cell without repeating its BO run. Two single-threaded processes fill the cells side by
# side, sigma 8 first; then two processes run the DECOYS decoy runs (default 140, what the committed block reads) of one sigma each for
# the decoy band, saving them 20 at a time (rerunning goes on; a larger DECOYS adds only the new ones;
# a sweep-wide family-wise decoy reading of 14 attacks per sigma needs 279); then, for the no-DP
# side of that reading, 400 round-1 and 300 round-5 decoys of sigma 0 (benchmarks/decoy_round.py:
# runs of 2 and 6 rounds; skipped when their file exists); the last call reuses them all,
# writes the aggregate with its command, commit and machine, and puts the table in README.md between
# the privacy-sweep-follow100 markers.
# Run from the repository root:  bash benchmarks/privacy_branin_follow100.sh   (or DECOYS=279 bash ...)
set -euo pipefail
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" OMP_NUM_THREADS=1
PY=${PYTHON:-python}
DECOYS=${DECOYS:-140}
OUT=benchmarks/results/privacy_branin_follow100
COMMON=(--attack-mode pursuit-follow --benchmark branin --iters 100
        --rounds 1,5,20,40,60,80,99 --clip 22.14 --x64 --quiet --out "$OUT")
for SIGMA in 8 0; do
    "$PY" -m pacd_jax.cli privacy --sigmas "$SIGMA" --operating-sigma "$SIGMA" --seeds 0 --decoys 0 "${COMMON[@]}" &
    A=$!
    "$PY" -m pacd_jax.cli privacy --sigmas "$SIGMA" --operating-sigma "$SIGMA" --seeds 1 --decoys 0 "${COMMON[@]}" &
    B=$!
    wait "$A"
    wait "$B"
done
"$PY" -m pacd_jax.cli privacy --sigmas 0 --operating-sigma 0 --seeds 0,1 --decoys "$DECOYS" "${COMMON[@]}" &
A=$!
"$PY" -m pacd_jax.cli privacy --sigmas 8 --operating-sigma 8 --seeds 0,1 --decoys "$DECOYS" "${COMMON[@]}" &
B=$!
wait "$A"
wait "$B"
for R in "1 400" "5 300"; do
    set -- $R
    F="$OUT/decoys_sigma0_round$1.json"
    [ -f "$F" ] || "$PY" benchmarks/decoy_round.py "$OUT" --sigma 0 --round "$1" --decoys "$2" --out "$F"
done
"$PY" -m pacd_jax.cli privacy --sigmas 0,8 --operating-sigma 8 --seeds 0,1 --decoys "$DECOYS" "${COMMON[@]}"
"$PY" benchmarks/privacy_readme.py "$OUT" privacy-sweep-follow100
