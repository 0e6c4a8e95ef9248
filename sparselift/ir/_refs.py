"""Reference checks: what a `sched.step` defines, and the ops inside it that name those things.

A step's `sparse.route` ops (and, before `lift-sparse`, its opaque
`sparse.embedding_bag_collection` ops) define its sharding groups: which features read which
table, where each table lives and, per rank, the order of the features in that rank's segment
of the routed buffers. Lookups, updates and fused table ops (`sparse.fused_*`) name a table,
its placement and `slots` into that order; id exchanges carry per-segment feature counts; every op may carry a
`group` label. The verifiers of those ops call the checks here, so that IR which verifies
cannot name what its step does not route: the plan-module target and the runtime look tables
up by name and features by slot, and fail far from the cause otherwise.

Ops are recognised by name, not by class: this module imports no dialect, so `sparse`, `coll`
and `sched` all use it without an import cycle. Outside a `sched.step` nothing is checked.
Lifted ops are checked against the step's routes (an opaque collection has no segments to
index); a step without any route is a fragment (the pass tests write lifted steps that take
the received buffers as arguments), where only the ops' agreement on each table is checked.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from xdsl.dialects.builtin import ArrayAttr, IntAttr, StringAttr
from xdsl.ir import Attribute, BlockArgument, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from sparselift.ir.sparse_attrs import FeatureAttr, PlacementAttr, TableAttr

STEP = "sched.step"
ROUTE = "sparse.route"
EBC = "sparse.embedding_bag_collection"
TABLE_OPS = ("sparse.lookup", "sparse.lookup_update", "sparse.lookup_grad", "sparse.gather_rows", "sparse.rows_update")
FUSED_OPS = ("sparse.fused_lookup", "sparse.fused_lookup_update", "sparse.fused_lookup_grad")


def enclosing_step(op: Operation) -> Operation | None:
    parent = op.parent_op()
    while parent is not None and parent.name != STEP:
        parent = parent.parent_op()
    return parent


def enclosing_world_size(op: Operation) -> int | None:
    """The world size of the enclosing `sched.step`, if any."""
    step = enclosing_step(op)
    return cast(IntAttr, step.properties["world_size"]).data if step is not None else None


def _is(attr: object, name: str) -> bool:
    """Duck-typed isinstance for the sparse attributes (this module cannot import them)."""
    return isinstance(attr, Attribute) and getattr(attr, "name", None) == name


def _attrs(op: Operation, key: str, kind: str) -> list[Any]:
    """The `kind` attributes listed in property (or attribute) `key`; [] when malformed."""
    value = op.properties.get(key, op.attributes.get(key))
    if not isinstance(value, ArrayAttr):
        return []
    return [a for a in value.data if _is(a, kind)]


def group_labels(op: Operation) -> list[str]:
    """The sharding groups an op's `group` label names (`a+b` after aggregation)."""
    label = op.attributes.get("group")
    if isinstance(label, StringAttr):
        return label.data.split("+")
    if op.name == EBC and isinstance(op.properties.get("module"), StringAttr):
        return [cast(StringAttr, op.properties["module"]).data]  # lift-sparse labels the group by module then
    return []


@dataclass
class GroupDef:
    """One route (or opaque collection): its features, placements and per-rank segments."""

    op: Operation
    features: list[FeatureAttr]
    placements: dict[str, PlacementAttr]  # by table name
    served: list[list[int]]  # per rank: indices of the features in that rank's segment, in order

    @property
    def label(self) -> str:
        labels = group_labels(self.op)
        return "+".join(labels) if labels else "?"

    def describe(self) -> str:
        if self.op.name == EBC:
            return f"the {EBC} '{cast(StringAttr, self.op.properties['module']).data}'"
        return f"the {self.op.name} of group '{self.label}'"

    def counts(self) -> list[int]:
        """Features per sample in each rank's segment."""
        return [len(s) for s in self.served]

    def table_features(self, table: str) -> list[int]:
        return [i for i, f in enumerate(self.features) if f.table.data == table]

    def slots(self, table: str, rank: int) -> list[int]:
        served = self.served[rank]
        return [served.index(i) for i in self.table_features(table) if i in served]

    def weighted(self, table: str) -> bool:
        return any(self.features[i].is_weighted for i in self.table_features(table))


def _group_def(op: Operation, world: int) -> GroupDef:
    features = _attrs(op, "features", "sparse.feature")
    placements: dict[str, PlacementAttr] = {}
    for p in _attrs(op, "placements", "sparse.placement"):
        placements.setdefault(p.table.data, p)
    served: list[list[int]] = [[] for _ in range(world)]
    for i, f in enumerate(features):
        p = placements.get(f.table.data)
        for r in p.owner_ranks(world) if p is not None else ():
            if 0 <= r < world:
                served[r].append(i)
    return GroupDef(op, features, placements, served)


@dataclass
class StepRefs:
    """Everything a step defines that its ops refer to, gathered in one walk of the step."""

    step: Operation
    world: int
    groups: dict[Operation, GroupDef] = field(default_factory=dict)
    table_group: dict[str, GroupDef] = field(
        default_factory=dict
    )  # the first group (route or collection) of each table
    routed: dict[str, GroupDef] = field(default_factory=dict)  # the first route of each table: what lifted ops read
    declared: dict[str, tuple[TableAttr, Operation]] = field(default_factory=dict)  # first one seen
    labels: set[str] = field(default_factory=set)
    routes: dict[int, Operation | None] = field(default_factory=dict)  # id(value) -> routed_by(value)

    @property
    def where(self) -> str:
        return f"@{cast(StringAttr, self.step.properties['sym_name']).data}"


def _build(step: Operation) -> StepRefs:
    refs = StepRefs(step, cast(IntAttr, step.properties["world_size"]).data)
    for op in step.walk():
        if op.name in (ROUTE, EBC):
            g = _group_def(op, refs.world)
            refs.groups[op] = g
            refs.labels.update(group_labels(op))
            for f in g.features:
                refs.table_group.setdefault(f.table.data, g)
                if op.name == ROUTE:
                    refs.routed.setdefault(f.table.data, g)
            tables = _attrs(op, "tables", "sparse.table")
        elif op.name in TABLE_OPS:
            tables = [t for t in [op.properties.get("table")] if _is(t, "sparse.table")]
        elif op.name in FUSED_OPS:
            tables = _attrs(op, "tables", "sparse.table")
        else:
            continue
        for t in tables:
            refs.declared.setdefault(t.name_str, (t, op))
    return refs


# While a step verifies (StepOp.verify), its ops share one StepRefs instead of each walking it.
_ACTIVE: dict[int, StepRefs | None] = {}


@contextmanager
def verifying(step: Operation) -> Iterator[None]:
    """Cache the step's references for the ops verified inside this block (nothing mutates)."""
    outer = id(step) in _ACTIVE
    _ACTIVE.setdefault(id(step), None)
    try:
        yield
    finally:
        if not outer:
            _ACTIVE.pop(id(step), None)


def step_refs(op: Operation) -> StepRefs | None:
    step = enclosing_step(op)
    if step is None:
        return None
    if id(step) not in _ACTIVE:
        return _build(step)
    refs = _ACTIVE[id(step)]
    if refs is None or refs.step is not step:
        refs = _ACTIVE[id(step)] = _build(step)
    return refs


def received_from(value: SSAValue) -> Operation | None:
    """The collective that produced a received value (through its `coll.wait`), if any."""
    owner = value.owner
    if not isinstance(owner, Operation):  # a block argument
        return None
    if owner.name == "coll.wait" and owner.operands:
        owner = owner.operands[0].owner
        if not isinstance(owner, Operation):
            return None
    return owner if owner.name.startswith("coll.") else None


def routed_by(value: SSAValue, refs: StepRefs) -> Operation | None:
    """The `sparse.route` whose lengths (or packed ids) `value` is: through exchanges, id packing
    and the step's saved values; None when it comes from elsewhere."""
    key = id(value)
    if key not in refs.routes:
        refs.routes[key] = _trace_route(value, refs)
    return refs.routes[key]


def _trace_route(value: SSAValue, refs: StepRefs) -> Operation | None:
    step = refs.step
    n_out = cast(IntAttr, step.properties["num_outputs"]).data
    for _ in range(32):  # a chain is a few ops long; the bound only guards against cycles
        if isinstance(value, BlockArgument):
            if value.block is not step.regions[1].block or value.index < n_out:
                return None
            fwd_yield = step.regions[0].block.last_op
            if fwd_yield is None or value.index >= len(fwd_yield.operands):
                return None
            value = fwd_yield.operands[value.index]
            continue
        owner = value.owner
        if not isinstance(owner, Operation):  # a block argument of another block
            return None
        if owner.name == ROUTE:
            return owner
        collective = received_from(value)
        if collective is not None and collective.name in ("coll.all_to_all", "coll.all_to_all_start"):
            value = collective.operands[0]
        elif owner.name in ("sparse.unpack_ids", "sparse.pack_ids") and owner.operands:
            value = owner.operands[0]
        else:
            return None
    return None


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _names(group: GroupDef, indices: Sequence[int]) -> str:
    names = [f"'{group.features[i].feature_name.data}'" for i in indices]
    return ("feature " if len(names) == 1 else "features ") + ", ".join(names)


def check_table_ref(
    op: Operation,
    what: str,
    table: TableAttr,
    placement: PlacementAttr,
    slots: Sequence[int],
    weighted: bool | None,
    lengths: SSAValue | None,
) -> None:
    """A table-local op (or one table of a fused kernel) against the group that routes its table:
    the table is routed, its placement and declaration agree, `slots` are where that group puts
    the table's features in the owner's segment, weights are read exactly when a feature is
    weighted, and `lengths` come from that group's route."""
    refs = step_refs(op)
    if refs is None:
        return
    name = table.name_str
    declared, source = refs.declared[name]
    if declared != table:
        raise VerifyException(f"{what}: {table} differs from {declared} in the {source.name} of {refs.where}")
    if not refs.routed:
        return  # a fragment (pass tests write steps without routes): nothing to check against
    group = refs.routed.get(name)
    if group is None:
        raise VerifyException(
            f"{what}: no sparse.route of {refs.where} routes a feature to table '{name}' (no feature reads it)"
        )
    if placement != group.placements.get(name):
        raise VerifyException(
            f"{what}: placement {placement} differs from {group.placements.get(name)} in {group.describe()}"
        )
    owners = [r for r in placement.owner_ranks(refs.world) if 0 <= r < refs.world]
    if owners:
        rank = owners[0]
        want = group.slots(name, rank)
        if list(slots) != want:
            raise VerifyException(
                f"{what}: slots {list(slots)}, but {group.describe()} puts {_names(group, group.table_features(name))} "
                f"of this table at slots {want} of rank {rank}'s segment ({_count(len(group.served[rank]), 'feature')})"
            )
    if weighted is not None and weighted != group.weighted(name):
        if weighted:
            raise VerifyException(f"{what}: reads per-sample weights but no feature of table '{name}' is weighted")
        raise VerifyException(f"{what}: table '{name}' has weighted features but the op reads no weights")
    source_route = routed_by(lengths, refs) if lengths is not None else None
    if source_route is not None and source_route is not group.op:
        raise VerifyException(
            f"{what}: its lengths come from {refs.groups[source_route].describe()}, which does not route "
            f"table '{name}' ({group.describe()} does)"
        )


def check_group_def(op: Operation) -> None:
    """A route or opaque collection: its world size is the step's, and no other group of the step
    routes one of its tables (runtime and plan index tables by name)."""
    refs = step_refs(op)
    if refs is None:
        return
    world: Any = op.properties.get("world_size")  # an IntAttr, or an IntegerAttr holding one
    if world is not None and getattr(world, "value", world).data != refs.world:
        raise VerifyException(
            f"{op.name}: world_size = {getattr(world, 'value', world).data} but {refs.where} has world_size = "
            f"{refs.world}"
        )
    for table in refs.groups[op].placements:
        other = refs.table_group.get(table)
        if other is not None and other.op is not op:
            raise VerifyException(
                f"{op.name}: table '{table}' is also in {other.describe()}; a table belongs to one sharding group"
            )


def check_segment_counts(op: Operation, counts: Sequence[int], value: SSAValue, what: str) -> None:
    """Per-segment feature counts (`features` of the id packing, `input_lengths` splits) against
    the route that `value` comes from."""
    refs = step_refs(op)
    if refs is None:
        return
    route = routed_by(value, refs)
    if route is None:
        return
    group = refs.groups[route]
    if list(counts) != group.counts():
        raise VerifyException(
            f"{op.name}: {what} {list(counts)}, but {group.describe()} sends {group.counts()} features per sample "
            f"to ranks 0..{refs.world - 1}"
        )


def check_group_label(op: Operation) -> None:
    """An op's `group` label names sharding groups that a route (or collection) of the step defines."""
    if not isinstance(op.attributes.get("group"), StringAttr):
        return
    refs = step_refs(op)
    if refs is None or not refs.groups:
        return
    for label in group_labels(op):
        if label not in refs.labels:
            known = ", ".join(f"'{g}'" for g in sorted(refs.labels)) or "none"
            raise VerifyException(
                f"{op.name}: group '{label}' is not a sharding group of {refs.where} (its routes define {known})"
            )


def check_rank(op: Operation, rank: int) -> None:
    """An `on_rank` rank exists in the step's world."""
    world = enclosing_world_size(op)
    if rank < 0 or (world is not None and rank >= world):
        raise VerifyException(f"{op.name}: on_rank {rank} is out of range for world size {world}")


def verify_tables_features_placements(
    op: Operation, tables: Sequence[TableAttr], features: Sequence[FeatureAttr], placements: Sequence[PlacementAttr]
) -> None:
    """An opaque collection's own declarations: each table once, features read declared tables,
    every table placed once (with row ranges covering it, on ranks of the step)."""
    where = op.name
    by_name: dict[str, TableAttr] = {}
    for t in tables:
        if t.name_str in by_name:
            raise VerifyException(f"{where}: table '{t.name_str}' is declared twice")
        by_name[t.name_str] = t
    seen_features: set[str] = set()
    for f in features:
        if f.feature_name.data in seen_features:
            raise VerifyException(f"{where}: feature '{f.feature_name.data}' is listed twice")
        seen_features.add(f.feature_name.data)
        if f.table.data not in by_name:
            raise VerifyException(f"{where}: feature '{f.feature_name.data}' maps to missing table '{f.table.data}'")
        if f.is_weighted and by_name[f.table.data].is_unpooled:
            raise VerifyException(
                f"{where}: feature '{f.feature_name.data}' has per-sample weights but table '{f.table.data}' is "
                "unpooled (weights scale ids within a pooled bag)"
            )
    unpooled = {t.is_unpooled for t in tables}
    if len(unpooled) > 1:
        raise VerifyException(f"{where}: a group holds pooled and unpooled tables; their exchanges differ")
    placed: set[str] = set()
    for p in placements:
        name = p.table.data
        if name not in by_name:
            raise VerifyException(f"{where}: placement names unknown table '{name}'")
        if name in placed:
            raise VerifyException(f"{where}: table '{name}' is placed twice in this group")
        placed.add(name)
        p.verify_for_table(by_name[name])
    missing = [t for t in by_name if t not in placed]
    if missing:
        raise VerifyException(f"{where}: table '{missing[0]}' is not placed in this group")
    world = enclosing_world_size(op)
    if world is not None:
        for p in placements:
            p.verify_ranks(world)
