"""Property: any valid SparseLift module survives print -> parse -> print unchanged (custom and generic)."""

from __future__ import annotations

import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseArrayBase,
    FlatSymbolRefAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    bf16,
    f16,
    f32,
    i32,
    i64,
)
from xdsl.ir import Block, Region
from xdsl.parser import Parser
from xdsl.printer import Printer

from sparselift.ir import make_context
from sparselift.ir.coll import (
    AllReduceOp,
    AllToAllOp,
    AllToAllStartOp,
    GroupAttr,
    HandleType,
    RoleAttr,
    SplitsAttr,
    WaitOp,
)
from sparselift.ir.sched import CostAttr, DenseOp, StepOp, YieldOp
from sparselift.ir.sparse import (
    EmbeddingBagCollectionOp,
    FeatureAttr,
    LayoutAttr,
    LookupOp,
    LookupUpdateOp,
    OptimizerAttr,
    PackOp,
    PlacementAttr,
    TableAttr,
    UnpackOp,
)

DYN = DYNAMIC_INDEX  # a `?` dimension of a tensor type
CTX = make_context()


def tensor(shape, elt):
    return TensorType(elt, shape)


def segment_sizes(*sizes):
    return DenseArrayBase.from_list(i32, list(sizes))


@st.composite
def placements_for(draw, table: TableAttr, world: int) -> PlacementAttr:
    kind = draw(st.sampled_from(["table_wise", "row_wise", "data_parallel"]))
    name = table.name_str
    if kind == "table_wise":
        return PlacementAttr.table_wise(name, draw(st.integers(0, world - 1)))
    if kind == "data_parallel" or table.rows.data < 2:
        return PlacementAttr.data_parallel(name)
    n = draw(st.integers(1, min(world, table.rows.data)))
    ranks = draw(st.permutations(range(world)))[:n]
    cuts = sorted(draw(st.sets(st.integers(1, table.rows.data - 1), min_size=n - 1, max_size=n - 1)))
    return PlacementAttr.row_wise(name, ranks, [0, *cuts, table.rows.data])


@st.composite
def modules(draw) -> ModuleOp:
    world = draw(st.integers(1, 4))
    n_tables = draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([f32, f16, bf16]))
    tables = [
        TableAttr(
            f"t{i}",
            draw(st.integers(1, 10_000)),
            draw(st.sampled_from([4, 8, 16, 64])),
            dtype,
            draw(st.sampled_from(["sum", "mean"])),
        )
        for i in range(n_tables)
    ]
    features = [
        FeatureAttr(
            f"f{i}",
            draw(st.sampled_from(tables)).name_str,
            draw(st.floats(0, 100, allow_nan=False).map(lambda x: round(x, 3))),
            draw(st.booleans()),
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    placements = [draw(placements_for(t, world)) for t in tables]
    id_type = draw(st.sampled_from([i32, i64]))
    n = len(features)
    n_weighted = sum(f.is_weighted for f in features)

    fwd = Block(arg_types=[tensor([DYN], id_type)] * n + [tensor([DYN], i64)] * n + [tensor([DYN], f32)] * n_weighted)
    ops = []
    ebc = EmbeddingBagCollectionOp(
        "emb_l", fwd.args[:n], fwd.args[n : 2 * n], fwd.args[2 * n :], tables, features, placements
    )
    ops.append(ebc)
    group = GroupAttr(list(range(world)))
    lengths = Block(arg_types=[tensor([DYN], i32)]).args[0]  # placeholder, replaced below
    a2a = AllToAllOp.create(
        operands=[fwd.args[n]],
        result_types=[tensor([DYN], i64)],
        properties={
            "group": group,
            "role": RoleAttr(draw(st.sampled_from(["input_lengths", "input_indices", "input_splits"]))),
            "splits": SplitsAttr([[draw(st.integers(0, 64)) for _ in range(world)] for _ in range(world)]),
            "operandSegmentSizes": segment_sizes(1, 0, 0),
        },
    )
    ops.append(a2a)
    lengths = a2a.outputs[0]
    start = AllToAllStartOp.create(
        operands=[fwd.args[n]],
        result_types=[HandleType([tensor([DYN], i64)])],
        properties={
            "group": group,
            "role": RoleAttr("input_indices"),
            "splits": SplitsAttr([[1] * world] * world),
            "operandSegmentSizes": segment_sizes(1, 0, 0),
        },
    )
    wait = WaitOp.create(operands=[start.handle], result_types=[tensor([DYN], i64)])
    ops += [start, wait]
    saved = [lengths, wait.outputs[0]]

    # One lookup per table, packed into one output buffer with a random segmentation.
    pooled = []
    for table, placement in zip(tables, placements):
        slots = draw(st.integers(1, 3))
        lookup = LookupOp.create(
            operands=[lengths, wait.outputs[0]],
            result_types=[tensor([DYN, table.dim.data * slots], table.dtype)],
            properties={
                "table": table,
                "placement": placement,
                "slots": DenseArrayBase.from_list(i64, list(range(slots))),
                "operandSegmentSizes": segment_sizes(1, 1, 0),
            },
        )
        if draw(st.booleans()):
            lookup.attributes["cost"] = CostAttr(
                draw(st.integers(0, 10**9)),
                draw(st.integers(0, 10**6)),
                draw(st.floats(0, 1e6, allow_nan=False)),
                draw(st.none() | st.floats(0, 1e6, allow_nan=False)),
            )
        ops.append(lookup)
        pooled.append(lookup.pooled)
    segments = []
    for _ in range(draw(st.integers(1, 3))):
        present = [draw(st.booleans()) for _ in pooled]
        cursor, seg = 0, []
        for p, v in zip(present, pooled):
            width = v.type.get_shape()[1]
            seg.append((cursor, width) if p else (0, 0))
            cursor += width if p else 0
        segments.append(seg)
    layout = LayoutAttr(segments)
    rank = draw(st.none() | st.integers(0, world - 1))
    props = {"layout": layout} | ({} if rank is None else {"rank": IntegerAttr(rank, i64)})
    pack = PackOp.create(operands=pooled, result_types=[tensor([DYN], dtype)], properties=props)
    unpack = UnpackOp.create(operands=[pack.buffer], result_types=[p.type for p in pooled], properties=dict(props))
    reduce = AllReduceOp.create(
        operands=[pack.buffer],
        result_types=[pack.buffer.type],
        properties={
            "group": group,
            "role": RoleAttr("output_pooled", "grad_pooled"),
            "reduction": StringAttr(draw(st.sampled_from(["sum", "mean"]))),
        },
    )
    dense = DenseOp.create(
        operands=[ebc.pooled[0]],
        result_types=[tensor([DYN, 1], f32)],
        properties={"callee": FlatSymbolRefAttr("top_mlp"), "phase": StringAttr("forward")},
    )
    ops += [pack, unpack, reduce, dense]
    outputs = [dense.res[0], *unpack.members]
    for op in ops:
        fwd.add_op(op)
    fwd.add_op(YieldOp(*outputs, *saved))

    bwd = Block(arg_types=[v.type for v in [*outputs, *saved]])
    grads = bwd.args[1 : 1 + len(tables)]
    kind = draw(st.sampled_from(["sgd", "adagrad", "rowwise_adagrad", "adam", "adamw", "partial_rowwise_adam"]))
    optimizer = OptimizerAttr(kind, draw(st.integers(0, 3)))
    for table, placement, grad in zip(tables, placements, grads):
        slots = grad.type.get_shape()[1] // table.dim.data
        bwd.add_op(
            LookupUpdateOp.create(
                operands=[bwd.args[-2], bwd.args[-1], grad],
                properties={
                    "table": table,
                    "placement": placement,
                    "optimizer": optimizer,
                    "slots": DenseArrayBase.from_list(i64, list(range(slots))),
                    "operandSegmentSizes": segment_sizes(1, 1, 0, 1),
                },
            )
        )
    bwd.add_op(YieldOp())
    step = StepOp("train", world, len(outputs), Region(fwd), Region(bwd))
    module = ModuleOp([step])
    module.verify()
    # Return text: a failing example then shows as readable IR rather than a huge object repr.
    return print_module(module)


def print_module(module: ModuleOp, generic: bool = False) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(module)
    return out.getvalue()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(modules())
def test_print_parse_print_is_stable(text: str):
    module = Parser(CTX, text).parse_module()
    reparsed = Parser(CTX, text).parse_module()
    reparsed.verify()
    assert print_module(reparsed) == text
    generic = print_module(module, generic=True)
    from_generic = Parser(CTX, generic).parse_module()
    from_generic.verify()
    assert print_module(from_generic) == text
    assert print_module(from_generic, generic=True) == generic
