"""The fused table ops built from Python (as generate-kernels builds them), and the ir modules'
one-way dependencies."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from xdsl.dialects.builtin import DYNAMIC_INDEX, DenseArrayBase, TensorType, f32, i32, i64
from xdsl.ir import Block
from xdsl.utils.exceptions import VerifyException

from sparselift.ir.sparse import (
    FUSED_TABLE_OPS,
    FusedLookupGradOp,
    FusedLookupOp,
    FusedLookupUpdateOp,
    OptimizerAttr,
    PlacementAttr,
    Sparse,
    TableAttr,
)

IR = Path(__file__).resolve().parents[2] / "sparselift" / "ir"
TABLES = [TableAttr("t0", 10, 4, f32), TableAttr("t1", 20, 8, f32)]
PLACED = [PlacementAttr.table_wise("t0", 1), PlacementAttr.table_wise("t1", 1)]
SLOTS = [DenseArrayBase.from_list(i64, [0]), DenseArrayBase.from_list(i64, [1, 2])]


def _values(*types):
    return Block(arg_types=list(types)).args


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at module level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_sched_needs_nothing_from_sparse():
    assert not {m for m in _imports(IR / "sched.py") if m.startswith("sparselift.ir.sparse")}


@pytest.mark.parametrize("module", ["sparse_attrs.py", "sparse_buffers.py", "sparse_fused.py", "_checks.py"])
def test_sparse_parts_do_not_import_the_facade(module):
    """`sparse.py` re-exports its parts; a part importing it back would be a cycle."""
    assert "sparselift.ir.sparse" not in _imports(IR / module)


def test_one_dialect_holds_the_fused_ops():
    assert set(FUSED_TABLE_OPS) <= set(Sparse.operations)
    assert "sched.kernel" not in {op.name for op in Sparse.operations}


def test_weights_are_an_optional_operand_not_an_operand_count():
    lengths, indices, weights = _values(
        TensorType(i32, [DYNAMIC_INDEX]), TensorType(i64, [DYNAMIC_INDEX]), TensorType(f32, [DYNAMIC_INDEX])
    )
    pooled = [TensorType(f32, [DYNAMIC_INDEX, 4]), TensorType(f32, [DYNAMIC_INDEX, 16])]
    with_weights = FusedLookupOp(lengths, indices, weights, TABLES, PLACED, SLOTS, pooled)
    without = FusedLookupOp(lengths, indices, None, TABLES, PLACED, SLOTS, pooled)
    with_weights.verify()
    without.verify()
    assert with_weights.weights is weights and without.weights is None
    assert list(with_weights.operands) == [lengths, indices, weights]
    assert with_weights.slot_lists == [[0], [1, 2]] and with_weights.owner_ranks(2) == [1]


def test_update_operands_are_the_ids_then_one_gradient_per_table():
    lengths, indices, g0, g1 = _values(
        TensorType(i32, [DYNAMIC_INDEX]),
        TensorType(i64, [DYNAMIC_INDEX]),
        TensorType(f32, [DYNAMIC_INDEX, 4]),
        TensorType(f32, [DYNAMIC_INDEX, 16]),
    )
    update = FusedLookupUpdateOp(lengths, indices, None, [g0, g1], TABLES, PLACED, SLOTS, OptimizerAttr("sgd"))
    update.verify()
    assert list(update.operands) == [lengths, indices, g0, g1] and list(update.grads) == [g0, g1]
    swapped = FusedLookupUpdateOp(lengths, indices, None, [g1, g0], TABLES, PLACED, SLOTS, OptimizerAttr("sgd"))
    with pytest.raises(VerifyException, match="gradient for table 't0' must be \\[bags, 4\\]"):
        swapped.verify()


def test_table_gradients_have_the_tables_shapes():
    lengths, indices, g0, g1 = _values(
        TensorType(i32, [DYNAMIC_INDEX]),
        TensorType(i64, [DYNAMIC_INDEX]),
        TensorType(f32, [DYNAMIC_INDEX, 4]),
        TensorType(f32, [DYNAMIC_INDEX, 16]),
    )
    replicated = [PlacementAttr.data_parallel("t0"), PlacementAttr.data_parallel("t1")]
    grads = FusedLookupGradOp(
        lengths,
        indices,
        None,
        [g0, g1],
        TABLES,
        replicated,
        SLOTS,
        [TensorType(f32, [10, 4]), TensorType(f32, [20, 8])],
    )
    grads.verify()
    wrong = FusedLookupGradOp(
        lengths,
        indices,
        None,
        [g0, g1],
        TABLES,
        replicated,
        SLOTS,
        [TensorType(f32, [10, 4]), TensorType(f32, [10, 8])],
    )
    with pytest.raises(VerifyException, match="table gradient of 't1' must have the table's shape \\[20, 8\\]"):
        wrong.verify()
