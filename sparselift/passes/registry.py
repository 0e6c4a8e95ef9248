"""The passes a plan is made of, by name: every SparseLift rewrite and analysis except the planner.

`plan-sparse` searches over and replays pipelines of these passes, so it takes them from here;
the package's `get_all_passes` adds `plan-sparse` itself on top. Keeping the planner out of this
list is what keeps the imports one-way (registry -> passes, planner -> registry, package ->
both) and means a plan cannot name `plan-sparse` inside itself. Each factory imports its pass
on first use, so `sparselift-opt` imports only what it runs.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass

PassFactory = Callable[[], type[ModulePass]]


def _lift_sparse() -> type[ModulePass]:
    from sparselift.passes.lift_sparse import LiftSparse

    return LiftSparse


def _aggregate_comm() -> type[ModulePass]:
    from sparselift.passes.aggregate_comm import AggregateComm

    return AggregateComm


def _compact_rows() -> type[ModulePass]:
    from sparselift.passes.compact_rows import CompactRows

    return CompactRows


def _dedup_ids() -> type[ModulePass]:
    from sparselift.passes.dedup_ids import DedupIds

    return DedupIds


def _generate_kernels() -> type[ModulePass]:
    from sparselift.passes.generate_kernels import GenerateKernels

    return GenerateKernels


def _parallelize_tables() -> type[ModulePass]:
    from sparselift.passes.parallelize_tables import ParallelizeTables

    return ParallelizeTables


def _hide_latency() -> type[ModulePass]:
    from sparselift.passes.hide_latency import HideLatency

    return HideLatency


def _print_srsv() -> type[ModulePass]:
    from sparselift.passes.srsv import PrintSRSV

    return PrintSRSV


def _annotate_cost() -> type[ModulePass]:
    from sparselift.passes.annotate_cost import AnnotateCost

    return AnnotateCost


def _canonicalize() -> type[ModulePass]:
    from xdsl.transforms.canonicalize import CanonicalizePass

    return CanonicalizePass


def _cse() -> type[ModulePass]:
    from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination

    return CommonSubexpressionElimination


def _dce() -> type[ModulePass]:
    from xdsl.transforms.dead_code_elimination import DeadCodeElimination

    return DeadCodeElimination


SPARSELIFT_PASSES: dict[str, PassFactory] = {
    "lift-sparse": _lift_sparse,
    "aggregate-comm": _aggregate_comm,
    "compact-rows": _compact_rows,
    "dedup-ids": _dedup_ids,
    "generate-kernels": _generate_kernels,
    "parallelize-tables": _parallelize_tables,
    "hide-latency": _hide_latency,
    "print-srsv": _print_srsv,
    "annotate-cost": _annotate_cost,
}
"""SparseLift's own passes, in the order `sparselift-opt --help` lists them."""

XDSL_CLEANUPS: dict[str, PassFactory] = {"canonicalize": _canonicalize, "cse": _cse, "dce": _dce}
"""The generic xDSL clean-ups SparseLift's pipelines rely on."""


def plan_passes() -> dict[str, PassFactory]:
    """Factories of every pass a plan may name (all but `plan-sparse`), by name."""
    return {**SPARSELIFT_PASSES, **XDSL_CLEANUPS}


__all__ = ["PassFactory", "SPARSELIFT_PASSES", "XDSL_CLEANUPS", "plan_passes"]
