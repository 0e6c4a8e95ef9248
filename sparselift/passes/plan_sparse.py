"""`plan-sparse{profile=.. memory-cap-bytes=.. max-lanes=.. decisions=.. optimizations=..}`: the planner as a pass.

Without `decisions` the pass plans by the analytic model alone (`plan_search.search` with the
`AnalyticConfirmer`) and applies the chosen plan; with `decisions` (a JSON file: a `PlanRecord`,
or an object with a `pipeline` list of pass specs) it applies exactly that plan, which is how a
cached plan is replayed. Either way the module gets a `plan` attribute (the applied plan as
pass-spec text) and, when planning, `plan_rejected` (one "family label: reason" string per
rejected candidate). The runtime planner (`sparselift.planner`) runs the same search with a
measuring confirmer. The search space is `plan_candidates`, the predictions `plan_predict`,
the search `plan_search`. Torch-free: `sparselift-opt` runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from sparselift.passes.pipeline import load_decisions, pipeline_text, run_pipeline
from sparselift.passes.plan_candidates import FAMILIES, PlanOptions, registered_passes
from sparselift.passes.plan_predict import Predictor
from sparselift.passes.plan_search import search


@dataclass(frozen=True)
class PlanSparse(ModulePass):
    """Choose (or replay) the optimization plan of a lifted module."""

    name = "plan-sparse"

    profile: str = "cpu-gloo"
    memory_cap_bytes: int = 0
    max_lanes: int = 4
    decisions: str = ""
    optimizations: tuple[str, ...] = FAMILIES  # the families it may choose from

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.decisions:
            try:
                plan = load_decisions(self.decisions, registered_passes())
            except ValueError as e:
                raise PassFailedException(f"plan-sparse: {e}") from None
            run_pipeline(op, plan, ctx)
            op.attributes["plan"] = StringAttr(pipeline_text(plan))
            return
        try:
            unknown = [f for f in self.optimizations if f not in FAMILIES]
            if unknown:
                raise ValueError(f"unknown optimization '{unknown[0]}'; known: {', '.join(FAMILIES)}")
            options = PlanOptions(
                self.profile, self.memory_cap_bytes, self.max_lanes, families=tuple(self.optimizations)
            )
            options.hardware()
            result = search(Predictor(op, ctx), options)
        except ValueError as e:
            raise PassFailedException(f"plan-sparse: {e}") from None
        run_pipeline(op, result.pipeline, ctx)
        op.attributes["plan"] = StringAttr(pipeline_text(result.pipeline))
        op.attributes["plan_rejected"] = ArrayAttr(
            [StringAttr(f"{d.family} {d.label}: {d.reason}") for d in result.decisions if not d.accepted]
        )


__all__ = ["PlanSparse"]
