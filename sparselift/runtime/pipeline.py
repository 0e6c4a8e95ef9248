"""`TrainPipeline`: training steps with the next batch's input distribution in flight.

Like TorchRec's TrainPipelineSparseDist: while batch i trains (forward, backward, optimizer
step), batch i+1's ids are already routed and exchanged. Only the input distribution runs ahead
— lookups happen in batch i+1's own forward, after batch i's table updates — so training is
exactly the same as without the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from sparselift.runtime.compiled import CompiledModel


class TrainPipeline:
    """`progress()` trains one batch from `data_iter` and returns its loss.

    `data_iter` yields `(inputs, target)` where `inputs` is the tuple of model inputs of this
    rank's local batch; `loss_fn(output, target)` gives the loss (mean over the batch). Batches
    may change size from step to step and differ across ranks: each batch's exchanges are sized
    by its own batch sizes, also while it is in flight behind the current step.
    """

    def __init__(
        self,
        compiled: CompiledModel,
        dense_optimizer: torch.optim.Optimizer,
        data_iter: Iterator[tuple[tuple, Any]],
        loss_fn: Callable[[Any, Any], torch.Tensor],
    ):
        self.compiled = compiled
        self.optimizer = dense_optimizer
        self.data = iter(data_iter)
        self.loss_fn = loss_fn
        self._next: tuple[tuple, Any] | None = None

    def _fetch(self) -> tuple[tuple, Any] | None:
        item = next(self.data, None)
        if item is not None:
            self.compiled.start(*item[0])
        return item

    def progress(self) -> torch.Tensor:
        """Train one batch; raises StopIteration when the data is exhausted."""
        current = self._next if self._next is not None else self._fetch()
        if current is None:
            raise StopIteration
        inputs, target = current
        self.optimizer.zero_grad(set_to_none=False)
        out = self.compiled(*inputs)
        self._next = self._fetch()  # batch i+1's input exchange overlaps batch i's backward
        loss = self.loss_fn(out, target)
        loss.backward()
        self.compiled.advance()  # batch i+1's lengths have arrived: start its indices exchange
        self.optimizer.step()
        return loss.detach()
