#!/usr/bin/env bash
# Regenerates every simulator figure quoted in the README and docs/results.md, from the
# shipped profiles: each built-in experiment (10 seeds), the random-workload suite (every
# policy), the ablations, the robustness run, the 180 workloads no rule was tuned on and the
# manager's view of the widened suite. Writes results/ (git-ignored) and
# docs/results/*.txt; 17.5 minutes on 2 cores (2026-11-29, the whole script).
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
# the 180 workloads no rule was tuned on (docs/results.md "180 workloads no rule was tuned on")
$PY benchmarks/suite.py --family widened --first 12 --workloads 30 --seeds 3 \
  --policies default,progress,paper,oracle --out docs/results/suite-widened-unseen.json \
  | tee docs/results/suite-widened-unseen.txt
$PY benchmarks/suite.py --family widened --first 12 --workloads 30 --seeds 3 --noise standard \
  --policies default,progress --out docs/results/suite-widened-unseen-noisy.json \
  | tee docs/results/suite-widened-unseen-noisy.txt
# as the manager sees it (docs/results.md "as the manager sees it")
manager() {  # file name, then suite.py's arguments
  local name=$1
  shift
  { echo "python benchmarks/suite.py $*"; echo; $PY benchmarks/suite.py "$@" --out "results/$name.json"; } \
    | tee "docs/results/$name.txt"
}
# nodes labelled; not labelled (the agents' measured speeds); neither (agents before the probe)
for labels in "" --unlabelled "--unlabelled --unmeasured"; do
  case $labels in "") tag= ;; --unlabelled) tag=-unlabelled ;; *) tag=-unmeasured ;; esac
  manager "suite-widened-manager$tag" --family widened --workloads 12 --manager-view $labels \
    --policies default,progress,oracle --seeds 3
  manager "suite-widened-manager$tag-noisy" --family widened --workloads 12 --manager-view \
    $labels --noise standard --policies default,progress --seeds 3
  manager "suite-widened-manager$tag-unseen" --family widened --first 12 --workloads 30 \
    --manager-view $labels --policies default,progress,oracle --seeds 3
  manager "suite-widened-manager$tag-unseen-noisy" --family widened --first 12 --workloads 30 \
    --manager-view $labels --noise standard --policies default,progress --seeds 3
done
for e in paper-30 paper-30-mc; do
  $S simulate "$e" --seeds 10 --no-jobs --no-plots --manager-view --out "results/$e-manager" \
    | tee "docs/results/$e-manager.txt"
done
