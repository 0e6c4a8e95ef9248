"""SparseLift's passes, registered lazily by name so `sparselift-opt` imports only what it runs.

Every pass is a frozen dataclass with a kebab-case `name` and its options as fields; nothing
here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Factories for SparseLift's passes plus the generic xDSL clean-ups they rely on."""

    def canonicalize() -> type[ModulePass]:
        from xdsl.transforms.canonicalize import CanonicalizePass

        return CanonicalizePass

    def cse() -> type[ModulePass]:
        from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

        return CommonSubexpressionElimination

    def dce() -> type[ModulePass]:
        from xdsl.transforms.dead_code_elimination import DeadCodeElimination

        return DeadCodeElimination

    def aggregate_comm() -> type[ModulePass]:
        from sparselift.passes.aggregate_comm import AggregateComm

        return AggregateComm

    def generate_kernels() -> type[ModulePass]:
        from sparselift.passes.generate_kernels import GenerateKernels

        return GenerateKernels

    def hide_latency() -> type[ModulePass]:
        from sparselift.passes.hide_latency import HideLatency

        return HideLatency

    def parallelize_tables() -> type[ModulePass]:
        from sparselift.passes.parallelize_tables import ParallelizeTables

        return ParallelizeTables

    def lift_sparse() -> type[ModulePass]:
        from sparselift.passes.lift_sparse import LiftSparse

        return LiftSparse

    def print_srsv() -> type[ModulePass]:
        from sparselift.passes.srsv import PrintSRSV

        return PrintSRSV

    def annotate_cost() -> type[ModulePass]:
        from sparselift.passes.annotate_cost import AnnotateCost

        return AnnotateCost

    def plan_sparse() -> type[ModulePass]:
        from sparselift.passes.plan_sparse import PlanSparse

        return PlanSparse

    return {
        "lift-sparse": lift_sparse,
        "aggregate-comm": aggregate_comm,
        "generate-kernels": generate_kernels,
        "parallelize-tables": parallelize_tables,
        "hide-latency": hide_latency,
        "print-srsv": print_srsv,
        "annotate-cost": annotate_cost,
        "plan-sparse": plan_sparse,
        "canonicalize": canonicalize,
        "cse": cse,
        "dce": dce,
    }
