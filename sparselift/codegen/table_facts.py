"""Table facts read from the IR: the one description of the tables that the runtime shards,
allocates, checkpoints and builds kernels from (the plan module's `TABLES`).

Everything here comes from the IR, at any stage: the exported step (opaque
`sparse.embedding_bag_collection`s) or a lifted one (`sparse.route`s and table ops). Per table:
its `#sparse.table` (rows, dim, dtype, pooling), its `#sparse.placement` (owner ranks and each
owner's rows), the `#sparse.feature`s reading it (weighted or not), the index dtype of the ids its
lookups read (the routed indices), the `#sparse.optimizer` of its update (lifted IR), and the
state-dict parameter it came from (`<name>.weight` unless the step's `table_params` says
otherwise). From these, each table's generated-kernel spec (`TableSpec`).

No torch here: the runtime maps dtype names to torch dtypes itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import attrs
from xdsl.dialects.builtin import ArrayAttr, IntegerType, ModuleOp, StringAttr, TensorType
from xdsl.ir import Attribute, Operation, OpResult

from sparselift.codegen.ckernels import INDEX_DTYPES, STORAGE_DTYPES, TableSpec
from sparselift.ir.sched import DenseOp, StepOp
from sparselift.ir.sparse import (
    EmbeddingBagCollectionOp,
    OptimizerAttr,
    PlacementAttr,
    PlacementKind,
    RouteOp,
    TableAttr,
)
from sparselift.placement import ShardingPlan, TablePlacement

_MAX_KERNEL_DIM = 4096  # the widest row the generated C kernels take (ckernels.TableSpec)


# Text fields convert to plain `str`, never a StrEnum member: the plan module writes them as
# Python literals. (`attrs.field` is spelled out per field: mypy's attrs plugin reads only it.)
# Tuple converters are spelled `tuple[X, ...]`: the plugin cannot type a bare generic `tuple`.


@attrs.frozen
class FeatureFact:
    """A sparse feature: the table it reads and its workload statistics."""

    name: str = attrs.field(converter=str)
    table: str = attrs.field(converter=str)
    pooling_factor: float = attrs.field(converter=float)
    weighted: bool = attrs.field(converter=bool)
    # the embedding module reading it ("" once lifted: only the export knows)
    module: str = attrs.field(converter=str, default="")


@attrs.frozen
class TableFact:
    """One embedding table as the IR describes it, for every rank (the plan module's `TABLES`)."""

    name: str = attrs.field(converter=str)  # IR name
    param: str = attrs.field(converter=str)  # FQN in the model's state_dict
    rows: int = attrs.field(converter=int)
    dim: int = attrs.field(converter=int)
    dtype: str = attrs.field(converter=str)  # f32 | f16 | bf16 | f64
    index_dtype: str = attrs.field(converter=str)  # i32 | i64: the ids its lookups read
    pooling: str = attrs.field(converter=str)  # sum | mean | none (unpooled)
    placement: str = attrs.field(converter=str)  # table_wise | row_wise | data_parallel
    # the placement's ranks (none for data_parallel)
    ranks: tuple[int, ...] = attrs.field(converter=tuple[int, ...])
    # row_wise: rank ranks[i] holds rows [row_bounds[i], row_bounds[i+1])
    row_bounds: tuple[int, ...] = attrs.field(converter=tuple[int, ...])
    # (rank, first row, end row) of every rank holding a shard
    shards: tuple[tuple[int, int, int], ...] = attrs.field(converter=tuple[tuple[int, int, int], ...])
    weighted: bool = attrs.field(converter=bool)  # some feature reading it has per-sample weights
    features: tuple[str, ...] = attrs.field(converter=tuple[str, ...])
    module: str = attrs.field(converter=str, default="")  # the embedding module ("" once lifted)
    # its fused update's optimizer (lifted IR); None before lifting
    optimizer: str | None = attrs.field(converter=attrs.converters.optional(str), default=None)
    # its hyperparameter group: `param_groups[optimizer_group]` of the compiled model's sparse_optimizer
    optimizer_group: int | None = attrs.field(default=None, converter=attrs.converters.optional(int))
    kernel_spec: TableSpec | None = None  # its generated kernels; None where they do not apply

    @property
    def owners(self) -> tuple[int, ...]:
        return tuple(r for r, _, _ in self.shards)

    def holds(self, rank: int) -> bool:
        return any(r == rank for r, _, _ in self.shards)

    def shard_rows(self, rank: int) -> tuple[int, int]:
        """The rows [lo, hi) that `rank` holds (KeyError if it holds none)."""
        for r, lo, hi in self.shards:
            if r == rank:
                return lo, hi
        raise KeyError(f"rank {rank} holds no shard of table '{self.name}'")

    def placement_record(self) -> TablePlacement:
        return TablePlacement(self.placement, self.ranks, self.row_bounds)


def step_of(module: ModuleOp | StepOp) -> StepOp:
    if isinstance(module, StepOp):
        return module
    steps = [op for op in module.walk() if isinstance(op, StepOp)]
    if len(steps) != 1:
        raise ValueError(f"expected exactly one sched.step, found {len(steps)}")
    return steps[0]


def _attrs_of(op: Operation) -> list[Attribute]:
    """Every attribute an op holds (properties and attributes), arrays flattened one level."""
    out: list[Attribute] = []
    for a in (*op.properties.values(), *op.attributes.values()):
        out += list(a.data) if isinstance(a, ArrayAttr) else [a]
    return out


def _feature_order(op: EmbeddingBagCollectionOp | RouteOp, seen: int) -> list[tuple[int, int]]:
    """Model order of `op`'s features: the position of each one's ids among `sparse_inputs`'
    results (which the export lays out feature by feature); after those, IR order (`seen`
    features came before) where that is not known (hand-written IR)."""
    out = []
    for i, v in enumerate(op.ids):
        owner = v.owner
        if (
            isinstance(v, OpResult)
            and isinstance(owner, DenseOp)
            and owner.callee.root_reference.data == "sparse_inputs"
        ):
            out.append((0, v.index))
        else:
            out.append((1, seen + i))
    return out


def _index_dtype(op: EmbeddingBagCollectionOp | RouteOp, tables: Sequence[TableAttr]) -> str:
    """The routed index dtype: a route's indices; for an opaque collection, what lift-sparse
    routes without `narrow-ids` (i32 only when every id is i32 and every row number fits; the
    compiler's default lowering narrows more, and the lifted module's facts say so)."""
    if isinstance(op, RouteOp):
        return _int_name(op.indices.type.element_type)
    id_types = {cast(TensorType, v.type).element_type for v in op.ids}  # verified: tensors
    narrow = id_types == {IntegerType(32)} and all(t.rows.data < 2**31 for t in tables)
    return "i32" if narrow else "i64"


def _int_name(t: Attribute) -> str:
    return f"i{t.width.data}" if isinstance(t, IntegerType) else str(t)


@attrs.define
class _Collected:
    tables: dict[str, TableAttr] = attrs.field(factory=dict)
    placements: dict[str, PlacementAttr] = attrs.field(factory=dict)
    features: list[tuple[tuple[int, int], FeatureFact]] = attrs.field(factory=list)
    index_dtype: dict[str, str] = attrs.field(factory=dict)
    module: dict[str, str] = attrs.field(factory=dict)
    optimizer: dict[str, OptimizerAttr] = attrs.field(factory=dict)
    groups: list[str] = attrs.field(factory=list)


def _collect(step: StepOp) -> _Collected:
    """Tables, placements and features from every op that names them, in one walk."""
    c = _Collected()
    for op in step.walk():
        held = _attrs_of(op)
        tables = [a for a in held if isinstance(a, TableAttr)]
        for t in tables:
            c.tables.setdefault(t.name_str, t)
        for p in held:
            if isinstance(p, PlacementAttr):
                c.placements.setdefault(p.table.data, p)
        optimizer = next((a for a in held if isinstance(a, OptimizerAttr)), None)
        if optimizer is not None:
            for t in tables:
                c.optimizer.setdefault(t.name_str, optimizer)
        if not isinstance(op, EmbeddingBagCollectionOp | RouteOp):
            continue
        group = op.attributes.get("group")
        if isinstance(group, StringAttr) and group.data not in c.groups:
            c.groups.append(group.data)
        module = op.module.data if isinstance(op, EmbeddingBagCollectionOp) else ""
        served = [p.table.data for p in op.placements.data]
        index_dtype = _index_dtype(
            op, [t for t in tables if t.name_str in served] or [c.tables[n] for n in served if n in c.tables]
        )
        for name in served:
            c.index_dtype.setdefault(name, index_dtype)
            c.module.setdefault(name, module)
        for order, f in zip(_feature_order(op, len(c.features)), op.features.data):
            c.features.append(
                (order, FeatureFact(f.feature_name.data, f.table.data, f.pooling_factor.data, f.is_weighted, module))
            )
    c.features.sort(key=lambda item: item[0])
    return c


def describe_features(module: ModuleOp | StepOp) -> list[FeatureFact]:
    """Every feature of the step, in model order (the order `sparse_inputs` returns them)."""
    return [f for _, f in _collect(step_of(module)).features]


def group_names(module: ModuleOp | StepOp) -> list[str]:
    """The sharding groups' labels, in IR order."""
    return _collect(step_of(module)).groups


def batch_size(module: ModuleOp | StepOp) -> int:
    """The example batch the step was exported with."""
    step = step_of(module)
    if step.batch_size is None:
        raise ValueError(f"sched.step @{step.sym_name.data} has no batch: it was not exported by sparselift.export")
    return step.batch_size


def _shards(p: PlacementAttr, rows: int, world: int) -> tuple[tuple[int, int, int], ...]:
    if p.kind.data == PlacementKind.ROW_WISE:
        b = p.bounds
        return tuple((r, b[i], b[i + 1]) for i, r in enumerate(p.rank_list))
    return tuple((r, 0, rows) for r in p.owner_ranks(world))


def _kernel_spec(t: TableAttr, index_dtype: str, weighted: bool, optimizer: OptimizerAttr | None) -> TableSpec | None:
    dtype = str(t.dtype)
    if dtype not in STORAGE_DTYPES or index_dtype not in INDEX_DTYPES or not 1 <= t.dim.data <= _MAX_KERNEL_DIM:
        return None
    return TableSpec(
        t.dim.data,
        dtype,
        index_dtype,
        str(t.kernel_pooling),
        weighted,
        None if optimizer is None else str(optimizer.kind.data),
    )


def describe_tables(module: ModuleOp | StepOp, world: int | None = None) -> list[TableFact]:
    """Every table of the step (in the model order of their first feature), for world size
    `world` (default: the step's)."""
    step = step_of(module)
    world = step.world_size.data if world is None else world
    c = _collect(step)
    order = list(dict.fromkeys([f.table for _, f in c.features] + list(c.tables)))
    out = []
    for name in order:
        t, p = c.tables.get(name), c.placements.get(name)
        if t is None or p is None:
            raise ValueError(f"table '{name}' has no #sparse.table or no #sparse.placement in the IR")
        features = [f for _, f in c.features if f.table == name]
        weighted = any(f.weighted for f in features)
        index_dtype = c.index_dtype.get(name, "i64")
        opt = c.optimizer.get(name)
        out.append(
            TableFact(
                name=name,
                param=step.param_name(name),
                rows=t.rows.data,
                dim=t.dim.data,
                dtype=str(t.dtype),
                index_dtype=index_dtype,
                pooling=t.pooling.data,
                placement=p.kind.data,
                ranks=tuple(p.rank_list),
                row_bounds=tuple(p.bounds),
                shards=_shards(p, t.rows.data, world),
                weighted=weighted,
                features=tuple(f.name for f in features),
                module=c.module.get(name, ""),
                optimizer=None if opt is None else opt.kind.data,
                optimizer_group=None if opt is None else opt.group.data,
                kernel_spec=_kernel_spec(t, index_dtype, weighted, opt),
            )
        )
    return out


def sharding_plan(module: ModuleOp | StepOp) -> ShardingPlan:
    """The placements the IR holds, as a `ShardingPlan` (what `sparselift export --plan-json` writes)."""
    step = step_of(module)
    return ShardingPlan(step.world_size.data, {t.name: t.placement_record() for t in describe_tables(step)})


def render_tables(facts: Sequence[TableFact]) -> list[str]:
    """The plan module's `TABLES` constant (Python source lines; the reprs are valid Python)."""
    return [
        "# every table of the step, on every rank (sparselift.codegen.table_facts)",
        "TABLES = (",
        *[f"    {f!r}," for f in facts],
        ")",
    ]


PLAN_MODULE_IMPORTS = (
    "from sparselift.codegen.ckernels import TableSpec",
    "from sparselift.codegen.table_facts import TableFact",
)


def distinct_shares(module: ModuleOp | StepOp) -> dict[str, float]:
    """Per table whose IR gives one (`TableAttr.distinct` under 1): its share of distinct ids."""
    tables = _collect(step_of(module)).tables
    return {name: t.distinct.data for name, t in tables.items() if t.distinct.data < 1.0}


__all__ = [
    "FeatureFact",
    "TableFact",
    "batch_size",
    "distinct_shares",
    "describe_features",
    "describe_tables",
    "group_names",
    "render_tables",
    "sharding_plan",
    "step_of",
    "PLAN_MODULE_IMPORTS",
]
