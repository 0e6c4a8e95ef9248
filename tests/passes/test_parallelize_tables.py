"""parallelize-tables: the per-rank LPT partition, the lanes' verifier and the rewrite on every fixture."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, TensorType, f32, i64
from xdsl.ir import Block, Region
from xdsl.parser import Parser
from xdsl.passes import PassPipeline
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from sparselift.ir import make_context
from sparselift.ir.sched import ParallelOp, StepOp, YieldOp, values_used_from_outside
from sparselift.ir.sparse import LookupGradOp, LookupOp, LookupUpdateOp, PackOp, PermuteOp
from sparselift.passes import get_all_passes
from sparselift.passes.parallelize_tables import _partition

INPUTS = Path(__file__).parents[1] / "filecheck" / "inputs"


def context() -> Context:
    return make_context()


def run(module: ModuleOp, spec: str) -> ModuleOp:
    PassPipeline.parse_spec(get_all_passes(), spec).apply(context(), module)
    module.verify()
    return module


def text(module: ModuleOp) -> str:
    out = StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


def test_partition_balances_the_busiest_rank():
    # Rank 0 loads 5, 4, 3, 3, 3 (largest first): 5 | 4 | 3 -> lane 1 (7) | 3 -> lane 0 (8) | 3 -> lane 1 (10).
    ops = [f"r0_{w}_{i}" for i, w in enumerate([5, 4, 3, 3, 3])] + ["r1_a", "r1_b"]
    loads = {op: {0: float(op.split("_")[1])} for op in ops[:5]} | {"r1_a": {1: 1.0}, "r1_b": {1: 1.0}}
    lanes = _partition(ops, loads, 2)
    per_lane_rank0 = sorted(sum(loads[o].get(0, 0.0) for o in lane) for lane in lanes)
    assert per_lane_rank0 == [8.0, 10.0]  # LPT's answer (the optimum is 9 / 9; LPT is within 4/3 of it)
    # Rank 1's two ops go to different lanes; every lane keeps program order.
    assert {next(i for i, lane in enumerate(lanes) if o in lane) for o in ("r1_a", "r1_b")} == {0, 1}
    for lane in lanes:
        assert lane == sorted(lane, key=ops.index)


def test_partition_spreads_zero_cost_ops():
    ops = ["a", "b", "c", "d"]
    lanes = _partition(ops, {o: {0: 0.0} for o in ops}, 2)
    assert [len(lane) for lane in lanes] == [2, 2]


@pytest.mark.parametrize("fixture", sorted(p.name for p in INPUTS.glob("*.mlir")))
@pytest.mark.parametrize("groups", [2, 3])
def test_rewrite_keeps_every_op_and_is_idempotent(fixture, groups):
    module = Parser(context(), (INPUTS / fixture).read_text()).parse_module()
    run(module, "lift-sparse")
    before = sorted(op.name for op in module.walk())
    tables_before = sorted(
        op.table.name_str for op in module.walk() if isinstance(op, LookupOp | LookupUpdateOp | LookupGradOp)
    )
    run(module, f"parallelize-tables{{groups={groups}}}")
    after = [op.name for op in module.walk()]
    lanes = [op for op in module.walk() if isinstance(op, ParallelOp)]
    # Only sched.parallel ops and their lanes' yields are new.
    assert sorted(n for n in after if n not in ("sched.parallel", "sched.yield")) == sorted(
        n for n in before if n != "sched.yield"
    )
    assert after.count("sched.yield") == before.count("sched.yield") + sum(len(p.lanes) for p in lanes)
    assert (
        sorted(op.table.name_str for op in module.walk() if isinstance(op, LookupOp | LookupUpdateOp | LookupGradOp))
        == tables_before
    )
    for par in lanes:
        assert 2 <= len(par.lanes) <= groups
        assert isinstance(par.parent_op(), StepOp)
        for lane in par.lanes:
            assert all(
                isinstance(o, LookupOp | LookupUpdateOp | LookupGradOp | PackOp | YieldOp) for o in lane.block.ops
            )
    once = text(module)
    run(module, f"parallelize-tables{{groups={groups}}}")
    assert text(module) == once


def test_verifier_rejects_a_lane_reading_another_lane():
    t = TensorType(f32, [-1, 8])
    order = {"order": DenseArrayBase.from_list(i64, [0])}
    outer = Block(arg_types=[t])
    lane0, lane1 = Block(), Block()
    p = PermuteOp.create(operands=[outer.args[0]], result_types=[t], properties=dict(order))
    lane0.add_ops([p, YieldOp(p.outputs[0])])
    q = PermuteOp.create(operands=[p.outputs[0]], result_types=[t], properties=dict(order))
    lane1.add_ops([q, YieldOp(q.outputs[0])])
    par = ParallelOp([Region(lane0), Region(lane1)], [t, t])
    outer.add_op(par)
    # What the plan module passes into the lanes: only the value defined outside the op.
    assert values_used_from_outside(par) == [outer.args[0]]
    with pytest.raises(VerifyException, match="lane 1 uses a value of sparse.permute defined in lane 0"):
        par.verify()
