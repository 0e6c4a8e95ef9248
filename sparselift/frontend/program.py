"""`SparseProgram`: what `sparselift.export` returns: the IR plus the torch regions it names."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import Any

import attrs
import torch
from torch import fx, nn
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

from sparselift.frontend.jagged import JaggedIds, jagged_position_features, jagged_values
from sparselift.strided_rows import stack_blocks


@attrs.frozen
class CallInputs:
    """How one lookup call's inputs become features (`SparseInputs`).

    `positions`: None for a pooled call (one feature); for an unpooled call (`nn.Embedding` on ids
    of shape `[B, *tail]`), the number of id positions per sample, `prod(tail)`: one feature per
    position, whose bags hold that position's id, or nothing where it is `padding_idx`.
    `jagged`: the ids are a KeyedJaggedTensor key's values (`sparselift.frontend.jagged`), up to
    `positions` per sample; the region gives the KJT's lengths right after them.
    """

    has_offsets: bool
    has_weights: bool
    include_last_offset: bool
    padding_idx: int | None = None
    positions: int | None = None
    table: str = ""  # for errors
    jagged: JaggedIds | None = None

    @property
    def outputs(self) -> int:
        """How many tensors its features add to `SparseInputs`' flat result."""
        return 2 * self.positions if self.positions is not None else 2 + self.has_weights


def drop_padding(
    ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor | None, padding_idx: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Bags without their `padding_idx` ids: as PyTorch pools them (a padding id adds nothing and
    is not counted by a mean), and with no gradient to the padding row."""
    keep = ids != padding_idx
    if bool(keep.all()):
        return ids, offsets, weights
    bag = torch.repeat_interleave(torch.arange(offsets.numel() - 1, device=ids.device), offsets.diff())
    kept = torch.bincount(bag[keep], minlength=offsets.numel() - 1)
    offsets = torch.cat([offsets.new_zeros(1), kept.cumsum(0).to(offsets.dtype)])
    return ids[keep], offsets, None if weights is None else weights[keep]


def position_features(ids: torch.Tensor, positions: int, padding_idx: int | None, table: str = "") -> list[tuple]:
    """An unpooled call's ids `[B, *tail]` as `positions` features of one-id bags (position-major):
    feature `p`'s bag `b` holds `ids[b, p]`, or nothing where that is `padding_idx`."""
    if ids.dim() == 0 or math.prod(ids.shape[1:]) != positions:
        raise ValueError(
            f"table '{table}': unpooled ids of shape {tuple(ids.shape)}, but the model was compiled for "
            f"{positions} ids per sample"
        )
    by_position = ids.reshape(ids.shape[0], positions).t()
    batch = by_position.shape[1]
    if padding_idx is None:
        offsets = torch.arange(batch + 1, dtype=torch.int64, device=ids.device)
        return [(row, offsets, None) for row in by_position.contiguous()]
    keep = by_position != padding_idx
    kept_ids = by_position[keep].split(keep.sum(1).tolist())
    ends = keep.cumsum(1)
    starts = ends.new_zeros(positions, 1)
    return [(i, o, None) for i, o in zip(kept_ids, torch.cat([starts, ends], 1))]


class SparseInputs(nn.Module):
    """Per-feature `(ids, offsets, weights)` from the model inputs, offsets always with B+1 entries.

    Wraps the extracted region that computes the lookups' ids/offsets/weights; a 2-D ids input
    of a pooled call becomes 1-D with offsets every `n` ids, as `nn.EmbeddingBag` defines it; an
    unpooled call becomes one feature per id position (`position_features`); padding ids are
    dropped from their bags (`drop_padding`).
    """

    def __init__(self, region: fx.GraphModule, calls: Sequence[CallInputs]):
        super().__init__()
        self.region = region
        self.calls = list(calls)

    def forward(self, *inputs: Any) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        flat = list(self.region(*inputs))
        out: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []
        for call in self.calls:
            ids = flat.pop(0)
            offsets = flat.pop(0) if call.has_offsets else None
            weights = flat.pop(0) if call.has_weights else None
            if call.jagged is not None:
                out += jagged_position_features(ids, flat.pop(0), call.jagged, call.padding_idx, call.table)
                continue
            if call.positions is not None:
                out += position_features(ids, call.positions, call.padding_idx, call.table)
                continue
            if ids.dim() == 2:  # [B, n] ids: one bag per row
                b, n = ids.shape
                offsets = torch.arange(0, b * n + 1, n, dtype=torch.int64, device=ids.device)
                ids = ids.reshape(-1)
                weights = None if weights is None else weights.reshape(-1)
            elif not call.include_last_offset:
                offsets = torch.cat([offsets, offsets.new_tensor([ids.numel()])])
            if call.padding_idx is not None:
                ids, offsets, weights = drop_padding(ids, offsets, weights, call.padding_idx)
            out.append((ids, offsets, weights))
        return out


@attrs.frozen
class ViewCall:
    """How `UnpooledViews` rebuilds one lookup call's result from its features' values.

    `features`: how many; `tail`: an unpooled call's ids shape after the batch (None: pooled,
    passed through); `jagged` with `lengths` (the index of the KJT's lengths among the view
    operands): the rows go back into the key's jagged values, unless `padded` (the region pads
    them right away, and was rewritten to take the positions' rows, `jagged.fold_padding`)."""

    features: int
    tail: tuple[int, ...] | None = None
    jagged: JaggedIds | None = None
    lengths: int = 0
    padded: bool = False


class UnpooledViews(nn.Module):
    """The `dense_post` region, given per-feature values: the rows of an unpooled call's position
    features are stacked back into the call's result, `[B, *tail, dim]`, or for a KJT key's
    jagged values (`EmbeddingCollection`) into `[sum(lengths), dim]`.

    Operands: the first `leading` (dense values and inputs) pass through to the region; the
    next `extras` (the KJTs' lengths) only serve the views; then the features' values."""

    def __init__(self, region: fx.GraphModule, leading: int, calls: Sequence[ViewCall], extras: int = 0):
        super().__init__()
        self.region = region
        self.leading = leading
        self.extras = extras
        self.calls = list(calls)

    def forward(self, *operands: Any) -> Any:
        args = list(operands[: self.leading])
        lengths = operands[self.leading : self.leading + self.extras]
        values = iter(operands[self.leading + self.extras :])
        for call in self.calls:
            rows = [next(values) for _ in range(call.features)]
            if call.tail is None:
                args += rows
                continue
            # The positions' rows are mostly blocks of one buffer: a view, not a copy (`stack_blocks`).
            stacked = stack_blocks(rows, 1) if len(rows) > 1 else rows[0].unsqueeze(1)
            if call.jagged is not None and not call.padded:
                args.append(jagged_values(stacked, lengths[call.lengths], call.jagged))
            elif call.jagged is not None:
                args.append(stacked)
            else:
                args.append(stacked.view(stacked.shape[0], *call.tail, stacked.shape[-1]))
        return self.region(*args)


@attrs.define
class SparseProgram:
    """The imported step (global SPMD view) and the torch artifacts needed to run it.

    Tables, features, placements, workload statistics, the batch and the world size are the
    IR's alone: read them with `sparselift.codegen.table_facts` (`describe_tables`,
    `describe_features`, `sharding_plan`, ...) on `module`.
    """

    module: ModuleOp
    regions: dict[str, nn.Module]  # symbol of a `sched.dense` op -> the torch region it runs
    graph_code: str  # the exported graph's Python code (the plan key's model structure)
    input_paths: list[str]  # flattened model inputs, by pytree path
    tensor_inputs: list[int]  # flat input index of each forward block argument
    in_spec: Any
    out_spec: Any
    # Per KJT key looked up unpooled (EmbeddingCollection): the longest bag it is compiled for;
    # the other ranks export with rank 0's (`sparselift.compiler`).
    max_lengths: dict[str, int] = attrs.field(factory=dict)
    # Flat model outputs that are constants (a JaggedTensor's None weights), by position; the
    # step yields the others, in order.
    constant_outputs: dict[int, Any] = attrs.field(factory=dict)

    def model_outputs(self, computed: Sequence[Any]) -> list[Any]:
        """The flat model outputs: the step's `computed` ones with the constants in place."""
        values = iter(computed)
        total = len(computed) + len(self.constant_outputs)
        return [self.constant_outputs[i] if i in self.constant_outputs else next(values) for i in range(total)]

    @property
    def text(self) -> str:
        out = io.StringIO()
        Printer(stream=out).print_op(self.module)
        return out.getvalue() + "\n"

    def input_binding(self) -> dict[str, int]:
        """Model input path -> index of the step's forward block argument."""
        return {self.input_paths[i]: k for k, i in enumerate(self.tensor_inputs)}

    def output_binding(self) -> list[int]:
        """The flat model output of each forward-yield value, in order (the constant outputs
        are not yielded)."""
        total = self.module.body.block.first_op.num_outputs.data + len(self.constant_outputs)
        return [i for i in range(total) if i not in self.constant_outputs]
