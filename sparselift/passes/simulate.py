"""The analytic step-time model behind `sparselift simulate`: the per-rank step at large world sizes.

(What the command parses and prints is `sparselift.tools.simulate_cli`.)

Nothing here runs or builds IR at the projected world size (its split matrices would be N x N):
the model is exported once at a small world size, `workload_from_module` reads the tables,
features, batch and dense FLOPs off that IR into a `Workload`, and `simulate` places the tables
for N ranks (`auto_shard` by default) and prices one training step from a `HardwareProfile`
with `sparselift.passes.cost_model`'s primitives (the formulas `annotate-cost` prices IR ops with).
The result is a projection, labelled SIMULATED everywhere it is printed or written.

The model (weak scaling: every rank keeps `B` samples; `N` ranks, `n` per node)
------------------------------------------------------------------------------
Notation: per table `t`: `pf_t` ids per sample (summed over its features), `F_t` features,
`d_t` dim, `E_t` element bytes, `w_t = F_t d_t E_t` pooled bytes per sample, `I` id bytes
(8 for i64 ids, 4 for i32), lengths and weights 4 bytes each. Placement: `auto_shard(tables, N)`
or a uniform kind (`SimOptions.sharding`, as `export` places tables): table-wise on one owner,
row-wise over ranks `R_t`, or data-parallel. Tables are grouped as `lift-sparse` groups them:
per embedding module, placement kind and dtype. Profile terms:
`gather(x) = x / mem_bw`, `copy(x) = 2 x / copy_bw`, `flops(x) = x / flops_per_s`,
`fixed = kernel_launch_us + lookup_overhead_us`, `beta_in = 1 / net_bw` (same node),
`beta_x = 1 / inter_node_bw` (across nodes).

1. Ids gathered on rank r per step: table-wise owner `N B pf_t`; row-wise shard `N B pf_t / |R_t|`
   (ids uniform over rows); data-parallel `B pf_t` on every rank.
   `lookup_r = sum_t (fixed + gather(ids_t,r d_t E_t) + ref_lookup(ids_t,r))`;
   `update_r = sum_t (fixed + update_factor gather(ids_t,r d_t E_t) + ref_update(ids_t,r))`
   (`ref_*`: the reference lowering's per-table torch passes, `cost_model.reference_us`). A data-parallel table
   instead zero-fills and scatters its dense gradient `(fixed + copy(S_t) / 2 +
   update_factor gather(..))` and applies it `(fixed + 1.5 copy(S_t))`, `S_t` its bytes.
2. Copies, per group: `route = kernel_launch_us + copy(B (pf I + F 4 + pf_w 4))` on every rank;
   forward `pack` on an owner holds its pooled vectors for all `N B` samples
   (`kernel_launch_us + copy(N B w_own)`; row-wise: `N B w_group` partial pools), `unpack`
   `B w_group`; backward mirrors it (pack `B w_group`, row-wise `N B w_group`; unpack on an owner
   `N B w_own`, row-wise `N B w_group`).
3. An exchange where rank s sends rank p `b[s][p] = u[s] + v[p]` bytes (every exchange here has
   that form) costs
   `coll_alpha_us + coll_peer_alpha_us (N - 1) + max_r max(send_r, recv_r)`, with
   `send_r = sum_{p != r} b[r][p] beta(r, p)` and `recv_r = sum_{s != r} b[s][r] beta(s, r)`:
   a rank's link serializes its messages, and the busiest sender or receiver sets the pace.
   Per distributed group: lengths `v[p] = B 4 (features p serves)`; ids `v[p] = B I (ids p
   serves)`, weights likewise; pooled outputs `u[s] = B w_own(s)` (table-wise all-to-all) or
   `u = B w_group` (row-wise reduce-scatter of partial pools, plus reading them:
   `copy(N B w_group) / 2`); pooled gradients `v[p] = B w_own(p)` (table-wise) or
   `u = B w_group` (row-wise: every shard needs every sample's gradient). With aggregation (the
   `aggregate-comm` pass), same-role static exchanges merge: pooled outputs of table-wise groups,
   pooled gradients of all groups, and the replicated tables' gradient all-reduces (their `u`
   and `v` add up, one alpha is paid). Lengths and ids exchanges stay per group.
4. Ring all-reduce of `S` bytes: `coll_alpha_us + 2 (N - 1) (coll_peer_alpha_us + S / N beta_ring)`,
   `beta_ring = beta_in` inside one node, the slower link once the ring spans nodes. The dense
   gradients (`P` dense parameter bytes) go in `ceil(P / bucket)` buckets of `bucket` bytes
   (DDP-style, 1 MiB), one ring each; replicated tables' gradients in one ring per group (one in
   all with aggregation).
5. Dense compute: `fwd = flops(B flops_fwd) + kernel_launch_us (forward regions)`, likewise
   `bwd`; `pre = flops(B flops_pre)` is the forward part that does not read embeddings;
   dense optimizer `opt = kernel_launch_us + 1.5 copy(P)` (read param and grad, write param).
6. Per group, the compute between two collectives is charged on its busiest rank (collectives
   synchronize every rank): `fwd_sparse = sum_g (route + max_r(lookup_r + pack_r) + unpack)`,
   `bwd_sparse = sum_g (pack + max_r(unpack_r + update_r))` (+ replicated tables' gradients).
7. Latency hiding (`SimOptions.latency_hiding`: the `hide-latency` schedule, `TrainPipeline` and
   the bucketed dense all-reduce): communication hides only behind compute it may overlap, and
   a stretch of compute hides at most one transfer (the links are shared), handed out in order.
   Backward, `W_b = bwd + bwd_sparse`, `pre_b` the backward of the embedding-free regions:
   pooled gradients and replicated-table all-reduces travel during `pre_b`,
   `hidden_grad = min(t_grad + t_dp, pre_b)`; the dense all-reduce hides all but its last bucket
   in what is left, `hidden_ar = min(t_ar - t_last, W_b - hidden_grad)`; the next step's lengths
   exchange (pipelined) takes the rest, `hidden_len = min(t_len, W_b - hidden_grad - hidden_ar)`.
   Forward, the ids (and weights) exchange starts after backward and the optimizer step `opt`
   hides it; then either it also hides behind the embedding-free forward `pre` (`overlap=input`:
   `hidden_ids = min(t_ids, opt + pre)`, `hidden_pooled = 0`) or the pooled outputs do
   (`overlap=output`: `hidden_ids = min(t_ids, opt)`, `hidden_pooled = min(t_pooled, pre)`),
   whichever exposes less. Without latency hiding nothing hides.
8. Stage columns (the paper's five), summing to the step time:
   `sparse_fwd = fwd_sparse + (t_pooled - hidden_pooled) + (t_len - hidden_len) + (t_ids - hidden_ids)`,
   `other_fwd = fwd`, `sparse_bwd = bwd_sparse + (t_grad + t_dp - hidden_grad)`,
   `other_bwd = bwd + (t_ar - hidden_ar)`, `other = opt`;
   `samples_per_s = N B / step`. `exchange` is the exposed sparse communication (everything in
   `sparse_fwd` and `sparse_bwd` that is an exchange).

Simplifications (say so when quoting numbers): a transfer does not slow the compute it overlaps;
ids are uniform over a row-wise table's rows and rows over ranks; every rank has the same batch
and pooling; one rank per device; all-reduces are rings (their `2 (N - 1)` latency terms are
pessimistic at thousands of ranks, where NCCL switches to trees). World size 1 has no collective.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from xdsl.dialects.builtin import ModuleOp

from sparselift.ir.sched import DenseOp, StepOp
from sparselift.ir.sparse import EmbeddingBagCollectionOp
from sparselift.passes import cost_model
from sparselift.passes.profiles import HardwareProfile
from sparselift.passes.srsv import attr_int, elem_bytes, step_batch, steps_of
from sparselift.placement import PlacementKind, ShardingPlan, TableStats, auto_shard, uniform_plan

STAGES: tuple[str, ...] = ("sparse_fwd", "other_fwd", "sparse_bwd", "other_bwd", "other")
SHARDINGS: tuple[str, ...] = ("auto", "table_wise", "row_wise", "data_parallel")  # as `export` offers them
LENGTH_BYTES = 4  # route lengths are i32
WEIGHT_BYTES = 4  # per-sample weights are f32
MAX_WORLD_SIZE = 1 << 16  # the model is O(N x tables); beyond this it is not a projection anyone needs


# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


def _at_least(minimum: float):
    def check(instance: Any, attribute: attrs.Attribute, value: float) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
            raise ValueError(f"{type(instance).__name__}.{attribute.name} must be a number >= {minimum}, got {value!r}")

    return check


@attrs.frozen
class SimTable:
    """One embedding table as the simulation sees it (sizes, and the features that read it)."""

    name: str
    module: str  # the embedding module: tables of one module and placement kind form one group
    rows: int = attrs.field(validator=_at_least(1))
    dim: int = attrs.field(validator=_at_least(1))
    dtype_bytes: int = attrs.field(default=4, validator=_at_least(1))
    pooling: str = "sum"
    features: int = attrs.field(default=1, validator=_at_least(1))
    pooling_factor: float = attrs.field(default=1.0, validator=_at_least(0))  # ids per sample, all features
    weighted_pooling_factor: float = attrs.field(default=0.0, validator=_at_least(0))  # ids that carry weights
    index_bytes: int = attrs.field(default=8, validator=_at_least(1))

    @property
    def table_bytes(self) -> int:
        return self.rows * self.dim * self.dtype_bytes

    @property
    def pooled_bytes(self) -> int:
        """Pooled output bytes per sample (one vector per feature)."""
        return self.features * self.dim * self.dtype_bytes

    def stats(self) -> TableStats:
        return TableStats(self.name, self.rows, self.dim, self.dtype_bytes, self.pooling_factor, self.pooling)


@attrs.frozen
class Workload:
    """What one training step of a model does, per rank, independent of the world size."""

    model: str
    batch: int = attrs.field(validator=_at_least(1))  # samples per rank per step (weak scaling)
    # `tuple[X, ...]` converters: mypy's attrs plugin cannot type a bare generic `tuple`.
    tables: tuple[SimTable, ...] = attrs.field(converter=tuple[SimTable, ...])
    dense_fwd_flops_per_sample: float = attrs.field(default=0.0, validator=_at_least(0))
    dense_bwd_flops_per_sample: float = attrs.field(default=0.0, validator=_at_least(0))
    # Forward FLOPs that do not read embeddings (e.g. DLRM's bottom MLP): they can hide exchanges.
    dense_pre_fwd_flops_per_sample: float = attrs.field(default=0.0, validator=_at_least(0))
    dense_pre_bwd_flops_per_sample: float = attrs.field(default=0.0, validator=_at_least(0))  # their adjoints
    dense_fwd_regions: int = attrs.field(default=0, validator=_at_least(0))
    dense_bwd_regions: int = attrs.field(default=0, validator=_at_least(0))
    dense_param_bytes: int = attrs.field(default=0, validator=_at_least(0))

    def __attrs_post_init__(self) -> None:
        if not self.tables:
            raise ValueError(f"workload '{self.model}' has no embedding tables: there is no sparse path to simulate")
        names = [t.name for t in self.tables]
        if len(set(names)) != len(names):
            raise ValueError(f"workload '{self.model}' names a table twice")
        if self.dense_pre_fwd_flops_per_sample > self.dense_fwd_flops_per_sample:
            raise ValueError("dense_pre_fwd_flops_per_sample cannot exceed dense_fwd_flops_per_sample")
        if self.dense_pre_bwd_flops_per_sample > self.dense_bwd_flops_per_sample:
            raise ValueError("dense_pre_bwd_flops_per_sample cannot exceed dense_bwd_flops_per_sample")

    def with_batch(self, batch: int) -> Workload:
        return attrs.evolve(self, batch=batch)

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "batch_per_rank": self.batch,
            "tables": len(self.tables),
            "table_rows": sum(t.rows for t in self.tables),
            "table_bytes": sum(t.table_bytes for t in self.tables),
            "ids_per_sample": round(sum(t.pooling_factor for t in self.tables), 4),
            "pooled_bytes_per_sample": sum(t.pooled_bytes for t in self.tables),
            "dense_fwd_flops_per_sample": self.dense_fwd_flops_per_sample,
            "dense_bwd_flops_per_sample": self.dense_bwd_flops_per_sample,
            "dense_pre_fwd_flops_per_sample": self.dense_pre_fwd_flops_per_sample,
            "dense_pre_bwd_flops_per_sample": self.dense_pre_bwd_flops_per_sample,
            "dense_param_bytes": self.dense_param_bytes,
        }


@attrs.frozen
class SimOptions:
    """The plan being projected: SparseLift's schedule by default."""

    sharding: str = attrs.field(default="auto")  # placement at each world size, as `export(sharding=)`
    latency_hiding: bool = True  # pipelined input exchange, bucketed dense all-reduce during backward
    aggregate_comm: bool = True  # same-role static exchanges merged across groups
    grad_bucket_bytes: int = attrs.field(default=1 << 20, validator=_at_least(1))
    dp_max_bytes: int = attrs.field(default=64 * 1024, validator=_at_least(0))  # auto_shard's replication cut-off

    @sharding.validator
    def _known_sharding(self, attribute: attrs.Attribute, value: str) -> None:
        if value not in SHARDINGS:
            raise ValueError(f"unknown sharding '{value}'; use one of {', '.join(SHARDINGS)}")

    def plan(self, tables: Sequence[TableStats], world: int) -> ShardingPlan:
        """The placement at `world` ranks, chosen as `export` chooses it."""
        if self.sharding == "auto" or (world == 1 and self.sharding != "data_parallel"):
            return auto_shard(tables, world, dp_max_bytes=self.dp_max_bytes)
        return uniform_plan(self.sharding, tables, world)


# --------------------------------------------------------------------------------------
# Reading the workload off exported IR
# --------------------------------------------------------------------------------------


def workload_from_module(module: ModuleOp, *, dense_param_bytes: int = 0, model: str | None = None) -> Workload:
    """The `Workload` of the (single) step of an exported, not yet lifted, module.

    Tables, features and pooling factors come from the opaque `sparse.embedding_bag_collection`
    ops, the batch from the step's `batch` attribute, FLOPs from the `flops` attribute of the
    `sched.dense` ops. The IR does not know the dense parameters: the caller passes their bytes.
    """
    steps = steps_of(module)
    if len(steps) != 1:
        raise ValueError(f"expected one sched.step in the module, found {len(steps)}")
    step: StepOp = steps[0]
    batch = step_batch(step)
    if batch is None or batch < 1:
        raise ValueError("the step has no positive 'batch' attribute (export writes it)")
    ebcs = [op for op in step.walk() if isinstance(op, EmbeddingBagCollectionOp)]
    if not ebcs:
        raise ValueError("the step has no sparse.embedding_bag_collection: give the exported IR, before lift-sparse")
    tables: list[SimTable] = []
    for ebc in ebcs:
        ids_bytes = {f.feature_name.data: elem_bytes(v.type) for f, v in zip(ebc.features.data, ebc.ids)}
        for t in ebc.tables.data:
            feats = [f for f in ebc.features.data if f.table.data == t.name_str]
            tables.append(
                SimTable(
                    name=t.name_str,
                    module=ebc.module.data,
                    rows=t.rows.data,
                    dim=t.dim.data,
                    dtype_bytes=elem_bytes(t.dtype),
                    pooling=t.pooling.data,
                    features=max(1, len(feats)),
                    pooling_factor=sum(f.pooling_factor.data for f in feats),
                    weighted_pooling_factor=sum(f.pooling_factor.data for f in feats if f.is_weighted),
                    index_bytes=max((ids_bytes[f.feature_name.data] for f in feats), default=8),
                )
            )

    # Forward dense regions that read nothing computed from embeddings can run before them (and
    # their adjoints, same callee, while the embeddings' gradients travel).
    after_embeddings = {r for ebc in ebcs for r in ebc.results}
    fwd = bwd = pre = pre_bwd = 0
    fwd_regions = bwd_regions = 0
    pre_callees: set[str] = set()
    for op in step.forward.block.ops:
        if any(v in after_embeddings for v in op.operands):
            after_embeddings.update(op.results)
        if isinstance(op, DenseOp):
            flops = max(0, attr_int(op.attributes.get("flops")) or 0)
            fwd += flops
            fwd_regions += 1
            if not any(v in after_embeddings for v in op.operands):
                pre += flops
                pre_callees.add(op.callee.root_reference.data)
    for op in step.backward.block.ops:
        if isinstance(op, DenseOp):
            flops = max(0, attr_int(op.attributes.get("flops")) or 0)
            bwd += flops
            bwd_regions += 1
            if op.callee.root_reference.data in pre_callees:
                pre_bwd += flops
    name = model or (step.model_name)
    return Workload(
        model=name,
        batch=batch,
        tables=tuple(tables),
        dense_fwd_flops_per_sample=fwd / batch,
        dense_bwd_flops_per_sample=bwd / batch,
        dense_pre_fwd_flops_per_sample=pre / batch,
        dense_pre_bwd_flops_per_sample=pre_bwd / batch,
        dense_fwd_regions=fwd_regions,
        dense_bwd_regions=bwd_regions,
        dense_param_bytes=dense_param_bytes,
    )


# --------------------------------------------------------------------------------------
# Profile overrides
# --------------------------------------------------------------------------------------


def calibrated(profile: HardwareProfile, overrides: Mapping[str, Any], where: str = "calibration") -> HardwareProfile:
    """`profile` with the fitted values of `overrides` (HardwareProfile field names) in place.

    Raises `ValueError` naming the problem: not a mapping, an unknown field, a bad value.
    """
    if not isinstance(overrides, Mapping):
        raise ValueError(f"{where}: expected a JSON object of profile fields, got {type(overrides).__name__}")
    return HardwareProfile.from_dict(dict(overrides), where, base=profile)


def check_world_size(n: int) -> int:
    if n < 1:
        raise ValueError(f"world size must be at least 1, got {n}")
    if n > MAX_WORLD_SIZE:
        raise ValueError(f"world size {n} is above the simulated maximum {MAX_WORLD_SIZE}")
    return n


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------


@attrs.frozen
class Breakdown:
    """The paper's five stage columns, in milliseconds; they add up to the step time."""

    sparse_fwd: float
    other_fwd: float
    sparse_bwd: float
    other_bwd: float
    other: float

    @property
    def total(self) -> float:
        return self.sparse_fwd + self.other_fwd + self.sparse_bwd + self.other_bwd + self.other

    def to_json(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 6) for k in STAGES}


def _own_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """A row's own copy of its per-kind counts (a typed converter for mypy's attrs plugin)."""
    return dict(counts)


@attrs.frozen
class SimRow:
    """The projected step at one world size."""

    world_size: int
    nodes: int
    step_ms: float
    breakdown: Breakdown
    samples_per_s: float
    exchange_ms: float  # exposed sparse communication (inside sparse_fwd and sparse_bwd)
    hidden_ms: float  # communication hidden behind compute by latency hiding
    dense_allreduce_ms: float  # the dense gradient all-reduce before hiding
    max_exchange_bytes: float  # per step, summed over sparse exchanges: what the busiest sender sends
    placements: Mapping[str, int] = attrs.field(converter=_own_counts)  # placement kind -> tables
    forward_overlap: str = "none"  # what the embedding-free forward hides: input | output | none

    @property
    def exchange_share(self) -> float:
        return self.exchange_ms / self.step_ms if self.step_ms > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "world_size": self.world_size,
            "nodes": self.nodes,
            "step_ms": round(self.step_ms, 6),
            "breakdown": self.breakdown.to_json(),
            "samples_per_s": round(self.samples_per_s, 3),
            "exchange_ms": round(self.exchange_ms, 6),
            "exchange_share": round(self.exchange_share, 6),
            "hidden_ms": round(self.hidden_ms, 6),
            "dense_allreduce_ms": round(self.dense_allreduce_ms, 6),
            "max_exchange_bytes": round(self.max_exchange_bytes),
            "placements": dict(self.placements),
            "forward_overlap": self.forward_overlap,
        }


@attrs.frozen
class _Exchange:
    """An exchange where rank s sends rank p `u[s] + v[p]` bytes (s != p); `None` means zeros."""

    u: tuple[float, ...] | None = None
    v: tuple[float, ...] | None = None

    def plus(self, other: _Exchange) -> _Exchange:
        return _Exchange(_add(self.u, other.u), _add(self.v, other.v))


def _add(a: tuple[float, ...] | None, b: tuple[float, ...] | None) -> tuple[float, ...] | None:
    if a is None or b is None:
        return a if b is None else b
    return tuple(x + y for x, y in zip(a, b))


class _Network:
    """Alpha-beta prices of exchanges among N ranks, `ranks_per_node` per node (`cost_model`'s)."""

    def __init__(self, profile: HardwareProfile, world: int):
        self.p = profile
        self.world = world
        self.nodes = (world - 1) // profile.ranks_per_node + 1

    def exchange(self, ex: _Exchange) -> tuple[float, float]:
        """(microseconds, bytes the busiest sender sends) of one all-to-all-like collective."""
        terms = cost_model.uv_exchange(self.p, ex.u, ex.v, self.world)
        return terms.total, terms.bytes

    def ring_all_reduce(self, nbytes: float) -> float:
        return cost_model.ring_all_reduce(self.p, self.world, nbytes).total


@attrs.frozen
class _Group:
    """Tables `lift-sparse` handles together: one module, one placement kind, one dtype."""

    kind: PlacementKind
    tables: tuple[SimTable, ...]

    @property
    def pooled_bytes(self) -> float:
        return float(sum(t.pooled_bytes for t in self.tables))

    @property
    def index_bytes(self) -> int:
        return max(t.index_bytes for t in self.tables)


def _groups(workload: Workload, plan: ShardingPlan) -> list[_Group]:
    groups: dict[tuple, list[SimTable]] = {}
    for t in workload.tables:
        placement = plan[t.name]
        ranks = placement.ranks if placement.kind == PlacementKind.ROW_WISE else ()
        groups.setdefault((t.module, placement.kind, t.dtype_bytes, ranks), []).append(t)
    return [_Group(key[1], tuple(tables)) for key, tables in groups.items()]


@attrs.define
class _SparseTimes:
    """The sparse path of one step (us), summed over the groups as `_StepModel` prices them."""

    fwd: float = 0.0  # compute between the forward collectives (busiest rank per group)
    bwd: float = 0.0
    t_len: float = 0.0  # exchanges: lengths, ids (and weights), pooled outputs, pooled gradients
    t_ids: float = 0.0
    t_pooled: float = 0.0
    t_grad: float = 0.0
    t_dp: float = 0.0  # replicated tables' gradient all-reduces
    max_bytes: float = 0.0  # what the busiest sender sends, summed over the exchanges
    # With aggregation: the same-role exchanges of every group, priced once after the groups.
    merged_pooled: _Exchange | None = None
    merged_grad: _Exchange | None = None
    dp_bytes_merged: float = 0.0


@attrs.frozen
class _DenseTimes:
    """Dense compute of one step (us): forward, backward, the embedding-free forward, the
    optimizer, and the dense gradient all-reduce (all buckets; the last one alone)."""

    fwd: float
    bwd: float
    pre: float
    opt: float
    t_ar: float
    t_last: float


@attrs.frozen
class _HiddenTimes:
    """Communication (us) latency hiding takes off the step, and what the forward overlaps."""

    grad: float = 0.0
    allreduce: float = 0.0
    lengths: float = 0.0
    ids: float = 0.0
    pooled: float = 0.0
    overlap: str = "none"  # input | output | none


class _StepModel:
    """Prices one step of `workload` at `world` ranks (see the module docstring, items 1-8)."""

    def __init__(self, workload: Workload, profile: HardwareProfile, world: int, options: SimOptions):
        self.w, self.p, self.N, self.o = workload, profile, world, options
        self.B = workload.batch
        self.net = _Network(profile, world)
        self.plan = options.plan([t.stats() for t in workload.tables], world)
        self.groups = _groups(workload, self.plan)

    # -- per-rank vectors ------------------------------------------------------------------
    def _per_rank(self, group: _Group, value) -> list[float]:
        """`value(table, share)` summed per rank over the group's tables that rank holds;
        `share` is the fraction of the table's ids that rank serves."""
        out = [0.0] * self.N
        for t in group.tables:
            placement = self.plan[t.name]
            if placement.kind == PlacementKind.DATA_PARALLEL:
                x = value(t, 1.0)
                out = [o + x for o in out]
                continue
            share = 1.0 / len(placement.ranks)
            x = value(t, share)
            for r in placement.ranks:
                out[r] += x
        return out

    def _ids_gathered(self, t: SimTable, share: float) -> float:
        """Ids one holder of `t` gathers per step: the whole world's, or its own batch if replicated."""
        if self.plan[t.name].kind == PlacementKind.DATA_PARALLEL:
            return self.B * t.pooling_factor
        return self.N * self.B * t.pooling_factor * share

    def _gathered(self, t: SimTable, share: float) -> float:
        return self._ids_gathered(t, share) * t.dim * t.dtype_bytes

    def _lookup_us(self, t: SimTable, share: float) -> float:
        return cost_model.lookup(self.p, self._gathered(t, share), self._ids_gathered(t, share)).total

    def _update_us(self, t: SimTable, share: float) -> float:
        return cost_model.sparse_update(self.p, self._gathered(t, share), self._ids_gathered(t, share)).total

    def _dense_grad_us(self, t: SimTable, share: float) -> float:
        """A replicated table's backward: its whole-table gradient, then applying it."""
        grad = cost_model.dense_grad(self.p, t.table_bytes, self._gathered(t, share), self._ids_gathered(t, share))
        return grad.plus(cost_model.dense_apply(self.p, t.table_bytes)).total

    def _copy_op_us(self, nbytes: float) -> float:
        return cost_model.copy_op(self.p, nbytes).total

    # -- the step --------------------------------------------------------------------------
    def run(self) -> SimRow:
        N, B = self.N, self.B
        sparse = self._sparse_path()
        dense = self._dense()
        hidden = self._hidden(sparse, dense)
        exposed_fwd = (sparse.t_pooled - hidden.pooled) + (sparse.t_len - hidden.lengths) + (sparse.t_ids - hidden.ids)
        exposed_bwd = sparse.t_grad + sparse.t_dp - hidden.grad
        breakdown = Breakdown(
            sparse_fwd=(sparse.fwd + exposed_fwd) / 1e3,
            other_fwd=dense.fwd / 1e3,
            sparse_bwd=(sparse.bwd + exposed_bwd) / 1e3,
            other_bwd=(dense.bwd + dense.t_ar - hidden.allreduce) / 1e3,
            other=dense.opt / 1e3,
        )
        step_ms = breakdown.total
        placements = {str(k): 0 for k in PlacementKind}
        for placement in self.plan.tables.values():
            placements[str(placement.kind)] += 1
        return SimRow(
            world_size=N,
            nodes=self.net.nodes,
            step_ms=step_ms,
            breakdown=breakdown,
            samples_per_s=N * B / (step_ms / 1e3) if step_ms > 0 else 0.0,
            exchange_ms=(exposed_fwd + exposed_bwd) / 1e3,
            hidden_ms=(hidden.grad + hidden.allreduce + hidden.lengths + hidden.ids + hidden.pooled) / 1e3,
            forward_overlap=hidden.overlap,
            dense_allreduce_ms=dense.t_ar / 1e3,
            max_exchange_bytes=sparse.max_bytes,
            placements=placements,
        )

    # -- the sparse path (items 1-4, 6) ----------------------------------------------------
    def _sparse_path(self) -> _SparseTimes:
        """Every group's compute and exchanges; with aggregation, the merged exchanges last."""
        sp = _SparseTimes()
        for g in self.groups:
            ids_ps = sum(t.pooling_factor for t in g.tables)
            wids_ps = sum(t.weighted_pooling_factor for t in g.tables)
            feats = sum(t.features for t in g.tables)
            route = self._copy_op_us(self.B * (ids_ps * g.index_bytes + feats * LENGTH_BYTES + wids_ps * WEIGHT_BYTES))
            lookups = self._per_rank(g, self._lookup_us)
            if g.kind == PlacementKind.DATA_PARALLEL:
                self._replicated_group(g, sp, route, lookups)
            else:
                self._sharded_group(g, sp, route, lookups, wids_ps)
        if sp.merged_pooled is not None:
            sp.t_pooled += self._exchange(sp, sp.merged_pooled)
        if sp.merged_grad is not None:
            sp.t_grad += self._exchange(sp, sp.merged_grad)
        if sp.dp_bytes_merged:
            sp.t_dp += self.net.ring_all_reduce(sp.dp_bytes_merged)
        return sp

    def _exchange(self, sp: _SparseTimes, ex: _Exchange) -> float:
        us, sent = self.net.exchange(ex)
        sp.max_bytes += sent
        return us

    def _replicated_group(self, g: _Group, sp: _SparseTimes, route: float, lookups: list[float]) -> None:
        """Local lookups; backward: dense table gradients, all-reduced, then applied."""
        N, B, width = self.N, self.B, g.pooled_bytes
        sp.fwd += route + max(lookups) + 2 * self._copy_op_us(B * width)
        grads = self._per_rank(g, self._dense_grad_us)
        sp.bwd += 2 * self._copy_op_us(B * width) + max(grads)
        if N > 1:
            table_bytes = float(sum(t.table_bytes for t in g.tables))
            if self.o.aggregate_comm:
                sp.dp_bytes_merged += table_bytes
            else:
                sp.t_dp += self.net.ring_all_reduce(table_bytes)
            sp.max_bytes += 2 * (N - 1) / N * table_bytes  # what a ring sends per rank

    def _sharded_group(self, g: _Group, sp: _SparseTimes, route: float, lookups: list[float], wids_ps: float) -> None:
        """Table-wise or row-wise tables: packs and unpacks around the ids, pooled outputs and
        pooled gradients exchanges."""
        N, B, width = self.N, self.B, g.pooled_bytes
        distributed = N > 1
        own_width = self._per_rank(g, lambda t, s: t.pooled_bytes)  # table-wise: pooled bytes owned
        updates = self._per_rank(g, self._update_us)
        if g.kind == PlacementKind.ROW_WISE:
            fwd_pack = [self._copy_op_us(N * B * width)] * N
            bwd_copy = 2 * self._copy_op_us(N * B * width)  # pack N segments, unpack N segments
            # Reading the N partial pools the reduce-scatter sums.
            reduce = cost_model.stream(self.p, N * B * width / 2).total if distributed else 0.0
            sp.bwd += bwd_copy + max(updates)
            pooled = _Exchange(u=(B * width,) * N)
            grad = _Exchange(u=(B * width,) * N)
        else:
            fwd_pack = [self._copy_op_us(N * B * w) if w else 0.0 for w in own_width]
            reduce = 0.0
            unpack_bwd = [self._copy_op_us(N * B * w) if w else 0.0 for w in own_width]
            sp.bwd += self._copy_op_us(B * width) + max(a + b for a, b in zip(unpack_bwd, updates))
            pooled = _Exchange(u=tuple(B * w for w in own_width))
            grad = _Exchange(v=tuple(B * w for w in own_width))
        sp.fwd += route + max(a + b for a, b in zip(lookups, fwd_pack)) + self._copy_op_us(B * width) + reduce
        if not distributed:
            return
        sp.t_len += self._exchange(
            sp, _Exchange(v=tuple(B * LENGTH_BYTES * x for x in self._per_rank(g, lambda t, s: t.features)))
        )
        sp.t_ids += self._exchange(
            sp, _Exchange(v=tuple(B * g.index_bytes * x for x in self._per_rank(g, lambda t, s: t.pooling_factor * s)))
        )
        if wids_ps:
            sp.t_ids += self._exchange(
                sp,
                _Exchange(
                    v=tuple(B * WEIGHT_BYTES * x for x in self._per_rank(g, lambda t, s: t.weighted_pooling_factor * s))
                ),
            )
        # Table-wise pooled outputs are all-to-alls (mergeable); row-wise ones reduce-scatters.
        if self.o.aggregate_comm and g.kind == PlacementKind.TABLE_WISE:
            sp.merged_pooled = pooled if sp.merged_pooled is None else sp.merged_pooled.plus(pooled)
        else:
            sp.t_pooled += self._exchange(sp, pooled)
        if self.o.aggregate_comm:
            sp.merged_grad = grad if sp.merged_grad is None else sp.merged_grad.plus(grad)
        else:
            sp.t_grad += self._exchange(sp, grad)

    # -- dense compute and latency hiding (items 4, 5, 7) ----------------------------------
    def _dense(self) -> _DenseTimes:
        """Dense compute, the dense optimizer and the dense gradient all-reduce."""
        p, B, w = self.p, self.B, self.w
        dense_fwd = cost_model.dense(p, B * w.dense_fwd_flops_per_sample, w.dense_fwd_regions).total
        dense_bwd = cost_model.dense(p, B * w.dense_bwd_flops_per_sample, w.dense_bwd_regions).total
        dense_pre = cost_model.dense(p, B * w.dense_pre_fwd_flops_per_sample).total
        opt = cost_model.optimizer_step(p, w.dense_param_bytes).total
        t_ar = t_last = 0.0
        if self.N > 1 and w.dense_param_bytes:
            bucket = self.o.grad_bucket_bytes
            full, rest = divmod(w.dense_param_bytes, bucket)
            sizes = [bucket] * full + ([rest] if rest else [])
            t_ar = sum(self.net.ring_all_reduce(s) for s in sizes)
            t_last = self.net.ring_all_reduce(sizes[-1])  # the bucket backward fills last
        return _DenseTimes(dense_fwd, dense_bwd, dense_pre, opt, t_ar, t_last)

    def _hidden(self, sp: _SparseTimes, dense: _DenseTimes) -> _HiddenTimes:
        """What latency hiding takes off the exposed communication (nothing without it)."""
        if not (self.o.latency_hiding and self.N > 1):
            return _HiddenTimes()
        pre_bwd = cost_model.dense(self.p, self.B * self.w.dense_pre_bwd_flops_per_sample).total
        window_bwd = dense.bwd + sp.bwd
        grad = min(sp.t_grad + sp.t_dp, pre_bwd)
        allreduce = min(dense.t_ar - dense.t_last, window_bwd - grad)
        lengths = min(sp.t_len, window_bwd - grad - allreduce)
        # The schedule overlaps the embedding-free forward with the ids or the pooled outputs.
        ids_in, pooled_in = min(sp.t_ids, dense.opt + dense.pre), 0.0
        ids_out, pooled_out = min(sp.t_ids, dense.opt), min(sp.t_pooled, dense.pre)
        if ids_out + pooled_out > ids_in + pooled_in:
            return _HiddenTimes(grad, allreduce, lengths, ids_out, pooled_out, "output")
        return _HiddenTimes(grad, allreduce, lengths, ids_in, pooled_in, "input")


def simulate(
    workload: Workload, profile: HardwareProfile, world_size: int, options: SimOptions | None = None
) -> SimRow:
    """The projected step of `workload` at `world_size` ranks (see the module docstring)."""
    check_world_size(world_size)
    return _StepModel(workload, profile, world_size, options or SimOptions()).run()


@attrs.frozen
class SimResult:
    """A sweep of projected steps, with what produced them."""

    workload: Workload
    profile: HardwareProfile
    options: SimOptions
    rows: tuple[SimRow, ...] = attrs.field(converter=tuple[SimRow, ...])
    cost_source: str  # where the per-op costs come from, in words
    calibrated_fields: tuple[str, ...] = attrs.field(default=(), converter=tuple[str, ...])
    notes: Mapping[str, Any] = attrs.field(factory=dict, converter=dict)  # extra context for the JSON

    def to_json(self) -> dict[str, Any]:
        return {
            "simulated": True,
            "model": self.workload.model,
            "profile": self.profile.name,
            "cost_source": self.cost_source,
            "calibrated_fields": list(self.calibrated_fields),
            "profile_fields": self.profile.to_dict(),
            "ranks_per_node": self.profile.ranks_per_node,
            "batch_per_rank": self.workload.batch,
            "scaling": "weak (batch per rank fixed)",
            "options": attrs.asdict(self.options),
            "workload": self.workload.to_json(),
            **dict(self.notes),
            "rows": [r.to_json() for r in self.rows],
        }


def sweep(
    workload: Workload,
    profile: HardwareProfile,
    world_sizes: Iterable[int],
    options: SimOptions | None = None,
    cost_source: str = "profile values",
    calibrated_fields: Sequence[str] = (),
    notes: Mapping[str, Any] | None = None,
) -> SimResult:
    """`simulate` at every world size (sorted), bundled with what produced the numbers."""
    options = options or SimOptions()
    rows = [simulate(workload, profile, n, options) for n in sorted(set(world_sizes))]
    return SimResult(workload, profile, options, rows, cost_source, tuple(calibrated_fields), notes or {})


__all__ = [
    "STAGES",
    "Breakdown",
    "SimOptions",
    "SimResult",
    "SimRow",
    "SimTable",
    "Workload",
    "calibrated",
    "check_world_size",
    "simulate",
    "sweep",
    "workload_from_module",
]
