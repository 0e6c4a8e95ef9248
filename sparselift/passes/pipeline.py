"""Pass-pipeline specs as text (`"a{x=1,2 y=3},b"`): splitting, joining, options, and running them.

What the planner, the compiler and the benchmarks write and read pipelines with. Running a
pipeline takes the registry of passes it may name as an argument (default: every pass but the
planner, `sparselift.passes.registry.plan_passes`), so this module imports no pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline

from sparselift.passes.registry import PassFactory, plan_passes


def split_pipeline(text: str) -> list[str]:
    """`"a{x=1,2 y=3},b"` -> `["a{x=1,2 y=3}", "b"]` (commas inside braces stay)."""
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            if "".join(cur).strip():
                out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def join_pipeline(specs: Sequence[str]) -> str:
    return ",".join(specs)


def pass_name(spec: str) -> str:
    return spec.split("{", 1)[0].strip()


def spec_options(spec: str) -> dict[str, str]:
    """The `key=value` options of a spec, as written (`roles=a,b` stays `"a,b"`)."""
    m = re.search(r"\{(.*)\}\s*$", spec)
    if not m:
        return {}
    out = {}
    for item in m.group(1).split():
        key, _, value = item.partition("=")
        out[key.replace("_", "-")] = value
    return out


def format_spec(name: str, options: dict[str, Any] | None = None) -> str:
    items = []
    for k, v in (options or {}).items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, list | tuple):
            v = ",".join(map(str, v))
        items.append(f"{k}={v}")
    return f"{name}{{{' '.join(items)}}}" if items else name


def load_decisions(path: str | Path) -> tuple[str, ...]:
    """The pass specs of a decisions file: a plan record, `{"pipeline": [...]}` or a JSON list."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise ValueError(f"decisions {path}: cannot read it: {e}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"decisions {path}: not valid JSON: {e}") from None
    specs = data.get("pipeline") if isinstance(data, dict) else data
    if isinstance(specs, str):
        specs = split_pipeline(specs)
    if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
        raise ValueError(f"decisions {path}: expected a list of pass specs under 'pipeline'")
    return tuple(specs)


def run_pipeline(
    module: ModuleOp,
    specs: Sequence[str],
    ctx: Context | None = None,
    passes: Mapping[str, PassFactory] | None = None,
) -> None:
    """Apply `specs` to `module` in place, each spec naming a pass of `passes` (default: every
    pass a plan may name)."""
    if not specs:
        return
    if ctx is None:
        from sparselift.ir import make_context

        ctx = make_context()
    registry = dict(plan_passes() if passes is None else passes)
    PassPipeline.parse_spec(registry, join_pipeline(specs)).apply(ctx, module)


__all__ = [
    "split_pipeline",
    "join_pipeline",
    "pass_name",
    "spec_options",
    "format_spec",
    "load_decisions",
    "run_pipeline",
]
