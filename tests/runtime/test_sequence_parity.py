"""Unpooled lookups beside pooled ones (`parity_models.SequenceModel`: a padded history and the
target reading one item table, a category table, pooled user bags, padding ids in both kinds):
compiled training on 1-3 gloo ranks equals single-process training (outputs, tables, dense
grads), under every placement, with uneven batches, and with each optimization."""

from __future__ import annotations

import pytest
from parity_models import ADAGRAD, ALL_FOUR, SGD  # tests/runtime is on sys.path

from sparselift.runtime.parity import check_parity

SEQUENCE = "parity_models:sequence_model"


@pytest.mark.parametrize(
    "world, sharding, optimizer",
    [
        pytest.param(1, "auto", SGD, id="ws1"),
        pytest.param(2, "table_wise", ADAGRAD, id="ws2-table-wise-adagrad"),
        pytest.param(3, "row_wise", SGD, id="ws3-row-wise"),
        pytest.param(2, "data_parallel", ADAGRAD, id="ws2-replicated-adagrad"),
        pytest.param(3, "auto", SGD, id="ws3-auto"),
    ],
)
def test_sequence_model_matches_single_process(world, sharding, optimizer):
    check_parity(SEQUENCE, world, sharding=sharding, optimizer=optimizer, steps=3, batch=8, rows_cap=200)


@pytest.mark.parametrize(
    "world, sharding, optimizer",
    [
        pytest.param(2, "data_parallel", ADAGRAD, id="ws2-replicated-adagrad"),
        pytest.param(3, "auto", SGD, id="ws3-auto"),
    ],
)
def test_replicated_positions_gradients_read_per_slot_match_single_process(world, sharding, optimizer):
    """`generate-kernels` gives a replicated table's whole-table gradient its positions' gradients
    one by one (no pack of them): the plan reads them so, and trains as single-process training."""
    _three_steps(world, optimizer, "generate-kernels", sharding, expect_ops=("sparse.fused_lookup_grad(per-slot)",))


def test_uneven_and_empty_batches_match_single_process():
    check_parity(
        SEQUENCE,
        2,
        sharding="table_wise",
        optimizer=SGD,
        rows_cap=200,
        sizes=[[8, 5], [3, 0], [6, 6]],
        expect_ops=("sparse.gather_rows",),
    )


# The ops of rows exchanged one per id merged with other exchanges into one dynamic exchange.
JOINED = ("sparse.join_segments", "sparse.split_segments")


@pytest.mark.parametrize(
    "world, sharding, passes, pipeline, expect",
    [
        # Rows (one per id) and pooled vectors in one output exchange, their gradients in one.
        pytest.param(2, "table_wise", "aggregate-comm,generate-kernels", False, JOINED, id="ws2-aggregate-generate"),
        pytest.param(3, "table_wise", "aggregate-comm", False, JOINED, id="ws3-aggregate"),
        # The merged exchanges under TrainPipeline (the next batch's input exchange started ahead).
        pytest.param(2, "table_wise", "aggregate-comm,hide-latency", True, JOINED, id="ws2-merged-pipelined"),
        pytest.param(2, "auto", ALL_FOUR, True, (), id="ws2-all-four-pipelined"),
        pytest.param(3, "row_wise", ALL_FOUR, False, (), id="ws3-row-wise-all-four"),
    ],
)
def test_optimized_sequence_model_matches_single_process(world, sharding, passes, pipeline, expect):
    _four_adagrad_steps(world, sharding, passes, pipeline, expect_ops=expect)


def _four_adagrad_steps(world, sharding, passes, pipeline, **kwargs):
    """`check_parity` of the sequence model for 4 row-wise Adagrad steps of batch 8 (`kwargs`: its other options)."""
    check_parity(
        SEQUENCE,
        world,
        sharding=sharding,
        optimizer=ADAGRAD,
        steps=4,
        batch=8,
        rows_cap=200,
        passes=passes,
        pipeline=pipeline,
        **kwargs,
    )


@pytest.mark.parametrize(
    "passes",
    [
        pytest.param("aggregate-comm{roles=output_pooled,output_rows}", id="forward-only"),
        pytest.param("aggregate-comm{roles=grad_pooled,grad_rows},hide-latency", id="backward-hidden"),
    ],
)
def test_merged_dynamic_exchanges_with_uneven_batches_match_single_process(passes):
    """One direction merged at a time, with uneven and empty batches: the static side's sizes
    follow each rank's batch, and a rank that sends or receives one side only copies nothing."""
    _three_steps(2, SGD, passes, sizes=[[8, 5], [3, 0], [6, 6]], expect_ops=JOINED)


JAGGED = ("sparse.gather_rows", "sparse.expand_rows", "sparse.compact_rows", "sparse.rows_update")


def _three_steps(world, optimizer, passes, sharding="table_wise", **kwargs):
    """`check_parity` of the sequence model for 3 steps of batch 8 (`kwargs`: its other options)."""
    check_parity(
        SEQUENCE,
        world,
        sharding=sharding,
        optimizer=optimizer,
        steps=3,
        batch=8,
        rows_cap=200,
        passes=passes,
        **kwargs,
    )


@pytest.mark.parametrize(
    "world, optimizer, passes",
    [
        # (2 ranks, and uneven batches: the tests above, which lower this way too.)
        pytest.param(3, ADAGRAD, "", id="ws3-adagrad"),
        pytest.param(3, SGD, ALL_FOUR, id="ws3-all-four"),
    ],
)
def test_rows_one_per_id_match_single_process(world, optimizer, passes):
    """The default lowering sends an unpooled table's rows one per id (compact-rows), sized at
    run time: the plans hold the jagged rows ops, and train as single-process training does
    (with all four optimizations, the rows ride in merged dynamic exchanges)."""
    _three_steps(world, optimizer, passes, expect_ops=JAGGED + (JOINED if passes else ()))


@pytest.mark.parametrize(
    "world, optimizer, passes, sizes",
    [
        pytest.param(2, SGD, "", None, id="ws2-sgd"),
        pytest.param(3, ADAGRAD, "", None, id="ws3-adagrad"),
        pytest.param(2, ADAGRAD, "", [[8, 5], [3, 0], [6, 6]], id="ws2-uneven"),
        pytest.param(3, SGD, f"dedup-ids,{ALL_FOUR}", None, id="ws3-dedup-all-four"),
    ],
)
def test_row_wise_rows_one_per_id_match_single_process(world, optimizer, passes, sizes):
    """A row-wise unpooled table's rows one per id: each id's row comes back from the rank whose
    row range holds it, and its gradient goes back there (compact-rows' row-wise form)."""
    _three_steps(world, optimizer, passes, sharding="row_wise", sizes=sizes, expect_ops=JAGGED)


@pytest.mark.parametrize(
    "world, sharding, optimizer, passes, sizes",
    [
        pytest.param(2, "table_wise", SGD, "", None, id="ws2-sgd"),
        pytest.param(2, "table_wise", ADAGRAD, "", [[8, 5], [3, 0], [6, 6]], id="ws2-uneven"),
        pytest.param(2, "table_wise", ADAGRAD, ALL_FOUR, None, id="ws2-all-four"),
        # A row-wise table's padded rows: partial rows from every rank, summed (reduce_scatter).
        pytest.param(3, "row_wise", SGD, "", None, id="ws3-row-wise"),
    ],
)
def test_padded_rows_match_single_process(world, sharding, optimizer, passes, sizes):
    """The rows exchanged one per id position (`CompileOptions(rows="padded")`); the tests above
    run the default, a row per id (compact-rows)."""
    expect = ("sparse.lookup_update",) if not passes else ("sparse.fused_lookup_update",)
    _three_steps(world, optimizer, passes, sharding=sharding, sizes=sizes, rows="padded", expect_ops=expect)


@pytest.mark.parametrize(
    "world, optimizer, passes, sizes",
    [
        pytest.param(2, SGD, "dedup-ids", None, id="ws2-sgd"),
        pytest.param(3, ADAGRAD, "dedup-ids", None, id="ws3-adagrad"),
        pytest.param(2, ADAGRAD, "dedup-ids", [[8, 5], [3, 0], [6, 6]], id="ws2-uneven"),
        pytest.param(2, SGD, f"dedup-ids,{ALL_FOUR}", None, id="ws2-all-four"),
    ],
)
def test_distinct_ids_match_single_process(world, optimizer, passes, sizes):
    """Each distinct id sent once per destination (dedup-ids): the summed gradient of an id's
    occurrences updates it (SGD equal up to rounding), as single-process training does."""
    _three_steps(
        world, optimizer, passes, sizes=sizes, expect_ops=("sparse.unique_ids", "sparse.take_rows", "sparse.sum_rows")
    )


@pytest.mark.parametrize(
    "world, transport, passes, pipeline",
    [
        pytest.param(2, "shm", ALL_FOUR, True, id="ws2-shm-all-four-pipelined"),
        pytest.param(3, "shm", "dedup-ids,aggregate-comm,hide-latency", False, id="ws3-shm-dedup-hidden"),
        pytest.param(2, "gloo", ALL_FOUR, True, id="ws2-gloo-all-four-pipelined"),
        pytest.param(3, "gloo", "", False, id="ws3-gloo"),
    ],
)
def test_each_transport_matches_single_process(world, transport, passes, pipeline):
    """The all-to-alls through shared memory (the default on one host) or over gloo train as
    single-process training does, exchanges started ahead and waited late included; every rank
    ran the transport asked for."""
    _four_adagrad_steps(
        world,
        "row_wise" if world == 3 else "auto",
        passes,
        pipeline,
        sizes=[[8, 5, 3][:world], [3, 0, 8][:world], [6, 6, 6][:world], [8, 8, 1][:world]],
        transport=transport,
        expect_transport=transport,
    )
