"""Plan ops for replicated tables: fused table gradients, the copy-free all-reduce buffer, and
the SGD whole-table update, each against the reference lowering."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sparselift.kernel_args import OptimizerArgs, RoutedBags, TableArgs, UpdateArgs, check_bags
from sparselift.optim import SGD, TableOptimizers
from sparselift.runtime import plan_ops as rt
from sparselift.runtime import reference as ref
from sparselift.runtime.backends import ReferenceKernels
from sparselift.runtime.kernels import default_kernels
from sparselift.runtime.sparse_optimizer import SparseOptimizer
from sparselift.strided_rows import block_run

ROWS, DIMS, BATCH, FEATURES = (7, 3, 11), (4, 8, 4), 5, 3


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    tables = {f"t{k}": torch.randn(r, d, generator=g) for k, (r, d) in enumerate(zip(ROWS, DIMS))}
    lengths = torch.randint(0, 4, (FEATURES * BATCH,), generator=g, dtype=torch.int32)
    segments = [(int(lengths[k * BATCH : (k + 1) * BATCH].sum()), ROWS[k]) for k in range(FEATURES)]
    indices = torch.cat([torch.randint(0, r, (n,), generator=g) for n, r in segments])
    grads = [torch.randn(BATCH, d, generator=g) for d in DIMS]
    return tables, lengths, indices, grads


def _kernels(generated: bool):
    """The C backend, or the reference one (what a plan without generated kernels holds)."""
    return default_kernels() if generated else ReferenceKernels()


def _reference_args(lengths, indices, batch, name, table, slot, pooling):
    """(checked bags, table) of one table reading feature `slot` of FEATURES-feature segments,
    for the reference lowering's per-table calls."""
    args = TableArgs(name, table, [slot], pooling)
    return check_bags(RoutedBags(lengths, indices, None, FEATURES, batch), [args]), args


@pytest.mark.parametrize("generated", [True, False])
def test_fused_table_gradients_match_the_reference_in_one_buffer(generated):
    tables, lengths, indices, grads = _inputs()
    plan = SimpleNamespace(tables=tables, states={}, kernels=_kernels(generated))
    names = list(tables)
    views = rt.fused_lookup_grad(
        plan,
        names,
        lengths,
        indices,
        None,
        slots=[[0], [1], [2]],
        features_per_segment=FEATURES,
        poolings=["sum", "mean", "sum"],
        segment_batches=(BATCH,),
        grads=grads,
    )
    for k, (v, name) in enumerate(zip(views, names)):
        bags, table = _reference_args(lengths, indices, BATCH, name, tables[name], k, ["sum", "mean", "sum"][k])
        want = ref.lookup_grad(bags, table, grads[k])
        torch.testing.assert_close(v, want, atol=1e-6, rtol=1e-6)
    assert rt._back_to_back(views) is views[0]._base  # the all-reduce reads it without a copy
    assert rt._back_to_back(views[::-1]) is None and rt._back_to_back(views[:2]) is None


def test_all_reduce_copies_operands_that_are_not_a_gradient_buffer():
    flat = torch.zeros(12)
    views = [flat[:6].view(2, 3), flat[6:].view(3, 2)]
    assert rt._back_to_back(views) is None  # an arbitrary buffer may be read again: no in-place reduce


def _sgd(tables) -> SparseOptimizer:
    """The sparse optimizer of a plan whose tables all train with SGD(lr=0.1)."""
    return SparseOptimizer(TableOptimizers((SGD(lr=0.1),), dict.fromkeys(tables, 0)), {})


def test_sgd_whole_table_update_is_the_touched_rows_update():
    g = torch.Generator().manual_seed(3)
    table = torch.randn(9, 4, generator=g)
    grad = torch.randn(9, 4, generator=g)
    grad[[1, 4, 5]] = 0.0  # untouched rows
    plan = SimpleNamespace(
        tables={"t": table.clone()},
        states={},
        grad_scale=0.5,
        kernels=ReferenceKernels(),
        sparse_optimizer=_sgd(["t"]),
    )
    rt.dense_update(plan, "t", grad, optimizer="sgd", group=0)
    want = table.clone()  # the touched rows only, as the sparse lowerings update them
    touched = torch.tensor([r for r in range(9) if r not in (1, 4, 5)])
    ref.apply_optimizer(want, None, touched, grad[touched] * 0.5, OptimizerArgs.of(SGD(lr=0.1)))
    assert torch.equal(plan.tables["t"], want)


# Uneven local batches: segment s of a received buffer holds rank s's batch (3, 0 and 5 samples).
SEGMENT_BATCHES = (3, 0, 5)


def _segments(seed=0):
    """Received lengths/ids of three source segments of FEATURES features each, every segment
    with its own batch, and per-table pooled gradients (rows source-major)."""
    g = torch.Generator().manual_seed(seed)
    tables = {f"t{k}": torch.randn(r, d, generator=g) for k, (r, d) in enumerate(zip(ROWS, DIMS))}
    lengths, indices = [], []
    for b in SEGMENT_BATCHES:
        seg = torch.randint(0, 4, (FEATURES, b), generator=g, dtype=torch.int32)
        lengths.append(seg.reshape(-1))
        indices += [torch.randint(0, ROWS[k], (int(seg[k].sum()),), generator=g) for k in range(FEATURES)]
    grads = [torch.randn(sum(SEGMENT_BATCHES), d, generator=g) for d in DIMS]
    return tables, torch.cat(lengths), torch.cat(indices), grads


def _per_segment(lengths, indices):
    """(first pooled row, batch, lengths, ids) of each segment, for one-segment reference calls."""
    out, bag, pos, row = [], 0, 0, 0
    for b in SEGMENT_BATCHES:
        seg = lengths[bag : bag + FEATURES * b]
        n = int(seg.sum())
        out.append((row, b, seg, indices[pos : pos + n]))
        bag, pos, row = bag + FEATURES * b, pos + n, row + b
    return out


@pytest.mark.parametrize("generated", [True, False])
def test_uneven_segments_pool_and_update_as_each_segment_alone(generated):
    tables, lengths, indices, grads = _segments()
    poolings = ["sum", "mean", "sum"]
    plan = SimpleNamespace(
        tables={n: t.clone() for n, t in tables.items()},
        states={},
        grad_scale=1.0,
        kernels=_kernels(generated),
        sparse_optimizer=_sgd(tables),
    )
    common = dict(
        slots=[[0], [1], [2]], features_per_segment=FEATURES, poolings=poolings, segment_batches=SEGMENT_BATCHES
    )
    pooled = rt.fused_lookup(plan, list(tables), lengths, indices, None, **common)
    want_tables = {n: t.clone() for n, t in tables.items()}
    for k, name in enumerate(tables):
        want = torch.cat(
            [
                ref.lookup(*_reference_args(seg, ids, b, name, tables[name], k, poolings[k]))
                for _, b, seg, ids in _per_segment(lengths, indices)
            ]
        )
        assert pooled[k].shape == (sum(SEGMENT_BATCHES), DIMS[k])
        torch.testing.assert_close(pooled[k], want, atol=1e-6, rtol=1e-6)
        for row, b, seg, ids in _per_segment(lengths, indices):  # SGD applies occurrences in order
            ref.lookup_update(
                *_reference_args(seg, ids, b, name, want_tables[name], k, poolings[k]),
                grads[k][row : row + b],
                UpdateArgs(OptimizerArgs.of(SGD(lr=0.1))),
            )
    rt.fused_lookup_update(plan, list(tables), lengths, indices, None, **common, grads=grads, optimizer="sgd", group=0)
    for name in tables:
        torch.testing.assert_close(plan.tables[name], want_tables[name], atol=1e-6, rtol=1e-6)
    views = rt.fused_lookup_grad(plan, list(tables), lengths, indices, None, **common, grads=grads)
    for k, name in enumerate(tables):
        want = sum(
            ref.lookup_grad(
                *_reference_args(seg, ids, b, name, plan.tables[name], k, poolings[k]), grads[k][row : row + b]
            )
            for row, b, seg, ids in _per_segment(lengths, indices)
        )
        torch.testing.assert_close(views[k], want, atol=1e-6, rtol=1e-6)


def test_pack_with_per_segment_batches_round_trips():
    # Two members on the tables' side of an exchange: segment s takes rank s's rows of each.
    layout = (((0, 2), (2, 1)),) * len(SEGMENT_BATCHES)
    a = torch.arange(2 * sum(SEGMENT_BATCHES), dtype=torch.float32).reshape(-1, 2)
    b = -torch.arange(sum(SEGMENT_BATCHES), dtype=torch.float32).reshape(-1, 1)
    plan = SimpleNamespace(kernels=default_kernels())
    buffer = rt.pack(plan, [a, b], layout, torch.float32, batch=SEGMENT_BATCHES)
    assert torch.equal(buffer, torch.cat([a, b], dim=1).reshape(-1))  # [B_s, 3] blocks, one after another
    back = rt.unpack(plan, buffer, layout, (2, 1), batch=SEGMENT_BATCHES)
    assert torch.equal(back[0], a) and torch.equal(back[1], b)
    with pytest.raises(ValueError, match="2 batch sizes for a layout of 3 segments"):
        rt.pack(plan, [a, b], layout, torch.float32, batch=(3, 5))
    with pytest.raises(ValueError, match="bag lengths for 3 features and batch sizes"):
        rt.fused_lookup(
            plan,
            [],
            torch.zeros(7, dtype=torch.int32),
            torch.zeros(0, dtype=torch.int64),
            None,
            slots=[],
            features_per_segment=FEATURES,
            poolings=[],
            segment_batches=SEGMENT_BATCHES,
        )


@pytest.mark.parametrize("generated", [True, False])
def test_unpack_returns_views_where_every_segment_lays_the_members_out_alike(generated):
    # A replicated table's positions packed by its lookup ([B, positions * dim]): the members are
    # its column blocks, read in place (no copy), and stacking them is still a view.
    batch, positions, dim = 5, 4, 3
    layout = [[(p * dim, dim) for p in range(positions)]] * 2
    buffer = torch.randn(2 * batch * positions * dim)
    plan = SimpleNamespace(kernels=_kernels(generated))
    members = rt.unpack(plan, buffer, layout, [dim] * positions, batch=batch)
    want = ref.unpack(buffer, layout, batch, [dim] * positions)
    assert all(torch.equal(m, w) for m, w in zip(members, want))
    assert all(m.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr() for m in members)
    stacked = block_run(members)
    assert stacked is not None and torch.equal(stacked, torch.stack(want))
    # Segments that lay the members out differently (a table-wise exchange): copied, as before.
    swapped = [layout[0], [(dim, dim), (0, dim), *layout[0][2:]]]
    members = rt.unpack(plan, buffer, swapped, [dim] * positions, batch=batch)
    want = ref.unpack(buffer, swapped, batch, [dim] * positions)
    assert all(torch.equal(m, w) for m, w in zip(members, want))
    assert all(m.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr() for m in members)


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_row_wise_route_of_all_features_at_once_is_the_per_feature_route(world, weighted):
    # Row ranges owned in a permuted rank order, empty bags, ids on range edges, one empty feature.
    g = torch.Generator().manual_seed(world)
    batch, rows = 6, (10, 25, 7, 9)
    features, ids, offsets, weights = [], [], [], {}
    for k, r in enumerate(rows):
        bounds = (0, *sorted(torch.randperm(r - 1, generator=g)[: world - 1].add(1).tolist()), r)
        ranks = tuple(reversed(range(world))) if k % 2 else tuple(range(world))
        features.append(ref.RouteFeature(f"f{k}", f"t{k}", r, "row_wise", ranks, bounds, weighted and k != 1))
        lengths = torch.randint(0, 4, (batch,), generator=g) * (k != 2)
        ids.append(torch.randint(0, r, (int(lengths.sum()),), generator=g))
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]))
        if weighted and k != 1:
            weights[f"f{k}"] = torch.rand(ids[-1].numel(), generator=g)
    for rank in range(world):
        got = ref.route(features, ids, offsets, weights, rank, world, with_weights=weighted)
        want = ref._route_per_feature(features, ids, offsets, weights, rank, world, weighted, torch.int64)
        for a, b in zip(got, want):
            assert (a is None and b is None) or (a.dtype == b.dtype and torch.equal(a, b))
        if not weighted:  # the generated library's one-pass counting sort routes them the same
            lengths = torch.stack([o[1:] - o[:-1] for o in offsets])
            by_kernel = ref.route(
                features,
                ids,
                offsets,
                {},
                rank,
                world,
                with_weights=False,
                lengths=lengths,
                route_row_wise=default_kernels().route_row_wise,
            )
            for a, b in zip(by_kernel, want):
                assert (a is None and b is None) or (a.dtype == b.dtype and torch.equal(a, b))


def test_row_wise_route_in_c_names_the_feature_of_a_bad_id():
    """The kernel checks every id as it buckets it: a bad one is refused naming its feature and
    table, before any id is written."""
    world, batch = 2, 4
    features = [ref.RouteFeature(f"f{k}", "t", 10, "row_wise", (1, 0), (0, 6, 10), False) for k in range(2)]
    offsets = [torch.arange(batch + 1, dtype=torch.int64)] * 2
    lengths = torch.ones(2, batch, dtype=torch.int64)
    kernel = default_kernels().route_row_wise
    for bad, message in [(10, "id 10 is out of range for a table of 10 rows"), (-1, "negative id -1")]:
        ids = [torch.tensor([1, 6, 9, 0]), torch.tensor([3, 4, bad, 5], dtype=torch.int32)]
        with pytest.raises(ValueError, match=rf"feature 'f1' \(table 't'\): {message} \(position 2\)"):
            ref.route(features, ids, offsets, {}, 0, world, False, lengths=lengths, route_row_wise=kernel)
    # Row ranges the kernel's search could not follow (falling bounds) are refused before any id is read.
    with pytest.raises(ValueError, match="rising bounds from 0"):
        kernel([torch.tensor([1, 2, 3, 4])], lengths[:1], [(0, 8, 6)], [(0, 1)], torch.int32)
