"""Collectives per step before and after `aggregate-comm`, in the IR and on the wire.

TorchRec sends splits, lengths and values per sharding group (4 forward and 1 backward
collectives for one table-wise group, 8 and 2 for two). After aggregate-comm a step has at most
one input and one output exchange forward, and one pooled-gradient exchange plus one
replicated-table all-reduce backward, whatever the number of groups and modules.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from xdsl.passes import PassPipeline

from sparselift.ir import make_context
from sparselift.passes import get_all_passes
from sparselift.passes.srsv import steps_of

INPUTS = Path(__file__).resolve().parents[1] / "filecheck" / "inputs"


def collectives(model_file: str, pipeline: str) -> tuple[int, int]:
    ctx = make_context()
    from xdsl.parser import Parser

    module = Parser(ctx, (INPUTS / model_file).read_text()).parse_module()
    PassPipeline.parse_spec(get_all_passes(), pipeline).apply(ctx, module)
    module.verify()
    (step,) = steps_of(module)

    def count(region) -> int:
        return sum(1 for op in region.walk() if op.name.startswith("coll.") and op.name != "coll.wait")

    return count(step.forward), count(step.backward)


@pytest.mark.parametrize(
    "model_file",
    [
        "dlrm-kaggle-ws2.mlir",
        "dlrm-kaggle-ws3.mlir",
        "two-tower-ws2.mlir",
        "torchrec-ebc-ws2.mlir",
        "dlrm-kaggle-ws2-rowwise.mlir",
    ],
)
@pytest.mark.parametrize(
    "after", ["aggregate-comm", "aggregate-comm,parallelize-tables{groups=2},generate-kernels,hide-latency"]
)
def test_aggregate_comm_leaves_at_most_two_exchanges_each_way(model_file, after):
    fwd0, bwd0 = collectives(model_file, "lift-sparse")
    fwd, bwd = collectives(model_file, f"lift-sparse,{after}")
    assert fwd + bwd < fwd0 + bwd0, (model_file, (fwd0, bwd0), (fwd, bwd))
    assert fwd <= 2 and bwd <= 2, (model_file, (fwd, bwd))


def test_two_tower_counts_exactly():
    # Two table-wise towers (one weighted feature) and a replicated table. Forward: 5 input
    # exchanges (lengths and ids per tower, the weights) and 2 pooled outputs become 1 + 1;
    # backward: 2 pooled-gradient exchanges become 1, the replicated table's all-reduce stays.
    assert collectives("two-tower-ws2.mlir", "lift-sparse") == (7, 3)
    assert collectives("two-tower-ws2.mlir", "lift-sparse,aggregate-comm") == (2, 2)
