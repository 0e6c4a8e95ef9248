"""The jagged rows runtime (`sparselift.runtime.rows`) against its definition on padded values:
compact_rows takes the non-empty bags' rows in the order their ids were sent, expand_rows puts
them back with zeros elsewhere; wrong sizes fail with a message, never a wrong row."""

from __future__ import annotations

import pytest
import torch

from sparselift.runtime.kernels import GeneratedKernels
from sparselift.runtime.rows import compact_rows, expand_rows, gather_rows, row_splits, sum_rows, take_rows, unique_ids

B, D, L = 7, 4, 5


def _members_and_lengths(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    history = torch.randn(B, L, D, generator=g)
    members = [*history.unbind(1), torch.randn(B, D, generator=g)]  # views of one tensor, then one more
    lengths = (torch.rand(len(members) * B, generator=g) < 0.6).int()
    return members, lengths


def _layout(slots):
    return [[(slot * D, D) for slot in slots], [(0, 0)] * len(slots)]


class _KernelPlan:
    """A plan with generated kernels: `expand_rows` and `compact_rows` take their C passes."""

    def __init__(self, cache):
        self.kernels = GeneratedKernels(cache=cache, nthreads=1)


@pytest.fixture(scope="module", params=["torch", "C kernel"])
def plan(request, tmp_path_factory):
    return None if request.param == "torch" else _KernelPlan(tmp_path_factory.mktemp("slcache"))


@pytest.mark.parametrize("slots", [[0, 1, 2, 3, 4, 5], [2, 0, 1, 5, 3, 4]], ids=["in-order", "permuted"])
def test_compact_takes_the_filled_rows_in_slot_order_and_expand_puts_them_back(slots, plan):
    members, lengths = _members_and_lengths()
    by_slot = [members[m] for m in sorted(range(len(members)), key=lambda m: slots[m])]
    want = torch.cat(by_slot)[lengths.bool()].reshape(-1)
    rows = compact_rows(plan, lengths, members, _layout(slots), dim=D, batch=B)
    assert torch.equal(rows, want)
    back = expand_rows(plan, rows, lengths, _layout(slots), dim=D, batch=B)
    for m, value in enumerate(back):
        mask = lengths[slots[m] * B : (slots[m] + 1) * B, None]
        assert torch.equal(value, members[m] * mask)


def test_wrong_counts_and_multi_id_bags_are_refused(plan):
    members, lengths = _members_and_lengths()
    rows = compact_rows(plan, lengths, members, _layout(range(6)), dim=D, batch=B)
    with pytest.raises(ValueError, match="rows received for"):
        expand_rows(plan, rows[:-D], lengths, _layout(range(6)), dim=D, batch=B)
    bad = lengths.clone()
    bad[0] = 2
    with pytest.raises(ValueError, match="a bag holds 2 ids.*; unpooled rows travel one per id"):
        compact_rows(plan, bad, members, _layout(range(6)), dim=D, batch=B)
    with pytest.raises(ValueError, match="a bag holds 2 ids.*; unpooled rows travel one per id"):
        expand_rows(plan, rows, bad, _layout(range(6)), dim=D, batch=B)


def test_gather_sizes_each_source_by_its_ids():
    class Plan:
        tables = {"item": torch.arange(40.0).reshape(10, 4)}

    lengths = torch.tensor([1, 0, 1, 1, 1, 0, 0, 1, 1], dtype=torch.int32)  # sources of 2 and 1 samples, 3 slots
    ids = torch.tensor([3, 1, 4, 9, 2, 5])
    rows, splits = gather_rows(
        Plan(), "item", lengths, ids, dim=4, dtype=torch.float32, features_per_segment=3, segment_batches=[2, 1]
    )
    assert torch.equal(rows.view(-1, 4), Plan.tables["item"][ids])
    assert splits.tolist() == [4 * 4, 2 * 4]
    assert row_splits(None, torch.tensor([3, 0]), dim=8).tolist() == [24, 0]


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_gather_with_generated_kernels_reads_the_same_rows(index_dtype):
    from sparselift.runtime.kernels import GeneratedKernels, TableSpec

    itype = "i32" if index_dtype == torch.int32 else "i64"

    class Plan:
        tables = {"item": torch.randn(1000, 8)}
        kernels = GeneratedKernels([TableSpec(8, "f32", itype, "sum", False, "sgd")])

    ids = torch.randint(0, 1000, (300,), dtype=index_dtype)
    lengths = torch.ones(300, dtype=torch.int32)
    rows, _ = gather_rows(
        Plan(), "item", lengths, ids, dim=8, dtype=torch.float32, features_per_segment=3, segment_batches=[100]
    )
    assert torch.equal(rows.view(-1, 8), Plan.tables["item"][ids.long()])


def test_distinct_ids_per_destination_round_trip():
    ids = torch.tensor([5, 2, 5, 9, 2, 2, 7, 7], dtype=torch.int32)
    splits = torch.tensor([5, 3])  # destination 0: 5, 2, 5, 9, 2; destination 1: 2, 7, 7
    distinct, counts, inverse = unique_ids(None, ids, splits)
    assert distinct.tolist() == [2, 5, 9, 2, 7] and distinct.dtype == torch.int32
    assert counts.tolist() == [3, 2]
    assert torch.equal(distinct[inverse], ids)  # each routed id finds itself, within its segment
    assert inverse.tolist()[5:] == [3, 4, 4]
    rows = torch.arange(5 * D, dtype=torch.float32)  # one row per distinct id
    spread = take_rows(None, rows, inverse, dim=D).view(-1, D)
    assert torch.equal(spread, rows.view(-1, D)[inverse])
    summed = sum_rows(None, spread.reshape(-1), inverse, counts, dim=D).view(-1, D)
    times = torch.bincount(inverse, minlength=5).float()[:, None]
    assert torch.equal(summed, rows.view(-1, D) * times)
    empty, none, no_inverse = unique_ids(None, ids[:0], torch.tensor([0, 0]))
    assert empty.numel() == 0 and none.tolist() == [0, 0] and no_inverse.numel() == 0
