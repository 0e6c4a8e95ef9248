"""Type checks shared by the `sparse` ops' verifiers: id tensors, pooled values, table gradients.

The per-table ops (`sparse.lookup` ...) and the fused multi-table ops (`sparse.fused_lookup` ...)
read the same operands and produce the same values; these checks say so once, with messages
that name what is wrong (`what`).
"""

from __future__ import annotations

from xdsl.dialects.builtin import AnyFloat, IntegerType, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.utils.exceptions import VerifyException

from sparselift.ir._syntax import DYNAMIC, dim, tensor_type
from sparselift.ir.sparse_attrs import TableAttr


def check_int_1d(value: SSAValue, what: str) -> TensorType:
    t = tensor_type(value, what)
    if len(t.get_shape()) != 1 or not isinstance(t.element_type, IntegerType):
        raise VerifyException(f"{what} must be a 1-D integer tensor, got {t}")
    return t


def check_float_1d(value: SSAValue, what: str) -> TensorType:
    t = tensor_type(value, what)
    if len(t.get_shape()) != 1 or not isinstance(t.element_type, AnyFloat):
        raise VerifyException(f"{what} must be a 1-D float tensor, got {t}")
    return t


def check_ids(lengths: SSAValue, indices: SSAValue, weights: SSAValue | None, of: str) -> None:
    """The received ids a table op reads: 1-D integer lengths, i32 or i64 indices, float weights
    (`of` names the reader in messages, e.g. "table 't0'")."""
    check_int_1d(lengths, f"lengths of {of}")
    it = check_int_1d(indices, f"indices of {of}")
    if it.element_type not in (IntegerType(32), IntegerType(64)):
        raise VerifyException(f"indices of {of} must be i32 or i64, got {it.element_type}")
    if weights is not None:
        check_float_1d(weights, f"weights of {of}")


def check_pooled(type_: Attribute, table: TableAttr, what: str) -> None:
    """A pooled value or its gradient: [bags, dim * k] in the table's dtype."""
    t = tensor_type(type_, what)
    shape = t.get_shape()
    if len(shape) != 2:
        raise VerifyException(f"{what} must be 2-D [bags, dim], got {t}")
    if t.element_type != table.dtype:
        raise VerifyException(f"{what} has dtype {t.element_type} but table '{table.name_str}' has dtype {table.dtype}")
    if shape[1] >= 0 and shape[1] % table.dim.data:
        raise VerifyException(f"{what} has width {shape[1]} but table '{table.name_str}' has dim {table.dim.data}")


def check_slots_width(type_: Attribute, table: TableAttr, slots: int, what: str) -> None:
    """A table-local pooled value (or its gradient): [bags, dim * slots] in the table's dtype."""
    check_pooled(type_, table, what)
    width = dim(tensor_type(type_, what), 1)
    want = table.dim.data * slots
    if width not in (DYNAMIC, want):
        raise VerifyException(f"{what} has width {width}, expected dim {table.dim.data} x {slots} slots = {want}")


def check_table_grad(type_: Attribute, table: TableAttr, what: str) -> None:
    """A whole-table gradient: the table's [rows, dim] in its dtype."""
    t = tensor_type(type_, what)
    want = [table.rows.data, table.dim.data]
    if t.get_shape() != tuple(want) and list(t.get_shape()) != want:
        raise VerifyException(f"{what} must have the table's shape {want}, got {t}")
    if t.element_type != table.dtype:
        raise VerifyException(f"{what} has dtype {t.element_type} but table '{table.name_str}' has dtype {table.dtype}")
