"""The jagged rows runtime (`sparselift.runtime.rows`) against its definition on padded values:
compact_rows takes the non-empty bags' rows in the order their ids were sent, expand_rows puts
them back with zeros elsewhere; wrong sizes fail with a message, never a wrong row."""

from __future__ import annotations

import pytest
import torch

from sparselift.runtime.backends import ReferenceKernels
from sparselift.runtime.kernels import CKernels
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
        self.kernels = CKernels(cache=cache, nthreads=1)


class _TorchPlan:
    """A plan without generated kernels: the reference backend's torch ops."""

    kernels = ReferenceKernels()


@pytest.fixture(scope="module", params=["torch", "C kernel"])
def plan(request, tmp_path_factory):
    return _TorchPlan() if request.param == "torch" else _KernelPlan(tmp_path_factory.mktemp("slcache"))


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


@pytest.mark.parametrize("ranks", [2, 3])
def test_row_wise_rows_come_back_from_each_ids_owner(ranks, plan):
    """A row-wise table on `ranks` ranks: every segment holds every member, each bag's id went to
    one of them (or none: an empty bag). Compact sends each segment its bags' rows; expand takes
    each bag's row from its owner's segment."""
    members, _ = _members_and_lengths()
    g = torch.Generator().manual_seed(ranks)
    owner = torch.randint(0, ranks + 1, (len(members) * B,), generator=g)  # `ranks`: an empty bag
    lengths = torch.cat([(owner == r).int() for r in range(ranks)])
    slots = [2, 0, 1, 5, 3, 4]
    layout = [[(slot * D, D) for slot in slots]] * ranks
    by_slot = torch.cat([members[m] for m in sorted(range(len(members)), key=lambda m: slots[m])])
    want = torch.cat([by_slot[owner == r] for r in range(ranks)]).reshape(-1)  # segment after segment
    rows = compact_rows(plan, lengths, members, layout, dim=D, batch=B)
    assert torch.equal(rows, want)
    back = expand_rows(plan, rows, lengths, layout, dim=D, batch=B)
    for m, value in enumerate(back):
        held = (owner[slots[m] * B : (slots[m] + 1) * B] < ranks)[:, None]
        assert torch.equal(value, members[m] * held)
    twice = lengths.clone()
    twice[int((owner == 0).nonzero()[0]) + len(members) * B] = 1  # a bag's id at two owners
    with pytest.raises(ValueError, match="in (2|several) segments"):
        expand_rows(plan, torch.randn(int(twice.sum()) * D), twice, layout, dim=D, batch=B)
    unlike = [layout[0], [(0, D)] + layout[0][1:]]
    with pytest.raises(ValueError, match="not alike in each"):
        expand_rows(plan, rows, lengths, unlike, dim=D, batch=B)


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
        states: dict = {}
        kernels = ReferenceKernels()

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
    from sparselift.runtime.kernels import TableSpec

    itype = "i32" if index_dtype == torch.int32 else "i64"

    class Plan:
        tables = {"item": torch.randn(1000, 8)}
        states: dict = {}
        kernels = CKernels([TableSpec(8, "f32", itype, "sum", False, "sgd")])

    ids = torch.randint(0, 1000, (300,), dtype=index_dtype)
    lengths = torch.ones(300, dtype=torch.int32)
    rows, _ = gather_rows(
        Plan(), "item", lengths, ids, dim=8, dtype=torch.float32, features_per_segment=3, segment_batches=[100]
    )
    assert torch.equal(rows.view(-1, 8), Plan.tables["item"][ids.long()])


def test_distinct_ids_per_destination_round_trip(plan):
    ids = torch.tensor([5, 2, 5, 9, 2, 2, 7, 7], dtype=torch.int32)
    splits = torch.tensor([5, 3])  # destination 0: 5, 2, 5, 9, 2; destination 1: 2, 7, 7
    distinct, counts, inverse = unique_ids(plan, ids, splits)
    assert distinct.tolist() == [2, 5, 9, 2, 7] and distinct.dtype == torch.int32
    assert counts.tolist() == [3, 2]
    assert torch.equal(distinct[inverse], ids)  # each routed id finds itself, within its segment
    assert inverse.tolist()[5:] == [3, 4, 4]
    rows = torch.arange(5 * D, dtype=torch.float32)  # one row per distinct id
    spread = take_rows(None, rows, inverse, dim=D).view(-1, D)
    assert torch.equal(spread, rows.view(-1, D)[inverse])
    summed = sum_rows(plan, spread.reshape(-1), inverse, counts, dim=D).view(-1, D)
    times = torch.bincount(inverse, minlength=5).float()[:, None]
    assert torch.equal(summed, rows.view(-1, D) * times)
    empty, none, no_inverse = unique_ids(plan, ids[:0], torch.tensor([0, 0]))
    assert empty.numel() == 0 and none.tolist() == [0, 0] and no_inverse.numel() == 0


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_distinct_ids_and_gradient_sums_in_c_equal_torch_bit_for_bit(index_dtype, tmp_path):
    """The C radix sort gives `torch.unique`'s distinct ids, counts and inverse, and the C sums
    add the routed rows in `index_add_`'s order: the same floats, on Zipf-like repeats over three
    destinations (one of them empty)."""
    g = torch.Generator().manual_seed(3)
    n, rows = 3000, 100_000
    ids = (torch.rand(n, generator=g) ** 12 * rows).to(index_dtype)  # skewed: many repeats
    splits = torch.tensor([1700, 0, 1300])
    c_plan = _KernelPlan(tmp_path)
    got = unique_ids(c_plan, ids, splits)
    want = unique_ids(_TorchPlan(), ids, splits)
    assert got[0].numel() < n // 2  # the case has repeats to merge
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and torch.equal(a, b)
    grads = torch.randn(n, 16, generator=g)
    c_sums = sum_rows(c_plan, grads.reshape(-1), got[2], got[1], dim=16)
    torch_sums = sum_rows(_TorchPlan(), grads.reshape(-1), want[2], want[1], dim=16)
    assert torch.equal(c_sums, torch_sums)


def test_distinct_ids_and_sums_refuse_bad_input_before_writing(tmp_path):
    kernels = _KernelPlan(tmp_path).kernels
    ids = torch.tensor([3, 1, 3, 2])
    with pytest.raises(ValueError, match=r"splits \[3, 2\] do not tile 4 ids"):
        kernels.unique_ids(ids, torch.tensor([3, 2]))
    with pytest.raises(ValueError, match="id -1 at position 2 is negative"):
        kernels.unique_ids(torch.tensor([3, 1, -1, 2]), torch.tensor([2, 2]))
    # The C sort refuses keys past 32 bits; the backend's `unique_ids` then takes the reference's
    # comparison sort (test_distinct_ids_past_32_bit_keys_take_the_comparison_sort).
    with pytest.raises(OverflowError, match="do not fit 32-bit keys"):
        kernels._c_unique_ids(torch.tensor([3, 1 << 31]), [1, 1])
    with pytest.raises(ValueError, match="routed id 1 goes to distinct id 5, of 2"):
        kernels.sum_rows(torch.ones(3, 4), torch.tensor([0, 5, 1]), 2)


def test_distinct_ids_past_32_bit_keys_take_the_comparison_sort(tmp_path):
    """Ids whose (segment, id) keys do not fit the C sort's 32 bits still get their distinct ids."""
    ids = torch.tensor([1 << 40, 7, 1 << 40, 7], dtype=torch.int64)
    distinct, counts, inverse = unique_ids(_KernelPlan(tmp_path), ids, torch.tensor([2, 2]))
    assert distinct.tolist() == [7, 1 << 40, 7, 1 << 40] and counts.tolist() == [2, 2]
    assert torch.equal(distinct[inverse], ids)
