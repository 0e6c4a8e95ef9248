"""Remarks: the `remark` attribute a pass leaves on an op to say why it did not rewrite it.

The text is `"<pass name>: <why>"`; the planner (`plan_sparse.check_candidate`) reports a
candidate that left the IR unchanged with its own pass's remarks, matched by that prefix, and
FileCheck tests check them in the printed IR.
"""

from __future__ import annotations

from xdsl.dialects.builtin import StringAttr
from xdsl.ir import Operation


def remark(op: Operation, pass_name: str, text: str) -> None:
    """Say on `op` why the pass `pass_name` left it as it is (replaces an earlier remark)."""
    op.attributes["remark"] = StringAttr(f"{pass_name}: {text}")


__all__ = ["remark"]
