#!/usr/bin/env bash
# Regenerates every simulator figure quoted in the README and docs/results.md, from the
# shipped profiles: each built-in experiment (10 seeds), the random-workload suite (every
# policy), the ablations and the robustness run. Writes results/ (git-ignored) and
# docs/results/*.txt; about 25 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
S=${SPECON:-specon}
PY=${PYTHON:-python}
mkdir -p docs/results
run() {  # name, then simulate's arguments
  local name=$1
  shift
  $S simulate "$name" --seeds 10 --no-jobs --out "results/$name" "$@" \
    | tee "docs/results/$name.txt"
}
run paper-30
run paper-30-mc
for e in paper-20 paper-vae20 paper-50x8 philly-160 paper-20-mc paper-50x8-mc; do
  run "$e" --no-plots
done
for e in targets-short deadlines-short; do
  run "$e" --no-plots --policies default,paper,progress,las,dqoes,deadline,agent-qos,oracle
done
$PY benchmarks/suite.py --workloads 30 --seeds 3 | tee docs/results/suite.txt
$PY benchmarks/suite.py --workloads 30 --seeds 3 --policies default,progress,oracle \
  --cost-error 0.3 --unknown-total-share 0.3 --out docs/results/suite-robustness.json \
  | tee docs/results/suite-robustness.txt
$PY benchmarks/ablation.py --workloads 30 --seeds 2 | tee docs/results/ablation.txt
$PY benchmarks/suite.py --family widened --workloads 12 --seeds 3 \
  --policies default,progress,paper,oracle --out docs/results/suite-widened.json \
  | tee docs/results/suite-widened.txt
$PY benchmarks/suite.py --family widened --workloads 12 --seeds 3 --noise standard \
  --policies default,progress,paper,oracle --out docs/results/suite-widened-noisy.json \
  | tee docs/results/suite-widened-noisy.txt
