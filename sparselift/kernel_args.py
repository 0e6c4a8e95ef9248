"""What every sparse kernel backend (reference, C, Triton) takes, as records, and the one check of it.

A table op reads routed bags (`RoutedBags`: the lengths, ids and weights a rank received,
segment after segment) for one or more tables (`TableArgs`: each its name, storage, feature
slots, pooling and optimizer state); an update also takes the tables' pooled gradients and an
`UpdateArgs` (the optimizer group's `OptimizerArgs` for this step and the gradient scale).
FBGEMM's `lookup_args.py` (`CommonArgs`, `OptimizerArgs`) is the model.

`check_bags` validates the bags against the tables once, for every backend, before any kernel
runs; `check_ids` adds, in torch, the id checks the C entry points make themselves (the
reference and Triton backends run it). A failure is a `ValueError` naming the table, and no
table has changed.

`KernelBackend` is the protocol the three backends implement (`sparselift.runtime.backends`):
a plan chooses one when it is built, from its IR's `kernels` attribute and its tables' device.

Imports without torch (the Triton wrappers in `codegen/` must): torch is imported where a
check runs.
"""

from __future__ import annotations

import ctypes
import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from sparselift.optim_rules import ARGUMENTS, OptimizerKind

if TYPE_CHECKING:
    import torch


class Pooling(enum.StrEnum):
    """How a bag's rows become one: summed, averaged, or not at all (one id per bag)."""

    SUM = "sum"
    MEAN = "mean"


class SlHyper(ctypes.Structure):
    """The generated C kernels' `sl_hyper` (codegen/c/prelude.h): `ARGUMENTS`, in order, in
    double precision (a kernel rounds an expression of them to f32 once, as the reference)."""

    _fields_ = [(name, ctypes.c_double) for name in ARGUMENTS]


@attrs.frozen
class OptimizerArgs:
    """One group's update arguments for the current step: its kind, its hyperparameters and the
    bias corrections of its step count (`optim_rules.ARGUMENTS`)."""

    kind: OptimizerKind
    lr: float
    eps: float = 0.0
    beta1: float = 0.0
    beta2: float = 0.0
    weight_decay: float = 0.0
    bc1: float = 1.0
    bc2: float = 1.0

    def values(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in ARGUMENTS}

    def with_step(self, step: int) -> OptimizerArgs:
        """These arguments at step count `step` (1 = the first): the bias corrections."""
        from sparselift.optim_rules import rule_for

        if not rule_for(self.kind).counts_steps:
            return self
        return attrs.evolve(self, bc1=1.0 - self.beta1**step, bc2=1.0 - self.beta2**step)

    @classmethod
    def of(cls, config: Any, step: int = 1) -> OptimizerArgs:
        """The arguments of a `sparselift.optim` record at step count `step` (1 = the first)."""
        return cls(config.kind, **config.hyperparameters()).with_step(step)

    def c_struct(self) -> SlHyper:
        return SlHyper(*(self.values()[name] for name in ARGUMENTS))


@attrs.frozen
class UpdateArgs:
    """What an update applies besides the gradients: the optimizer's arguments for this step and
    the scale of the gradients (1/world when the ranks' gradients are averaged)."""

    optimizer: OptimizerArgs
    grad_scale: float = 1.0


def _int_tuple(values: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


_POOLINGS = frozenset(p.value for p in Pooling)


def _known_pooling(instance: TableArgs, attribute: Any, value: Any) -> None:
    if value not in _POOLINGS:
        raise ValueError(f"table '{instance.name}': unknown pooling '{value}' (sum or mean)")


def _pooling(value: Any) -> Any:
    """A pooling's name as the enum; anything else is left for the validator to name."""
    return Pooling(value) if value in _POOLINGS else value


@attrs.frozen
class TableArgs:
    """One table of a table op: its storage (`weight`, `[rows, dim]`), the feature slots of a
    segment it reads (its output or gradient holds `dim` columns per slot, in this order), its
    pooling, and for an update its optimizer state buffer (`sparse_optimizer.state_slots`)."""

    name: str
    weight: torch.Tensor
    slots: tuple[int, ...] = attrs.field(converter=_int_tuple)
    pooling: Pooling = attrs.field(converter=_pooling, validator=_known_pooling)
    state: torch.Tensor | None = None

    @property
    def rows(self) -> int:
        return int(self.weight.shape[0])

    @property
    def dim(self) -> int:
        return int(self.weight.shape[1])

    @property
    def width(self) -> int:
        """Columns of its output (and gradient): `dim` per slot."""
        return self.dim * len(self.slots)


@attrs.frozen
class RoutedBags:
    """The bags a table op reads: `lengths` holds one length per bag, segment after segment
    (a segment is one source rank's samples), feature after feature within a segment, sample
    after sample within a feature; `indices` the ids, bag after bag; `weights` one per id (or
    None). A segment holds `features` features of `batch` samples (padded to the largest
    segment's batch)."""

    lengths: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor | None
    features: int = attrs.field(converter=int)
    batch: int = attrs.field(converter=int)

    @classmethod
    def one_id_each(cls, indices: torch.Tensor) -> RoutedBags:
        """One feature, one sample per id, one id per bag: rows read or updated one per id."""
        import torch

        n = indices.numel()
        return cls(torch.ones(n, dtype=torch.int32, device=indices.device), indices, None, 1, n)


@attrs.frozen
class CheckedBags:
    """`RoutedBags` as the kernels read them: int32 contiguous lengths, contiguous int32/int64
    ids, contiguous float32 weights, and the number of segments."""

    lengths: torch.Tensor
    indices: torch.Tensor
    weights: torch.Tensor | None
    features: int
    batch: int
    segments: int

    @property
    def rows(self) -> int:
        """Rows of a pooled output: one per sample of every segment."""
        return self.segments * self.batch


@attrs.frozen
class CheckedIds:
    """What `check_ids` computed on the way, for the backends that need it: the bags' int64
    offsets (one more than the bags) and each id's bag."""

    offsets: torch.Tensor
    bag_of_id: torch.Tensor


def _who(tables: Sequence[TableArgs]) -> str:
    names = ", ".join(f"'{t.name}'" for t in tables)
    return f"table {names}" if len(tables) == 1 else f"tables {names}"


def _fast_path(bags: RoutedBags, tables: Sequence[TableArgs]) -> CheckedBags | None:
    """The usual dtypes and shapes, accepted with attribute checks only (every step runs this)."""
    import torch

    f, b, lengths, indices, weights = bags.features, bags.batch, bags.lengths, bags.indices, bags.weights
    if (
        lengths.dtype == torch.int32
        and lengths.dim() == 1
        and lengths.is_contiguous()
        and indices.dim() == 1
        and indices.dtype in (torch.int32, torch.int64)
        and indices.is_contiguous()
        and f > 0
        and b > 0
        and lengths.numel() % (f * b) == 0
        and (
            weights is None
            or (
                weights.dtype == torch.float32
                and weights.dim() == 1
                and weights.numel() == indices.numel()
                and weights.is_contiguous()
            )
        )
        and all(0 <= s < f for t in tables for s in t.slots)
    ):
        return CheckedBags(lengths, indices, weights, f, b, lengths.numel() // (f * b))
    return None


def check_bags(bags: RoutedBags, tables: Sequence[TableArgs], op: str = "lookup") -> CheckedBags:
    """Validate `bags` for `tables` (dtypes, shapes, whole segments, every slot within a segment)
    and return them as the kernels read them. `op` names the operation in errors."""
    import torch

    fast = _fast_path(bags, tables)
    if fast is not None:
        return fast
    where = f"{op} of {_who(tables)}"
    lengths, indices, weights = bags.lengths, bags.indices, bags.weights
    if lengths.dim() != 1 or lengths.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"{where}: lengths must be a 1-D int32 tensor, got {lengths.dtype} of shape {tuple(lengths.shape)}"
        )
    if lengths.dtype != torch.int32:
        if lengths.numel() and int(lengths.max()) > 2**31 - 1:
            raise ValueError(f"{where}: bag length {int(lengths.max())} does not fit in int32")
        lengths = lengths.to(torch.int32)
    if indices.dim() != 1 or indices.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"{where}: indices must be a 1-D int32/int64 tensor, got {indices.dtype} of shape {tuple(indices.shape)}"
        )
    if weights is not None:
        if weights.dim() != 1 or weights.numel() != indices.numel():
            raise ValueError(
                f"{where}: one weight per id expected ({indices.numel()} ids, weights of shape {tuple(weights.shape)})"
            )
        weights = weights.to(torch.float32).contiguous()
    f, b, nbags = bags.features, bags.batch, lengths.numel()
    if f < 0 or b < 0:
        raise ValueError(f"{where}: features and batch must be non-negative, got {f} and {b}")
    if f * b == 0:
        if nbags:
            raise ValueError(f"{where}: {nbags} bag lengths for {f} features x batch {b}")
        segments = 0
    elif nbags % (f * b):
        raise ValueError(f"{where}: {nbags} bag lengths is not a whole number of segments of {f} features x batch {b}")
    else:
        segments = nbags // (f * b)
    for t in tables:
        for s in t.slots:
            if not 0 <= s < f:
                raise ValueError(f"table '{t.name}': slot {s} is outside the {f} features of a segment")
    return CheckedBags(lengths.contiguous(), indices.contiguous(), weights, f, b, segments)


def check_ids(bags: CheckedBags, tables: Sequence[TableArgs], op: str = "lookup") -> CheckedIds:
    """The C entry points' own checks, in torch on the ids' device (two host syncs): no negative
    bag length, the lengths sum to the number of ids, and every id a table's slots read lies in
    `[0, rows)` of that table."""
    import torch

    where = f"{op} of {_who(tables)}"
    lengths64 = bags.lengths.to(torch.int64)
    nbags, n = lengths64.numel(), bags.indices.numel()
    offsets = torch.zeros(nbags + 1, dtype=torch.int64, device=lengths64.device)
    total = 0
    if nbags:
        torch.cumsum(lengths64, 0, out=offsets[1:])
        negative, total = torch.stack([(lengths64 < 0).any().to(torch.int64), offsets[-1]]).tolist()
        if negative:
            bad = int(torch.nonzero(lengths64 < 0)[0])
            raise ValueError(f"{where}: negative bag length {int(lengths64[bad])} at bag {bad}")
    if total != n:
        raise ValueError(f"{where}: bag lengths sum to {total} but there are {n} ids")
    bag_of_id = torch.repeat_interleave(torch.arange(nbags, device=lengths64.device), lengths64, output_size=n)
    f, b = bags.features, bags.batch
    limit: list[int | None] = [None] * f  # the fewest rows of the tables each slot reads
    for t in tables:
        for s in t.slots:
            seen = limit[s]
            limit[s] = t.rows if seen is None else min(t.rows, seen)
    if n and bags.segments and any(x is not None for x in limit):
        bound = torch.tensor([2**62 if x is None else x for x in limit], dtype=torch.int64, device=lengths64.device)
        feature = (bag_of_id % (f * b)) // b
        ids = bags.indices
        outside = (ids < 0) | (ids >= bound[feature])
        if bool(outside.any()):
            at = int(torch.nonzero(outside)[0])
            slot, v = int(feature[at]), int(ids[at])
            table = next(t for t in tables if slot in t.slots and not 0 <= v < t.rows)
            raise ValueError(
                f"{op} of table '{table.name}': id {v} at position {at} is out of range for a table of "
                f"{table.rows} rows"
            )
    return CheckedIds(offsets, bag_of_id)


def check_grads(
    tables: Sequence[TableArgs], grads: Sequence[Any], rows: int, op: str = "update", per_slot_form: bool = False
) -> None:
    """One pooled gradient per table: a `[rows, width]` tensor, or with `per_slot_form` (the
    replicated tables' gradients) also a list of one `[rows, dim]` tensor per slot."""
    if len(grads) != len(tables):
        raise ValueError(f"{op} of {_who(tables)}: {len(grads)} gradients for {len(tables)} tables")
    for t, g in zip(tables, grads):
        per_slot = not hasattr(g, "shape")
        if per_slot and not per_slot_form:
            raise ValueError(f"{op} of table '{t.name}': the gradient must be one [rows, width] tensor, got a list")
        blocks = list(g) if per_slot else [g]
        if per_slot and len(blocks) != len(t.slots):
            raise ValueError(f"{op} of table '{t.name}': {len(blocks)} per-slot gradients for its {len(t.slots)} slots")
        want = (rows, t.dim) if per_slot else (rows, t.width)
        for k, x in enumerate(blocks):
            if x.dim() != 2 or tuple(x.shape) != want:
                slot = f", slot {k}" if per_slot else ""
                raise ValueError(f"{op} of table '{t.name}'{slot}: gradient of shape {tuple(x.shape)}, expected {want}")


def check_outputs(tables: Sequence[TableArgs], out: Sequence[Any] | None, op: str = "lookup") -> None:
    """One output buffer per table, where the caller gives them."""
    if out is not None and len(out) != len(tables):
        raise ValueError(f"{op} of {_who(tables)}: {len(out)} outputs for {len(tables)} tables")


def check_states(tables: Sequence[TableArgs], kind: OptimizerKind | str, op: str = "update") -> None:
    """Each table's optimizer state holds what `kind`'s rule needs: `rows * state_width(dim)`
    contiguous float32 entries (none for a stateless optimizer)."""
    import torch

    from sparselift.optim_rules import rule_for

    for t in tables:
        width = rule_for(kind).state_width(t.dim)
        if not width:
            continue
        st = t.state
        if st is None or st.dtype != torch.float32 or st.numel() != t.rows * width or not st.is_contiguous():
            got = (
                "none"
                if st is None
                else f"{'' if st.is_contiguous() else 'a strided '}{st.dtype} of shape {tuple(st.shape)}"
            )
            raise ValueError(
                f"{op} of table '{t.name}': {kind} needs a contiguous float32 state of {t.rows} x {width} entries; "
                f"got {got}"
            )


class KernelBackend(Protocol):
    """The sparse table ops a plan runs, one implementation per backend (reference, C, Triton).

    `lookup` pools each table's bags (into `out` when given: 2-D, the table's dtype, unit column
    stride, e.g. column blocks of one exchange buffer); `lookup_update` applies each table's
    pooled gradient through `update`'s optimizer (every input checked before any table changes);
    `lookup_grad` adds each table's whole-table gradient into `out` (zeroed float32 buffers of
    the tables' shapes). The rows ops serve unpooled tables (`sparselift.runtime.rows`)."""

    nthreads: int | None

    def lookup(
        self, bags: RoutedBags, tables: Sequence[TableArgs], out: Sequence[torch.Tensor] | None = None
    ) -> list[torch.Tensor]: ...

    def lookup_update(
        self, bags: RoutedBags, tables: Sequence[TableArgs], grads: Sequence[torch.Tensor], update: UpdateArgs
    ) -> None: ...

    def lookup_grad(
        self,
        bags: RoutedBags,
        tables: Sequence[TableArgs],
        grads: Sequence[torch.Tensor | Sequence[torch.Tensor]],
        out: Sequence[torch.Tensor],
        grad_scale: float = 1.0,
    ) -> None: ...

    def dense_update(self, table: TableArgs, grad: torch.Tensor, update: UpdateArgs) -> None: ...

    def pack(self, members: Sequence[torch.Tensor], layout: Any, batch: int, dtype: Any) -> torch.Tensor: ...

    def unpack(self, buffer: torch.Tensor, layout: Any, batch: int, widths: Sequence[int]) -> list[torch.Tensor]: ...

    def gather_rows(self, table: TableArgs, indices: torch.Tensor) -> torch.Tensor: ...

    def expand_rows(self, rows: torch.Tensor, lengths: torch.Tensor, segments: int) -> torch.Tensor: ...

    def compact_rows(self, blocks: Sequence[torch.Tensor], lengths: torch.Tensor) -> torch.Tensor: ...

    def unique_ids(self, indices: torch.Tensor, splits: torch.Tensor) -> tuple[torch.Tensor, ...]: ...

    def sum_rows(self, rows: torch.Tensor, inverse: torch.Tensor, distinct: int) -> torch.Tensor: ...


__all__ = [
    "CheckedBags",
    "CheckedIds",
    "KernelBackend",
    "OptimizerArgs",
    "Pooling",
    "RoutedBags",
    "SlHyper",
    "TableArgs",
    "UpdateArgs",
    "check_bags",
    "check_grads",
    "check_ids",
    "check_outputs",
    "check_states",
]
