#!/bin/bash
# Issue 16's targets: `sparselift explain --replan` on 2 ranks at rows cap 100k, dlrm-kaggle and
# dlrm-bench 4 times each (interleaved), torchrec-ebc and two-tower once each, each run with a
# fresh cache directory. Usage: bench/issue16_replan_runs.sh [OUT_DIR] [CODE_DIR]
# (CODE_DIR: a checkout to run, e.g. a worktree of the commit under test; default: this one).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$here/bench/out/issue16}
code=${2:-$here}
mkdir -p "$out"
cache=$(mktemp -d)
run() {  # model, run number
  local s=$(date +%s)
  (cd "$code" && PYTHONPATH="$code" "$here/.venv/bin/python" -m sparselift.tools.cli explain --model "$1" \
    --world-size 2 --replan --rows-cap 100000 --cache-dir "$cache/$1-$2" --json "$out/$1-$2.json") \
    > "$out/$1-$2.txt" 2>&1
  echo "$1 $2 rc=$? wall=$(( $(date +%s) - s ))s"
}
for i in 1 2 3 4; do
  for m in dlrm-kaggle dlrm-bench; do run $m $i; done
  if [ "$i" = 1 ]; then for m in torchrec-ebc two-tower; do run $m $i; done; fi
done
rm -rf "$cache"
