"""Generated C kernels (sparselift.runtime.kernels) against the reference lowering."""

from __future__ import annotations

import inspect
import itertools
import logging
import subprocess
import sys
import time

import pytest
import torch

from sparselift.codegen import ckernels
from sparselift.kernel_args import KernelBackend, OptimizerArgs, RoutedBags, TableArgs, UpdateArgs
from sparselift.optim_rules import OptimizerKind, rule_for
from sparselift.runtime import kernels as K
from sparselift.runtime import reference as ref
from sparselift.runtime.backends import ReferenceKernels, TritonKernels
from sparselift.runtime.kernels import CKernels, TableSpec
from sparselift.strided_rows import block_run

F, B, S = 3, 5, 2  # features per segment, batch, segments
SLOTS = [2, 0]  # two features read one (shared) table
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
IDX = {"i32": torch.int32, "i64": torch.int64}
KINDS = [str(k) for k in OptimizerKind]
REF = ReferenceKernels()  # the reference result of every table op


def bags(lengths, idx, w=None, features=F, batch=B) -> RoutedBags:
    """Routed bags: `features` features of `batch` samples per segment."""
    return RoutedBags(lengths, idx, w, features, batch)


def table(name: str, t: torch.Tensor, slots, pooling: str, state: torch.Tensor | None = None) -> TableArgs:
    return TableArgs(name, t, slots, pooling, state)


def opt(kind: str, lr: float = 0.1, eps: float = 1e-3, step: int = 3) -> OptimizerArgs:
    """Update arguments of `kind` at step `step` (betas and weight decay for the Adam family)."""
    b1, b2 = 0.9, 0.99
    adam = kind in ("adam", "adamw", "partial_rowwise_adam")
    return OptimizerArgs(
        OptimizerKind(kind),
        lr,
        eps,
        b1 if adam else 0.0,
        b2 if adam else 0.0,
        0.01 if adam else 0.0,
        1 - b1**step if adam else 1.0,
        1 - b2**step if adam else 1.0,
    )


def state_for(kind: str, rows: int, dim: int, seed: int = 0) -> torch.Tensor | None:
    """A positive random state buffer of `kind`'s layout (`rows * width` floats)."""
    width = rule_for(kind).state_width(dim)
    if not width:
        return None
    g = torch.Generator().manual_seed(seed)
    return torch.rand(rows * width, generator=g)


def upd(kind: str, lr: float = 0.1, eps: float = 1e-3, grad_scale: float = 1.0) -> UpdateArgs:
    """`opt(kind, lr, eps)` applied to gradients scaled by `grad_scale`."""
    return UpdateArgs(opt(kind, lr, eps), grad_scale)


def _clone(x):
    return None if x is None else x.clone()


def _specs() -> set[TableSpec]:
    specs = set()
    for it, p, w, o in itertools.product(IDX, ["sum", "mean"], [False, True], KINDS):
        specs.add(TableSpec(13, "f32", it, p, w, o))
    for d, p, w, o in itertools.product([4, 16], ["sum", "mean"], [False, True], KINDS):
        specs.add(TableSpec(d, "f32", "i64", p, w, o))
    for dt, p, o in itertools.product(["bf16", "f16"], ["sum", "mean"], KINDS):
        specs.add(TableSpec(8, dt, "i64", p, False, o))
    return specs


@pytest.fixture(scope="module")
def gk(tmp_path_factory) -> CKernels:
    t0 = time.perf_counter()
    k = CKernels(_specs(), cache=tmp_path_factory.mktemp("slcache"), nthreads=1)
    assert time.perf_counter() - t0 < 30
    return k


def _inputs(
    rows,
    dim,
    *,
    dtype=torch.float32,
    index_dtype=torch.int64,
    weighted=False,
    seed=0,
    max_len=7,
    segments=S,
    features=F,
    batch=B,
):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_len, (segments * features * batch,), generator=g, dtype=torch.int32)
    lengths[::4] = 0  # empty bags
    n = int(lengths.sum())
    idx = torch.randint(0, rows, (n,), generator=g).to(index_dtype)  # few rows: many duplicates
    w = torch.rand(n, generator=g) + 0.5 if weighted else None
    table = torch.randn(rows, dim, generator=g).to(dtype)
    return table, lengths, idx, w


def _tol(dtype):
    return {"atol": 1e-6, "rtol": 1e-6} if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}


@pytest.mark.parametrize("index", ["i32", "i64"])
@pytest.mark.parametrize("pooling", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_lookup_matches_reference(gk, index, pooling, weighted):
    t, lengths, idx, w = _inputs(6, 13, index_dtype=IDX[index], weighted=weighted)
    tables = [table("t", t, SLOTS, pooling)]
    (got,) = gk.lookup(bags(lengths, idx, w), tables)
    (want,) = REF.lookup(bags(lengths, idx, w), tables)
    assert got.shape == want.shape == (S * B, 13 * len(SLOTS))
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("index", ["i32", "i64"])
@pytest.mark.parametrize("pooling", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_lookup_update_matches_reference(gk, index, pooling, weighted, kind):
    """Every optimizer's generated update (rendered from its rule) equals the reference's
    (evaluated from the same rule on tensors), table and state."""
    t, lengths, idx, w = _inputs(6, 13, index_dtype=IDX[index], weighted=weighted, seed=1)
    assert idx.unique().numel() < idx.numel() / 3  # the point: many duplicate ids
    grad = torch.randn(S * B, 13 * len(SLOTS), generator=torch.Generator().manual_seed(2))
    state = state_for(kind, 6, 13)
    t1, t2, s1, s2 = t.clone(), t.clone(), _clone(state), _clone(state)
    gk.lookup_update(bags(lengths, idx, w), [table("t", t1, SLOTS, pooling, s1)], [grad], upd(kind, grad_scale=0.5))
    REF.lookup_update(bags(lengths, idx, w), [table("t", t2, SLOTS, pooling, s2)], [grad], upd(kind, grad_scale=0.5))
    assert not torch.equal(t1, t)
    torch.testing.assert_close(t1, t2, atol=1e-6, rtol=1e-5)
    if state is not None:
        assert not torch.equal(s1, state)
        torch.testing.assert_close(s1, s2, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("pooling", ["sum", "mean"])
@pytest.mark.parametrize("kind", KINDS)
def test_low_precision_storage(gk, dtype, pooling, kind):
    t, lengths, idx, _ = _inputs(5, 8, dtype=DTYPES[dtype], seed=3, max_len=4)
    (got,) = gk.lookup(bags(lengths, idx), [table("t", t, SLOTS, pooling)])
    assert got.dtype == t.dtype
    # f32 accumulation: compare with the reference on the upcast table.
    (want,) = REF.lookup(bags(lengths, idx), [table("t", t.float(), SLOTS, pooling)])
    want = want.to(t.dtype)
    torch.testing.assert_close(got.float(), want.float(), atol=3e-2, rtol=2e-2)
    grad = torch.randn(S * B, 16, generator=torch.Generator().manual_seed(4))
    state = state_for(kind, 5, 8)
    t1, t2, s1, s2 = t.clone(), t.clone().float(), _clone(state), _clone(state)
    gk.lookup_update(bags(lengths, idx), [table("t", t1, SLOTS, pooling, s1)], [grad], upd(kind, 0.05))
    REF.lookup_update(bags(lengths, idx), [table("t", t2, SLOTS, pooling, s2)], [grad], upd(kind, 0.05))
    torch.testing.assert_close(t1.float(), t2.to(t.dtype).float(), atol=3e-2, rtol=2e-2)
    if state is not None:  # the state is f32 whatever the storage; the weights it read were rounded
        torch.testing.assert_close(s1, s2, atol=1e-2, rtol=1e-2)
    # A row's steps in f32, rounded to the storage once: as the reference on the 16-bit table.
    t3, s3 = t.clone(), _clone(state)
    REF.lookup_update(bags(lengths, idx), [table("t", t3, SLOTS, pooling, s3)], [grad], upd(kind, 0.05))
    if kind == "sgd":
        assert torch.equal(t1, t3)
    else:
        torch.testing.assert_close(t1.float(), t3.float(), atol=1e-2, rtol=1e-2)


NAMES = ("t0", "t1", "t2")


def _fused_case(weighted, seed=5):
    g = torch.Generator().manual_seed(seed)
    features = 4
    tables = [torch.randn(7, 4, generator=g), torch.randn(11, 13, generator=g), torch.randn(3, 16, generator=g)]
    slots = [[0, 3], [1], [2]]  # table 0 is shared by two features
    poolings = ["sum", "mean", "sum"]
    lengths = torch.randint(0, 6, (S * features * B,), generator=g, dtype=torch.int32)
    lengths[1::5] = 0
    # Each feature's ids must fit its own table.
    feat_of_bag = (torch.arange(lengths.numel()) % (features * B)) // B
    rows_of_feature = torch.tensor([7, 11, 3, 7])
    bag_rows = rows_of_feature[feat_of_bag].repeat_interleave(lengths.long())
    idx = (torch.rand(bag_rows.numel(), generator=g) * bag_rows).long()
    w = torch.rand(idx.numel(), generator=g) if weighted else None
    return tables, lengths, idx, w, slots, poolings, features


def _fused_tables(tables, slots, poolings, states=None, names=NAMES) -> list[TableArgs]:
    """`_fused_case`'s tables as table arguments (named t0, t1, t2 unless `names` says)."""
    states = states if states is not None else [None] * len(tables)
    return [table(n, t, sl, p, st) for n, t, sl, p, st in zip(names, tables, slots, poolings, states)]


@pytest.mark.parametrize("weighted", [False, True])
def test_fused_lookup_matches_per_table(gk, weighted):
    tables, lengths, idx, w, slots, poolings, features = _fused_case(weighted)
    args = _fused_tables(tables, slots, poolings)
    outs = gk.lookup(bags(lengths, idx, w, features), args)
    assert len(outs) == len(args)
    for o, a in zip(outs, args):
        (want,) = REF.lookup(bags(lengths, idx, w, features), [a])
        torch.testing.assert_close(o, want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_fused_update_matches_per_table(gk, weighted, kind):
    tables, lengths, idx, w, slots, poolings, features = _fused_case(weighted, seed=6)
    g = torch.Generator().manual_seed(7)
    grads = [torch.randn(S * B, t.shape[1] * len(sl), generator=g) for t, sl in zip(tables, slots)]
    states = [state_for(kind, t.shape[0], t.shape[1], seed=k) for k, t in enumerate(tables)]
    mine = [t.clone() for t in tables]
    mine_st = [_clone(s) for s in states]
    update = upd(kind, 0.1, 1e-2, grad_scale=2.0)
    gk.lookup_update(bags(lengths, idx, w, features), _fused_tables(mine, slots, poolings, mine_st), grads, update)
    for n, t, st, m, mst, gr, sl, p in zip(NAMES, tables, states, mine, mine_st, grads, slots, poolings):
        t, st = t.clone(), _clone(st)
        REF.lookup_update(bags(lengths, idx, w, features), [table(n, t, sl, p, st)], [gr], update)
        torch.testing.assert_close(m, t, atol=1e-6, rtol=1e-5)
        if st is not None:
            torch.testing.assert_close(mst, st, atol=1e-6, rtol=1e-5)


TORCH_SGD_DIMS = [1, 3, 16, 17, 64]


@pytest.fixture(scope="module")
def gk_sgd(tmp_path_factory) -> CKernels:
    specs = {
        TableSpec(d, "f32", "i64", p, w, "sgd")
        for d, p, w in itertools.product(TORCH_SGD_DIMS, ["sum", "mean"], [False, True])
        if not (w and p == "mean")
    }
    return CKernels(specs, cache=tmp_path_factory.mktemp("slcache_sgd"), nthreads=1)


@pytest.mark.parametrize("dim", TORCH_SGD_DIMS)
@pytest.mark.parametrize("pooling,weighted", [("sum", False), ("mean", False), ("sum", True)])
def test_sgd_update_rounds_exactly_as_torch_sgd(gk_sgd, dim, pooling, weighted):
    """nn.EmbeddingBag(sparse=True) + torch.optim.SGD (the DLRM reference's update) applies a
    row's duplicate ids one fused step at a time; the generated kernel and the reference lowering
    must give the same table to the last bit, not merely within a tolerance."""
    g = torch.Generator().manual_seed(dim)
    rows, batch = 7, 64
    lengths = torch.randint(0, 6, (batch,), generator=g, dtype=torch.int32)
    n = int(lengths.sum())
    idx = torch.randint(0, rows, (n,), generator=g)  # ~50 occurrences per row
    w = torch.rand(n, generator=g) + 0.5 if weighted else None
    grad = torch.randn(batch, dim, generator=g) * 3
    emb = torch.nn.EmbeddingBag(rows, dim, mode=pooling, sparse=True)
    start = emb.weight.detach().clone()
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.long().cumsum(0)[:-1]])
    emb(idx, offsets, per_sample_weights=w).backward(grad)
    torch.optim.SGD(emb.parameters(), lr=0.1).step()
    want = emb.weight.detach()
    got_c, got_ref = start.clone(), start.clone()
    gk_sgd.lookup_update(bags(lengths, idx, w, 1, batch), [table("t", got_c, [0], pooling)], [grad], upd("sgd", 0.1))
    REF.lookup_update(bags(lengths, idx, w, 1, batch), [table("t", got_ref, [0], pooling)], [grad], upd("sgd", 0.1))
    assert not torch.equal(want, start)
    assert torch.equal(got_ref, want), (got_ref - want).abs().max()
    assert torch.equal(got_c, want), (got_c - want).abs().max()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("layout", ["dense", "column_slices", "per_slot"])
def test_fused_lookup_grad_equals_reference_bit_for_bit(gk, weighted, layout):
    """Replicated tables' whole-table gradients: every occurrence added in the reference's order;
    gradients that are column slices of one wider gradient (as a concatenation's backward gives
    them) are read in place, and so are per-slot gradients, each a block of its own wider
    tensor (a history position's columns of `[B, positions, width]`), in any order in memory."""
    tables, lengths, idx, w, slots, poolings, features = _fused_case(weighted, seed=11)
    g = torch.Generator().manual_seed(12)
    widths = [t.shape[1] * len(sl) for t, sl in zip(tables, slots)]
    if layout == "column_slices":
        wide = torch.randn(S * B, sum(widths) + 5, generator=g)
        grads = list(wide[:, 5:].split(widths, dim=1))
        assert not any(gr.is_contiguous() for gr in grads)
    else:
        grads = [torch.randn(S * B, wd, generator=g) for wd in widths]
    given: list = grads
    if layout == "per_slot":
        given = []
        for t, sl, gr in zip(tables, slots, grads):
            d = t.shape[1]
            # Slots laid out in reverse inside one [rows, slots, d + 3] tensor: each slot's block
            # is strided and they are not in slot order in memory.
            wide = torch.randn(S * B, len(sl), d + 3, generator=g)
            for k in range(len(sl)):
                wide[:, len(sl) - 1 - k, 3:] = gr[:, k * d : (k + 1) * d]
            given.append([wide[:, len(sl) - 1 - k, 3:] for k in range(len(sl))])
        assert not any(b.is_contiguous() for blocks in given for b in blocks)
    args = _fused_tables(tables, slots, poolings)
    bufs = [torch.zeros(t.shape) for t in tables]
    gk.lookup_grad(bags(lengths, idx, w, features), args, given, bufs)
    for buf, a, gr in zip(bufs, args, grads):
        want = torch.zeros(a.weight.shape)
        REF.lookup_grad(bags(lengths, idx, w, features), [a], [gr], [want])
        assert want.abs().sum() > 0 and torch.equal(buf, want)


def test_fused_lookup_grad_per_slot_gradients_are_checked(gk):
    """A per-slot gradient list of the wrong length or a block of the wrong shape is refused,
    naming the table (and the slot), before anything is written."""
    tables, lengths, idx, _, slots, poolings, features = _fused_case(False, seed=14)
    args = _fused_tables(tables, slots, poolings)
    blocks = [[torch.randn(S * B, t.shape[1]) for _ in sl] for t, sl in zip(tables, slots)]
    bufs = [torch.zeros(t.shape) for t in tables]
    long = [[*blocks[0], blocks[0][1]], *blocks[1:]]
    with pytest.raises(ValueError, match=r"^gradient of table 't0': 3 per-slot gradients for its 2 slots$"):
        gk.lookup_grad(bags(lengths, idx, None, features), args, long, bufs)
    # A list is the per-slot form: one block per slot, never the whole gradient in a list.
    short = [blocks[0][:-1], *blocks[1:]]
    with pytest.raises(ValueError, match=r"^gradient of table 't0': 1 per-slot gradients for its 2 slots$"):
        gk.lookup_grad(bags(lengths, idx, None, features), args, short, bufs)
    narrow = [[blocks[0][0][:, :-1], blocks[0][1]], *blocks[1:]]
    with pytest.raises(
        ValueError, match=r"^gradient of table 't0', slot 0: gradient of shape \(10, 3\), expected \(10, 4\)$"
    ):
        gk.lookup_grad(bags(lengths, idx, None, features), args, narrow, bufs)
    assert all(b.abs().sum() == 0 for b in bufs)


def test_fused_lookup_grad_bad_id_names_the_table_and_writes_nothing(gk):
    tables, lengths, idx, _, slots, poolings, features = _fused_case(False, seed=13)
    grads = [torch.randn(S * B, t.shape[1] * len(sl)) for t, sl in zip(tables, slots)]
    bufs = [torch.zeros(t.shape) for t in tables]
    bad = idx.clone()
    bad[-1] = 10_000
    msg = rf"^gradient of table 't0': id 10000 at position {bad.numel() - 1} is out of range for a table of 7 rows$"
    with pytest.raises(ValueError, match=msg):
        gk.lookup_grad(bags(lengths, bad, None, features), _fused_tables(tables, slots, poolings), grads, bufs)
    assert all(b.abs().sum() == 0 for b in bufs)


def test_fused_wrappers_name_the_table_in_argument_errors(gk):
    """The three table ops share one argument check: one gradient (and output) per table, known
    poolings and index dtypes, each error naming the op and the tables."""
    tables, lengths, idx, _, slots, poolings, features = _fused_case(False, seed=14)
    grads = [torch.randn(S * B, t.shape[1] * len(sl)) for t, sl in zip(tables, slots)]
    bufs = [torch.zeros(t.shape) for t in tables]
    args = _fused_tables(tables, slots, poolings)
    calls = {
        "lookup": lambda ix, gr, out: gk.lookup(bags(lengths, ix, None, features), args, out),
        "update": lambda ix, gr, out: gk.lookup_update(bags(lengths, ix, None, features), args, gr, upd("sgd", 0.1)),
        "gradient": lambda ix, gr, out: gk.lookup_grad(bags(lengths, ix, None, features), args, gr, out),
    }
    before = [t.clone() for t in tables]
    outs = [torch.zeros(S * B, a.width) for a in args]
    with pytest.raises(ValueError, match=r"^lookup of tables 't0', 't1', 't2': 2 outputs for 3 tables$"):
        calls["lookup"](idx, grads, outs[:-1])
    for role in ("update", "gradient"):
        with pytest.raises(ValueError, match=rf"^{role} of tables 't0', 't1', 't2': 2 gradients for 3 tables$"):
            calls[role](idx, grads[:-1], bufs)
    # The pooling is checked when the table's arguments are made, whatever the op.
    with pytest.raises(ValueError, match=r"^table 't1': unknown pooling 'max' \(sum or mean\)$"):
        table("t1", tables[1], slots[1], "max")
    for role, call in calls.items():
        with pytest.raises(
            ValueError,
            match=rf"^{role} of tables 't0', 't1', 't2': indices must be a 1-D int32/int64 tensor, got torch.float32",
        ):
            call(idx.float(), grads, bufs if role == "gradient" else None)
    assert all(torch.equal(t, b) for t, b in zip(tables, before)) and all(b.abs().sum() == 0 for b in bufs)
    assert all(o.abs().sum() == 0 for o in outs)


def test_lookup_grad_wants_one_buffer_per_table(gk):
    """As `lookup` wants one output per table and every op one gradient per table, `lookup_grad`
    wants one gradient buffer per table: a missing one is refused, never a table's gradient
    silently left out."""
    tables, lengths, idx, _, slots, poolings, features = _fused_case(False, seed=14)
    grads = [torch.randn(S * B, t.shape[1] * len(sl)) for t, sl in zip(tables, slots)]
    bufs = [torch.zeros(t.shape) for t in tables]
    with pytest.raises(ValueError, match="2 .* for 3 tables"):
        gk.lookup_grad(bags(lengths, idx, None, features), _fused_tables(tables, slots, poolings), grads, bufs[:-1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64], ids=str)
def test_expand_rows_spreads_the_rows_to_their_bags_and_zeros_the_rest(gk, dtype):
    g = torch.Generator().manual_seed(15)
    lengths = (torch.rand(300, generator=g) < 0.6).to(torch.int32)
    rows = torch.randn(int(lengths.sum()), 24, generator=g).to(dtype)
    rows[0, 0] = -0.0  # copied bit for bit (a sum would turn it into +0.0)
    want = torch.zeros(300, 24, dtype=dtype).index_copy_(0, lengths.nonzero().squeeze(1), rows)
    got = gk.expand_rows(rows, lengths)
    assert got.dtype == dtype and torch.equal(got, want)
    assert torch.signbit(got[int(lengths.nonzero()[0]), 0])
    assert gk.expand_rows(rows[:0], torch.zeros(0, dtype=torch.int32)).shape == (0, 24)


def test_expand_rows_checks_every_length_before_it_reads_a_row(gk):
    lengths = torch.tensor([1, 0, 1, 1], dtype=torch.int32)
    rows = torch.randn(3, 8)
    for bad_at, value in [(1, 2), (2, -1)]:
        bad = lengths.clone()
        bad[bad_at] = value
        with pytest.raises(ValueError, match=rf"a bag holds {value} ids \(bag {bad_at}\)"):
            gk.expand_rows(rows, bad)
    # More filled bags than rows received: refused, never a read past the rows.
    with pytest.raises(ValueError, match="2 rows received for 3 ids sent"):
        gk.expand_rows(rows[:2], lengths)
    with pytest.raises(ValueError, match="4 rows received for 3 ids sent"):
        gk.expand_rows(torch.randn(4, 8), lengths)


@pytest.mark.parametrize("segments", [2, 3])
def test_expand_rows_takes_each_bag_from_the_segment_that_holds_it(gk, segments):
    """A row-wise table's bags: each id went to the one rank whose row range holds it, and each
    rank's rows come back in its segment; bag i's row is in the segment where its length is 1."""
    g = torch.Generator().manual_seed(17)
    bags = 200
    owner = torch.randint(0, segments + 1, (bags,), generator=g)  # `segments`: an empty bag
    lengths = torch.stack([(owner == s).to(torch.int32) for s in range(segments)]).reshape(-1)
    rows = torch.randn(int(lengths.sum()), 16, generator=g)  # segment after segment
    want = torch.zeros(bags, 16)
    filled = lengths.nonzero().squeeze(1) % bags  # each row's bag, in received order
    want[filled] = rows
    assert torch.equal(gk.expand_rows(rows, lengths, segments), want)
    # What it spreads, compact_rows packs back: each segment's bags read from the same blocks.
    blocks = list(want.split(bags // 4)) * segments  # 4 members of 50 bags, in every segment
    assert torch.equal(gk.compact_rows(blocks, lengths), rows)
    both = lengths.clone()
    both[int((owner == 0).nonzero()[0]) + bags] = 1  # a bag of segment 0 in segment 1 too
    with pytest.raises(ValueError, match=r"has an id in 2 segments"):
        gk.expand_rows(torch.randn(int(both.sum()), 16), both, segments)
    with pytest.raises(ValueError, match=rf"not {segments} segments"):
        gk.expand_rows(rows, lengths[:-1], segments)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_compact_rows_packs_the_filled_rows_of_strided_blocks(gk, dtype):
    g = torch.Generator().manual_seed(16)
    grad = torch.randn(9, 5, 12, generator=g).to(dtype)  # [batch, positions, dim]
    blocks = [*grad.unbind(1), torch.randn(9, 12, generator=g).to(dtype)]  # strided views, then one more
    lengths = (torch.rand(len(blocks) * 9, generator=g) < 0.6).to(torch.int32)
    want = torch.cat(blocks)[lengths.bool()]
    got = gk.compact_rows(blocks, lengths)
    assert got.dtype == dtype and torch.equal(got, want)
    # What expand_rows spreads, compact_rows packs back.
    assert torch.equal(gk.compact_rows(list(gk.expand_rows(got, lengths).split(9)), lengths), got)
    bad = lengths.clone()
    bad[20] = 3
    with pytest.raises(ValueError, match=r"a bag holds 3 ids \(bag 20\)"):
        gk.compact_rows(blocks, bad)
    with pytest.raises(ValueError, match="bags in the blocks"):
        gk.compact_rows(blocks[:-1], lengths)


@pytest.mark.parametrize("out_dtype", [torch.int32, torch.int64])
def test_concat_ids_checks_every_id_while_it_copies(gk, out_dtype):
    g = torch.Generator().manual_seed(14)
    rows = [50, 7, 1000]
    ids = [
        torch.randint(0, r, (n,), generator=g).to(dt)
        for r, n, dt in zip(rows, [33, 0, 517], [torch.int64, torch.int32, torch.int32])
    ]
    got = gk.concat_ids(ids, rows, out_dtype)
    assert got.dtype == out_dtype and torch.equal(got, torch.cat([i.long() for i in ids]).to(out_dtype))
    bad = [i.clone() for i in ids]
    bad[2][400] = 1000  # one past the last row
    with pytest.raises(IndexError) as e:
        gk.concat_ids(bad, rows, out_dtype)
    assert e.value.args == (2, 400, 1000)
    bad[2][400] = 3
    bad[0][5] = -2
    with pytest.raises(IndexError) as e:
        gk.concat_ids(bad, rows, out_dtype)
    assert e.value.args == (0, 5, -2)


def test_heavy_duplicates_rowwise_adagrad(gk):
    """Every id hits one of two rows: the row-wise Adagrad state needs the summed gradient."""
    t, lengths, _, _ = _inputs(2, 16, seed=8, max_len=9)
    idx = torch.randint(0, 2, (int(lengths.sum()),))
    grad = torch.randn(S * B, 32)
    t1, t2, s1, s2 = t.clone(), t.clone(), torch.zeros(2), torch.zeros(2)
    update = upd("rowwise_adagrad", 0.1, 1e-8)
    gk.lookup_update(bags(lengths, idx), [table("t", t1, SLOTS, "sum", s1)], [grad], update)
    REF.lookup_update(bags(lengths, idx), [table("t", t2, SLOTS, "sum", s2)], [grad], update)
    torch.testing.assert_close(s1, s2, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(t1, t2, atol=1e-6, rtol=1e-5)


def test_empty_inputs(gk):
    t = torch.randn(4, 16)
    lengths = torch.zeros(S * F * B, dtype=torch.int32)
    idx = torch.empty(0, dtype=torch.int64)
    (out,) = gk.lookup(bags(lengths, idx), [table("t", t, SLOTS, "mean")])
    assert torch.equal(out, torch.zeros(S * B, 32))
    t1 = t.clone()
    gk.lookup_update(
        bags(lengths, idx),
        [table("t", t1, SLOTS, "sum", torch.zeros(4))],
        [torch.randn(S * B, 32)],
        upd("rowwise_adagrad", 0.1, 1e-3),
    )
    assert torch.equal(t1, t)
    # batch 0: no bags at all
    (out,) = gk.lookup(bags(torch.empty(0, dtype=torch.int32), idx, None, 1, 0), [table("t", t, [0], "sum")])
    assert out.shape == (0, 16)


def test_single_segment_many_features_one_slot(gk):
    t, lengths, idx, w = _inputs(9, 4, seed=9, segments=1, features=6, batch=8)
    for slot in range(6):
        tables = [table("t", t, [slot], "sum")]
        torch.testing.assert_close(
            gk.lookup(bags(lengths, idx, w, 6, 8), tables)[0],
            REF.lookup(bags(lengths, idx, w, 6, 8), tables)[0],
            atol=1e-6,
            rtol=1e-6,
        )


def test_two_threads_match(gk, tmp_path):
    k2 = CKernels([TableSpec(13, "f32", "i64", "sum", True, "sgd")], cache=tmp_path, nthreads=2)
    t, lengths, idx, w = _inputs(50, 13, weighted=True, seed=10, segments=3, batch=64)
    tables = [table("t", t, SLOTS, "sum")]
    torch.testing.assert_close(
        k2.lookup(bags(lengths, idx, w, F, 64), tables)[0],
        REF.lookup(bags(lengths, idx, w, F, 64), tables)[0],
        atol=1e-6,
        rtol=1e-6,
    )


# ---- bad input ------------------------------------------------------------------------------


def _bad_case():
    t, lengths, idx, w = _inputs(6, 13, seed=11)
    return t, lengths, idx


@pytest.mark.parametrize("bad", [-1, 6, 1 << 40])
def test_out_of_range_id_raises_naming_the_table(gk, bad):
    t, lengths, idx = _bad_case()
    pos = int(lengths[: (0 * F + 2) * B].sum())  # first id of slot 2, segment 0
    idx = idx.clone()
    if pos >= idx.numel():
        pytest.skip("no id in that slot")
    idx[pos] = bad
    before = t.clone()
    msg = rf"id {bad} at position {pos} is out of range for a table of 6 rows$"
    with pytest.raises(ValueError, match=rf"^lookup of table 't_users': {msg}"):
        gk.lookup(bags(lengths, idx), [table("t_users", t, SLOTS, "sum")])
    state = torch.zeros(6)
    with pytest.raises(ValueError, match=rf"^update of table 't_users': {msg}"):
        gk.lookup_update(
            bags(lengths, idx),
            [table("t_users", t, SLOTS, "sum", state)],
            [torch.randn(S * B, 26)],
            upd("rowwise_adagrad", 0.1, 1e-3),
        )
    assert torch.equal(t, before) and torch.equal(state, torch.zeros(6))


def test_bad_id_in_another_feature_is_not_this_tables_business(gk):
    t, lengths, idx = _bad_case()
    # Feature 1 is not among the slots: its ids belong to another table and may be large.
    feat = (torch.repeat_interleave(torch.arange(lengths.numel()), lengths.long()) % (F * B)) // B
    idx = torch.where(feat == 1, idx + 1000, idx)
    tables = [table("t_users", t, SLOTS, "sum")]
    torch.testing.assert_close(gk.lookup(bags(lengths, idx), tables)[0], REF.lookup(bags(lengths, idx), tables)[0])


def test_bad_lengths_and_slots(gk):
    t, lengths, idx = _bad_case()
    users = [table("t_users", t, SLOTS, "sum")]
    neg = lengths.clone()
    neg[3] = -1
    with pytest.raises(ValueError, match=r"^lookup of table 't_users': negative bag length -1 at bag 3$"):
        gk.lookup(bags(neg, idx), users)
    n = idx.numel()
    with pytest.raises(
        ValueError, match=rf"^lookup of table 't_users': bag lengths sum to {n} but there are {n - 1} ids$"
    ):
        gk.lookup(bags(lengths, idx[:-1]), users)
    with pytest.raises(ValueError, match=r"^table 't_users': slot 3 is outside the 3 features of a segment$"):
        gk.lookup(bags(lengths, idx), [table("t_users", t, [3], "sum")])
    with pytest.raises(
        ValueError, match=r"^lookup of table 't_users': 29 bag lengths is not a whole number of segments"
    ):
        gk.lookup(bags(lengths[:-1], idx), users)
    with pytest.raises(
        ValueError, match=r"^update of table 't_users': gradient of shape \(10, 13\), expected \(10, 26\)$"
    ):
        gk.lookup_update(bags(lengths, idx), users, [torch.randn(S * B, 13)], upd("sgd", 0.1))
    with pytest.raises(ValueError, match=r"^lookup of table 't_users': one weight per id expected"):
        gk.lookup(bags(lengths, idx, torch.ones(idx.numel() + 1)), users)


def test_fused_update_is_all_or_nothing(gk):
    tables, lengths, idx, _, slots, poolings, features = _fused_case(False, seed=12)
    feat = (torch.repeat_interleave(torch.arange(lengths.numel()), lengths.long()) % (features * B)) // B
    idx = idx.clone()
    at = int(torch.nonzero(feat == 2)[0])
    idx[at] = 3  # table t_c has 3 rows
    before = [t.clone() for t in tables]
    grads = [torch.randn(S * B, t.shape[1] * len(sl)) for t, sl in zip(tables, slots)]
    args = _fused_tables(tables, slots, poolings, names=("t_a", "t_b", "t_c"))
    with pytest.raises(
        ValueError, match=rf"^update of table 't_c': id 3 at position {at} is out of range for a table of 3 rows$"
    ):
        gk.lookup_update(bags(lengths, idx, None, features), args, grads, upd("sgd", 0.1))
    assert all(torch.equal(a, b) for a, b in zip(tables, before))


# ---- pack / unpack --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_pack_unpack_match_reference(gk, dtype):
    batch, world = 4, 3
    # member 0: [W*B, 6] (per-peer rows), member 1: [B, 2] (same rows to every peer), member 2: [W*B, 5]
    layout = [[(0, 6), (6, 2), (8, 5)], [(0, 6), (0, 0), (6, 5)], [(2, 6), (0, 2), (8, 0)]]
    members = [
        torch.arange(world * batch * 6).reshape(world * batch, 6).to(dtype),
        (100 + torch.arange(batch * 2)).reshape(batch, 2).to(dtype),
        (1000 + torch.arange(world * batch * 5)).reshape(world * batch, 5).to(dtype),
    ]
    got = gk.pack(members, layout, batch, dtype)
    want = ref.pack(members, layout, batch, dtype)
    assert torch.equal(got, want)
    widths = [6, 2, 5]
    for a, b in zip(gk.unpack(got, layout, batch, widths), ref.unpack(want, layout, batch, widths)):
        assert a.shape == b.shape and torch.equal(a, b)


def test_pack_reads_rows_at_any_stride_in_place(gk, monkeypatch):
    # The gradients of an unpooled lookup's id positions: views of one [B, K, D] tensor, rows
    # spaced K * D apart. They are read where they are: no `contiguous()` copy first.
    batch, positions, dim = 5, 3, 4
    grad = torch.arange(batch * positions * dim, dtype=torch.float32).reshape(batch, positions, dim)
    members = list(grad.unbind(1)) + [torch.ones(batch, 8)[:, ::2]]  # and one with spaced columns
    layout = [[(0, dim), (dim, dim), (2 * dim, dim), (3 * dim, 4)]]
    copies = []
    original = torch.Tensor.contiguous
    monkeypatch.setattr(torch.Tensor, "contiguous", lambda t, *a, **k: copies.append(t.shape) or original(t, *a, **k))
    got = gk.pack(members, layout, batch, torch.float32)
    assert copies == [(batch, 4)]  # only the member whose columns are spaced
    monkeypatch.undo()
    assert torch.equal(got, ref.pack(members, layout, batch, torch.float32))


def test_unpacked_position_members_stack_as_a_view(gk):
    # An unpooled call's positions unpacked from one exchange buffer: each member contiguous,
    # all of them blocks of one allocation at a regular stride, so stacking them is a view.
    batch, positions, dim = 6, 4, 3
    layout = [[(p * dim, dim) for p in range(positions)]]
    buffer = torch.randn(batch * positions * dim)
    members = gk.unpack(buffer, layout, batch, [dim] * positions)
    assert all(m.is_contiguous() for m in members)
    want = ref.unpack(buffer, layout, batch, [dim] * positions)
    assert all(torch.equal(a, b) for a, b in zip(members, want))
    run = block_run(members)
    assert run is not None and run.data_ptr() == members[0].data_ptr()
    assert torch.equal(run, torch.stack(want))


def test_pack_converts_dtype_and_empty_layouts(gk):
    members = [torch.ones(2, 3, dtype=torch.float64)]
    assert torch.equal(gk.pack(members, [[(0, 3)]], 2, torch.float32), ref.pack(members, [[(0, 3)]], 2, torch.float32))
    assert gk.pack([], [[], []], 4, torch.float32).numel() == 0
    assert gk.unpack(torch.empty(0), [[], []], 4, []) == []


# ---- build cache ----------------------------------------------------------------------------


def test_build_is_cached_and_reused(tmp_path, caplog, monkeypatch):
    specs = [
        TableSpec(24, "f32", "i64", "sum", False, "sgd"),
        TableSpec(8, "f32", "i64", "mean", True, "rowwise_adagrad"),
    ]
    with caplog.at_level(logging.INFO, logger="sparselift.kernels"):
        t0 = time.perf_counter()
        first = CKernels(specs, cache=tmp_path)
        build_s = time.perf_counter() - t0
    assert first.rebuilt and "built C kernels" in caplog.text
    assert build_s < 10, f"building one plan's kernels took {build_s:.1f}s"
    so = first.library_path
    assert so.parent == tmp_path / "ckernels" and so.exists()
    caplog.clear()
    # A fresh process would find the .so on disk: forget the in-process handles.
    monkeypatch.setattr(K, "_LOADED", {})
    with caplog.at_level(logging.INFO, logger="sparselift.kernels"):
        second = CKernels(specs, cache=tmp_path)
    assert not second.rebuilt and "reusing cached C kernels" in caplog.text
    assert second.library_path == so
    mtime = so.stat().st_mtime_ns
    third = CKernels(list(reversed(specs)), cache=tmp_path)  # same set, same source
    assert not third.rebuilt and so.stat().st_mtime_ns == mtime
    # A different spec set is a different library.
    other = CKernels([TableSpec(24, "f32", "i32", "sum", False, "sgd")], cache=tmp_path)
    assert other.rebuilt and other.library_path != so


def test_cache_dir_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARSELIFT_CACHE_DIR", str(tmp_path))
    assert K.cache_dir() == tmp_path / "ckernels"


PROTOCOL_OPS = [n for n, v in vars(KernelBackend).items() if inspect.isfunction(v) and not n.startswith("_")]


@pytest.mark.parametrize("name", PROTOCOL_OPS)
def test_backends_have_the_protocol_signatures(name):
    """Every backend's table, buffer and rows ops take the `KernelBackend` protocol's arguments,
    by the same names (a plan calls whichever backend it holds the same way)."""
    want = list(inspect.signature(getattr(KernelBackend, name)).parameters)
    for backend in (ReferenceKernels, TritonKernels, CKernels):
        assert list(inspect.signature(getattr(backend, name)).parameters) == want, (backend.__name__, name)


def test_default_kernels_are_shared_c_kernels(monkeypatch, gk):
    monkeypatch.setattr(K, "_DEFAULT", None)
    first = K.default_kernels()
    assert isinstance(first, CKernels) and K.default_kernels() is first
    monkeypatch.setattr(K, "_DEFAULT", gk)
    assert K.default_kernels() is gk
    t, lengths, idx, _ = _inputs(6, 13, seed=13)
    tables = [table("t", t, SLOTS, "sum")]
    torch.testing.assert_close(
        K.default_kernels().lookup(bags(lengths, idx), tables)[0], REF.lookup(bags(lengths, idx), tables)[0]
    )


def test_unsupported_dtype_falls_back_to_reference(gk):
    t, lengths, idx, _ = _inputs(6, 13, seed=14)
    t = t.double()
    tables = [table("t", t, SLOTS, "sum")]
    (got,) = gk.lookup(bags(lengths, idx), tables)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, REF.lookup(bags(lengths, idx), tables)[0])
    idx = idx.clone()
    idx[-1] = 99
    with pytest.raises(
        ValueError,
        match=rf"^lookup of table 't': id 99 at position {idx.numel() - 1} is out of range for a table of 6 rows$",
    ):
        gk.lookup(bags(lengths, idx), tables)


def test_codegen_does_not_import_torch():
    code = (
        "import sys\nfrom sparselift.codegen import ckernels\n"
        "src = ckernels.generate_source([ckernels.TableSpec(16, optimizer='sgd')])\n"
        "assert 'sl_forward' in src and 'torch' not in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_spec_validation():
    with pytest.raises(ValueError):
        TableSpec(0)
    with pytest.raises(ValueError):
        TableSpec(8, dtype="f64")
    with pytest.raises(ValueError):
        TableSpec(8, optimizer="rmsprop")
    assert TableSpec(8, optimizer="sgd").forward_key == TableSpec(8)
    assert "fwd_d8_f32_i64_sum_u" in ckernels.generate_source([TableSpec(8)])


def test_forward_only_and_update_specs_mix(tmp_path):
    k = CKernels([TableSpec(8), TableSpec(8, optimizer="sgd"), TableSpec(4, pooling="mean")], cache=tmp_path)
    assert TableSpec(8, optimizer="sgd") in k.specs
