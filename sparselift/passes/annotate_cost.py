"""`annotate-cost{profile=cpu-gloo}`: put an analytic `#sched.cost` on every op of every step.

Every op of a `sched.step` (nested ops and terminators included) gets the discardable attribute
`cost = #sched.cost<bytes = .., lookups = .., est_us = ..>`, with sizes from the step's SRSV
(`sparselift.passes.srsv`) and times from a hardware profile (`sparselift.passes.profiles`; the
option is a built-in profile name or a path to a JSON profile). Per op, on its busiest rank:

- `sparse.lookup`: the rows gathered (`lookups x dim x dtype bytes`) over the random-gather
  bandwidth, plus `lookup_overhead_us` and `kernel_launch_us`.
- `sparse.lookup_update` (pooled form): the same rows, `update_factor` times (read the row and
  the gradient, write the row back), plus the overheads; in its dense form (a whole-table
  gradient) it streams the table, the gradient and the updated table (3 x table bytes).
- `sparse.lookup_grad`: zero-fills the table-sized gradient and scatters the rows into it.
- `coll.*`: `coll_alpha_us` + max over the group's ranks of (`coll_peer_alpha_us` per peer
  message + the bytes sent to each peer x that link's per-byte time). An all-to-all or a
  reduce-scatter talks to `G-1` peers, a ring all-reduce takes `2 (G-1)` steps; `bytes` is the
  largest number of bytes one rank sends. `coll.wait` costs nothing (its start carries the time).
- `sparse.pack` / `sparse.unpack`: the buffer's bytes over the copy bandwidth plus a launch;
  `sparse.route`: the ids/offsets it reads and the buckets it writes over the copy bandwidth plus
  a launch; `sparse.permute` only renames values (no bytes, no time).
- `sched.dense`: FLOPs over `flops_per_s`. The IR does not say how many FLOPs a dense region
  has; the pass reads an optional `flops` attribute on the op (an integer, `IntAttr` or an
  integer `StringAttr`, which the frontend is to write) and treats a missing one as 0 FLOPs.
- `sparse.fused_*` (a generated multi-table kernel): its work, as the per-table ops would do it
  (the tables' gathers; updates; or zero-fill + updates), plus one launch and one lookup
  overhead for the whole call, with the tables sized from the IR (`cost_model.fused_entries`).
- everything else (`sched.yield`, `sched.parallel`, ...): zero.

The step itself gets `cost` with the summed `bytes` and `lookups` of its ops and, as `est_us`,
the critical-path length of its SRSV graph under these costs (independent ops overlap; see
`SRSV.critical_path`). A `measured_us` already on an op (or the step) is kept. The pass only sets
attributes: it never creates, moves or deletes an op. The formulas live in
`sparselift.passes.cost_model` (shared with the planner and `simulate`); this pass writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from sparselift.ir.sched import CostAttr, StepOp
from sparselift.passes import cost_model
from sparselift.passes.cost_model import CostTerms, dense_flops
from sparselift.passes.profiles import HardwareProfile, load_profile
from sparselift.passes.srsv import SRSV, CollectiveEntry, Sizer, build_srsv, step_ops, steps_of


@dataclass(frozen=True)
class OpCost:
    bytes: float = 0.0
    lookups: float = 0.0
    est_us: float = 0.0

    @classmethod
    def of(cls, terms: CostTerms) -> OpCost:
        return cls(terms.bytes, terms.lookups, terms.total)

    def attr(self, measured_us: float | None = None) -> CostAttr:
        return CostAttr(round(self.bytes), round(self.lookups), round(self.est_us, 3), measured_us)


def collective_cost(entry: CollectiveEntry, profile: HardwareProfile) -> OpCost:
    """alpha + max over ranks of (per-peer alpha x messages + bytes to each peer x beta)."""
    return OpCost.of(cost_model.collective(entry, profile))


def op_cost(op: Operation, view: SRSV, profile: HardwareProfile, sizer: Sizer) -> OpCost:
    """The analytic cost of one op of the step `view` describes (`cost_model.op_terms`, summed)."""
    return OpCost.of(cost_model.op_terms(op, view, profile, sizer))


def _measured(op: Operation) -> float | None:
    """A measurement already on the op survives re-annotation."""
    old = op.attributes.get("cost")
    return old.measured if isinstance(old, CostAttr) else None


def annotate_step(step: StepOp, profile: HardwareProfile, batch: int | None = None) -> float:
    """Set `cost` on every op of `step` and on the step; return the predicted step time (us)."""
    view = build_srsv(step, batch)
    sizer = Sizer(view.world_size, view.batch)
    total_bytes = total_lookups = 0.0
    for op, _ in list(step_ops(step)):
        cost = op_cost(op, view, profile, sizer)
        op.attributes["cost"] = cost.attr(_measured(op))
        total_bytes += cost.bytes
        total_lookups += cost.lookups
    length, _ = view.critical_path(serial=True)
    step.attributes["cost"] = CostAttr(round(total_bytes), round(total_lookups), round(length, 3), _measured(step))
    return length


@dataclass(frozen=True)
class AnnotateCost(ModulePass):
    """Attach an analytic `#sched.cost` to every op and a predicted total to every step."""

    name = "annotate-cost"

    profile: str = "cpu-gloo"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        try:
            profile = load_profile(self.profile)
        except ValueError as e:
            raise PassFailedException(f"annotate-cost: {e}") from None
        for step in steps_of(op):
            try:
                annotate_step(step, profile)
            except ValueError as e:
                raise PassFailedException(f"annotate-cost: {e}") from None


__all__ = ["AnnotateCost", "OpCost", "annotate_step", "op_cost", "collective_cost", "dense_flops"]
