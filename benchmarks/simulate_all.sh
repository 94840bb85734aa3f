#!/usr/bin/env bash
# Regenerates every simulator figure quoted in the README and docs/parameters.md, from the
# shipped profiles: the parameter sweep, then each built-in experiment with the shipped
# defaults. Writes results/ (git-ignored); takes a few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SPECON:-specon}
$S simulate paper-30 --seeds 20 --policies specon+flowcon --out results/sweep \
  --sweep "alpha=0.0025,0.005,0.01,0.02,0.05 interval=20,30,60,120 beta=1,1.5,2"
$S simulate paper-30 --seeds 20 --out results/paper-30
$S simulate paper-30 --seeds 20 --beta 2 --policies default,flowcon,specon+flowcon \
  --no-plots --no-jobs --out results/paper-30-beta2
for e in paper-20 paper-vae20 paper-50x8 philly-160; do
  $S simulate "$e" --seeds 10 --no-plots --no-jobs --out "results/$e"
done
for e in targets-short deadlines-short; do
  $S simulate "$e" --seeds 10 --no-plots --no-jobs --out "results/$e" \
    --policies default,specon+flowcon,las,dqoes,deadline,agent-qos,oracle
done
