"""Building SparseLift attributes and ops from Python, and their verifiers."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    ModuleOp,
    StringAttr,
    TensorType,
    f16,
    f32,
    i32,
    i64,
)
from xdsl.ir import Block, Region
from xdsl.utils.exceptions import VerifyException

from sparselift.ir._syntax import DYNAMIC
from sparselift.ir.coll import AllReduceOp, AllToAllOp, GroupAttr, RoleAttr, SplitsAttr
from sparselift.ir.sched import CostAttr, StepOp, YieldOp
from sparselift.ir.sparse import (
    EmbeddingBagCollectionOp,
    FeatureAttr,
    LayoutAttr,
    OptimizerAttr,
    PackOp,
    PlacementAttr,
    TableAttr,
    UnpackOp,
)

DYN = DYNAMIC_INDEX  # a `?` dimension of a tensor type


def t(shape, elt):
    return TensorType(elt, shape)


def test_table_attr_fields_and_verify():
    table = TableAttr("t0", 1460, 16, f32, "mean")
    assert (table.name_str, table.rows.data, table.dim.data, table.pooling.data) == ("t0", 1460, 16, "mean")
    with pytest.raises(VerifyException, match="positive dim"):
        TableAttr("t0", 10, 0, f32)
    with pytest.raises(VerifyException, match="pooling 'max'"):
        TableAttr("t0", 10, 4, f32, "max")
    with pytest.raises(VerifyException, match="float dtype"):
        TableAttr("t0", 10, 4, i32)


def test_placement_kinds():
    assert PlacementAttr.table_wise("t", 1).rank_list == [1]
    rw = PlacementAttr.row_wise("t", [0, 1], [0, 5, 10])
    assert rw.bounds == [0, 5, 10] and rw.owner_ranks(2) == [0, 1]
    assert PlacementAttr.data_parallel("t").owner_ranks(3) == [0, 1, 2]
    with pytest.raises(VerifyException, match="one more row bound than ranks"):
        PlacementAttr.row_wise("t", [0, 1], [0, 10])
    with pytest.raises(VerifyException, match="increasing"):
        PlacementAttr.row_wise("t", [0, 1], [0, 7, 7])
    with pytest.raises(VerifyException, match="rank 2 is out of range"):
        PlacementAttr.table_wise("t", 2).verify_ranks(2)
    with pytest.raises(VerifyException, match="cover rows"):
        rw.verify_for_table(TableAttr("t", 12, 4, f32))


def test_optimizer_attr():
    # The kind and the hyperparameter group; hyperparameters are run-time values, not IR.
    assert OptimizerAttr("adam", 2).group.data == 2
    assert OptimizerAttr("partial_rowwise_adam").optimizer_kind == "partial_rowwise_adam"
    with pytest.raises(VerifyException, match="unknown optimizer 'rmsprop'"):
        OptimizerAttr("rmsprop")
    with pytest.raises(VerifyException, match="group must be non-negative"):
        OptimizerAttr("sgd", -1)


def test_layout_attr_segments_and_checks():
    layout = LayoutAttr([[(0, 16), (16, 8), (DYNAMIC, DYNAMIC)], [(0, 0), (0, 8), (DYNAMIC, DYNAMIC)]])
    assert layout.num_segments == 2
    assert layout.static_width(0) == 24 and layout.static_width(1) == 8
    assert layout.member_is_dynamic(2) and not layout.member_is_dynamic(0)
    with pytest.raises(VerifyException, match="overlaps"):
        LayoutAttr([[(0, 16), (8, 8)]])
    with pytest.raises(VerifyException, match="gap"):
        LayoutAttr([[(0, 8), (16, 8)]])


TABLES = [TableAttr("t0", 100, 16, f32), TableAttr("t1", 50, 8, f32, "mean")]


def _ebc(features, placements, result_types=None):
    """An EBC over TABLES; `result_types` overrides the types derived from the tables."""
    ids = [Block(arg_types=[t([DYN], i64)]).args[0] for _ in features]
    if result_types is None:
        return EmbeddingBagCollectionOp("emb", ids, ids, [], TABLES, features, placements)
    return EmbeddingBagCollectionOp.create(
        operands=[*ids, *ids],
        result_types=result_types,
        properties={
            "module": StringAttr("emb"),
            "tables": ArrayAttr(TABLES),
            "features": ArrayAttr(features),
            "placements": ArrayAttr(placements),
            "operandSegmentSizes": DenseArrayBase.from_list(i32, [len(ids), len(ids), 0]),
        },
    )


def _segments(*sizes):
    return DenseArrayBase.from_list(i32, list(sizes))


def test_embedding_bag_collection_builds_result_types_from_tables():
    op = _ebc(
        [FeatureAttr("f0", "t0"), FeatureAttr("f1", "t1"), FeatureAttr("f2", "t0")],
        [PlacementAttr.table_wise("t0", 0), PlacementAttr.data_parallel("t1")],
    )
    op.verify()
    assert [r.type for r in op.pooled] == [t([DYN, 16], f32), t([DYN, 8], f32), t([DYN, 16], f32)]


@pytest.mark.parametrize(
    "features, placements, message",
    [
        ([FeatureAttr("f0", "t9")], None, "maps to missing table 't9'"),
        (
            [FeatureAttr("f0", "t0")],
            [PlacementAttr.table_wise("t0", 0), PlacementAttr.table_wise("t0", 1), PlacementAttr.data_parallel("t1")],
            "table 't0' is placed twice",
        ),
        ([FeatureAttr("f0", "t0")], [PlacementAttr.table_wise("t0", 0)], "table 't1' is not placed"),
    ],
)
def test_embedding_bag_collection_verifier(features, placements, message):
    placements = placements or [PlacementAttr.table_wise("t0", 0), PlacementAttr.table_wise("t1", 1)]
    op = _ebc(features, placements, result_types=[t([DYN, 16], f32) for _ in features])
    with pytest.raises(VerifyException, match=message):
        op.verify()


def test_ebc_result_dtype_mismatch():
    op = _ebc(
        [FeatureAttr("f0", "t0")],
        [PlacementAttr.table_wise("t0", 0), PlacementAttr.table_wise("t1", 0)],
        result_types=[t([DYN, 16], f16)],
    )
    with pytest.raises(VerifyException, match="dtype f16 but table 't0' has dtype f32"):
        op.verify()


def _step(world_size, build):
    """A step whose forward region runs `build(block)` and yields what it returns."""
    fwd = Block(arg_types=[t([DYN], i32), t([DYN], f32)])
    values = build(fwd)
    fwd.add_op(YieldOp(*values))
    bwd = Block(arg_types=[v.type for v in values])
    bwd.add_op(YieldOp())
    step = StepOp("train", world_size, len(values), Region(fwd), Region(bwd))
    return ModuleOp([step])


def test_collectives_check_group_against_world_size():
    def build(block):
        a2a = AllToAllOp.create(
            operands=[block.args[0]],
            result_types=[t([DYN], i32)],
            properties={
                "group": GroupAttr([0, 1, 2]),
                "role": RoleAttr("input_lengths"),
                "splits": SplitsAttr([[1, 1, 1]] * 3),
                "operandSegmentSizes": _segments(1, 0, 0),
            },
        )
        block.add_op(a2a)
        return [a2a.outputs[0]]

    _step(3, build).verify()
    with pytest.raises(VerifyException, match="group rank 2 is out of range for world size 2"):
        _step(2, build).verify()


def test_role_must_fit_element_type():
    def build(block):
        ar = AllReduceOp.create(
            operands=[block.args[0]],
            result_types=[t([DYN], i32)],
            properties={"group": GroupAttr([0, 1]), "role": RoleAttr("dense_grad"), "reduction": StringAttr("sum")},
        )
        block.add_op(ar)
        return [ar.outputs[0]]

    with pytest.raises(VerifyException, match="role 'dense_grad' needs float data"):
        _step(2, build).verify()


def test_pack_unpack_roundtrip_types_and_mismatch():
    layout = LayoutAttr([[(0, 16), (16, 8)]])

    def build(block):
        a = Block(arg_types=[t([DYN, 16], f32), t([DYN, 8], f32)])
        pack = PackOp.create(operands=list(a.args), result_types=[t([DYN], f32)], properties={"layout": layout})
        block.add_op(pack)
        unpack = UnpackOp.create(
            operands=[pack.buffer], result_types=[t([DYN, 16], f32), t([DYN, 4], f32)], properties={"layout": layout}
        )
        block.add_op(unpack)
        return list(unpack.members)

    # The members come from a detached block: verify the unpack op on its own.
    module = _step(1, build)
    unpack = next(op for op in module.walk() if isinstance(op, UnpackOp))
    with pytest.raises(VerifyException, match="does not match its sparse.pack"):
        unpack.verify()


def test_cost_attr():
    c = CostAttr(4096, 256, 12.5, 11.0)
    assert c.measured == 11.0 and CostAttr(1, 1, 1.0).measured is None
    with pytest.raises(VerifyException, match="non-negative"):
        CostAttr(-1, 0, 0.0)


def test_verifier_messages_only_reachable_from_python():
    """Messages the text parsers can never produce (they reject the input first)."""
    from xdsl.dialects.builtin import FloatData, IntAttr

    from sparselift.ir._syntax import int_array

    with pytest.raises(VerifyException, match="a collective needs at least one role"):
        RoleAttr()
    with pytest.raises(VerifyException, match="all-to-all splits must be 2x2"):
        SplitsAttr.new((int_array([1, 2, 3]), IntAttr(2)))
    with pytest.raises(VerifyException, match="weighted must be 0 or 1"):
        FeatureAttr.new((StringAttr("f"), StringAttr("t"), FloatData(1.0), IntAttr(2)))
    with pytest.raises(VerifyException, match="table_wise needs exactly one rank"):
        PlacementAttr("t", "table_wise", [0, 1])
    with pytest.raises(VerifyException, match="data_parallel takes no ranks"):
        PlacementAttr("t", "data_parallel", [0])
    with pytest.raises(VerifyException, match="layout entries do not form whole segments"):
        LayoutAttr.new((int_array([0, 1, 2]), IntAttr(1), IntAttr(1)))
