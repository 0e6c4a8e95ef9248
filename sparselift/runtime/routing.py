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
agreement). `route(..., checked=True)` then only buckets the ids, with no collective.

A route whose inputs are not all known before the first segment (ids computed from a segment's
outputs) is emitted with `checked=False`: it checks and agrees on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from sparselift.runtime import reference as ref
from sparselift.runtime.agree import raise_if_any_failed
from sparselift.runtime.collectives import exchange_sizes
from sparselift.runtime.reference import RouteFeature

RouteInputs = tuple[Sequence[RouteFeature], Sequence[torch.Tensor], Sequence[torch.Tensor], Sequence[torch.Tensor]]
"""One route's (spec, ids, offsets, weights), as `check_batch` takes them."""


class BatchSizes:
    """One step's local batch sizes, as a segment's exchanges and buffers need them.

    Every exchange and buffer is sized per step and per peer: `own` is this rank's batch,
    `ranks` every rank's (agreed by `check_batch`, or by a route that checks on its own).
    """

    def __init__(self, own: int, ranks: tuple[int, ...]):
        self.own = own
        self.ranks = ranks

    def saved(self) -> torch.Tensor:
        """For backward (a saved tensor of the segment): `own`, then `ranks`."""
        return torch.tensor([self.own, *self.ranks], dtype=torch.int64)


def saved_batch_sizes(saved: torch.Tensor) -> BatchSizes:
    """The `BatchSizes` a segment's forward saved (`BatchSizes.saved`), in its backward."""
    values = [int(b) for b in saved.tolist()]
    return BatchSizes(values[0], tuple(values[1:]))


def agree(plan: Any, own: int, error: Exception | None, device: torch.device) -> BatchSizes:
    """Every rank's batch size; raises `error` (or the failing rank's) on every rank."""
    if plan.world == 1:
        if error is not None:
            raise error
        return BatchSizes(own, (own,))
    send = torch.full((plan.world,), -1 if error is not None else own, dtype=torch.int64, device=device)
    ranks = exchange_sizes(plan, send)[0]
    if error is not None or bool((ranks < 0).any()):
        raise_if_any_failed(error, plan.pg, plan.world)
    return BatchSizes(own, tuple(int(b) for b in ranks.tolist()))


def check_batch(plan: Any, routes: Sequence[RouteInputs]) -> BatchSizes:
    """Check every route's features against this rank's batch (the first route's), then agree
    on the batch sizes and the outcome with every rank: one collective for the whole step."""
    first_offsets = routes[0][2][0]
    own = first_offsets.numel() - 1
    error = None
    try:
        for spec, ids, offsets, weights in routes:
            ref.validate_features(spec, ids, offsets, own)
            _check_weights(spec, ids, weights)
    except Exception as e:  # noqa: BLE001 - raised by `agree`, on every rank
        error = e
    return agree(plan, own, error, first_offsets.device)


def route(
    plan: Any, spec: Sequence[RouteFeature], ids, offsets, weights, index_dtype=torch.int64, checked: bool = False
):
    """Route this rank's batch: its lengths, ids, splits and weights, and the step's `BatchSizes`.

    `checked=True`: the plan's `check_batch` has checked these features and agreed on the sizes
    (`plan.batch_sizes()`), so this is local work only. Otherwise the route checks its own
    features and agrees on its own (one small all-to-all)."""
    if checked:
        return (*_route(plan, spec, ids, offsets, weights, index_dtype, check_ids=False), plan.batch_sizes())
    error, routed = None, None
    try:
        _check_weights(spec, ids, weights)
        routed = _route(plan, spec, ids, offsets, weights, index_dtype, check_ids=True)
    except Exception as e:  # noqa: BLE001 - raised by `agree`, on every rank
        error = e
    batches = agree(plan, offsets[0].numel() - 1, error, offsets[0].device)
    assert routed is not None  # `agree` raised the error
    return (*routed, batches)


def _check_weights(spec: Sequence[RouteFeature], ids, weights) -> None:
    weighted = [f for f in spec if f.weighted]
    for f, w in zip(weighted, weights):
        if w.numel() != ids[spec.index(f)].numel():
            raise ValueError(f"feature '{f.name}' (table '{f.table}'): one weight per id expected")


def _route(plan: Any, spec: Sequence[RouteFeature], ids, offsets, weights, index_dtype, check_ids: bool):
    batch = offsets[0].numel() - 1
    # Whole features on the CPU: the generated library checks every id while it concatenates
    # them (one pass), instead of a concatenation, a per-id bound tensor and a comparison.
    concat = (
        getattr(plan.kernels, "concat_ids", None)
        if (spec and all(f.kind != "row_wise" for f in spec) and all(i.device.type == "cpu" for i in ids))
        else None
    )
    lengths = ref.validate_features(spec, ids, offsets, batch, check_ids=check_ids and concat is None)
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
    )


__all__ = ["BatchSizes", "RouteInputs", "agree", "check_batch", "route", "saved_batch_sizes"]
