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
import os
from collections.abc import Mapping, Sequence
from typing import Any

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
    LookupCall,
    ancestors,
    descendants,
    extract,
    find_lookups,
    output_nodes,
    user_inputs,
)
from sparselift.frontend.meta import fake_meta_parameters, has_meta_parameters, materialize_dense
from sparselift.frontend.program import FeatureInfo, SparseProgram, TableInfo
from sparselift.frontend.quiet import debug, export_failure, quietly
from sparselift.ir.sched import DenseOp, StepOp, YieldOp
from sparselift.ir.sparse import EmbeddingBagCollectionOp, FeatureAttr, PlacementAttr, TableAttr
from sparselift.passes.sharding import PlacementKind, ShardingPlan, TableStats, auto_shard, uniform_plan

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
            torch.export.export, model, example_inputs, dynamic_shapes=dynamic_shapes(model, example_inputs),
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
    node = call.indices
    if node.op != "call_function" or node.target.__name__ != "getitem":
        return None
    split, k = node.args
    if not isinstance(split, fx.Node) or "split" not in str(split.target):
        return None
    source = split.args[0]
    if source not in input_objects:
        return None
    path, root = input_objects[source]
    if not path or pytree.keystr(path[-1:]) != "._values":
        return None
    obj = root
    for key in path[:-1]:
        obj = key.get(obj)
    keys = getattr(obj, "keys", None)
    return keys()[k] if callable(keys) else None


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


def _feature_names(calls, placeholders, flat_paths, input_objects) -> list[str]:
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


def _measure_features(sparse_inputs: nn.Module, flat_args: Sequence[Any], features: Sequence[FeatureInfo]):
    """Pooling factor and id skew per feature, and the batch (which must agree across features)."""
    with torch.no_grad():
        per_feature = sparse_inputs(*flat_args)
    batches = {}
    stats = {}
    for f, (ids, offsets, _weights) in zip(features, per_feature):
        bags = offsets.numel() - 1
        batches[f.name] = bags
        ids64 = ids.reshape(-1).long()
        unique = int(torch.unique(ids64).numel()) if ids64.numel() else 0
        stats[f.name] = {
            "pooling_factor": ids64.numel() / max(bags, 1),
            "unique_fraction": unique / max(ids64.numel(), 1),
        }
    if len(set(batches.values())) > 1:
        detail = ", ".join(f"'{k}' has {v}" for k, v in batches.items())
        raise ExportError(f"the batch is not consistent across features: {detail} bags")
    return next(iter(batches.values())), stats


def export(
    model: nn.Module,
    example_inputs: tuple,
    *,
    world_size: int,
    sharding: str | ShardingPlan = "auto",
    stats: tuple | Mapping[str, float] | None = None,
    init_seed: int = 0,
) -> SparseProgram:
    """Export `model` and import it as a `sched.step` with one opaque EBC per sharding group.

    `stats` gives workload statistics: another input sample (a tuple like `example_inputs`) or a
    mapping feature -> pooling factor; by default they come from `example_inputs`.

    Parameters on the meta device are exported from their shapes; dense modules among them are
    materialized with `reset_parameters()` under `init_seed` (`sparselift.frontend.meta`), the
    tables stay on meta for each rank to materialize its shard.
    """
    if world_size < 1:
        raise ExportError(f"world_size must be at least 1, got {world_size}")
    if not isinstance(example_inputs, tuple):
        example_inputs = (example_inputs,)
    example_inputs = distinct_input_tensors(example_inputs)
    model_name = type(model).__name__
    meta = has_meta_parameters(model)
    with fake_meta_parameters(model, input_device(example_inputs)) if meta else contextlib.nullcontext():
        ep = _torch_export(model, example_inputs)
    gm = ep.module()
    placeholders = user_inputs(gm)
    flat_with_paths, _ = pytree.tree_flatten_with_path((example_inputs, {}))
    flat_paths = [p for p, _ in flat_with_paths]
    flat_values = [v for _, v in flat_with_paths]
    if len(flat_values) != len(placeholders):
        raise ExportError(f"model '{model_name}': {len(placeholders)} graph inputs but {len(flat_values)} input leaves")
    input_objects = {n: (p, (example_inputs, {})) for n, p in zip(placeholders, flat_paths)}

    calls = find_lookups(gm)
    if not calls:
        raise ExportError(f"model '{model_name}' has no embedding-bag lookups: there is no sparse path to compile")

    # The sparse path must be separable: no pooled value may feed another lookup's inputs.
    pooled_nodes = [c.pooled for c in calls]
    prep_targets = [n for c in calls for n in (c.indices, c.offsets, c.per_sample_weights) if n is not None]
    prep = ancestors(prep_targets)
    tangled = prep & descendants(pooled_nodes)
    if tangled:
        culprit = next(c for c in calls if c.pooled in ancestors(tangled))
        raise ExportError(
            f"module '{_group_module_name([culprit]) }', table '{culprit.table_fqn}': its pooled output feeds the "
            "ids of another lookup, so the sparse path cannot be separated from the dense part"
        )

    feature_names = _feature_names(calls, placeholders, flat_paths, input_objects)

    # Region: per-feature ids / offsets / weights from the model inputs.
    sparse_in_inputs = [p for p in placeholders if p in prep]
    sparse_in_gm = extract(gm, sparse_in_inputs, prep_targets, "sparse inputs")
    from sparselift.frontend.program import SparseInputs

    layout = [(c.offsets is not None, c.per_sample_weights is not None, c.include_last_offset) for c in calls]
    sparse_inputs = SparseInputs(sparse_in_gm, layout)

    # Tables and features.
    tables: dict[str, TableInfo] = {}
    features: list[FeatureInfo] = []
    for name, c in zip(feature_names, calls):
        param = gm.get_parameter(c.table_fqn) if c.table_fqn in dict(gm.named_parameters()) else getattr(gm, c.table_fqn)
        tname = c.table_fqn.removesuffix(".weight")
        if param.dim() != 2:
            raise ExportError(f"table '{tname}': expected a 2-D weight, got shape {tuple(param.shape)}")
        if param.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ExportError(f"table '{tname}': dtype {param.dtype} is not supported")
        module = _group_module_name([c])
        info = tables.get(tname)
        if info is None:
            info = tables[tname] = TableInfo(tname, c.table_fqn, int(param.shape[0]), int(param.shape[1]), param.dtype, c.mode, module)
        elif info.pooling != c.mode:
            raise ExportError(f"table '{tname}' is read with both {info.pooling} and {c.mode} pooling")
        elif info.module != module:
            raise ExportError(f"table '{tname}' is read by two embedding modules, '{info.module}' and '{module}'")
        features.append(FeatureInfo(name, tname, module, c.mode, c.per_sample_weights is not None, c.include_last_offset))

    batch, feature_stats = _measure_features(sparse_inputs, [flat_values[placeholders.index(p)] for p in sparse_in_inputs], features)
    if isinstance(stats, Mapping):
        for k, v in stats.items():
            if k not in feature_stats:
                raise ExportError(f"stats names unknown feature '{k}' (known: {', '.join(feature_stats)})")
            feature_stats[k]["pooling_factor"] = float(v)
    elif stats is not None:
        sample = stats if isinstance(stats, tuple) else (stats,)
        flat_sample = pytree.tree_leaves((sample, {}))
        _, feature_stats = _measure_features(
            sparse_inputs, [flat_sample[placeholders.index(p)] for p in sparse_in_inputs], features
        )

    table_stats = [
        TableStats(
            t.name, t.rows, t.dim, t.dtype.itemsize,
            sum(feature_stats[f.name]["pooling_factor"] for f in features if f.table == t.name),
            t.pooling,
        )
        for t in tables.values()
    ]
    plan = _resolve_sharding(sharding, table_stats, world_size)

    # Dense regions around the lookups.
    outputs = output_nodes(gm)
    post_nodes = descendants(pooled_nodes) - set(pooled_nodes)
    dense_needed = ancestors(outputs, stop=set(pooled_nodes)) - set(pooled_nodes)
    pre_nodes = {n for n in dense_needed - post_nodes if n.op not in ("placeholder", "get_attr", "output")}
    post_operand_nodes = _region_operands(gm, post_nodes, outputs, set(pooled_nodes))
    pre_outputs = [n for n in post_operand_nodes if n in pre_nodes]
    post_inputs_direct = [n for n in post_operand_nodes if n.op == "placeholder"]
    pre_nodes -= {n for n in pre_nodes if not _is_tensor(n)}
    pre_inputs = [p for p in placeholders if p in ancestors(pre_outputs)]

    regions: dict[str, fx.GraphModule | nn.Module] = {"sparse_inputs": sparse_inputs}
    if pre_outputs:
        regions["dense_pre"] = extract(gm, pre_inputs, pre_outputs, "dense_pre")
    post_operands = pre_outputs + post_inputs_direct + pooled_nodes
    regions["dense_post"] = extract(gm, post_operands, outputs, "dense_post")

    # --- IR ---------------------------------------------------------------------------------
    arg_types = [tensor_type(v, f"model input {_path_name(p)}") if isinstance(v, torch.Tensor) else None
                 for p, v in zip(flat_paths, flat_values)]
    tensor_inputs = [i for i, t in enumerate(arg_types) if t is not None]
    fwd = Block(arg_types=[arg_types[i] for i in tensor_inputs])
    value_of: dict[fx.Node, SSAValue] = {placeholders[i]: fwd.args[k] for k, i in enumerate(tensor_inputs)}

    def operands(nodes: Sequence[fx.Node], what: str) -> list[SSAValue]:
        try:
            return [value_of[n] for n in nodes]
        except KeyError as e:
            raise ExportError(f"{what}: model input '{e.args[0].name}' is not a tensor") from None

    # sparse_inputs: ids, offsets (+ weights) per feature.
    sp_types: list[Attribute] = []
    with torch.no_grad():
        example_sparse = sparse_inputs(*[flat_values[placeholders.index(p)] for p in sparse_in_inputs])
    for f, (ids, offs, w) in zip(features, example_sparse):
        sp_types += [tensor_type(ids.reshape(-1), f"ids of feature '{f.name}'"), tensor_type(offs, f"offsets of '{f.name}'")]
        if w is not None:
            sp_types.append(tensor_type(w.reshape(-1), f"weights of feature '{f.name}'"))
    sp_op = DenseOp.create(
        operands=operands(sparse_in_inputs, "sparse inputs"),
        result_types=sp_types,
        properties={"callee": FlatSymbolRefAttr("sparse_inputs"), "phase": StringAttr("forward")},
    )
    fwd.add_op(sp_op)
    results = iter(sp_op.res)
    ids_v, offs_v, w_v = {}, {}, {}
    for f in features:
        ids_v[f.name], offs_v[f.name] = next(results), next(results)
        if f.weighted:
            w_v[f.name] = next(results)

    pre_op = None
    if pre_outputs:
        pre_op = DenseOp.create(
            operands=operands(pre_inputs, "dense_pre"),
            result_types=[tensor_type(n.meta["val"], f"value '{n.name}'") for n in pre_outputs],
            properties={"callee": FlatSymbolRefAttr("dense_pre"), "phase": StringAttr("forward")},
            attributes={"flops": IntegerAttr(region_flops(regions["dense_pre"], batch), i64)},
        )
        fwd.add_op(pre_op)
        value_of.update(zip(pre_outputs, pre_op.res))

    # One opaque EBC per sharding group: (module, placement kind, dtype, and the ranks of a
    # row-wise table), features in model order.
    groups: dict[tuple, list[FeatureInfo]] = {}
    for f in features:
        p = plan[f.table]
        key = (f.module, str(p.kind), str(tables[f.table].dtype).removeprefix("torch."),
               p.ranks if p.kind == PlacementKind.ROW_WISE else ())
        groups.setdefault(key, []).append(f)
    pooled_of: dict[str, SSAValue] = {}
    group_names = []
    names_taken: set[str] = set()
    for (module, kind, dtype, ranks), gfeatures in groups.items():
        gtables = list(dict.fromkeys(f.table for f in gfeatures))
        ebc = EmbeddingBagCollectionOp(
            module,
            [ids_v[f.name] for f in gfeatures],
            [offs_v[f.name] for f in gfeatures],
            [w_v[f.name] for f in gfeatures if f.weighted],
            [TableAttr(t, tables[t].rows, tables[t].dim, _DTYPES[tables[t].dtype], tables[t].pooling) for t in gtables],
            [FeatureAttr(f.name, f.table, round(feature_stats[f.name]["pooling_factor"], 4), f.weighted) for f in gfeatures],
            [_placement_attr(t, plan[t]) for t in gtables],
        )
        name = f"{module}/{kind}"
        for suffix in (dtype, "ranks" + "_".join(map(str, ranks))):
            if name in names_taken:
                name = f"{name}/{suffix}"
        names_taken.add(name)
        ebc.attributes["group"] = StringAttr(name)
        group_names.append(name)
        fwd.add_op(ebc)
        pooled_of.update({f.name: r for f, r in zip(gfeatures, ebc.pooled)})
    value_of.update({c.pooled: pooled_of[f.name] for c, f in zip(calls, features)})

    post_op = DenseOp.create(
        operands=[value_of[n] for n in post_operands],
        result_types=[tensor_type(n.meta["val"], f"model output '{n.name}'") for n in outputs],
        properties={"callee": FlatSymbolRefAttr("dense_post"), "phase": StringAttr("forward")},
        attributes={"flops": IntegerAttr(region_flops(regions["dense_post"], batch), i64)},
    )
    fwd.add_op(post_op)
    fwd.add_op(YieldOp(*post_op.res))

    bwd = Block(arg_types=[r.type for r in post_op.res])
    post_bwd = DenseOp.create(
        operands=list(bwd.args),
        result_types=[v.type for v in post_op.operands],
        properties={"callee": FlatSymbolRefAttr("dense_post"), "phase": StringAttr("backward")},
        # Backward of a matmul is two matmuls of the same size.
        attributes={"flops": IntegerAttr(2 * region_flops(regions["dense_post"], batch), i64)},
    )
    bwd.add_op(post_bwd)
    if pre_op is not None:
        bwd.add_op(DenseOp.create(
            operands=list(post_bwd.res[: len(pre_outputs)]),
            result_types=[v.type for v in pre_op.operands],
            properties={"callee": FlatSymbolRefAttr("dense_pre"), "phase": StringAttr("backward")},
            attributes={"flops": IntegerAttr(2 * region_flops(regions["dense_pre"], batch), i64)},
        ))
    bwd.add_op(YieldOp())
    step = StepOp("step", world_size, len(outputs), Region(fwd), Region(bwd))
    step.attributes["batch"] = StringAttr(str(batch))
    step.attributes["model"] = StringAttr(model_name)
    module = ModuleOp([step])
    if meta:
        materialize_dense(model, {t.param for t in tables.values()}, regions, seed=init_seed,
                          device=input_device(example_inputs))
    try:
        module.verify()
    except Exception as e:  # an importer bug, not a user error: say so plainly
        raise ExportError(f"internal error: the imported IR for '{model_name}' does not verify: {e}") from e

    return SparseProgram(
        module=module,
        regions=regions,
        # Not the ExportedProgram: it holds every parameter of the model (the tables too), so
        # keeping it would keep the user's tables alive after the compiled model took them over.
        graph_code=ep.graph_module.code,
        input_paths=[_path_name(p) for p in flat_paths],
        tensor_inputs=tensor_inputs,
        in_spec=pytree.tree_flatten((example_inputs, {}))[1],
        out_spec=gm._out_spec if hasattr(gm, "_out_spec") else None,
        tables=list(tables.values()),
        features=features,
        sharding=plan,
        stats=feature_stats,
        batch=batch,
        groups=group_names,
        world_size=world_size,
    )


__all__ = ["export", "input_device", "dynamic_shapes", "ExportError", "SHARDING_CHOICES"]
