"""Code generation: kernel generators and the plan-module emitter, registered lazily as xDSL targets."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.utils.target import Target


def get_all_targets() -> dict[str, Callable[[], type[Target]]]:
    """Factories for SparseLift's output targets (`sparselift-opt -t NAME`)."""

    def plan_module() -> type[Target]:
        from sparselift.codegen.plan_module import PlanModuleTarget

        return PlanModuleTarget

    return {"plan-module": plan_module}
