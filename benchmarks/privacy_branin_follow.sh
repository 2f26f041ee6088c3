#!/usr/bin/env bash
# The follow attacker (pursuit attack following the target through every round) against DP on
# Branin (README "Differential privacy"; issue 7's check): sigma 0 (no DP) against the operating
# sigma 8, seed 0, 40 rounds, followed from round 1 to 39 and scored at rounds 1, 20 and 39, BO in
# float64 (the attack is float64 either way). Rerunning reuses finished (sigma, seed) cells; the
# table then goes into README.md between the privacy-sweep-follow markers.
# Run from the repository root:  bash benchmarks/privacy_branin_follow.sh
set -euo pipefail
PY=${PYTHON:-python}
OUT=benchmarks/results/privacy_branin_follow
"$PY" -m pacd_jax.cli privacy --attack-mode pursuit-follow --sigmas 0,8 --operating-sigma 8 --benchmark branin --seeds 0 \
    --iters 40 --rounds 1,20,39 --clip 22.14 --x64 --out "$OUT"
"$PY" benchmarks/privacy_readme.py "$OUT" privacy-sweep-follow
