"""What a cached plan depends on: its key fields, its key, its record file, and why a lookup missed.

`sparselift.planner` keys the plan record it caches by these fields (the exported IR, shapes,
sharding, world size, optimizer, device kind, versions and the planner's constraints); the
fields are stored in the record, so a miss can say which one changed. The IR fields are read
from the module itself (its value types, its feature attributes), not from its printed text.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, ModuleOp
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.passes import ModulePass
from xdsl.printer import Printer

from sparselift.codegen.table_facts import batch_size, describe_features, describe_tables, sharding_plan
from sparselift.ir.sparse_attrs import FeatureAttr, TableAttr
from sparselift.passes.plan_candidates import PlanOptions

KEY_ORDER = ("model", "shapes", "world_size", "sharding", "optimizer", "device", "versions", "constraints", "ir")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def key_fields(
    program, *, lift: ModulePass, plan_options: PlanOptions, device: str, sharding_family: Sequence[str] | None = None
) -> dict[str, str]:
    """What the plan depends on, field by field (the key hashes them all)."""
    import xdsl

    import sparselift

    # Exported, before any pass. Pooling factors are measured on the example batch; they enter
    # the key bucketed (factors of sqrt 2), so another batch of the same data reuses the plan
    # and a real shift in the workload re-plans.
    ir_text = _bucketed_text(program.module)
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
    types = _value_types(program.module)
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
        # The lift-sparse pass: the fused update, and how rows and replicated gradients are lowered.
        "optimizer": str(lift.spec(include_default=True)),
        "device": device,
        "versions": f"torch {torch.__version__}, xdsl {xdsl.__version__}, sparselift {sparselift.__version__}",
        "constraints": json.dumps(constraints, sort_keys=True),
        "ir": _sha(ir_text),
    }


def _bucket_pooling(pf: float) -> float:
    """The bucket of a pooling factor: the nearest power of sqrt 2 (3 significant digits); 0 stays 0."""
    return float(f"{2 ** (round(math.log2(pf) * 2) / 2):.3g}") if pf > 0 else pf


def _bucketed(attr: Attribute) -> Attribute:
    """`attr` with the pooling factor of every `#sparse.feature` and the distinct share of every
    `#sparse.table` in it bucketed (`attr` itself when it holds none): features sit in op
    properties as arrays, so containers are rebuilt."""
    if isinstance(attr, FeatureAttr):
        pf = _bucket_pooling(attr.pooling_factor.data)
        return FeatureAttr(attr.feature_name.data, attr.table.data, pf, attr.is_weighted)
    if isinstance(attr, TableAttr) and attr.distinct.data < 1.0:
        share = min(1.0, max(0.1, round(attr.distinct.data * 10) / 10))  # to a tenth: batches differ a little
        return TableAttr(attr.name_str, attr.rows.data, attr.dim.data, attr.dtype, attr.pooling.data, share)
    if isinstance(attr, ArrayAttr):
        items = tuple(_bucketed(a) for a in attr.data)
        return ArrayAttr(items) if any(n is not o for n, o in zip(items, attr.data)) else attr
    if isinstance(attr, DictionaryAttr):
        entries = {k: _bucketed(v) for k, v in attr.data.items()}
        return DictionaryAttr(entries) if any(entries[k] is not v for k, v in attr.data.items()) else attr
    if isinstance(attr, ParametrizedAttribute):
        params = tuple(_bucketed(p) for p in attr.parameters)
        return type(attr).new(params) if any(n is not o for n, o in zip(params, attr.parameters)) else attr
    return attr


def _bucketed_text(module: ModuleOp) -> str:
    """`module` printed with its pooling factors bucketed (a clone is changed, not `module`)."""
    clone = module.clone()
    for op in clone.walk():
        for held in (op.properties, op.attributes):
            for name, attr in list(held.items()):
                held[name] = _bucketed(attr)
    out = io.StringIO()
    Printer(stream=out).print_op(clone)
    return out.getvalue()


def _value_types(module: ModuleOp) -> list[str]:
    """Every type of a value in `module` (op operands and results, block arguments), printed,
    sorted and without repeats."""
    types: set[Attribute] = set()
    for op in module.walk():
        types.update(v.type for v in (*op.operands, *op.results))
        for region in op.regions:
            for block in region.blocks:
                types.update(a.type for a in block.args)
    return sorted({str(t) for t in types})


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
