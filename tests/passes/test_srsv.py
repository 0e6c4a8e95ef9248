"""The SRSV: per-table and per-collective resources of a lifted step, and its dependency graph."""

from __future__ import annotations

import networkx as nx
import pytest
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.parser import Parser

from sparselift.ir import make_context
from sparselift.ir.coll import AllToAllOp
from sparselift.ir.sched import DenseOp, StepOp
from sparselift.ir.sparse import LookupOp, LookupUpdateOp, PackOp, RouteOp
from sparselift.passes.lift_sparse import LiftSparse
from sparselift.passes.srsv import PrintSRSV, build_srsv, steps_of


def context() -> Context:
    return make_context()


def parse(text: str) -> ModuleOp:
    module = Parser(context(), text).parse_module()
    module.verify()
    return module


# Two ranks, batch B = 4. Table "t0" (dim 8, f32) lives on rank 0 and serves feature f0 with
# pooling factor 2; table "t1" (dim 16, f32) lives on rank 1 and serves f1 with pooling factor 3.
# This is what `lift-sparse` makes of one table-wise group (names made readable).
SMALL = """
sched.step @small world_size = 2 outputs = 1 attributes {batch = "4"} {
^bb0(%ids0: tensor<?xi64>, %off0: tensor<?xi64>, %ids1: tensor<?xi64>, %off1: tensor<?xi64>):
  %len, %idx, %splits = sparse.route ids(%ids0, %ids1 : tensor<?xi64>, tensor<?xi64>) offsets(%off0, %off1 : tensor<?xi64>, tensor<?xi64>) features = [#sparse.feature<"f0" -> "t0", pooling_factor = 2.0>, #sparse.feature<"f1" -> "t1", pooling_factor = 3.0>] placements = [#sparse.placement<"t0", table_wise, rank = 0>, #sparse.placement<"t1", table_wise, rank = 1>] world_size = 2 {group = "emb/table_wise"} -> tensor<?xi32>, tensor<?xi64>, tensor<2xi64>
  %rlen = coll.all_to_all %len on #coll.group<[0, 1]> role #coll.role<input_lengths> splits #coll.splits<[[1, 1], [1, 1]]> {group = "emb/table_wise"} : tensor<?xi32> -> tensor<?xi32>
  %ridx, %rsplits = coll.all_to_all %idx on #coll.group<[0, 1]> role #coll.role<input_indices> send_splits(%splits : tensor<2xi64>) {group = "emb/table_wise"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>
  %pool0 = sparse.lookup %rlen, %ridx table = #sparse.table<"t0", rows = 100, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] {group = "emb/table_wise"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x8xf32>
  %pool1 = sparse.lookup %rlen, %ridx table = #sparse.table<"t1", rows = 50, dim = 16, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 1> slots = [0] {group = "emb/table_wise"} : tensor<?xi32>, tensor<?xi64> -> tensor<?x16xf32>
  %buf0 = sparse.pack %pool0 layout = #sparse.layout<[[0 : 8], [0 : 8]]> on_rank 0 {group = "emb/table_wise"} : tensor<?x8xf32> -> tensor<?xf32>
  %buf1 = sparse.pack %pool1 layout = #sparse.layout<[[0 : 16], [0 : 16]]> on_rank 1 {group = "emb/table_wise"} : tensor<?x16xf32> -> tensor<?xf32>
  %recv = coll.all_to_all %buf0, %buf1 on #coll.group<[0, 1]> role #coll.role<output_pooled> splits #coll.splits<[[8, 8], [16, 16]]> {group = "emb/table_wise"} : tensor<?xf32>, tensor<?xf32> -> tensor<?xf32>
  %u0, %u1 = sparse.unpack %recv layout = #sparse.layout<[[0 : 8, 0 : 0], [0 : 0, 0 : 16]]> {group = "emb/table_wise"} : tensor<?xf32> -> tensor<?x8xf32>, tensor<?x16xf32>
  %p0, %p1 = sparse.permute %u0, %u1 order = [0, 1] {group = "emb/table_wise"} : tensor<?x8xf32>, tensor<?x16xf32> -> tensor<?x8xf32>, tensor<?x16xf32>
  %out = sched.dense @top(%p0, %p1) phase "forward" : (tensor<?x8xf32>, tensor<?x16xf32>) -> tensor<?xf32>
  sched.yield %out, %rlen, %ridx : tensor<?xf32>, tensor<?xi32>, tensor<?xi64>
} backward {
^bb0(%g: tensor<?xf32>, %slen: tensor<?xi32>, %sidx: tensor<?xi64>):
  %g0, %g1 = sched.dense @top(%g) phase "backward" : (tensor<?xf32>) -> (tensor<?x8xf32>, tensor<?x16xf32>)
  %gbuf = sparse.pack %g0, %g1 layout = #sparse.layout<[[0 : 8, 0 : 0], [0 : 0, 0 : 16]]> {group = "emb/table_wise"} : tensor<?x8xf32>, tensor<?x16xf32> -> tensor<?xf32>
  %grecv = coll.all_to_all %gbuf on #coll.group<[0, 1]> role #coll.role<grad_pooled> splits #coll.splits<[[8, 16], [8, 16]]> {group = "emb/table_wise"} : tensor<?xf32> -> tensor<?xf32>
  %gt0 = sparse.unpack %grecv layout = #sparse.layout<[[0 : 8], [0 : 8]]> on_rank 0 {group = "emb/table_wise"} : tensor<?xf32> -> tensor<?x8xf32>
  %gt1 = sparse.unpack %grecv layout = #sparse.layout<[[0 : 16], [0 : 16]]> on_rank 1 {group = "emb/table_wise"} : tensor<?xf32> -> tensor<?x16xf32>
  sparse.lookup_update %slen, %sidx grad %gt0 table = #sparse.table<"t0", rows = 100, dim = 8, f32, sum> placement = #sparse.placement<"t0", table_wise, rank = 0> slots = [0] optimizer = #sparse.optimizer<sgd> {group = "emb/table_wise"} : tensor<?xi32>, tensor<?xi64>, tensor<?x8xf32>
  sparse.lookup_update %slen, %sidx grad %gt1 table = #sparse.table<"t1", rows = 50, dim = 16, f32, sum> placement = #sparse.placement<"t1", table_wise, rank = 1> slots = [0] optimizer = #sparse.optimizer<sgd> {group = "emb/table_wise"} : tensor<?xi32>, tensor<?xi64>, tensor<?x16xf32>
  sched.yield
}
"""


@pytest.fixture
def small():
    module = parse(SMALL)
    step = steps_of(module)[0]
    return step, build_srsv(step)


def ops(step: StepOp, cls, **where):
    found = [op for op in step.walk() if isinstance(op, cls)]
    if "table" in where:
        found = [op for op in found if op.table.name_str == where["table"]]
    if "role" in where:
        found = [op for op in found if op.role.role_list == [where["role"]]]
    if "phase" in where:
        found = [op for op in found if op.phase.data == where["phase"]]
    return found


def test_table_entries_match_hand_computed_numbers(small):
    _, view = small
    assert view.batch == 4 and view.world_size == 2
    t0, t1 = view.tables
    # t0 on rank 0: it gathers the f0 ids of both ranks: B x W x pf = 4 x 2 x 2 = 16 rows of
    # 8 f32 (32 B) = 512 B; the table is 100 x 8 x 4 = 3200 B; the pooled output has one row per
    # received bag (W x B = 8) and 8 columns: 8 x 8 x 4 = 256 B.
    assert (t0.name, t0.group, t0.placement, t0.owner_ranks) == ("t0", "emb/table_wise", "table_wise", (0,))
    assert (t0.rows, t0.dim, t0.dtype, t0.dtype_bytes, t0.pooling) == (100, 8, "f32", 4, "sum")
    assert t0.features == ("f0",) and t0.pooling_factor == 2.0
    assert t0.lookups_per_rank == 16
    assert t0.bytes_gathered == 512
    assert t0.table_bytes_per_owner == (3200,)
    assert t0.workspace_bytes == 256
    # t1 on rank 1: 4 x 2 x 3 = 24 rows of 16 f32 (64 B) = 1536 B; 50 x 16 x 4 = 3200 B;
    # workspace 8 bags x 16 x 4 = 512 B.
    assert (t1.name, t1.owner_ranks, t1.features, t1.pooling_factor) == ("t1", (1,), ("f1",), 3.0)
    assert (t1.lookups_per_rank, t1.bytes_gathered, t1.table_bytes_per_owner, t1.workspace_bytes) == (
        24,
        1536,
        (3200,),
        512,
    )
    assert view.table("t1") is t1


def test_collective_bytes_per_peer_match_hand_computed_numbers(small):
    _, view = small
    lengths, indices, pooled, grads = view.collectives
    # input_lengths (i32): every rank sends 1 length per sample to each rank: 1 x 4 x 4 B = 16 B.
    assert (lengths.roles, lengths.phase, lengths.dtype, lengths.sizing) == (
        ("input_lengths",),
        "forward",
        "i32",
        "static",
    )
    assert lengths.bytes_matrix == ((16, 16), (16, 16))
    assert lengths.total_bytes == 32  # off-diagonal only: 16 + 16
    # input_indices (i64, dynamic splits): rank 0 serves f0 (pf 2): 4 x 2 ids x 8 B = 64 B from
    # every rank; rank 1 serves f1 (pf 3): 4 x 3 x 8 B = 96 B.
    assert indices.sizing == "estimated" and indices.dtype == "i64"
    assert indices.bytes_matrix == ((64, 96), (64, 96))
    assert indices.total_bytes == 96 + 64
    assert indices.max_sent_bytes == 96
    # output_pooled (f32): rank 0 sends its 8 pooled columns for each rank's 4 samples
    # (8 x 4 x 4 B = 128 B per peer), rank 1 its 16 columns (16 x 4 x 4 B = 256 B per peer).
    assert pooled.bytes_matrix == ((128, 128), (256, 256))
    assert pooled.total_bytes == 128 + 256
    assert pooled.group_ranks == (0, 1) and pooled.group == "emb/table_wise"
    assert pooled.layout_map == {"lookup:t0@0": ((0, 0, 8), (1, 0, 8)), "lookup:t1@1": ((0, 0, 16), (1, 0, 16))}
    # grad_pooled (backward): every rank sends 8 gradient columns to rank 0 (128 B) and 16 to
    # rank 1 (256 B).
    assert grads.phase == "backward"
    assert grads.bytes_matrix == ((128, 256), (128, 256))
    assert grads.total_bytes == 256 + 128
    assert grads.layout_map == {"@top[0]": ((0, 0, 8),), "@top[1]": ((1, 0, 16),)}
    assert [c.index for c in view.collectives] == [0, 1, 2, 3]


def test_independent_queries(small):
    step, view = small
    look0, look1 = ops(step, LookupOp)
    upd0, upd1 = ops(step, LookupUpdateOp)
    pack0, _ = [op for op in ops(step, PackOp) if op.rank is not None]
    a2a_lengths = ops(step, AllToAllOp, role="input_lengths")[0]
    a2a_indices = ops(step, AllToAllOp, role="input_indices")[0]
    a2a_pooled = ops(step, AllToAllOp, role="output_pooled")[0]
    assert view.independent(look0, look1)
    assert view.independent(pack0, look1)
    assert view.independent(upd0, upd1)
    assert not view.independent(look0, a2a_pooled)  # the pooled exchange reads the lookup
    assert not view.independent(look0, upd0)  # through the dense adjoint and the saved ids
    assert not view.independent(look0, look0)
    # No value flows between the lengths and indices exchanges, but collectives keep their order.
    assert not view.independent(a2a_lengths, a2a_indices)
    assert view.graph.edges[a2a_lengths, a2a_indices]["kind"] == "order"
    route = ops(step, RouteOp)[0]
    assert view.graph.edges[route, a2a_lengths]["kind"] == "ssa"
    # The backward update reads the received lengths the forward saved.
    assert view.graph.edges[a2a_lengths, upd0]["kind"] == "saved"
    fwd, bwd = ops(step, DenseOp, phase="forward")[0], ops(step, DenseOp, phase="backward")[0]
    assert view.graph.has_edge(fwd, bwd)
    assert view.graph.nodes[look0]["phase"] == "forward" and view.graph.nodes[upd0]["phase"] == "backward"
    assert nx.is_directed_acyclic_graph(view.graph)
    # 12 forward and 8 backward ops, less the two step terminators.
    assert view.graph.number_of_nodes() == 18


def test_critical_path_on_known_costs(small):
    step, view = small
    look0, look1 = ops(step, LookupOp)
    costs = {look0: 10.0, look1: 30.0}

    def cost(op):
        return costs.get(op, 1.0)

    length, path = view.critical_path(cost)
    # route, lengths a2a, indices a2a, lookup t1 (30), pack on rank 1, pooled a2a, unpack,
    # permute, dense fwd, dense bwd, grad pack, grad a2a, unpack on rank 1, update t1:
    # 13 ops of cost 1 and the t1 lookup (the last two may as well be the t0 unpack and update).
    assert length == 13 + 30
    assert look1 in path and look0 not in path
    assert len(path) == 14
    assert path[0].name == "sparse.route" and path[-1].name == "sparse.lookup_update"
    # A mapping works too; without costs (no #sched.cost attributes) everything weighs 0.
    assert view.critical_path({look0: 5.0})[0] == 5.0
    assert view.critical_path()[0] == 0.0


def test_to_table_lists_tables_and_bytes_per_peer(small, capsys):
    _, view = small
    text = view.to_table()
    assert text.startswith("SRSV @small: world_size = 2, batch = 4\n")
    lines = text.splitlines()
    t0 = next(line for line in lines if line.strip().startswith("t0 "))
    assert t0.split() == [
        "t0",
        "emb/table_wise",
        "table_wise",
        "0",
        "100",
        "8",
        "f32",
        "sum",
        "f0",
        "2",
        "16",
        "512",
        "3200",
        "256",
    ]
    indices = next(line for line in lines if "input_indices" in line)
    assert "estimated" in indices and "s0->[64, 96] s1->[64, 96]" in indices
    pooled = next(line for line in lines if "output_pooled" in line)
    assert pooled.split()[:4] == ["2", "forward", "coll.all_to_all", "output_pooled"]
    assert "384" in pooled.split() and "s0->[128, 128] s1->[256, 256]" in pooled
    # The pass prints the same table for every step and leaves the IR alone.
    module = parse(SMALL)
    before = str(module)
    PrintSRSV().apply(context(), module)
    assert capsys.readouterr().out == text
    assert str(module) == before


def test_batch_argument_and_missing_batch():
    module = parse(SMALL)
    step = steps_of(module)[0]
    assert build_srsv(step, batch=8).table("t0").lookups_per_rank == 32
    del step.attributes["batch"]
    with pytest.raises(ValueError, match="batch"):
        build_srsv(step)
    step.attributes["batch"] = StringAttr("2")
    assert build_srsv(step).collectives[0].bytes_matrix == ((8, 8), (8, 8))


def test_exported_two_tower_has_an_entry_per_table_and_bytes_per_collective():
    from sparselift.codegen.table_facts import describe_tables
    from sparselift.frontend.export import export
    from sparselift.models import build

    model, inputs = build("two-tower", rows_cap=2000, batch_size=16)
    program = export(model, inputs, world_size=2, sharding="auto")
    table_names = {t.name for t in describe_tables(program.module)}
    module = program.module
    LiftSparse().apply(context(), module)
    step = steps_of(module)[0]
    view = build_srsv(step)
    assert view.batch == 16
    assert {t.name for t in view.tables} == table_names
    for t in view.tables:
        assert t.features and t.pooling_factor > 0 and t.lookups_per_rank > 0 and t.bytes_gathered > 0
        assert t.workspace_bytes > 0 and all(b > 0 for b in t.table_bytes_per_owner)
    assert view.collectives
    n_collectives = sum(op.name.startswith("coll.") for op in step.walk())
    assert len(view.collectives) == n_collectives
    for c in view.collectives:
        assert c.sizing in ("static", "estimated")
        assert c.total_bytes > 0, c
    assert all(t.name in view.to_table() for t in view.tables)


def async_and_parallel() -> str:
    """SMALL with the indices exchange split into start/wait and the lookups in two lanes."""
    text = SMALL.replace(
        "  %ridx, %rsplits = coll.all_to_all %idx on #coll.group<[0, 1]> role #coll.role<input_indices> "
        'send_splits(%splits : tensor<2xi64>) {group = "emb/table_wise"} : tensor<?xi64> -> tensor<?xi64>, tensor<2xi64>\n',
        "  %h = coll.all_to_all_start %idx on #coll.group<[0, 1]> role #coll.role<input_indices> "
        "send_splits(%splits : tensor<2xi64>) : tensor<?xi64> -> !coll.handle<tensor<?xi64>, tensor<2xi64>>\n"
        "  %ridx, %rsplits = coll.wait %h : !coll.handle<tensor<?xi64>, tensor<2xi64>> -> tensor<?xi64>, tensor<2xi64>\n",
    )
    lines = text.splitlines(keepends=True)
    i0 = next(i for i, line in enumerate(lines) if line.startswith("  %pool0 = "))
    look0, look1 = lines[i0], lines[i0 + 1]
    lines[i0 : i0 + 2] = [
        "  %pool0, %pool1 = sched.parallel lanes 2 -> (tensor<?x8xf32>, tensor<?x16xf32>) {\n",
        "  " + look0.replace("%pool0 =", "%a ="),
        "    sched.yield %a : tensor<?x8xf32>\n",
        "  }, {\n",
        "  " + look1.replace("%pool1 =", "%b ="),
        "    sched.yield %b : tensor<?x16xf32>\n",
        "  }\n",
    ]
    return "".join(lines)


def test_parallel_lanes_and_async_collectives():
    from sparselift.ir.coll import AllToAllStartOp, WaitOp
    from sparselift.ir.sched import ParallelOp

    module = parse(async_and_parallel())
    step = steps_of(module)[0]
    view = build_srsv(step)
    assert [t.name for t in view.tables] == ["t0", "t1"]
    start = ops(step, AllToAllStartOp)[0]
    wait = ops(step, WaitOp)[0]
    indices = view.collective(start)
    assert indices.op_name == "coll.all_to_all_start" and indices.bytes_matrix == ((64, 96), (64, 96))
    look0, look1 = ops(step, LookupOp)
    parallel = ops(step, ParallelOp)[0]
    pack0 = next(op for op in ops(step, PackOp) if op.rank is not None and op.rank.value.data == 0)
    assert view.independent(look0, look1)
    assert view.graph.has_edge(start, wait) and view.graph.has_edge(wait, look0)
    assert view.graph.has_edge(look1, parallel) and view.graph.has_edge(parallel, pack0)
    # The lane yields are nodes (they carry costs too); the step's own yields are not.
    assert sum(op.name == "sched.yield" for op in view.graph.nodes) == 2
    # Only the slower lane counts on the critical path.
    length, path = view.critical_path(lambda op: {look0: 10.0, look1: 30.0}.get(op, 0.0))
    assert length == 30.0 and look1 in path and look0 not in path
    # The ordering chain goes through the start (the wait is local).
    lengths = ops(step, AllToAllOp, role="input_lengths")[0]
    assert view.graph.edges[lengths, start]["kind"] == "order"
