"""`sparselift.passes.cost_model`: one cost model for annotate-cost, the planner and simulate.

The exported DLRM Kaggle IR at world size 2 (tests/filecheck/inputs, no torch) is lifted and
annotated; every op's figure must be what the simulator's primitives give for the same workload.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_srsv import context, parse  # tests/passes is on sys.path (rootdir-relative import)

from sparselift.ir.coll import AllReduceOp, AllToAllOp
from sparselift.ir.sparse import (
    FusedLookupOp,
    FusedTableOp,
    JoinSegmentsOp,
    LookupGradOp,
    LookupOp,
    LookupUpdateOp,
    PackOp,
    SplitSegmentsOp,
    UnpackOp,
)
from sparselift.passes import cost_model
from sparselift.passes.annotate_cost import annotate_step, op_cost
from sparselift.passes.pipeline import parse_pipeline, run_pipeline
from sparselift.passes.plan_predict import predict
from sparselift.passes.profiles import CPU_GLOO, H100_NCCL
from sparselift.passes.simulate import SimOptions, _StepModel, workload_from_module
from sparselift.passes.srsv import Sizer, build_srsv, steps_of

INPUTS = Path(__file__).resolve().parents[1] / "filecheck" / "inputs"
REL = 1e-6


def _exported():
    return parse((INPUTS / "dlrm-kaggle-ws2.mlir").read_text())


def _lifted(specs: tuple[str, ...] = ()):
    module = _exported()
    run_pipeline(module, parse_pipeline(["lift-sparse", *specs]), context())
    return module


class _Recorder:
    """A `_StepModel` at world size 2 whose exchanges, rings and copy ops are recorded in order."""

    def __init__(self, profile):
        workload = workload_from_module(_exported())  # no dense parameters: no dense all-reduce
        self.model = _StepModel(workload, profile, 2, SimOptions(aggregate_comm=False, latency_hiding=False))
        self.tables = {t.name: t for t in workload.tables}
        self.exchanges: list[tuple[float, float]] = []
        self.rings: list[float] = []
        self.copies: list[float] = []
        net, model = self.model.net, self.model
        exchange, ring, copy = net.exchange, net.ring_all_reduce, model._copy_op_us
        net.exchange = lambda ex: self._keep(self.exchanges, exchange(ex))  # type: ignore[method-assign]
        net.ring_all_reduce = lambda n: self._keep(self.rings, ring(n))  # type: ignore[method-assign]
        model._copy_op_us = lambda n: self._keep(self.copies, copy(n))  # type: ignore[method-assign]
        model.run()

    @staticmethod
    def _keep(into, value):
        into.append(value)
        return value


@pytest.mark.parametrize("profile", [CPU_GLOO, H100_NCCL])
def test_simulate_and_annotate_cost_agree_op_by_op(profile):
    module = _lifted()
    step = steps_of(module)[0]
    annotate_step(step, profile)
    view = build_srsv(step)
    sizer = Sizer(view.world_size, view.batch)
    sim = _Recorder(profile)
    # The simulator places the tables as export did (auto_shard at 2 ranks).
    for t in view.tables:
        placement = sim.model.plan[t.name]
        assert str(placement.kind) == t.placement, t.name
        if t.placement == "table_wise":
            assert placement.ranks == t.owner_ranks, t.name

    def cost(op):
        got = op_cost(op, view, profile, sizer)
        # What the pass wrote is the same figure, rounded to 3 decimals.
        assert op.attributes["cost"].est_us.data == pytest.approx(got.est_us, abs=5e-4)
        return got

    grads = {}
    checked = 0
    for op in view.graph.nodes:
        if isinstance(op, LookupOp):
            t = sim.tables[op.table.name_str]
            assert cost(op).est_us == pytest.approx(sim.model._lookup_us(t, 1.0), rel=REL), op.table.name_str
            checked += 1
        elif isinstance(op, LookupUpdateOp) and not op.dense:
            t = sim.tables[op.table.name_str]
            assert cost(op).est_us == pytest.approx(sim.model._update_us(t, 1.0), rel=REL), op.table.name_str
            checked += 1
        elif isinstance(op, LookupGradOp | LookupUpdateOp):  # a replicated table: gradient, then apply
            grads[op.table.name_str] = grads.get(op.table.name_str, 0.0) + cost(op).est_us
    for name, est in grads.items():
        assert est == pytest.approx(sim.model._dense_grad_us(sim.tables[name], 1.0), rel=REL), name
    assert checked == 26 + 15 and len(grads) == 11  # 26 lookups, 15 table-wise updates, 11 replicated

    # Exchanges, in the simulator's order for the table-wise group: lengths, ids, pooled outputs,
    # pooled gradients; then the replicated tables' gradient all-reduce (one ring). At 2 ranks the
    # busiest sender (annotate-cost) is also the busiest receiver (simulate takes the larger).
    by_role = {}
    for op in view.graph.nodes:
        if isinstance(op, AllToAllOp | AllReduceOp):
            by_role[op.role.role_list[0]] = cost(op)
    roles = ["input_lengths", "input_indices", "output_pooled", "grad_pooled"]
    assert len(sim.exchanges) == len(roles)
    for role, (us, sent) in zip(roles, sim.exchanges):
        assert by_role[role].est_us == pytest.approx(us, rel=REL), role
        assert by_role[role].bytes == pytest.approx(sent, rel=REL), role
    assert len(sim.rings) == 1 and by_role["sparse_grad"].est_us == pytest.approx(sim.rings[0], rel=REL)

    # Packs and unpacks of the table-wise group: the same copies. Not compared, by design:
    # - routes: annotate-cost halves the bytes the IR's route reads and writes (i64 offsets in,
    #   i32 lengths out), the simulator's closed form counts id bytes and 4-byte lengths only;
    # - the replicated group's pack/unpack the simulator charges (lift-sparse emits none for it).
    packs = [cost(op).est_us for op in view.graph.nodes if isinstance(op, PackOp | UnpackOp)]
    assert len(packs) == 6
    for est in packs:
        assert any(est == pytest.approx(c, rel=REL) for c in sim.copies), est


def test_fused_kernel_costs_its_tables_gathers_plus_one_launch_and_overhead():
    lifted = _lifted()
    plain = build_srsv(steps_of(lifted)[0])
    module = _lifted(["generate-kernels"])
    step = steps_of(module)[0]
    view = build_srsv(step)
    sizer = Sizer(view.world_size, view.batch)
    p = CPU_GLOO
    fused = [op for op in view.graph.nodes if isinstance(op, FusedLookupOp)]
    assert fused
    from_ir = 0
    for op in fused:
        names = [t.name_str for t in op.tables.data]
        assert len(names) > 1
        # The table-wise tables have no per-table op left: only the IR (the fused op) sizes them.
        from_ir += not any(n in {t.name for t in view.tables} for n in names)
        # The IR-sized entries are what the unoptimized step's SRSV says of those tables.
        assert cost_model.fused_entries(op, view) == [plain.table(n) for n in names]
        unfused = sum(cost_model.lookup(p, plain.table(n).bytes_gathered).gather for n in names)
        terms = cost_model.op_terms(op, view, p, sizer)
        want = unfused + p.kernel_launch_us + p.lookup_overhead_us
        assert terms.total == pytest.approx(want, rel=1e-9)
        assert terms.gather == pytest.approx(unfused, rel=1e-9) and terms.gather > 0
        assert op_cost(op, view, p, sizer).est_us == pytest.approx(want, rel=1e-9)  # annotate-cost charges it
    assert from_ir == 2  # the table-wise tables of rank 0 and of rank 1
    # The planner's prediction and annotate-cost agree on the optimized step, fused ops included.
    pred = predict(lifted, parse_pipeline("generate-kernels"), p)
    assert pred.est_us == pytest.approx(annotate_step(step, p), abs=1e-2)
    assert {k for k, _ in pred.breakdown} == set(cost_model.CATEGORIES) and "other" not in dict(pred.breakdown)


def test_categories_add_up_to_the_total_for_every_op_of_an_optimized_step():
    module = _lifted(["aggregate-comm{roles=output_pooled,grad_pooled}", "generate-kernels"])
    step = steps_of(module)[0]
    view = build_srsv(step)
    sizer = Sizer(view.world_size, view.batch)
    kinds = set()
    for op in view.graph.nodes:
        terms = cost_model.op_terms(op, view, CPU_GLOO, sizer)
        parts = terms.as_dict()
        assert set(parts) == set(cost_model.CATEGORIES)
        assert sum(parts.values()) == pytest.approx(terms.total, rel=1e-12, abs=1e-12), op.name
        assert terms.total == pytest.approx(op_cost(op, view, CPU_GLOO, sizer).est_us, rel=1e-12)
        if terms.total:
            kinds.add(op.name)
    assert any(isinstance(op, FusedTableOp) for op in view.graph.nodes)
    assert {"sparse.fused_lookup", "sparse.fused_lookup_update", "sparse.fused_lookup_grad"} <= kinds
    assert {"coll.all_to_all", "coll.all_reduce", "sparse.pack", "sparse.route"} <= kinds


def test_a_merged_dynamic_exchange_costs_the_copies_its_ranks_make():
    """Rows one per id merged with the pooled vectors (sequence-ws2, `item` rows from rank 0, `cat`
    rows, `user` and `tags` pooled from rank 1): forward, each rank sends one side only, and each
    side arrives from one source: the join and split copy nothing. Backward, every rank sends
    both sides' gradients (rows to rank 0, pooled to rank 1): the join copies them."""
    module = parse((INPUTS / "sequence-ws2.mlir").read_text())
    run_pipeline(module, parse_pipeline(["lift-sparse{rows=jagged}", "aggregate-comm"]), context())
    step = steps_of(module)[0]
    view = build_srsv(step)
    sizer = Sizer(view.world_size, view.batch)

    def copied(op) -> float:
        return cost_model.op_terms(op, view, CPU_GLOO, sizer).bytes

    forward = [op for op in step.forward.block.ops if isinstance(op, JoinSegmentsOp | SplitSegmentsOp)]
    backward_joins = [op for op in step.backward.block.ops if isinstance(op, JoinSegmentsOp)]
    assert forward and backward_joins
    # The two rows exchanges' join: rank 0 sends item rows only, rank 1 cat rows only.
    assert copied(forward[0]) == 0.0
    # Their join with the pooled vectors: rank 1 sends cat rows and pooled vectors.
    assert copied(forward[1]) > 0.0
    assert all(copied(op) == 0.0 for op in forward if isinstance(op, SplitSegmentsOp))
    assert copied(backward_joins[-1]) > 0.0
