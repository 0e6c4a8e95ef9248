"""The `sched` dialect: the structure of one training step, its parallel lanes and its costs.

`sched.step` holds a whole step in the global SPMD view: a forward region (the model inputs as
block arguments, yielding the outputs and then the values saved for backward) and a backward
region (block arguments: one gradient per forward output, then the saved values). Dense work is
opaque (`sched.dense` names a torch submodule); `sched.parallel` runs its lanes concurrently.
`#sched.cost` annotates any op; `#sched.remark` is what a pass leaves on an op it did not
rewrite (which pass, which feasibility check, why). (Generated fused kernels are `sparse.fused_*` ops; this
dialect needs nothing from `sparse`.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import auto

from xdsl.dialects.builtin import (
    DictionaryAttr,
    FlatSymbolRefAttr,
    FloatData,
    IntAttr,
    IntegerAttr,
    NoneAttr,
    StringAttr,
    SymbolNameConstraint,
)
from xdsl.ir import Attribute, Dialect, Operation, OpResult, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    base,
    irdl_attr_definition,
    irdl_op_definition,
    lazy_traits_def,
    opt_attr_def,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_region_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import HasParent, IsolatedFromAbove, IsTerminator, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from sparselift.ir._refs import verifying
from sparselift.ir._syntax import check_finite, format_float, parse_float_or_int


class Phase(StrEnum):
    FORWARD = auto()
    BACKWARD = auto()


@irdl_attr_definition
class CostAttr(ParametrizedAttribute):
    """Cost of an op: `#sched.cost<bytes = 4096, lookups = 256, est_us = 12.5, measured_us = 11.0>`.

    `bytes` is the data the op moves (gathered rows, or bytes sent over the network), `lookups`
    the rows it touches, `est_us` the analytic estimate and `measured_us` an optional measurement.
    """

    name = "sched.cost"

    bytes: IntAttr
    lookups: IntAttr
    est_us: FloatData
    measured_us: FloatData | NoneAttr

    def __init__(self, bytes: int, lookups: int, est_us: float, measured_us: float | None = None):
        super().__init__(
            IntAttr(int(bytes)),
            IntAttr(int(lookups)),
            FloatData(float(est_us)),
            NoneAttr() if measured_us is None else FloatData(float(measured_us)),
        )

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            parser.parse_keyword("bytes")
            parser.parse_punctuation("=")
            nbytes = parser.parse_integer(allow_boolean=False)
            parser.parse_punctuation(",")
            parser.parse_keyword("lookups")
            parser.parse_punctuation("=")
            lookups = parser.parse_integer(allow_boolean=False)
            parser.parse_punctuation(",")
            parser.parse_keyword("est_us")
            parser.parse_punctuation("=")
            est = parse_float_or_int(parser)
            measured: Attribute = NoneAttr()
            if parser.parse_optional_punctuation(",") is not None:
                parser.parse_keyword("measured_us")
                parser.parse_punctuation("=")
                measured = FloatData(parse_float_or_int(parser))
        return (IntAttr(nbytes), IntAttr(lookups), FloatData(est), measured)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(
                f"bytes = {self.bytes.data}, lookups = {self.lookups.data}, est_us = {format_float(self.est_us.data)}"
            )
            if isinstance(self.measured_us, FloatData):
                printer.print_string(f", measured_us = {format_float(self.measured_us.data)}")

    @property
    def measured(self) -> float | None:
        return self.measured_us.data if isinstance(self.measured_us, FloatData) else None

    def verify(self) -> None:
        if self.bytes.data < 0 or self.lookups.data < 0:
            raise VerifyException("cost bytes and lookups must be non-negative")
        check_finite(self.est_us.data, "cost est_us")
        if self.est_us.data < 0:
            raise VerifyException("cost est_us must be non-negative")
        if self.measured is not None:
            check_finite(self.measured, "cost measured_us")
            if self.measured < 0:
                raise VerifyException("cost measured_us must be non-negative")


KEBAB_CASE = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
"""Pass and check names of a remark: lower-case words joined by `-` (`aggregate-comm`, `max-bytes`)."""


@irdl_attr_definition
class RemarkAttr(ParametrizedAttribute):
    """Why a pass left an op as it is: `#sched.remark<"aggregate-comm", "dependency", "not merged: ...">`.

    `pass_name` is the pass that refused, `check` the feasibility check that refused (the name
    the pass's docstring gives it), `text` the message for people. The planner matches remarks
    by pass and check, never by their text.
    """

    name = "sched.remark"

    pass_name: StringAttr
    check: StringAttr
    text: StringAttr

    def __init__(self, pass_name: str, check: str, text: str):
        super().__init__(StringAttr(pass_name), StringAttr(check), StringAttr(text))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            pass_name = parser.parse_str_literal(" for the pass name")
            parser.parse_punctuation(",")
            check = parser.parse_str_literal(" for the check name")
            parser.parse_punctuation(",")
            text = parser.parse_str_literal(" for the remark text")
        return (StringAttr(pass_name), StringAttr(check), StringAttr(text))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.pass_name.data)
            printer.print_string(", ")
            printer.print_string_literal(self.check.data)
            printer.print_string(", ")
            printer.print_string_literal(self.text.data)

    def verify(self) -> None:
        for what, value in (("pass", self.pass_name.data), ("check", self.check.data)):
            if KEBAB_CASE.fullmatch(value) is None:
                raise VerifyException(f"remark {what} name must be non-empty kebab-case, got '{value}'")

    @property
    def message(self) -> str:
        """`<pass> refused (<check>): <text>`, the reason the planner records."""
        return f"{self.pass_name.data} refused ({self.check.data}): {self.text.data}"


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminator of a step's regions and of parallel lanes."""

    name = "sched.yield"

    values = var_operand_def()

    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(StepOp, ParallelOp)))

    assembly_format = "($values^ `:` type($values))? attr-dict"

    def __init__(self, *values):
        super().__init__(operands=[list(values)])


def _check_defined_before_use(region: Region, where: str) -> None:
    """Within a block, a value is used only after the op that defines it (a schedule that moves a
    use above its definition, e.g. before a collective's wait, is rejected)."""
    for block in region.blocks:
        seen: set = set()
        for op in block.ops:
            for operand in op.operands:
                owner = operand.owner
                if isinstance(owner, Operation) and owner.parent_block() is block and owner not in seen:
                    raise VerifyException(f"{where}: {op.name} uses a value of {owner.name} before it is defined")
            for inner in op.walk():
                if inner is op:
                    continue
                for operand in inner.operands:
                    owner = operand.owner
                    if isinstance(owner, Operation) and owner.parent_block() is block and owner not in seen:
                        raise VerifyException(
                            f"{where}: {inner.name} uses a value of {owner.name} before it is defined"
                        )
            seen.add(op)


def _yield_of(region: Region, what: str) -> YieldOp:
    block = region.block
    term = block.last_op
    if not isinstance(term, YieldOp):
        raise VerifyException(f"{what} must end with sched.yield")
    return term


KERNEL_LOWERINGS = ("generated", "reference")
"""The values of `sched.step`'s `kernels` attribute."""


@irdl_op_definition
class StepOp(IRDLOperation):
    """One training step for all ranks (global SPMD view)."""

    name = "sched.step"

    sym_name = prop_def(SymbolNameConstraint())
    world_size = prop_def(IntAttr)
    num_outputs = prop_def(IntAttr)
    # What the frontend knew of the model, declared so that it is typed and verified here and
    # read through the accessors below (printed in the attribute dictionary):
    batch = opt_attr_def(base(StringAttr) | base(IntegerAttr))  # the example batch per rank: "128" or 128
    model = opt_attr_def(StringAttr)  # the model's class name
    table_params = opt_attr_def(DictionaryAttr)  # table -> state-dict name, where not "<table>.weight"
    # How the step's table ops run: "generated" (set by generate-kernels: generated kernels, one
    # call per table op or fused op) or, absent or "reference", the per-table torch lowering.
    kernels = opt_attr_def(StringAttr)

    forward = region_def("single_block")
    backward = region_def("single_block")

    traits = traits_def(SymbolOpInterface(), IsolatedFromAbove())

    def __init__(self, sym_name: str, world_size: int, num_outputs: int, forward: Region, backward: Region):
        super().__init__(
            properties={
                "sym_name": StringAttr(sym_name),
                "world_size": IntAttr(world_size),
                "num_outputs": IntAttr(num_outputs),
            },
            regions=[forward, backward],
        )

    @classmethod
    def parse(cls, parser: Parser) -> StepOp:
        sym = parser.parse_symbol_name()
        parser.parse_keyword("world_size")
        parser.parse_punctuation("=")
        world = parser.parse_integer(allow_boolean=False, allow_negative=False)
        parser.parse_keyword("outputs")
        parser.parse_punctuation("=")
        outputs = parser.parse_integer(allow_boolean=False, allow_negative=False)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        forward = parser.parse_region()
        parser.parse_keyword("backward")
        backward = parser.parse_region()
        op = cls(sym.data, world, outputs, forward, backward)
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        printer.print_string(f" world_size = {self.world_size.data} outputs = {self.num_outputs.data}")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.forward)
        printer.print_string(" backward ")
        printer.print_region(self.backward)

    def verify(self, verify_nested_ops: bool = True) -> None:
        # The ops inside check their references against this step: they share one index of it.
        with verifying(self):
            super().verify(verify_nested_ops)

    def verify_(self) -> None:
        if self.world_size.data < 1:
            raise VerifyException(f"sched.step @{self.sym_name.data}: world_size must be at least 1")
        self._verify_metadata()
        for region in (self.forward, self.backward):
            _check_defined_before_use(region, f"sched.step @{self.sym_name.data}")
        fwd_yield = _yield_of(self.forward, "the forward region")
        _yield_of(self.backward, "the backward region")
        n_out = self.num_outputs.data
        if n_out > len(fwd_yield.values):
            raise VerifyException(
                f"sched.step @{self.sym_name.data}: {n_out} outputs declared but forward yields "
                f"{len(fwd_yield.values)} values"
            )
        expected = [v.type for v in fwd_yield.values]
        got = [a.type for a in self.backward.block.args]
        if got != expected:
            raise VerifyException(
                f"sched.step @{self.sym_name.data}: backward arguments must be one gradient per output and then "
                f"the saved values, with types {[str(t) for t in expected]}; got {[str(t) for t in got]}"
            )

    def _verify_metadata(self) -> None:
        where = f"sched.step @{self.sym_name.data}"
        if self.batch is not None and (self.batch_size is None or self.batch_size < 1):
            raise VerifyException(f"{where}: batch must be a positive integer, got {self.batch}")
        if self.kernels is not None and self.kernels.data not in KERNEL_LOWERINGS:
            raise VerifyException(
                f"{where}: kernels must be one of {', '.join(KERNEL_LOWERINGS)}, got {self.kernels.data!r}"
            )
        if self.table_params is not None:
            for table, param in self.table_params.data.items():
                if not isinstance(param, StringAttr) or not param.data:
                    raise VerifyException(f"{where}: table_params['{table}'] must be a parameter name, got {param}")

    @property
    def generated_kernels(self) -> bool:
        """Whether the step's table ops run generated kernels (not the per-table torch lowering)."""
        return self.kernels is not None and self.kernels.data == "generated"

    @property
    def saved(self):
        return _yield_of(self.forward, "forward").values[self.num_outputs.data :]

    @property
    def batch_size(self) -> int | None:
        """The example batch per rank the frontend exported with, if it wrote one."""
        if isinstance(self.batch, IntegerAttr):
            return self.batch.value.data
        if isinstance(self.batch, StringAttr) and self.batch.data.strip().isdigit():
            return int(self.batch.data)
        return None

    @property
    def model_name(self) -> str:
        """The model's class name, or the step's symbol when the frontend did not write one."""
        return self.model.data if self.model is not None else self.sym_name.data

    def param_name(self, table: str) -> str:
        """The state-dict parameter of `table`: `<table>.weight` unless `table_params` says otherwise."""
        held = self.table_params.data.get(table) if self.table_params is not None else None
        return held.data if isinstance(held, StringAttr) else f"{table}.weight"

    def set_model_facts(self, *, batch: int, model: str, params: dict[str, str]) -> None:
        """Write what the frontend knows of the model (`params`: only names not `<table>.weight`)."""
        self.attributes["batch"] = StringAttr(str(batch))
        self.attributes["model"] = StringAttr(model)
        if params:
            self.attributes["table_params"] = DictionaryAttr({t: StringAttr(p) for t, p in params.items()})


@irdl_op_definition
class DenseOp(IRDLOperation):
    """An opaque dense region: the torch submodule `@callee` run on its operands."""

    name = "sched.dense"

    args = var_operand_def()
    res = var_result_def()
    callee = prop_def(FlatSymbolRefAttr)
    phase = prop_def(StringAttr)

    assembly_format = "$callee `(` $args `)` `phase` $phase attr-dict `:` functional-type($args, $res)"

    def verify_(self) -> None:
        if self.phase.data not in set(Phase):
            raise VerifyException(f"sched.dense @{self.callee.root_reference.data}: phase must be forward or backward")


def values_used_from_outside(op: Operation) -> list[SSAValue]:
    """What `op` reads from outside itself: its operands, then the values ops nested in its
    regions (e.g. `sched.parallel` lanes) read from outside `op`, in order, without repeats."""
    used: dict[SSAValue, None] = dict.fromkeys(op.operands)
    for inner in op.walk():
        if inner is op:
            continue
        for v in inner.operands:
            node = v.owner  # the op of a result, the block of a block argument
            if v not in used and (node is op or not op.is_ancestor(node)):
                used[v] = None
    return list(used)


@irdl_op_definition
class ParallelOp(IRDLOperation):
    """Run `G` lanes concurrently; results are the lanes' yielded values, lane by lane."""

    name = "sched.parallel"

    lanes = var_region_def("single_block")
    res = var_result_def()

    def __init__(self, lanes: Sequence[Region], result_types: Sequence[Attribute]):
        super().__init__(regions=[list(lanes)], result_types=[list(result_types)])

    @classmethod
    def parse(cls, parser: Parser) -> ParallelOp:
        parser.parse_keyword("lanes")
        count = parser.parse_integer(allow_boolean=False, allow_negative=False)
        types: list[Attribute] = []
        if parser.parse_optional_punctuation("->") is not None:
            types = parser.parse_comma_separated_list(parser.Delimiter.PAREN, parser.parse_type)
        attrs = parser.parse_optional_attr_dict_with_keyword()
        lanes = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_region)
        if len(lanes) != count:
            parser.raise_error(f"sched.parallel declares {count} lanes but has {len(lanes)} regions")
        op = cls(lanes, types)
        if attrs is not None:
            op.attributes |= attrs.data
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(f" lanes {len(self.lanes)}")
        if self.res:
            printer.print_string(" -> (")
            printer.print_list([r.type for r in self.res], printer.print_attribute)
            printer.print_string(")")
        printer.print_op_attributes(self.attributes, print_keyword=True)
        printer.print_string(" ")
        printer.print_list(self.lanes, printer.print_region)

    def verify_(self) -> None:
        if not self.lanes:
            raise VerifyException("sched.parallel needs at least one lane")
        # Lanes run concurrently: none may read another lane's values or the op's own results.
        for i, lane in enumerate(self.lanes):
            for inner in lane.walk():
                for v in inner.operands:
                    if isinstance(v, OpResult) and v.owner is self:
                        raise VerifyException(
                            f"sched.parallel: lane {i} uses result {v.index} of the sched.parallel itself"
                        )
                    for j, other in enumerate(self.lanes):
                        if j != i and isinstance(v, OpResult) and other.is_ancestor(v.owner):
                            raise VerifyException(
                                f"sched.parallel: lane {i} uses a value of {v.owner.name} defined in lane {j} "
                                "(lanes run concurrently)"
                            )
        yielded = []
        for i, lane in enumerate(self.lanes):
            yielded += [v.type for v in _yield_of(lane, f"sched.parallel lane {i}").values]
        if yielded != [r.type for r in self.res]:
            raise VerifyException(
                "sched.parallel: results must be the lanes' yielded values in lane order, expected "
                f"{[str(t) for t in yielded]}"
            )


Sched = Dialect(
    "sched",
    [StepOp, DenseOp, ParallelOp, YieldOp],
    [CostAttr, RemarkAttr],
)

__all__ = [
    "Sched",
    "CostAttr",
    "RemarkAttr",
    "KEBAB_CASE",
    "StepOp",
    "DenseOp",
    "ParallelOp",
    "YieldOp",
    "Phase",
    "values_used_from_outside",
]
