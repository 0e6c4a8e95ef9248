"""`sparselift.export`: torch.export a model and import it as an opaque-sparse `sched.step`.

The result is a global SPMD view of one training step: `sched.dense` regions for the torch
parts (`sparse_inputs` computes each feature's ids/offsets/weights from the model inputs,
`dense_pre` and `dense_post` are the dense forward), and one opaque
`sparse.embedding_bag_collection` per sharding group (an embedding module and a placement kind).
The backward region holds the dense adjoints: a backward `sched.dense @X` takes the gradients of
`@X`'s forward results and returns the gradients of its forward operands, in order.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch
import torch.utils._pytree as pytree
from torch import fx, nn
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    FlatSymbolRefAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    TensorType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, Block, Region, SSAValue

from sparselift.frontend.errors import ExportError
from sparselift.frontend.graph import (
    UNPOOLED,
    LookupCall,
    ancestors,
    constant_outputs,
    descendants,
    extract,
    find_lookups,
    output_nodes,
    user_inputs,
)
from sparselift.frontend.jagged import JaggedIds, check_max_lengths, fold_padding, jagged_ids, kjt_feature
from sparselift.frontend.meta import fake_meta_parameters, has_meta_parameters, is_fake, materialize_dense
from sparselift.frontend.program import CallInputs, SparseInputs, SparseProgram, UnpooledViews, ViewCall
from sparselift.frontend.quiet import debug, export_failure, quietly
from sparselift.ir.sched import DenseOp, StepOp, YieldOp
from sparselift.ir.sparse import EmbeddingBagCollectionOp, FeatureAttr, PlacementAttr, TableAttr
from sparselift.placement import PlacementKind, ShardingPlan, TableStats, auto_shard, uniform_plan

_DTYPES: dict[torch.dtype, Attribute] = {
    torch.float32: f32,
    torch.float16: f16,
    torch.bfloat16: bf16,
    torch.float64: f64,
    torch.int64: i64,
    torch.int32: i32,
    torch.bool: i1,
}
SHARDING_CHOICES = ("auto", "table_wise", "row_wise", "data_parallel")


def dynamic_shapes(model: nn.Module, example_inputs: tuple) -> Any:
    """`dynamic_shapes` for torch.export: dim 0 of every tensor input is `Dim.AUTO`.

    The batch and every ids/values length become symbolic, so the exported dense regions run
    at any batch size (export infers which sizes are equal).
    """
    from torch.export import Dim, ShapesCollection

    sc = ShapesCollection()
    for leaf in pytree.tree_leaves(example_inputs):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            sc[leaf] = {0: Dim.AUTO}
    return sc.dynamic_shapes(model, example_inputs)


def input_device(example_inputs: tuple) -> torch.device:
    leaf = next((t for t in pytree.tree_leaves(example_inputs) if isinstance(t, torch.Tensor)), None)
    return leaf.device if leaf is not None else torch.device("cpu")


def _torch_export(model: nn.Module, example_inputs: tuple) -> torch.export.ExportedProgram:
    # Each attempt is quiet (sparselift.frontend.quiet): a failed one's report is in the error.
    try:
        return quietly(
            torch.export.export,
            model,
            example_inputs,
            dynamic_shapes=dynamic_shapes(model, example_inputs),
            strict=False,
        )
    except Exception as dynamic_error:  # fall back to static shapes, e.g. for size-1 examples
        try:
            return quietly(torch.export.export, model, example_inputs, strict=False)
        except Exception as e:
            # The reason and the user's line; torch's internal frames only under SPARSELIFT_DEBUG.
            raise ExportError(export_failure(type(model).__name__, e)) from (dynamic_error if debug() else None)


def distinct_input_tensors(example_inputs: tuple) -> tuple:
    """`example_inputs` with a copy wherever a tensor object is passed again at a later position.

    Non-strict torch.export traces one fake tensor per tensor object, so one tensor passed at
    two positions (say one `arange` offsets tensor for several one-hot features) makes the graph
    read a single placeholder for both, and later calls with different tensors there would read
    the wrong one. A copy gives every position its own placeholder (views of one tensor are
    distinct objects already and export keeps them apart)."""
    leaves = [t for t in pytree.tree_leaves(example_inputs) if isinstance(t, torch.Tensor)]
    if len({id(t) for t in leaves}) == len(leaves):
        return example_inputs
    seen: set[int] = set()

    def copy_repeated(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in seen:
            seen.add(id(t))
            return t
        with torch.no_grad():
            return t.clone().requires_grad_(t.requires_grad)

    return pytree.tree_map_only(torch.Tensor, copy_repeated, example_inputs)


def tensor_type(value: Any, what: str) -> TensorType:
    """IR type of an example or fake tensor: dim 0 (batch or jagged length) is `?`."""
    if not isinstance(value, torch.Tensor):
        raise ExportError(f"{what}: expected a tensor, got {type(value).__name__}")
    if value.dtype not in _DTYPES:
        raise ExportError(f"{what}: dtype {value.dtype} is not supported")
    shape = [DYNAMIC_INDEX] + [d if isinstance(d, int) else DYNAMIC_INDEX for d in value.shape[1:]]
    if value.dim() == 0:
        shape = []
    return TensorType(_DTYPES[value.dtype], shape)


def _path_name(path) -> str:
    return pytree.keystr(path).replace("[0]", "", 1).strip(".") or "input"


def _kjt_key(call: LookupCall, input_objects: dict[fx.Node, tuple[Any, Any]]) -> str | None:
    """For TorchRec, `ids = split_with_sizes(kjt._values)[k]`: the feature is `kjt.keys()[k]`."""
    feature = kjt_feature(call.indices, input_objects)
    return None if feature is None else feature.key


def _group_module_name(calls: Sequence[LookupCall]) -> str:
    caller = calls[0].caller
    if caller:
        return caller
    parents = [c.table_fqn.rsplit(".", 2)[0].split(".") for c in calls]
    common = os.path.commonprefix(parents)
    return ".".join(common) or "model"


def _is_tensor(node: fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def _region_operands(gm: fx.GraphModule, region: set[fx.Node], outputs, boundary: set[fx.Node]) -> list[fx.Node]:
    """Operands of the region computing `outputs` from `region` nodes: boundary values, tensors
    computed before it, and placeholders. Symbolic sizes are recomputed inside the region."""
    operands: list[fx.Node] = []
    seen: set[fx.Node] = set()
    todo = [x for n in gm.graph.nodes if n in region for x in n.all_input_nodes]
    todo += [o for o in outputs if o not in region]
    while todo:
        x = todo.pop(0)
        if x in region or x in seen:
            continue
        seen.add(x)
        if x in boundary or x.op == "placeholder" or _is_tensor(x):
            if x.op != "get_attr":
                operands.append(x)
        else:
            todo.extend(x.all_input_nodes)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    return sorted(operands, key=order.__getitem__)


def _feature_names(calls, input_objects) -> list[str]:
    names: list[str] = []
    for i, c in enumerate(calls):
        name = _kjt_key(c, input_objects)
        if name is None and c.indices.op == "placeholder":
            name = c.indices.name
        if name is None:
            name = f"{c.table_fqn.removesuffix('.weight')}#{i}"
        base, n = name, 1
        while name in names:
            n += 1
            name = f"{base}#{n}"
        names.append(name)
    return names


def _resolve_sharding(sharding, stats: Sequence[TableStats], world_size: int) -> ShardingPlan:
    if isinstance(sharding, ShardingPlan):
        if sharding.world_size != world_size:
            raise ExportError(f"the sharding plan is for world size {sharding.world_size}, not {world_size}")
        try:
            sharding.check(stats)
        except ValueError as e:
            raise ExportError(str(e)) from None
        return sharding
    if sharding == "auto":
        return auto_shard(stats, world_size)
    if sharding in SHARDING_CHOICES:
        if world_size == 1 and sharding != "data_parallel":
            return auto_shard(stats, 1)
        return uniform_plan(sharding, stats, world_size)
    raise ExportError(f"unknown sharding '{sharding}'; use one of {', '.join(SHARDING_CHOICES)} or a ShardingPlan")


def _placement_attr(table: str, p) -> PlacementAttr:
    if p.kind == PlacementKind.TABLE_WISE:
        return PlacementAttr.table_wise(table, p.ranks[0])
    if p.kind == PlacementKind.ROW_WISE:
        return PlacementAttr.row_wise(table, p.ranks, p.row_bounds)
    return PlacementAttr.data_parallel(table)


def _dim(d, fallback: int) -> int:
    if isinstance(d, int):
        return d
    hint = getattr(getattr(d, "node", None), "hint", None)
    return int(hint) if hint is not None else fallback


def region_flops(region: fx.GraphModule, batch: int) -> int:
    """Forward FLOPs of a dense region at the example batch (matmuls only: they dominate MLPs)."""
    total = 0
    for node in region.graph.nodes:
        if node.op != "call_function":
            continue
        shapes = [
            [_dim(d, batch) for d in a.meta["val"].shape]
            for a in node.args
            if isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)
        ]
        if node.target in (torch.ops.aten.linear.default,) and len(shapes) >= 2:
            (*lead, k), (n, _) = shapes[0], shapes[1]
            total += 2 * k * n * max(1, int(torch.tensor(lead).prod())) if lead else 2 * k * n
        elif node.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default) and len(shapes) >= 2:
            (m, k), (_, n) = shapes[-2], shapes[-1]
            total += 2 * m * k * n
        elif node.target is torch.ops.aten.bmm.default and len(shapes) == 2:
            (b, m, k), (_, _, n) = shapes
            total += 2 * b * m * k * n
    return total


def _measure_features(sparse_inputs: nn.Module, flat_args: Sequence[Any], features: Sequence[_Feature]):
    """Pooling factor and id skew per feature, and the batch (which must agree across features)."""
    with torch.no_grad():
        per_feature = sparse_inputs(*flat_args)
    batches = {}
    stats = {}
    unpooled_ids: dict[str, list[torch.Tensor]] = {}
    for f, (ids, offsets, _weights) in zip(features, per_feature):
        if f.unpooled:
            unpooled_ids.setdefault(f.table, []).append(ids.reshape(-1).long())
        bags = offsets.numel() - 1
        batches[f.name] = bags
        ids64 = ids.reshape(-1).long()
        unique = int(torch.unique(ids64).numel()) if ids64.numel() else 0
        stats[f.name] = {
            "pooling_factor": ids64.numel() / max(bags, 1),
            "unique_fraction": unique / max(ids64.numel(), 1),
        }
    if len(set(batches.values())) > 1:
        # A pooled feature's bags are the samples; an unpooled lookup of jagged ids has one bag per id.
        pooled = [batches[f.name] for f in features if not f.unpooled]
        jagged = next((f for f in features if f.unpooled and (not pooled or batches[f.name] != pooled[0])), None)
        if jagged is not None:
            others = f"a batch of {pooled[0]} samples" if pooled else "the other unpooled lookups' counts"
            raise ExportError(
                f"table '{jagged.table}': its unpooled lookup reads {batches[jagged.name]} ids against {others}; "
                "jagged ids without pooling are supported as a KeyedJaggedTensor's values (TorchRec's "
                "EmbeddingCollection); otherwise pad them to [B, L] and pass padding_idx"
            )
        detail = ", ".join(f"'{k}' has {v}" for k, v in batches.items())
        raise ExportError(f"the batch is not consistent across features: {detail} bags")
    return next(iter(batches.values())), stats, {t: _distinct_share(ids) for t, ids in unpooled_ids.items()}


def _distinct_share(ids: Sequence[torch.Tensor]) -> float:
    """The share of distinct ids among a table's ids in a batch (over all its features), to two
    digits (at least 0.01); 1 without ids."""
    every = torch.cat(list(ids)) if ids else torch.empty(0, dtype=torch.int64)
    if every.numel() == 0:
        return 1.0
    return max(round(int(torch.unique(every).numel()) / every.numel(), 2), 0.01)


def export(
    model: nn.Module,
    example_inputs: tuple,
    *,
    world_size: int,
    sharding: str | ShardingPlan = "auto",
    stats: tuple | Mapping[str, float] | None = None,
    init_seed: int = 0,
    max_lengths: Mapping[str, int] | None = None,
    distinct: Mapping[str, float] | None = None,
    traced: Traced | None = None,
) -> SparseProgram:
    """Export `model` and import it as a `sched.step` with one opaque EBC per sharding group.

    `stats` gives workload statistics: another input sample (a tuple like `example_inputs`) or a
    mapping feature -> pooling factor; by default they come from `example_inputs`.

    Parameters on the meta device are exported from their shapes; dense modules among them are
    materialized with `reset_parameters()` under `init_seed` (`sparselift.frontend.meta`), the
    tables stay on meta for each rank to materialize its shard.

    `max_lengths`: per KeyedJaggedTensor key that a TorchRec `EmbeddingCollection` looks up
    unpooled, the longest bag the model is compiled for (default: the example's longest); a
    batch with a longer one is refused (`sparselift.frontend.jagged`). `distinct`: per unpooled
    table, the share of a batch's ids that are distinct (`TableAttr.distinct`; default: measured
    on the example inputs, or on the `stats` sample). `traced`: `trace(model, example_inputs)`,
    made already (default: traced here).
    """
    if world_size < 1:
        raise ExportError(f"world_size must be at least 1, got {world_size}")
    if traced is None:
        traced = trace(model, example_inputs)
    elif traced.model is not model:
        raise ValueError("export: `traced` is the trace of another model")
    example_inputs = traced.example_inputs
    model_name = type(model).__name__
    calls = _separable_lookups(traced.gm, model_name)
    jagged = _jagged_calls(calls, traced.input_objects, max_lengths)
    regions = _regions(traced, calls, jagged)
    tables, features = _tables_and_features(traced.gm, calls, _feature_names(calls, traced.input_objects), jagged)
    batch, feature_stats, shares = _workload(traced, regions, features, stats, distinct)
    plan = _resolve_sharding(sharding, _table_stats(tables, features, feature_stats), world_size)
    tables = {n: attrs.evolve(t, distinct=shares.get(n, 1.0)) for n, t in tables.items()}
    module = ModuleOp([_build_step(traced, regions, tables, features, plan, feature_stats, batch, model_name)])
    if has_meta_parameters(model):
        materialize_dense(
            model,
            {t.param for t in tables.values()},
            regions.modules,
            seed=init_seed,
            device=input_device(example_inputs),
        )
    try:
        module.verify()
    except Exception as e:  # an importer bug, not a user error: say so plainly
        raise ExportError(f"internal error: the imported IR for '{model_name}' does not verify: {e}") from e
    return SparseProgram(
        module=module,
        regions=regions.modules,
        # Not the ExportedProgram: it holds every parameter of the model (the tables too), so
        # keeping it would keep the user's tables alive after the compiled model took them over.
        graph_code=traced.ep.graph_module.code,
        input_paths=[_path_name(p) for p in traced.flat_paths],
        tensor_inputs=[i for i, v in enumerate(traced.flat_values) if isinstance(v, torch.Tensor)],
        in_spec=pytree.tree_flatten((example_inputs, {}))[1],
        out_spec=traced.gm._out_spec if hasattr(traced.gm, "_out_spec") else None,
        max_lengths={j.key: j.max_length for j, _ in jagged.values()},
        constant_outputs=constant_outputs(traced.gm),
    )


@attrs.frozen
class _Table:
    """A table as the export finds it: what its `#sparse.table` and the placement policy need."""

    name: str  # IR name: the parameter FQN without ".weight"
    param: str  # parameter FQN in the model's state_dict
    rows: int
    dim: int
    dtype: torch.dtype
    pooling: str
    module: str
    distinct: float = 1.0  # share of distinct ids in a batch (unpooled tables; `TableAttr.distinct`)


@attrs.frozen
class _Feature:
    name: str
    table: str
    module: str
    weighted: bool
    unpooled: bool = False


@attrs.frozen
class Traced:
    """The exported graph and the model inputs as its placeholders see them (`trace`)."""

    model: nn.Module
    example_inputs: tuple  # as traced: `distinct_input_tensors` of the caller's
    ep: torch.export.ExportedProgram
    gm: fx.GraphModule
    placeholders: list[fx.Node]
    flat_paths: list
    flat_values: list
    input_objects: dict[fx.Node, tuple[Any, Any]]

    def values_of(self, nodes: Sequence[fx.Node], leaves: Sequence[Any] | None = None) -> list[Any]:
        """The input leaves (the example's, or `leaves`) that feed graph inputs `nodes`."""
        leaves = self.flat_values if leaves is None else leaves
        return [leaves[self.placeholders.index(p)] for p in nodes]


@attrs.frozen
class _Regions:
    """The torch regions around the lookups, and the graph values at their boundaries."""

    modules: dict[str, nn.Module]
    sparse_in_inputs: list[fx.Node]
    pre_inputs: list[fx.Node]
    pre_outputs: list[fx.Node]
    post_leading: list[fx.Node]  # dense_post's operands before the features' looked-up values
    view_inputs: list[fx.Node]  # then the KJTs' lengths its jagged values are rebuilt with
    outputs: list[fx.Node]


def trace(model: nn.Module, example_inputs: tuple) -> Traced:
    """torch.export the model (meta parameters faked) and pair graph inputs with input leaves.

    The part of `export` that needs no decision (placement, statistics), so that the ranks of a
    process group can run it at once, before rank 0's decisions reach them (`traced=`)."""
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    example_inputs = distinct_input_tensors(example_inputs)
    meta = has_meta_parameters(model)
    with fake_meta_parameters(model, input_device(example_inputs)) if meta else contextlib.nullcontext():
        ep = _torch_export(model, example_inputs)
    gm = ep.module()
    placeholders = user_inputs(gm)
    flat_with_paths, _ = pytree.tree_flatten_with_path((example_inputs, {}))
    flat_paths = [p for p, _ in flat_with_paths]
    flat_values = [v for _, v in flat_with_paths]
    if len(flat_values) != len(placeholders):
        raise ExportError(
            f"model '{type(model).__name__}': {len(placeholders)} graph inputs but {len(flat_values)} input leaves"
        )
    input_objects = {n: (p, (example_inputs, {})) for n, p in zip(placeholders, flat_paths)}
    return Traced(model, example_inputs, ep, gm, placeholders, flat_paths, flat_values, input_objects)


def _separable_lookups(gm: fx.GraphModule, model_name: str) -> list[LookupCall]:
    """The embedding lookups, checked separable: no looked-up value feeds another lookup's inputs."""
    calls = find_lookups(gm)
    if not calls:
        raise ExportError(f"model '{model_name}' has no embedding lookups: there is no sparse path to compile")
    pooled_nodes = [c.pooled for c in calls]
    tangled = ancestors(_lookup_inputs(calls)) & descendants(pooled_nodes)
    if tangled:
        culprit = next(c for c in calls if c.pooled in ancestors(tangled))
        raise ExportError(
            f"module '{_group_module_name([culprit])}', table '{culprit.table_fqn}': its pooled output feeds the "
            "ids of another lookup, so the sparse path cannot be separated from the dense part"
        )
    return calls


_Jagged = tuple[JaggedIds, fx.Node]  # an unpooled lookup of a KJT key's values, and the KJT's lengths input


def _jagged_calls(
    calls: Sequence[LookupCall], input_objects, max_lengths: Mapping[str, int] | None
) -> dict[fx.Node, _Jagged]:
    """The unpooled lookups of a KeyedJaggedTensor's jagged values (TorchRec's
    `EmbeddingCollection`), by call node."""
    jagged: dict[fx.Node, _Jagged] = {}
    for c in calls:
        feature = kjt_feature(c.indices, input_objects) if c.unpooled else None
        if feature is None:
            continue
        ids = jagged_ids(feature, c.table_fqn.removesuffix(".weight"), _group_module_name([c]), max_lengths)
        assert feature.lengths is not None  # jagged_ids checked
        jagged[c.node] = (ids, feature.lengths)
    check_max_lengths(max_lengths, {k: j for k, (j, _) in jagged.items()})
    return jagged


def _lookup_inputs(calls: Sequence[LookupCall]) -> list[fx.Node]:
    return [n for c in calls for n in (c.indices, c.offsets, c.per_sample_weights) if n is not None]


def _id_tail(call: LookupCall, jagged: Mapping[fx.Node, _Jagged]) -> tuple[int, ...] | None:
    """An unpooled call's ids shape after the batch (`()` for `[B]` ids, `(L,)` for a KJT key's
    jagged ids of at most L per sample); None for a pooled call."""
    if not call.unpooled:
        return None
    if call.node in jagged:
        return (jagged[call.node][0].max_length,)
    tail = call.indices.meta["val"].shape[1:]
    if not all(isinstance(d, int) for d in tail):
        raise ExportError(
            f"table '{call.table_fqn.removesuffix('.weight')}': the ids of an unpooled lookup have shape "
            f"{tuple(call.indices.meta['val'].shape)}; only the batch dimension may vary (pad the ids to [B, L])"
        )
    if 0 in tail:
        raise ExportError(
            f"table '{call.table_fqn.removesuffix('.weight')}': the ids of an unpooled lookup have shape "
            f"{tuple(call.indices.meta['val'].shape)}, with no id per sample"
        )
    return tuple(int(d) for d in tail)


def _positions(call: LookupCall, jagged: Mapping[fx.Node, _Jagged]) -> int | None:
    tail = _id_tail(call, jagged)
    return None if tail is None else math.prod(tail)


def _regions(traced: Traced, calls: Sequence[LookupCall], jagged: Mapping[fx.Node, _Jagged]) -> _Regions:
    """The torch regions: `sparse_inputs` (each feature's ids/offsets/weights from the model
    inputs), `dense_pre` (what the dense part computes before the lookups, if anything) and
    `dense_post` (the outputs from the looked-up values; `UnpooledViews` around it when a call is
    unpooled)."""
    gm, placeholders = traced.gm, traced.placeholders
    # A key's values padded right away by its own lengths are given padded (no jagged values).
    folded = {node for node, (ids, lengths) in jagged.items() if fold_padding(gm, node, lengths, ids)}
    # Per call its inputs, then (a KJT key's jagged ids) the KJT's lengths.
    prep_targets = [n for c in calls for n in _lookup_inputs([c]) + ([jagged[c.node][1]] if c.node in jagged else [])]
    prep = ancestors(prep_targets)
    sparse_in_inputs = [p for p in placeholders if p in prep]
    layout = [
        CallInputs(
            c.offsets is not None,
            c.per_sample_weights is not None,
            c.include_last_offset,
            c.padding_idx,
            _positions(c, jagged),
            c.table_fqn.removesuffix(".weight"),
            jagged[c.node][0] if c.node in jagged else None,
        )
        for c in calls
    ]
    modules: dict[str, nn.Module] = {
        "sparse_inputs": SparseInputs(extract(gm, sparse_in_inputs, prep_targets, "sparse inputs"), layout)
    }

    pooled_nodes = [c.pooled for c in calls]
    outputs = output_nodes(gm)
    post_nodes = descendants(pooled_nodes) - set(pooled_nodes)
    dense_needed = ancestors(outputs, stop=set(pooled_nodes)) - set(pooled_nodes)
    pre_nodes = {n for n in dense_needed - post_nodes if n.op not in ("placeholder", "get_attr", "output")}
    post_operand_nodes = _region_operands(gm, post_nodes, outputs, set(pooled_nodes))
    pre_outputs = [n for n in post_operand_nodes if n in pre_nodes]
    post_inputs_direct = [n for n in post_operand_nodes if n.op == "placeholder"]
    pre_inputs = [p for p in placeholders if p in ancestors(pre_outputs)]
    if pre_outputs:
        modules["dense_pre"] = extract(gm, pre_inputs, pre_outputs, "dense_pre")
    post_leading = pre_outputs + post_inputs_direct
    post = extract(gm, post_leading + pooled_nodes, outputs, "dense_post")
    view_inputs = list(dict.fromkeys(lengths for node, (_, lengths) in jagged.items() if node not in folded))
    if any(c.unpooled for c in calls):
        views = [_view_call(c, jagged, view_inputs, folded) for c in calls]
        post = UnpooledViews(post, len(post_leading), views, extras=len(view_inputs))
    modules["dense_post"] = post
    return _Regions(modules, sparse_in_inputs, pre_inputs, pre_outputs, post_leading, view_inputs, outputs)


def _view_call(
    call: LookupCall, jagged: Mapping[fx.Node, _Jagged], view_inputs: Sequence[fx.Node], folded: set[fx.Node]
) -> ViewCall:
    if call.node not in jagged:
        return ViewCall(_positions(call, jagged) or 1, _id_tail(call, jagged))
    ids, lengths = jagged[call.node]
    padded = call.node in folded
    return ViewCall(ids.max_length, (ids.max_length,), ids, view_inputs.index(lengths) if not padded else 0, padded)


def _tables_and_features(
    gm: fx.GraphModule, calls: Sequence[LookupCall], feature_names: Sequence[str], jagged: Mapping[fx.Node, _Jagged]
) -> tuple[dict[str, _Table], list[_Feature]]:
    """The tables (in the order the lookups first read them) and the features: one per pooled
    call, one per id position of an unpooled call (`name[p]`, in call order)."""
    tables: dict[str, _Table] = {}
    features: list[_Feature] = []
    params = dict(gm.named_parameters())
    for name, c in zip(feature_names, calls):
        param = gm.get_parameter(c.table_fqn) if c.table_fqn in params else getattr(gm, c.table_fqn)
        tname = c.table_fqn.removesuffix(".weight")
        if param.dim() != 2:
            raise ExportError(f"table '{tname}': expected a 2-D weight, got shape {tuple(param.shape)}")
        if param.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ExportError(f"table '{tname}': dtype {param.dtype} is not supported")
        module = _group_module_name([c])
        info = tables.get(tname)
        if info is None:
            info = tables[tname] = _Table(
                tname, c.table_fqn, int(param.shape[0]), int(param.shape[1]), param.dtype, c.mode, module
            )
        elif info.pooling != c.mode:
            raise ExportError(
                f"table '{tname}' is read with both {_mode_words(info.pooling)} and {_mode_words(c.mode)}"
            )
        elif info.module != module:
            raise ExportError(f"table '{tname}' is read by two embedding modules, '{info.module}' and '{module}'")
        if c.unpooled and c.padding_idx is not None:
            _check_padding_row(tname, param, c.padding_idx)
        positions = _positions(c, jagged)
        if positions is None:
            features.append(_Feature(name, tname, module, c.per_sample_weights is not None))
        else:
            names = [name] if positions == 1 else [f"{name}[{p}]" for p in range(positions)]
            features += [_Feature(n, tname, module, False, unpooled=True) for n in names]
    return tables, features


def _mode_words(mode: str) -> str:
    return "unpooled lookups (nn.Embedding)" if mode == UNPOOLED else f"{mode} pooling"


def _check_padding_row(table: str, param: torch.Tensor, padding_idx: int) -> None:
    """A padding id reads a zero vector here; PyTorch's `nn.Embedding` reads the padding row,
    which it creates zero and never updates. A model whose padding row is not zero would give
    different numbers: refuse it rather than differ silently."""
    if param.device.type == "meta" or is_fake(param):
        return  # materialized by its module's initializer, which zeroes the padding row
    with torch.no_grad():
        if bool(param[padding_idx].any()):
            raise ExportError(
                f"table '{table}': its padding row {padding_idx} is not zero; SparseLift reads a zero vector "
                "for a padding id (as nn.Embedding does with the zero row it creates). Zero the row first"
            )


def _workload(
    traced: Traced,
    regions: _Regions,
    features: Sequence[_Feature],
    stats: tuple | Mapping[str, float] | None,
    distinct: Mapping[str, float] | None,
) -> tuple[int, dict[str, dict[str, float]], dict[str, float]]:
    """The example batch, each feature's statistics and each unpooled table's share of distinct
    ids: measured on the example inputs, then overridden by `stats` (pooling factors by feature,
    or another input sample to measure) and `distinct` (shares by table)."""
    sparse_inputs = regions.modules["sparse_inputs"]
    example = traced.values_of(regions.sparse_in_inputs)
    batch, feature_stats, shares = _measure_features(sparse_inputs, example, features)
    for table, share in (distinct or {}).items():
        if table not in shares:
            raise ExportError(f"distinct names '{table}', not an unpooled table (those: {', '.join(shares) or 'none'})")
        if not 0.0 < float(share) <= 1.0:
            raise ExportError(f"distinct['{table}'] is a share of the table's ids, in (0, 1]; got {share}")
        shares[table] = float(share)
    if isinstance(stats, Mapping):
        for k, v in stats.items():
            if k not in feature_stats:
                raise ExportError(f"stats names unknown feature '{k}' (known: {', '.join(feature_stats)})")
            feature_stats[k]["pooling_factor"] = float(v)
    elif stats is not None:
        sample = stats if isinstance(stats, tuple) else (stats,)
        leaves = pytree.tree_leaves((sample, {}))
        _, feature_stats, measured = _measure_features(
            sparse_inputs, traced.values_of(regions.sparse_in_inputs, leaves), features
        )
        shares = {**measured, **(distinct or {})}
    return batch, feature_stats, shares


def _table_stats(
    tables: Mapping[str, _Table], features: Sequence[_Feature], feature_stats: Mapping[str, Mapping[str, float]]
) -> list[TableStats]:
    return [
        TableStats(
            t.name,
            t.rows,
            t.dim,
            t.dtype.itemsize,
            sum(feature_stats[f.name]["pooling_factor"] for f in features if f.table == t.name),
            t.pooling,
        )
        for t in tables.values()
    ]


def _operands(value_of: Mapping[fx.Node, SSAValue], nodes: Sequence[fx.Node], what: str) -> list[SSAValue]:
    try:
        return [value_of[n] for n in nodes]
    except KeyError as e:
        raise ExportError(f"{what}: model input '{e.args[0].name}' is not a tensor") from None


def _dense_op(
    callee: str, phase: str, operands: Sequence[SSAValue], result_types: Sequence[Attribute], flops: int | None = None
) -> DenseOp:
    return DenseOp.create(
        operands=list(operands),
        result_types=list(result_types),
        properties={"callee": FlatSymbolRefAttr(callee), "phase": StringAttr(phase)},
        attributes={} if flops is None else {"flops": IntegerAttr(flops, i64)},
    )


def _build_step(
    traced: Traced,
    regions: _Regions,
    tables: Mapping[str, _Table],
    features: Sequence[_Feature],
    plan: ShardingPlan,
    feature_stats,
    batch: int,
    model_name: str,
) -> StepOp:
    """The `sched.step`: forward (sparse inputs, dense_pre, one opaque EBC per sharding group,
    dense_post) and backward (the dense regions' adjoints, in reverse)."""
    arg_types = [
        tensor_type(v, f"model input {_path_name(p)}") if isinstance(v, torch.Tensor) else None
        for p, v in zip(traced.flat_paths, traced.flat_values)
    ]
    tensor_inputs = [i for i, t in enumerate(arg_types) if t is not None]
    fwd = Block(arg_types=[arg_types[i] for i in tensor_inputs])
    value_of: dict[fx.Node, SSAValue] = {traced.placeholders[i]: fwd.args[k] for k, i in enumerate(tensor_inputs)}
    sparse_values = _add_sparse_inputs(fwd, traced, regions, features, value_of)
    pre_op = None
    if regions.pre_outputs:
        pre_op = _dense_op(
            "dense_pre",
            "forward",
            _operands(value_of, regions.pre_inputs, "dense_pre"),
            [tensor_type(n.meta["val"], f"value '{n.name}'") for n in regions.pre_outputs],
            region_flops(regions.modules["dense_pre"], batch),
        )
        fwd.add_op(pre_op)
        value_of.update(zip(regions.pre_outputs, pre_op.res))
    pooled_of = _add_collections(fwd, tables, features, plan, feature_stats, sparse_values)
    post_flops = region_flops(_fx_region(regions.modules["dense_post"]), batch)
    post_op = _dense_op(
        "dense_post",
        "forward",
        [value_of[n] for n in regions.post_leading + regions.view_inputs] + [pooled_of[f.name] for f in features],
        [tensor_type(n.meta["val"], f"model output '{n.name}'") for n in regions.outputs],
        post_flops,
    )
    fwd.add_op(post_op)
    fwd.add_op(YieldOp(*post_op.res))

    bwd = Block(arg_types=[r.type for r in post_op.res])
    # Backward of a matmul is two matmuls of the same size.
    post_bwd = _dense_op("dense_post", "backward", list(bwd.args), [v.type for v in post_op.operands], 2 * post_flops)
    bwd.add_op(post_bwd)
    if pre_op is not None:
        bwd.add_op(
            _dense_op(
                "dense_pre",
                "backward",
                list(post_bwd.res[: len(regions.pre_outputs)]),
                [v.type for v in pre_op.operands],
                2 * region_flops(regions.modules["dense_pre"], batch),
            )
        )
    bwd.add_op(YieldOp())
    step = StepOp("step", plan.world_size, len(regions.outputs), Region(fwd), Region(bwd))
    params = {t.name: t.param for t in tables.values() if t.param != f"{t.name}.weight"}
    step.set_model_facts(batch=batch, model=model_name, params=params)
    return step


def _fx_region(region: nn.Module) -> fx.GraphModule:
    return region.region if isinstance(region, UnpooledViews) else region


def _add_sparse_inputs(
    fwd: Block, traced: Traced, regions: _Regions, features: Sequence[_Feature], value_of: Mapping[fx.Node, SSAValue]
) -> dict[str, tuple[SSAValue, SSAValue, SSAValue | None]]:
    """The `sched.dense @sparse_inputs` op; per feature its (ids, offsets, weights) values."""
    sp_types: list[Attribute] = []
    with torch.no_grad():
        example_sparse = regions.modules["sparse_inputs"](*traced.values_of(regions.sparse_in_inputs))
    for f, (ids, offs, w) in zip(features, example_sparse):
        sp_types += [
            tensor_type(ids.reshape(-1), f"ids of feature '{f.name}'"),
            tensor_type(offs, f"offsets of '{f.name}'"),
        ]
        if w is not None:
            sp_types.append(tensor_type(w.reshape(-1), f"weights of feature '{f.name}'"))
    sp_op = _dense_op(
        "sparse_inputs", "forward", _operands(value_of, regions.sparse_in_inputs, "sparse inputs"), sp_types
    )
    fwd.add_op(sp_op)
    results = iter(sp_op.res)
    out = {}
    for f in features:
        ids, offs = next(results), next(results)
        out[f.name] = (ids, offs, next(results) if f.weighted else None)
    return out


def _add_collections(
    fwd: Block,
    tables: Mapping[str, _Table],
    features: Sequence[_Feature],
    plan: ShardingPlan,
    feature_stats,
    sparse_values,
) -> dict[str, SSAValue]:
    """One opaque EBC per sharding group (module, placement kind, dtype, and the ranks of a
    row-wise table; an unpooled table alone), features in model order; each feature's pooled
    value."""
    groups: dict[tuple, list[_Feature]] = {}
    for f in features:
        p = plan[f.table]
        key = (
            f.module,
            f.unpooled,  # a group's exchanges carry pooled vectors or unpooled rows, not both
            # An unpooled table is a group of its own (an EmbeddingCollection holds several):
            # its rows then travel one per id (compact-rows takes one table).
            f.table if f.unpooled else "",
            str(p.kind),
            str(tables[f.table].dtype).removeprefix("torch."),
            p.ranks if p.kind == PlacementKind.ROW_WISE else (),
        )
        groups.setdefault(key, []).append(f)
    pooled_of: dict[str, SSAValue] = {}
    names_taken: set[str] = set()
    for (module, unpooled, table, kind, dtype, ranks), gfeatures in groups.items():
        gtables = [tables[t] for t in dict.fromkeys(f.table for f in gfeatures)]
        ebc = EmbeddingBagCollectionOp(
            module,
            [sparse_values[f.name][0] for f in gfeatures],
            [sparse_values[f.name][1] for f in gfeatures],
            [sparse_values[f.name][2] for f in gfeatures if f.weighted],
            [TableAttr(t.name, t.rows, t.dim, _DTYPES[t.dtype], t.pooling, t.distinct) for t in gtables],
            [
                FeatureAttr(f.name, f.table, round(feature_stats[f.name]["pooling_factor"], 4), f.weighted)
                for f in gfeatures
            ],
            [_placement_attr(t.name, plan[t.name]) for t in gtables],
        )
        name = f"{module}/{kind}"
        if unpooled and sum(k[0] == module and k[1] and k[3] == kind for k in groups) > 1:
            name = f"{name}/{table.rsplit('.', 1)[-1]}"  # a collection's tables: one group each
        for suffix in ("unpooled" if unpooled else "pooled", dtype, "ranks" + "_".join(map(str, ranks))):
            if name in names_taken:
                name = f"{name}/{suffix}"
        names_taken.add(name)
        ebc.attributes["group"] = StringAttr(name)
        fwd.add_op(ebc)
        pooled_of.update({f.name: r for f, r in zip(gfeatures, ebc.pooled)})
    return pooled_of


__all__ = ["export", "trace", "Traced", "input_device", "dynamic_shapes", "ExportError", "SHARDING_CHOICES"]
