#!/usr/bin/env bash
# Regenerate the exported fixtures that tests/filecheck/transforms/lift-sparse-models.mlir reads.
# Run from anywhere, with the project's venv:  tests/filecheck/inputs/regenerate.sh
#
# Every fixture is `sparselift export` output (opaque sparse.embedding_bag_collection groups),
# batch 8, seed 0, sharding auto unless said otherwise; --rows-cap keeps the DLRM tables small:
#   dlrm-kaggle-ws1.mlir    sparselift export --model dlrm-kaggle   --world-size 1 --rows-cap 20000 --batch-size 8 --sharding auto
#   dlrm-kaggle-ws2.mlir    sparselift export --model dlrm-kaggle   --world-size 2 --rows-cap 20000 --batch-size 8 --sharding auto
#   dlrm-kaggle-ws3.mlir    sparselift export --model dlrm-kaggle   --world-size 3 --rows-cap 20000 --batch-size 8 --sharding auto
#   dlrm-kaggle-ws2-rowwise.mlir  sparselift export --model dlrm-kaggle --world-size 2 --rows-cap 20000 --batch-size 8 --sharding row_wise
#   dlrm-terabyte-ws2.mlir  sparselift export --model dlrm-terabyte --world-size 2 --rows-cap 20000 --batch-size 8 --sharding auto
#   two-tower-ws2.mlir      sparselift export --model two-tower     --world-size 2 --batch-size 8 --sharding auto
#   torchrec-ebc-ws2.mlir   sparselift export --model torchrec-ebc  --world-size 2 --batch-size 8 --sharding auto
#   sequence-ws2.mlir       sparselift export tests/runtime/parity_models.py:sequence_model --world-size 2 --batch-size 8 --sharding table_wise
#   din-ws2.mlir            sparselift export --model din           --world-size 2 --rows-cap 1000 --batch-size 8 --sharding auto
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
sparselift="${SPARSELIFT:-$root/.venv/bin/sparselift}"

export_fixture() {  # OUT MODEL WORLD [extra args...]; MODEL: a built-in name or FILE.py:FACTORY
    local out="$1" model="$2" world="$3"
    shift 3
    if [[ "$model" == *:* ]]; then set -- "$root/$model" "$@"; else set -- --model "$model" "$@"; fi
    "$sparselift" export "$@" --world-size "$world" --batch-size 8 --seed 0 -o "$here/$out"
    echo "wrote $out"
}

export_fixture dlrm-kaggle-ws1.mlir         dlrm-kaggle   1 --rows-cap 20000 --sharding auto
export_fixture dlrm-kaggle-ws2.mlir         dlrm-kaggle   2 --rows-cap 20000 --sharding auto
export_fixture dlrm-kaggle-ws3.mlir         dlrm-kaggle   3 --rows-cap 20000 --sharding auto
export_fixture dlrm-kaggle-ws2-rowwise.mlir dlrm-kaggle   2 --rows-cap 20000 --sharding row_wise
export_fixture dlrm-terabyte-ws2.mlir       dlrm-terabyte 2 --rows-cap 20000 --sharding auto
export_fixture two-tower-ws2.mlir           two-tower     2 --sharding auto
export_fixture torchrec-ebc-ws2.mlir        torchrec-ebc  2 --sharding auto
export_fixture sequence-ws2.mlir           tests/runtime/parity_models.py:sequence_model 2 --sharding table_wise
export_fixture din-ws2.mlir                 din           2 --rows-cap 1000 --sharding auto
