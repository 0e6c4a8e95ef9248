"""Plans as typed values: a plan is a tuple of xDSL `ModulePass` objects, options as their fields.

The planner, the compiler and the benchmarks hold plans as `Pipeline` (`tuple[ModulePass, ...]`);
candidates are made with `dataclasses.replace` and compared as values. Text exists only at the
edges, written and read through xDSL's pass specs (`ModulePass.spec()`,
`PassPipeline.parse_spec`): the JSON plan record, `CompileOptions(passes=...)`, the CLI and the
module's `plan` attribute. Parsing takes the registry of passes a plan may name as an argument
(default: every pass but the planner, `sparselift.passes.registry.plan_passes`), so this module
imports no pass.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.utils import arg_spec

from sparselift.passes.registry import PassFactory, plan_passes

Pipeline = tuple[ModulePass, ...]
"""The passes of a plan, in the order they run (the planner's: those after `lift-sparse`)."""


def parse_pipeline(text: str | Sequence[str], passes: Mapping[str, PassFactory] | None = None) -> Pipeline:
    """The plan a pass-spec text (`"a{x=1 y=2},b"`) or a list of specs names; a `ValueError`
    says which pass or option is unknown or ill-typed."""
    joined = text if isinstance(text, str) else ",".join(text)
    if not joined.strip():
        return ()
    registry = dict(plan_passes() if passes is None else passes)
    try:
        unknown = [spec.name for spec in arg_spec.parse_pipeline(joined) if spec.name not in registry]
        if unknown:
            raise ValueError(f"unknown pass '{unknown[0]}'; known: {', '.join(sorted(registry))}")
        return PassPipeline.parse_spec(registry, joined).passes
    except ValueError as e:
        raise ValueError(f"pipeline '{joined}': {e}") from None


def pass_spec(p: ModulePass) -> str:
    """One pass as spec text, the options that differ from their defaults only."""
    return str(p.spec())


def pipeline_specs(plan: Pipeline) -> list[str]:
    """The plan as a list of spec texts (how the JSON record stores it)."""
    return [pass_spec(p) for p in plan]


def pipeline_text(plan: Pipeline) -> str:
    """The plan as one pipeline text, `parse_pipeline`'s inverse."""
    return ",".join(pipeline_specs(plan))


def find_pass(plan: Pipeline, name: str) -> ModulePass | None:
    """The plan's pass called `name`, if it has one."""
    return next((p for p in plan if p.name == name), None)


def load_decisions(path: str | Path, passes: Mapping[str, PassFactory] | None = None) -> Pipeline:
    """The plan of a decisions file: a plan record, `{"pipeline": [...]}` or a JSON list of specs."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"decisions {path}: cannot read it: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"decisions {path}: not valid JSON: {e}") from None
    specs = data.get("pipeline") if isinstance(data, dict) else data
    if not isinstance(specs, str) and not (isinstance(specs, list) and all(isinstance(s, str) for s in specs)):
        raise ValueError(f"decisions {path}: expected a list of pass specs under 'pipeline'")
    try:
        return parse_pipeline(specs, passes)
    except ValueError as e:
        raise ValueError(f"decisions {path}: {e}") from None


def run_pipeline(module: ModuleOp, plan: Pipeline, ctx: Context | None = None) -> None:
    """Apply the passes of `plan` to `module` in place."""
    if not plan:
        return
    if ctx is None:
        from sparselift.ir import make_context

        ctx = make_context()
    PassPipeline(tuple(plan)).apply(ctx, module)


__all__ = [
    "Pipeline",
    "parse_pipeline",
    "pass_spec",
    "pipeline_specs",
    "pipeline_text",
    "find_pass",
    "load_decisions",
    "run_pipeline",
]
