"""Compiled training on 1-3 gloo ranks equals single-process training (outputs, tables, dense grads)."""

from __future__ import annotations

import pytest

from sparselift.runtime.parity import check_parity

CASES = [
    # model, world, sharding, optimizer, rows_cap: what the case covers (generated C kernels)
    pytest.param("two-tower", 1, "auto", ("sgd", 0.05, 0.0), 200, id="ws1-two-tower"),
    pytest.param("dlrm-kaggle", 2, "auto", ("sgd", 0.05, 0.0), 20000, id="ws2-kaggle-auto-tw+dp"),
    pytest.param("two-tower", 2, "table_wise", ("sgd", 0.05, 0.0), 200, id="ws2-mixed-dims-mean-weighted"),
    pytest.param("two-tower", 3, "row_wise", ("sgd", 0.05, 0.0), 200, id="ws3-row-wise"),
    pytest.param("two-tower", 2, "data_parallel", ("sgd", 0.05, 0.0), 200, id="ws2-data-parallel"),
    pytest.param("torchrec-ebc", 2, "table_wise", ("sgd", 0.05, 0.0), 200, id="ws2-torchrec-shared-table"),
    pytest.param("parity_models:int32_empty_bags", 2, "auto", ("rowwise_adagrad", 0.1, 1e-8), 200,
                 id="ws2-int32-empty-bags-adagrad"),
    pytest.param("two-tower", 3, "auto", ("rowwise_adagrad", 0.1, 1e-8), 200, id="ws3-auto-adagrad"),
]


@pytest.mark.parametrize("model, world, sharding, optimizer, rows_cap", CASES)
def test_training_matches_single_process(model, world, sharding, optimizer, rows_cap):
    check_parity(model, world, sharding=sharding, optimizer=optimizer, steps=3, batch=8, rows_cap=rows_cap)


@pytest.mark.parametrize(
    "model, world, sharding, optimizer",
    [
        pytest.param("two-tower", 2, "auto", ("rowwise_adagrad", 0.1, 1e-8), id="ws2-reference-lowering"),
        pytest.param("dlrm-kaggle", 1, "auto", ("sgd", 0.05, 0.0), id="ws1-reference-lowering"),
    ],
)
def test_reference_lowering_matches_single_process(model, world, sharding, optimizer):
    check_parity(model, world, sharding=sharding, optimizer=optimizer, steps=3, batch=8, rows_cap=2000,
                 kernels="reference")


@pytest.mark.parametrize(
    "model, world, sharding",
    [
        pytest.param("dlrm-kaggle", 2, "auto", id="ws2-kaggle-pipelined"),
        pytest.param("two-tower", 3, "table_wise", id="ws3-two-tower-pipelined"),
    ],
)
def test_train_pipeline_matches_single_process(model, world, sharding):
    # The next batch's input exchange runs during this batch's backward: training is unchanged.
    check_parity(model, world, sharding=sharding, steps=4, batch=8, rows_cap=2000, pipeline=True)


@pytest.mark.parametrize(
    "model, world, sharding",
    [
        # Two embedding modules with replicated tables: their gradient all-reduces merge.
        pytest.param("torchrec-ebc", 2, "data_parallel", id="ws2-all-reduces"),
        # Two towers, table-wise: pooled outputs and pooled gradients merge across the towers.
        pytest.param("two-tower", 2, "table_wise", id="ws2-all-to-alls"),
        pytest.param("two-tower", 3, "auto", id="ws3-mixed"),
    ],
)
def test_aggregate_comm_matches_single_process(model, world, sharding):
    check_parity(model, world, sharding=sharding, optimizer=("rowwise_adagrad", 0.1, 1e-8), passes="aggregate-comm",
                 pipeline=True)
