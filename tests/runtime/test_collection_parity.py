"""TorchRec's `EmbeddingCollection` (`parity_models.CollectionModel`: a KeyedJaggedTensor's
jagged histories and targets looked up unpooled, beside pooled bags): compiled training on 1-3
gloo ranks equals single-process training of the unmodified model (outputs, tables, dense
grads), under every placement, with uneven batches, and with all four optimizations."""

from __future__ import annotations

import pytest
from parity_models import ADAGRAD, ALL_FOUR, SGD  # tests/runtime is on sys.path

from sparselift.runtime.parity import check_parity

COLLECTION = "parity_models:collection_model"


@pytest.mark.parametrize(
    "world, sharding, optimizer, passes, pipeline",
    [
        pytest.param(1, "auto", SGD, "", False, id="ws1"),
        pytest.param(3, "row_wise", SGD, "", False, id="ws3-row-wise"),
        pytest.param(2, "data_parallel", SGD, "", False, id="ws2-replicated"),
        pytest.param(3, "auto", ADAGRAD, ALL_FOUR, True, id="ws3-auto-all-four-pipelined"),
    ],
)
def test_collection_model_matches_single_process(world, sharding, optimizer, passes, pipeline):
    check_parity(
        COLLECTION, world, sharding=sharding, optimizer=optimizer, steps=3, batch=8, passes=passes, pipeline=pipeline
    )


def test_collection_uneven_batches_match_single_process():
    # Table-wise, so the rows travel one per id. No empty local batch: TorchRec itself cannot
    # split an empty KJT (`to_dict` raises), so the reference has no answer for one.
    check_parity(
        COLLECTION,
        2,
        sharding="table_wise",
        optimizer=ADAGRAD,
        sizes=[[8, 5], [3, 1], [6, 6]],
        expect_ops=("sparse.gather_rows",),
    )
