"""What a cached plan depends on: its key fields, its key, its record file, and why a lookup missed.

`sparselift.planner` keys the plan record it caches by these fields (the exported IR, shapes,
sharding, world size, optimizer, device kind, versions and the planner's constraints); the
fields are stored in the record, so a miss can say which one changed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from sparselift.codegen.table_facts import batch_size, describe_features, describe_tables, sharding_plan
from sparselift.passes.plan_sparse import PlanOptions

KEY_ORDER = ("model", "shapes", "world_size", "sharding", "optimizer", "device", "versions", "constraints", "ir")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def key_fields(
    program, *, lift: str, plan_options: PlanOptions, device: str, sharding_family: Sequence[str] | None = None
) -> dict[str, str]:
    """What the plan depends on, field by field (the key hashes them all)."""
    import xdsl

    import sparselift

    # Exported, before any pass. Pooling factors are measured on the example batch; they enter
    # the key bucketed (factors of sqrt 2), so another batch of the same data reuses the plan
    # and a real shift in the workload re-plans.
    ir_text = re.sub(r"pooling_factor = ([0-9.eE+-]+)", _bucket_pooling, program.text)
    code = program.graph_code
    tables, sharding = describe_tables(program.module), sharding_plan(program.module)
    pooling = {t.name: t.pooling for t in tables}
    structure = json.dumps(
        [
            code,
            [(t.name, t.param, t.dtype, t.pooling, t.module) for t in tables],
            [(f.name, f.table, pooling[f.table], f.weighted) for f in describe_features(program.module)],
        ]
    )
    types = sorted(set(re.findall(r"tensor<[^>]*>", ir_text)))
    shapes = json.dumps([batch_size(program.module), [(t.name, t.rows, t.dim) for t in tables], types])
    constraints = {
        "memory_cap_bytes": plan_options.memory_cap_bytes,
        "max_lanes": plan_options.max_lanes,
        "kernels": "generated" if plan_options.allow_generated else "reference",
        "optimizations": list(plan_options.families) + (["sharding"] if "sharding" in (sharding_family or ()) else []),
        "profile": str(plan_options.profile),
    }
    return {
        "model": _sha(structure),
        "shapes": _sha(shapes),
        "world_size": str(sharding.world_size),
        "sharding": _sha(sharding.to_json()),
        "optimizer": lift,
        "device": device,
        "versions": f"torch {torch.__version__}, xdsl {xdsl.__version__}, sparselift {sparselift.__version__}",
        "constraints": json.dumps(constraints, sort_keys=True),
        "ir": _sha(ir_text),
    }


def _bucket_pooling(m: re.Match) -> str:
    pf = float(m.group(1))
    return f"pooling_factor ~ {2 ** (round(math.log2(pf) * 2) / 2):.3g}" if pf > 0 else m.group(0)


def plan_key(fields: Mapping[str, str]) -> str:
    return _sha(json.dumps([fields.get(k, "") for k in KEY_ORDER]))


def record_path(directory: Path, key: str) -> Path:
    return directory / f"plan_record_{key}.json"


def diff_fields(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """The key fields that differ, with old -> new for the readable ones."""
    out = []
    for k in KEY_ORDER:
        if old.get(k) != new.get(k):
            if k in ("world_size", "device", "optimizer", "versions", "constraints"):
                out.append(f"{k} ({old.get(k)} -> {new.get(k)})")
            else:
                out.append(k)
    return out


def describe_miss(directory: Path, fields: Mapping[str, str], key: str) -> str:
    """Why no cached plan matches: the closest record's differing key fields."""
    best: tuple[int, float, Path, list[str]] | None = None
    for path in directory.glob("plan_record_*.json"):
        try:
            old = json.loads(path.read_text()).get("key_fields", {})
        except (OSError, ValueError):
            continue
        diff = diff_fields(old, fields)
        score = (len(diff), -path.stat().st_mtime)
        if best is None or score < best[:2]:
            best = (*score, path, diff)
    if best is None:
        return f"no cached plan record in {directory} (key {key})"
    _, _, path, diff = best
    if any(d.startswith("model") for d in diff):
        return f"no cached plan for this model structure (key {key})"
    return f"no cached plan for key {key}; the closest ({path.name}) differs in {', '.join(diff)}"


__all__ = ["KEY_ORDER", "key_fields", "plan_key", "record_path", "diff_fields", "describe_miss"]
