"""Small parse/print helpers shared by the SparseLift dialects' custom syntaxes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

DYNAMIC = -1
"""Encodes `?` (a size known only at run time) in integer lists."""


def format_float(value: float) -> str:
    """Print a float so that the MLIR lexer reads it back as a float (`1.0e-08`, not `1e-08`)."""
    text = repr(float(value))
    mantissa, sep, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + sep + exponent


def parse_keyword_value(parser: AttrParser, keyword: str, parse: Callable[[], object]) -> object:
    """Parse `keyword = value`."""
    parser.parse_keyword(keyword)
    parser.parse_punctuation("=")
    return parse()


def parse_float_or_int(parser: AttrParser) -> float:
    value = parser.parse_optional_number()
    if value is None:
        parser.raise_error("expected a number")
    return float(value)


def parse_int_or_dynamic(parser: AttrParser) -> int:
    if parser.parse_optional_punctuation("?") is not None:
        return DYNAMIC
    return parser.parse_integer(allow_boolean=False)


def print_int_or_dynamic(printer: Printer, value: int) -> None:
    printer.print_string("?" if value == DYNAMIC else str(value))


def parse_int_list(parser: AttrParser) -> list[int]:
    return parser.parse_comma_separated_list(parser.Delimiter.SQUARE, lambda: parser.parse_integer(allow_boolean=False))


def print_int_list(printer: Printer, values: Sequence[int]) -> None:
    printer.print_string("[" + ", ".join(str(v) for v in values) + "]")


def int_array(values: Sequence[int]) -> ArrayAttr[IntAttr]:
    return ArrayAttr([IntAttr(int(v)) for v in values])


def str_array(values: Sequence[str]) -> ArrayAttr[StringAttr]:
    return ArrayAttr([StringAttr(v) for v in values])


def ints(array: ArrayAttr[IntAttr]) -> list[int]:
    return [a.data for a in array.data]


def strs(array: ArrayAttr[StringAttr]) -> list[str]:
    return [a.data for a in array.data]


def check_finite(value: float, what: str) -> None:
    if not math.isfinite(value):
        raise VerifyException(f"{what} must be finite, got {value}")


def tensor_type(value: SSAValue | Attribute, what: str) -> TensorType:
    """The value's (or type's) tensor type, or a VerifyException naming `what`."""
    type_ = value.type if isinstance(value, SSAValue) else value
    if not isinstance(type_, TensorType):
        raise VerifyException(f"{what} must be a tensor, got {type_}")
    return type_


def dim(type_: TensorType, index: int) -> int:
    """Static size of a dimension, DYNAMIC (-1) when it is `?`."""
    size = type_.get_shape()[index]
    return DYNAMIC if size < 0 else size
