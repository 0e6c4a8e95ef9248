"""Remarks: the `remark` attribute a pass leaves on an op to say why it did not rewrite it.

The attribute is a `#sched.remark<"<pass>", "<check>", "<why>">` (`sparselift.ir.sched.RemarkAttr`):
the pass, the feasibility check that refused (named as in the pass's docstring) and a message.
The planner (`plan_predict.check_candidate`) reports a candidate that left the IR unchanged with
the remarks of its own pass, read with `remarks_of` and matched by the `pass` field; FileCheck
tests check them in the printed IR. A pass's refusal helpers return a `Refusal` (check, text).
"""

from __future__ import annotations

import attrs
from xdsl.ir import Operation

from sparselift.ir.sched import RemarkAttr


@attrs.frozen
class Refusal:
    """Why a feasibility check refused: the check's kebab-case name and the message."""

    check: str
    text: str


def remark(op: Operation, pass_name: str, check: str, text: str) -> None:
    """Say on `op` why the pass `pass_name` left it as it is: `check` refused, because `text`
    (replaces an earlier remark; raises on a pass or check name that is not kebab-case)."""
    attr = RemarkAttr(pass_name, check, text)
    attr.verify()  # a misspelt check name fails in the pass, not later in the planner
    op.attributes["remark"] = attr


def remarks_of(root: Operation) -> tuple[RemarkAttr, ...]:
    """The remarks on `root` and every op nested in it, in walk order, without repeats."""
    seen: dict[RemarkAttr, None] = {}
    for op in root.walk():
        r = op.attributes.get("remark")
        if isinstance(r, RemarkAttr):
            seen.setdefault(r, None)
    return tuple(seen)


__all__ = ["Refusal", "remark", "remarks_of"]
