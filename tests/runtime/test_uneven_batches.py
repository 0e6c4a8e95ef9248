"""Local batches of different sizes across ranks and steps train like single-process training.

A loader's last batch, or data split unevenly, gives ranks different local batches. The
convention is DDP's: each rank's loss is the mean over its own batch, dense gradients are
averaged over ranks, and the tables take the same gradient, that of `sum_r loss_r / W`
(`grad_reduction="mean"`), which is what `sparselift.runtime.parity` trains in one process.
`sizes[step][rank]` is each rank's batch; every model is compiled on an example batch of 8.
"""

from __future__ import annotations

import pytest
from parity_models import ADAGRAD, ALL_FOUR, SGD  # tests/runtime is on sys.path

from sparselift.runtime.parity import check_parity

CASES = [
    # model, world, sharding, sizes, optimizer, kernels, passes, pipeline
    pytest.param(
        "two-tower",
        2,
        "table_wise",
        [[12, 7], [5, 9], [1, 8]],
        SGD,
        "generated",
        "",
        False,
        id="ws2-table-wise-batch-1",
    ),
    pytest.param(
        "two-tower",
        3,
        "row_wise",
        [[4, 9, 1], [7, 3, 5], [2, 6, 8]],
        ADAGRAD,
        "reference",
        "hide-latency",
        True,
        id="ws3-row-wise-reference-hide-latency-pipelined",
    ),
    pytest.param(
        "two-tower",
        2,
        "data_parallel",
        [[3, 8], [8, 1], [5, 5]],
        SGD,
        "generated",
        "",
        True,
        id="ws2-data-parallel-pipelined",
    ),
    # Packed input exchange (merge_inputs), merged output and gradient exchanges, lanes, fused
    # kernels and start/wait pairs, with the next batch's inputs in flight.
    pytest.param(
        "two-tower",
        3,
        "auto",
        [[5, 1, 9], [8, 4, 2], [3, 7, 6]],
        ADAGRAD,
        "generated",
        ALL_FOUR,
        True,
        id="ws3-auto-all-four-pipelined",
    ),
    pytest.param(
        "dlrm-kaggle",
        2,
        "auto",
        [[12, 7], [1, 9], [6, 3]],
        SGD,
        "generated",
        "aggregate-comm,generate-kernels,hide-latency",
        False,
        id="ws2-kaggle-auto-aggregated",
    ),
    # An empty local batch: its rank still takes part in every exchange.
    pytest.param(
        "parity_models:any_batch",
        2,
        "table_wise",
        [[0, 5], [4, 6], [3, 0]],
        SGD,
        "reference",
        "",
        False,
        id="ws2-empty-batch",
    ),
    pytest.param(
        "parity_models:any_batch",
        3,
        "auto",
        [[0, 5, 2], [4, 0, 1]],
        ADAGRAD,
        "generated",
        ALL_FOUR,
        True,
        id="ws3-empty-batch-all-four-pipelined",
    ),
]


@pytest.mark.parametrize("model, world, sharding, sizes, optimizer, kernels, passes, pipeline", CASES)
def test_uneven_local_batches_match_single_process(model, world, sharding, sizes, optimizer, kernels, passes, pipeline):
    check_parity(
        model,
        world,
        sharding=sharding,
        optimizer=optimizer,
        sizes=sizes,
        batch=8,
        rows_cap=200,
        kernels=kernels,
        passes=passes,
        pipeline=pipeline,
    )
