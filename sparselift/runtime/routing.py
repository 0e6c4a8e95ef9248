"""A step's batch check and routing: one agreement per step, then routes without collectives.

Ranks may train on batches of different sizes (a loader's last batch, data split unevenly), and
a batch may be bad on one rank only (an id out of range, broken offsets). Both must be known on
every rank before the first exchange: the sizes, because every exchange and buffer is sized per
peer; the failure, because a rank that raised alone would leave the others waiting in their next
collective.

`check_batch` does both for the whole step at once: it checks every feature of every route of
the batch, then one small all-to-all sends each rank's batch size, or -1 where its checks
failed. A failure is raised on every rank (`raise_if_any_failed`, with the failing rank's
message). The plan module calls it once per batch, before the first sparse segment (and in
`start` for a batch whose input exchanges start ahead; that batch's forward then reuses the
agreement). `route(..., checked=k)` then returns what the check routed, with no collective.

The agreement also says, per route, whether every rank's bags all hold exactly one id (one-hot
features, like all of Criteo's). Then every bag length is 1, known on every rank, and the
lengths exchange is skipped (`collectives.all_to_all(..., lengths_known=True)`): one collective
less a step, and the ids exchange is sized from the batch sizes.

A route whose inputs are not all known before the first segment (ids computed from a segment's
outputs) is emitted without `checked`: it checks and agrees on its own.

Under `TrainPipeline`, a plan with nothing to start ahead checks the next batch in `start`
(`ride=True`) and its agreement rides in the current step's dense-gradient all-reduce
(`RidingAgreement`): then a step has no collective of its own for the agreement at all.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import torch

from sparselift.runtime import reference as ref
from sparselift.runtime.agree import raise_if_any_failed
from sparselift.runtime.collectives import exchange_sizes
from sparselift.runtime.reference import RouteFeature

RouteInputs = tuple[
    Sequence[RouteFeature], Sequence[torch.Tensor], Sequence[torch.Tensor], Sequence[torch.Tensor], torch.dtype
]
"""One route's (spec, ids, offsets, weights, index dtype), as `check_batch` takes them."""


class BatchSizes:
    """One step's local batch sizes, as a segment's exchanges and buffers need them.

    Every exchange and buffer is sized per step and per peer: `own` is this rank's batch,
    `ranks` every rank's (agreed by `check_batch`, or by a route that checks on its own).
    `one_id`: every rank's bags of this route hold exactly one id (all of Criteo's features), so
    every bag length is 1 and the lengths exchange has nothing to tell (`all_to_all(...,
    lengths_known=True)`).
    """

    def __init__(self, own: int, ranks: tuple[int, ...], one_id: bool = False):
        self.own = own
        self.ranks = ranks
        self.one_id = one_id

    def saved(self) -> torch.Tensor:
        """For backward (a saved tensor of the segment): `own`, then `ranks`."""
        return torch.tensor([self.own, *self.ranks], dtype=torch.int64)


def saved_batch_sizes(saved: torch.Tensor) -> BatchSizes:
    """The `BatchSizes` a segment's forward saved (`BatchSizes.saved`), in its backward."""
    values = [int(b) for b in saved.tolist()]
    return BatchSizes(values[0], tuple(values[1:]))


class Agreement:
    """What every rank said about one batch: its size, and per checked route whether all of
    its bags hold one id (a bit mask over the routes, ANDed over the ranks)."""

    def __init__(self, own: int, ranks: tuple[int, ...], one_id_mask: int = 0, routed: Sequence[tuple] = ()):
        self.own, self.ranks, self.one_id_mask = own, ranks, one_id_mask
        self.routed = routed  # per checked route: its (lengths, ids, splits, weights), routed by the check

    def route(self, index: int) -> BatchSizes:
        """The sizes as checked route `index` (its position in `check_batch`'s list) uses them."""
        return BatchSizes(self.own, self.ranks, one_id=bool(self.one_id_mask >> index & 1))


def agree(plan: Any, own: int, error: Exception | None, device: torch.device, one_id_mask: int = 0) -> Agreement:
    """Every rank's batch size and the AND of their one-id masks; raises `error` (or the
    failing rank's) on every rank."""
    if plan.world == 1:
        if error is not None:
            raise error
        return Agreement(own, (own,), one_id_mask)
    # Per peer: (this rank's batch, or -1 where its checks failed; its one-id mask).
    send = torch.tensor([-1 if error is not None else own, one_id_mask] * plan.world, dtype=torch.int64, device=device)
    said = exchange_sizes(plan, send)[0].view(plan.world, 2)
    if error is not None or bool((said[:, 0] < 0).any()):
        raise_if_any_failed(error, plan.pg, plan.world)
    return Agreement(own, tuple(int(b) for b in said[:, 0].tolist()), _all_of(int(m) for m in said[:, 1].tolist()))


def _all_of(masks) -> int:
    """The routes every rank marked one-id: the AND of the ranks' masks."""
    return functools.reduce(operator.and_, masks)


class LocalCheck:
    """One rank's verdict on its batch, before any rank knows the others': its size, its error
    (None when it passed), its one-id mask, and its routes, routed.

    Checking is routing: the route concatenates each destination's ids with the generated
    library's `concat_ids`, which checks every id as it copies it, so the check costs no pass
    over the ids of its own (a separate range check took 5 ms a step at dlrm-bench's 0.8M ids).
    The routes' results are kept for the checked routes (`route(..., checked=k)`)."""

    def __init__(self, plan: Any, routes: Sequence[RouteInputs], error: Exception | None = None):
        first_offsets = routes[0][2][0]
        self.own, self.device = max(first_offsets.numel() - 1, 0), first_offsets.device
        self.error: Exception | None = error  # already failed (the batch's `sparse_inputs`)
        self.one_id_mask = 0
        self.routed: list[tuple] = []
        if error is not None:
            return
        try:
            for k, (spec, ids, offsets, weights, index_dtype) in enumerate(routes):
                _check_weights(spec, ids, weights)
                routed = _route(plan, spec, ids, offsets, weights, index_dtype, check_ids=True, batch=self.own)
                # The routed lengths are what the lengths exchange would send: all 1 (one-hot
                # bags of whole features) means every peer knows them without it.
                if bool((routed[0] == 1).all()):
                    self.one_id_mask |= 1 << k
                self.routed.append(routed)
        except Exception as e:  # noqa: BLE001 - raised by `agree`, on every rank
            self.error = e

    def agree(self, plan: Any) -> Agreement:
        agreed = agree(plan, self.own, self.error, self.device, self.one_id_mask)
        agreed.routed = self.routed
        return agreed


def check_batch(plan: Any, routes: Sequence[RouteInputs], error: Exception | None = None) -> Agreement:
    """Check every route's features against this rank's batch (the first route's), then agree
    on the batch sizes, the outcome and which routes' bags all hold one id with every rank: one
    collective for the whole step. `error`: the batch already failed here (its features could not
    be computed); every rank raises it."""
    return LocalCheck(plan, routes, error).agree(plan)


class RidingAgreement:
    """The next batch's agreement, carried by this step's dense-gradient all-reduce.

    A step's dense gradients are summed over the ranks at the end of backward anyway. Rank `r`
    writes its next batch's verdict into its own two slots of a zero vector (`batch + 1`, or 0
    where its checks failed; its one-id mask) and the vector rides in that all-reduce
    (`all_reduce_with_dense_grads`): each slot is written by one rank, so the sum is every
    rank's verdict, exact in float32 (sizes and masks below 2^24). The next forward then needs
    no collective of its own to agree. If no backward carried it (`received` stays None), or a
    rank's size or mask does not fit a float32 slot (it writes -1, so every rank sees it), that
    forward agrees the usual way. Every rank rides the same vector, so the all-reduce that
    carries it has the same size everywhere."""

    def __init__(self, local: LocalCheck, rank: int, world: int):
        self.local = local
        self.slots = torch.zeros(2 * world, dtype=torch.float32)
        fits = local.own + 1 < 1 << 24 and local.one_id_mask < 1 << 24
        self.slots[2 * rank] = -1.0 if not fits else 0.0 if local.error is not None else float(local.own + 1)
        self.slots[2 * rank + 1] = float(local.one_id_mask) if fits else 0.0
        self.received: torch.Tensor | None = None

    def receive(self, summed: torch.Tensor) -> None:
        self.received = summed.detach().clone()

    def resolve(self, plan: Any) -> Agreement:
        """The agreement: carried (raising a failure on every rank, with its message), or made now."""
        said = [] if self.received is None else [int(round(float(x))) for x in self.received.tolist()]
        sizes, masks = said[0::2], said[1::2]
        if not said or min(sizes) < 0:  # not carried, or a verdict too large for its slot
            return self.local.agree(plan)
        if self.local.error is not None or min(sizes) == 0:
            raise_if_any_failed(self.local.error, plan.pg, plan.world)
        return Agreement(self.local.own, tuple(b - 1 for b in sizes), _all_of(masks), self.local.routed)


def route(
    plan: Any,
    spec: Sequence[RouteFeature],
    ids,
    offsets,
    weights,
    index_dtype=torch.int64,
    checked: int | None = None,
):
    """Route this rank's batch: its lengths, ids, splits and weights, and the step's `BatchSizes`.

    `checked=k`: the plan's `check_batch` has checked and routed these features as its route `k`
    and agreed on the sizes, so this returns what it routed (`plan.checked_route(k)`): no work,
    no collective. Otherwise (None) the route checks its own features and agrees on its own (one
    small all-to-all)."""
    if checked is not None:
        return plan.checked_route(checked)
    error, routed = plan.take_inputs_error(), None
    try:
        if error is None:
            _check_weights(spec, ids, weights)
            routed = _route(plan, spec, ids, offsets, weights, index_dtype, check_ids=True)
    except Exception as e:  # noqa: BLE001 - raised by `agree`, on every rank
        error = e
    agreed = agree(plan, offsets[0].numel() - 1, error, offsets[0].device)
    assert routed is not None  # `agree` raised the error
    return (*routed, agreed.route(0))


def _check_weights(spec: Sequence[RouteFeature], ids, weights) -> None:
    weighted = [f for f in spec if f.weighted]
    for f, w in zip(weighted, weights):
        if w.numel() != ids[spec.index(f)].numel():
            raise ValueError(f"feature '{f.name}' (table '{f.table}'): one weight per id expected")


def _route(
    plan: Any,
    spec: Sequence[RouteFeature],
    ids,
    offsets,
    weights,
    index_dtype,
    check_ids: bool,
    batch: int | None = None,
):
    """Check (`check_ids`: every id too) and route one route's features; `batch`: the batch every
    feature must have (default: its first feature's)."""
    batch = offsets[0].numel() - 1 if batch is None else batch
    # Features on the CPU: the generated library checks every id while it concatenates whole
    # features or buckets row-wise ones by row range (one pass), instead of a concatenation (or
    # a sort), a per-id bound tensor and a comparison.
    # `ref.route` takes the same predicates, so a kernel passed here is the one that routes.
    on_cpu = all(i.device.type == "cpu" for i in ids)
    concat = getattr(plan.kernels, "concat_ids", None) if on_cpu and ref.whole_features(spec) else None
    by_range = (
        getattr(plan.kernels, "route_row_wise", None)
        if on_cpu and ref.row_wise_over(spec, plan.world) and not any(f.weighted for f in spec)
        else None
    )
    checked_here = concat is None and by_range is None
    lengths = ref.validate_features(spec, ids, offsets, batch, check_ids=check_ids and checked_here)
    weighted = [f for f in spec if f.weighted]
    return ref.route(
        spec,
        ids,
        offsets,
        {f.name: w for f, w in zip(weighted, weights)},
        plan.rank,
        plan.world,
        with_weights=bool(weighted),
        index_dtype=index_dtype,
        lengths=lengths,
        concat_ids=concat,
        route_row_wise=by_range,
    )


__all__ = [
    "Agreement",
    "BatchSizes",
    "LocalCheck",
    "RidingAgreement",
    "RouteInputs",
    "agree",
    "check_batch",
    "route",
    "saved_batch_sizes",
]
