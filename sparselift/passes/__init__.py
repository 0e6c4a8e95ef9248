"""SparseLift's passes, registered lazily by name so `sparselift-opt` imports only what it runs.

Every pass is a frozen dataclass with a kebab-case `name` and its options as fields; nothing
here imports torch.
"""

from __future__ import annotations

from xdsl.passes import ModulePass

from sparselift.passes.registry import SPARSELIFT_PASSES, XDSL_CLEANUPS, PassFactory


def get_all_passes() -> dict[str, PassFactory]:
    """Factories for SparseLift's passes, the planner `plan-sparse`, and the generic xDSL
    clean-ups they rely on (`sparselift.passes.registry` lists all but the planner, which the
    planner itself runs pipelines of)."""

    def plan_sparse() -> type[ModulePass]:
        from sparselift.passes.plan_sparse import PlanSparse

        return PlanSparse

    return {**SPARSELIFT_PASSES, "plan-sparse": plan_sparse, **XDSL_CLEANUPS}


__all__ = ["get_all_passes"]
