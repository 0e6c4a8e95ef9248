#!/bin/bash
# Issue 17: the real-size runs (bench/RESULTS.md, "Issue 17"), one after another on an idle VM.
# Usage: bench/issue17_runs.sh [OUT [CHECKOUT]]: OUT defaults to bench/out/issue17, CHECKOUT (the
# code measured, e.g. a worktree) to the current directory; the virtualenv is this checkout's
# .venv unless VENV names another.
set -u
W=$(cd ${2:-$PWD} && pwd); O=${1:-bench/out/issue17}; mkdir -p $O; O=$(cd $O && pwd)
VENV=${VENV:-$PWD/.venv}
SL="env PYTHONPATH=$W $VENV/bin/sparselift"
cd $W
for i in 1 2; do
  echo "== kaggle run $i $(date -u +%H:%M:%S)"
  $SL bench dlrm --model dlrm-kaggle --rows-cap none --world-size 2 --json $O/kaggle-$i.json --plot $O/kaggle-$i.png 2>&1 | grep -v "it/s\]" | tail -22
  echo "== bench run $i $(date -u +%H:%M:%S)"
  $SL bench dlrm --model dlrm-bench --rows-cap 1000000 --world-size 2 --json $O/bench-$i.json --plot $O/bench-$i.png 2>&1 | grep -v "it/s\]" | tail -22
done
for m in "dlrm-kaggle none" "dlrm-bench 1000000"; do
  set -- $m
  echo "== ablation $1 $(date -u +%H:%M:%S)"
  $SL bench ablation --model $1 --rows-cap $2 --no-cost-model --steps 12 --rounds 3 \
    --pipeline unoptimized= --pipeline +generate-kernels=generate-kernels \
    --pipeline +gk+aggregate-comm=aggregate-comm,generate-kernels \
    --pipeline +gk+hide-latency=generate-kernels,hide-latency \
    --pipeline "all four=aggregate-comm,parallelize-tables{groups=2},generate-kernels,hide-latency" \
    --json $O/ablation-$1.json 2>&1 | grep -v "it/s\]" | tail -9
done
echo "== quality $(date -u +%H:%M:%S)"
$SL bench quality --model dlrm-kaggle --json $O/quality-kaggle.json --plot $O/quality-kaggle.png 2>&1 | grep -v "it/s\]" | tail -15
echo "== done $(date -u +%H:%M:%S)"
