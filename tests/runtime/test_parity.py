"""Compiled training on 1-3 gloo ranks equals single-process training (outputs, tables, dense grads)."""

from __future__ import annotations

import pytest
from parity_models import ALL_FOUR  # tests/runtime is on sys.path

from sparselift.runtime.parity import check_parity

CASES = [
    # model, world, sharding, optimizer, rows_cap: what the case covers (generated C kernels)
    pytest.param("two-tower", 1, "auto", ("sgd", 0.05, 0.0), 200, id="ws1-two-tower"),
    pytest.param("dlrm-kaggle", 2, "auto", ("sgd", 0.05, 0.0), 20000, id="ws2-kaggle-auto-tw+dp"),
    pytest.param("two-tower", 2, "table_wise", ("sgd", 0.05, 0.0), 200, id="ws2-mixed-dims-mean-weighted"),
    pytest.param("two-tower", 3, "row_wise", ("sgd", 0.05, 0.0), 200, id="ws3-row-wise"),
    pytest.param("two-tower", 2, "data_parallel", ("sgd", 0.05, 0.0), 200, id="ws2-data-parallel"),
    pytest.param("torchrec-ebc", 2, "table_wise", ("sgd", 0.05, 0.0), 200, id="ws2-torchrec-shared-table"),
    pytest.param(
        "parity_models:int32_empty_bags",
        2,
        "auto",
        ("rowwise_adagrad", 0.1, 1e-8),
        200,
        id="ws2-int32-empty-bags-adagrad",
    ),
    pytest.param("two-tower", 3, "auto", ("rowwise_adagrad", 0.1, 1e-8), 200, id="ws3-auto-adagrad"),
    # One-hot bags on every rank skip the lengths exchange; a step where one rank is not does not.
    pytest.param("parity_models:one_hot_mostly", 3, "table_wise", ("sgd", 0.05, 0.0), 200, id="ws3-one-hot-steps"),
]


@pytest.mark.parametrize("model, world, sharding, optimizer, rows_cap", CASES)
def test_training_matches_single_process(model, world, sharding, optimizer, rows_cap):
    check_parity(model, world, sharding=sharding, optimizer=optimizer, steps=3, batch=8, rows_cap=rows_cap)


@pytest.mark.parametrize(
    "model, world, optimizer",
    [
        pytest.param("dlrm-kaggle", 2, ("sgd", 0.05, 0.0), id="ws2-kaggle"),
        pytest.param("two-tower", 3, ("rowwise_adagrad", 0.1, 1e-8), id="ws3-two-tower-adagrad"),
    ],
)
def test_replicated_gradients_own_all_reduce_matches_single_process(model, world, optimizer):
    # The lowering the compiler no longer chooses by default (CompileOptions.replicated_grads):
    # the replicated tables' gradients summed by an all-reduce of their own, mid-backward.
    check_parity(model, world, sharding="auto", optimizer=optimizer, steps=3, batch=8, replicated_grads="own")


@pytest.mark.parametrize(
    "model, world, sharding, optimizer",
    [
        pytest.param("two-tower", 2, "auto", ("rowwise_adagrad", 0.1, 1e-8), id="ws2-reference-lowering"),
        pytest.param("dlrm-kaggle", 1, "auto", ("sgd", 0.05, 0.0), id="ws1-reference-lowering"),
    ],
)
def test_reference_lowering_matches_single_process(model, world, sharding, optimizer):
    check_parity(
        model, world, sharding=sharding, optimizer=optimizer, steps=3, batch=8, rows_cap=2000, kernels="reference"
    )


@pytest.mark.parametrize(
    "model, world, sharding",
    [
        pytest.param("dlrm-kaggle", 2, "auto", id="ws2-kaggle-pipelined"),
        pytest.param("two-tower", 3, "table_wise", id="ws3-two-tower-pipelined"),
        pytest.param("parity_models:one_hot_mostly", 2, "table_wise", id="ws2-one-hot-steps-pipelined"),
    ],
)
def test_train_pipeline_matches_single_process(model, world, sharding):
    # The next batch's input exchange runs during this batch's backward: training is unchanged.
    check_parity(model, world, sharding=sharding, steps=4, batch=8, rows_cap=2000, pipeline=True, passes="hide-latency")


@pytest.mark.parametrize(
    "model, world, sharding",
    [
        # Two embedding modules with replicated tables: their gradient all-reduces merge.
        pytest.param("torchrec-ebc", 2, "data_parallel", id="ws2-all-reduces"),
        # Two towers, table-wise: pooled outputs and pooled gradients merge across the towers.
        pytest.param("two-tower", 2, "table_wise", id="ws2-all-to-alls"),
        pytest.param("two-tower", 3, "auto", id="ws3-mixed"),
        # Replicated tables' gradients riding in the dense gradients' all-reduce (dense_grad).
        pytest.param("dlrm-kaggle", 3, "auto", id="ws3-kaggle-with-dense-grads"),
    ],
)
def test_aggregate_comm_matches_single_process(model, world, sharding):
    check_parity(
        model,
        world,
        sharding=sharding,
        optimizer=("rowwise_adagrad", 0.1, 1e-8),
        passes="aggregate-comm",
        pipeline=True,
    )


@pytest.mark.parametrize(
    "model, world, kernels, passes",
    [
        # Per-table lookups, pooled and dense updates, replicated tables' gradients and packs in
        # two lanes. With generated kernels, compile runs generate-kernels first: the lanes hold
        # fused kernels and the C calls left per table (gradients), each with its thread share.
        pytest.param("dlrm-kaggle", 2, "generated", "parallelize-tables{groups=2}", id="ws2-kaggle-generated"),
        pytest.param("dlrm-kaggle", 2, "reference", "parallelize-tables{groups=2}", id="ws2-kaggle-reference"),
        pytest.param("two-tower", 3, "generated", "parallelize-tables{groups=2}", id="ws3-two-tower-generated"),
        pytest.param("two-tower", 3, "reference", "parallelize-tables{groups=2}", id="ws3-two-tower-reference"),
        # The final pipeline's order: lanes first, then one fused kernel per lane and rank.
        pytest.param(
            "dlrm-kaggle",
            2,
            "reference",
            "aggregate-comm,parallelize-tables{groups=2},generate-kernels",
            id="ws2-kaggle-fused-per-lane",
        ),
    ],
)
def test_parallelize_tables_matches_single_process(model, world, kernels, passes):
    check_parity(
        model,
        world,
        sharding="auto",
        optimizer=("rowwise_adagrad", 0.1, 1e-8),
        rows_cap=2000,
        kernels=kernels,
        passes=passes,
    )


@pytest.mark.parametrize(
    "model, world, sharding, passes, pipeline",
    [
        # Exchanges split into start/wait around the bottom MLP (forward) and its backward.
        pytest.param("dlrm-kaggle", 2, "auto", "hide-latency", False, id="ws2-kaggle-hide"),
        pytest.param("two-tower", 3, "auto", "hide-latency{overlap=output}", True, id="ws3-output-overlap-pipelined"),
        pytest.param("two-tower", 2, "row_wise", "hide-latency{max-inflight-bytes=2000}", False, id="ws2-capped"),
        # The planner's schedule with the dense gradients in one all-reduce after backward.
        pytest.param(
            "dlrm-kaggle",
            2,
            "auto",
            "generate-kernels,hide-latency{dense-grads=false}",
            True,
            id="ws2-kaggle-dense-grads-after-backward-pipelined",
        ),
        # All four optimizations in one pipeline, with and without TrainPipeline.
        pytest.param("dlrm-kaggle", 2, "auto", ALL_FOUR, True, id="ws2-kaggle-all-four-pipelined"),
        pytest.param("two-tower", 3, "auto", ALL_FOUR, False, id="ws3-two-tower-all-four"),
        pytest.param("torchrec-ebc", 2, "table_wise", ALL_FOUR, True, id="ws2-torchrec-all-four-pipelined"),
    ],
)
def test_hide_latency_and_all_four_match_single_process(model, world, sharding, passes, pipeline):
    check_parity(
        model,
        world,
        sharding=sharding,
        optimizer=("rowwise_adagrad", 0.1, 1e-8),
        steps=4,
        batch=8,
        rows_cap=2000,
        passes=passes,
        pipeline=pipeline,
    )
