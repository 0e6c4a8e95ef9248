"""`sparselift-opt`'s diagnostics: pass pipelines checked up front, errors located in the input.

- `check_pipeline`: an unknown pass lists the known ones and suggests the closest; an unknown
  option lists the pass's options, hyphenated as the docs write them; a bad option value names
  the pass, the option and the type it expects. xDSL's own messages (`Incompatible types:
  given ('abc',), expected <class 'int'>`) name none of these.
- `LocatingParser` records where each op starts in the input (xDSL keeps no source location
  for ops written without `loc(...)`), so that `verify_error` can report a verifier failure as
  `FILE:LINE:COL: error: MESSAGE` followed by the failing op alone, where xDSL prints the whole
  module (15 KB for dlrm-kaggle) with the message inside.

The errors raised here are `VerifyException`s where xDSL's `--verify-diagnostics` has to see
them, and print as is (`ToolError`). No torch here.
"""

from __future__ import annotations

import dataclasses
import difflib
import io
import typing
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from types import NoneType, UnionType
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ArgSpecParseError, ParseError, VerifyException
from xdsl.utils.lexer import Location

from sparselift.tools.errors import ToolError

PROG = "sparselift-opt"


class LocatedVerifyError(ToolError, VerifyException):
    """A verifier failure, formatted with its location and op; still a VerifyException, so
    `--verify-diagnostics` prints it (and nothing else) and exits 0."""


# -- pass pipelines ---------------------------------------------------------------------------


def _hyphen(field_name: str) -> str:
    return field_name.replace("_", "-")


def _describe_type(t: Any) -> str:
    """`int` -> `an integer`, `tuple[str, ...]` -> `a comma-separated list of strings`, ..."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (typing.Union, UnionType):
        return " or ".join(_describe_type(a) for a in args if a is not NoneType)
    if origin is tuple:
        return f"a comma-separated list of {_describe_type(args[0]).split(' ', 1)[1]}s"
    names = {int: "an integer", float: "a number", bool: "a boolean (true or false)", str: "a string"}
    return names.get(t, f"a {getattr(t, '__name__', t)}")


def _show_value(values: tuple) -> str:
    if not values:
        return "no value"
    return ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values)


def _malformed(spec: str, error: ArgSpecParseError) -> str:
    """xDSL's `pass-pipeline:1:40 / spec / ^ / message` as one message with the spec under it."""
    lines = str(error).split("\n")
    if len(lines) >= 5 and lines[1].startswith("pass-pipeline:"):
        column = lines[1].rsplit(":", 1)[-1]
        reason = " ".join(line.strip() for line in lines[4:] if line.strip())
        return f"{PROG}: error: malformed pass pipeline at column {column}: {reason}\n  {lines[2]}\n  {lines[3]}"
    return f"{PROG}: error: malformed pass pipeline {spec!r}: {' '.join(str(error).split())}"


def _suggest(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _check_options(cls: type, spec) -> None:
    """Every option given to `spec.name` exists and has a value of its type."""
    from xdsl.utils import arg_spec

    fields = [f.name for f in dataclasses.fields(cls) if f.init and f.name != "name"]
    hints = typing.get_type_hints(cls)
    where = f"pass '{spec.name}'"
    for given, values in spec.parameters.items():
        key = given.replace("-", "_")
        if key not in fields:
            options = ", ".join(_hyphen(f) for f in fields) or "none"
            hint = _suggest(_hyphen(key), [_hyphen(f) for f in fields])
            raise ToolError(f"{PROG}: error: {where} has no option '{given}'{hint}; its options: {options}")
        # The conversion xDSL applies when it builds the pass (a private helper of the pinned xDSL).
        convert: Callable | None = getattr(arg_spec, "_convert_arg_to_type", None)
        try:
            if convert is not None:
                convert(values, hints[key])
        except ValueError:
            raise ToolError(
                f"{PROG}: error: {where}: option '{_hyphen(key)}' expects {_describe_type(hints[key])}, "
                f"got '{_show_value(values)}'"
            ) from None
    try:
        cls.from_pass_spec(spec)
    except (ValueError, TypeError) as e:  # e.g. a required option missing
        raise ToolError(f"{PROG}: error: {where}: {e}") from None


def check_pipeline(spec: str, available: Mapping[str, Callable[[], type]]) -> None:
    """Raise a ToolError for the first problem in the `-p` pipeline `spec`."""
    from xdsl.utils.arg_spec import parse_pipeline

    try:
        specs = list(parse_pipeline(spec))
    except ArgSpecParseError as e:  # a BaseException in xDSL
        raise ToolError(_malformed(spec, e)) from None
    known = list(available)
    for s in specs:
        if s.name not in available:
            raise ToolError(
                f"{PROG}: error: unknown pass '{s.name}'{_suggest(s.name, known)}; known passes: {', '.join(known)}"
            )
        _check_options(available[s.name](), s)


# -- locations ------------------------------------------------------------------------------


class LocatingParser(Parser):
    """A Parser that records where each op starts (`locations[op]`), and puts that location on
    a verifier error raised while the op is parsed (an attribute that does not verify)."""

    def __init__(self, ctx, input: str | bytes, name: str, locations: dict[Operation, Location], line_offset: int = 0):
        super().__init__(ctx, input, name)
        self.locations = locations
        self.line_offset = line_offset

    def parse_operation(self) -> Operation:
        start = self._current_token.span.get_location()
        start = Location(start.file, start.line + self.line_offset, start.col)
        try:
            op = super().parse_operation()
        except LocatedVerifyError:
            raise
        except VerifyException as e:
            raise LocatedVerifyError(f"{start}: error: {e}") from e
        self.locations[op] = start
        return op


def parse_error(e: ParseError) -> ToolError:
    """`FILE:LINE:COL: error: MESSAGE` and the source line with carets under the span."""
    context = e.span.print_with_context().split("\n", 1)[1].rstrip("\n")
    return ToolError(f"{e.span.get_location()}: error: {e.msg}\n{context}")


def failing_op(module: ModuleOp, message: str) -> Operation | None:
    """The op whose own verification fails with `message` (nested ops first, as xDSL verifies)."""
    from sparselift.ir._refs import verifying

    first = None
    with ExitStack() as stack:
        for op in module.walk():
            if op.name == "sched.step":  # one index of each step for all the ops in it
                stack.enter_context(verifying(op))
        for op in module.walk(region_first=True):
            try:
                op.verify(verify_nested_ops=False)
            except VerifyException as e:
                if str(e) == message:
                    return op
                first = first or op
            except Exception:  # noqa: BLE001 - a malformed op elsewhere: keep looking
                continue
    return first


def op_text(op: Operation) -> str:
    """The op in its custom syntax, without the ops nested in its regions."""
    out = io.StringIO()
    Printer(stream=out).print_op(op)
    lines = out.getvalue().strip().split("\n")
    return lines[0] + (" ... }" if len(lines) > 1 else "")


def verify_error(
    e: VerifyException,
    module: ModuleOp,
    locations: Mapping[Operation, Location],
    source_lines: Mapping[int, str],
    after_pass: str | None,
) -> LocatedVerifyError:
    """The failing op's location (or that of the nearest op around it that has one), the
    message, and the op itself: its line of the input, else its printed form; one op, not the
    module."""
    message = str(e)
    after = f" (in the IR that pass '{after_pass}' produced)" if after_pass else ""
    op = failing_op(module, message)
    if op is None:
        return LocatedVerifyError(f"{PROG}: error: {message}{after}")
    loc = locations.get(op)
    if loc is not None:
        line = source_lines.get(loc.line, "").strip() or op_text(op)
        return LocatedVerifyError(f"{loc}: error: {message}{after}\n  {line}")
    parent = op.parent_op()
    while parent is not None and parent not in locations:
        parent = parent.parent_op()
    inside = f"\n  inside {parent.name} at {locations[parent]}" if parent is not None else ""
    return LocatedVerifyError(f"{PROG}: error: {message}{after}\n  {op_text(op)}{inside}")
