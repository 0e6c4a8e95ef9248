"""The buffers a lifted step declares per rank (`passes.step_buffers`), read from its SRSV."""

from __future__ import annotations

from pathlib import Path

from test_srsv import SMALL, parse  # tests/passes is on sys.path (rootdir-relative import)
from xdsl.parser import Parser

from sparselift.ir import make_context
from sparselift.passes.lift_sparse import LiftSparse
from sparselift.passes.srsv import build_srsv, steps_of
from sparselift.passes.step_buffers import StepBuffers, declared_buffers, step_buffers

INPUTS = Path(__file__).parents[1] / "filecheck" / "inputs"


def test_each_rank_counts_what_it_sends_receives_gathers_and_pools():
    """SMALL (batch 4): rank 0 sends 16 / 96 / 128 / 256 bytes and receives 16 / 64 / 256 / 128
    over the lengths, ids, pooled and gradient exchanges; it owns t0 (4 x 2 pooled rows of 32 B;
    pooled as read, so no gathered rows). Rank 1 the mirror, with t1 (4 x 2 x 64 B)."""
    srsv = build_srsv(steps_of(parse(SMALL))[0])
    assert step_buffers(srsv, 0) == StepBuffers(exchanges=32 + 160 + 384 + 384, gathered_rows=0, outputs=256)
    assert step_buffers(srsv, 1) == StepBuffers(exchanges=32 + 160 + 384 + 384, gathered_rows=0, outputs=512)
    assert step_buffers(srsv, 2) == StepBuffers()  # not in the group, owns nothing


def test_buffers_scale_with_the_batch_and_add_up():
    small = parse(SMALL)
    at_4, at_8 = declared_buffers(small, 0), declared_buffers(small, 0, batch=8)
    assert at_8 == at_4.scaled(2) and at_8.total == 2 * at_4.total
    assert (at_4 + at_4).total == 2 * at_4.total


def test_a_lifted_real_model_declares_buffers_on_every_rank():
    ctx = make_context()
    module = Parser(ctx, (INPUTS / "din-ws2.mlir").read_text()).parse_module()
    LiftSparse().apply(ctx, module)
    per_rank = [declared_buffers(module, r) for r in range(2)]
    assert all(b.exchanges > 0 and b.outputs > 0 for b in per_rank), per_rank
    assert sum(b.gathered_rows for b in per_rank) > 0  # the item table's history rows, unpooled
    # table-wise: both ranks take part in every exchange, each sends what the other receives
    assert per_rank[0].exchanges == per_rank[1].exchanges
