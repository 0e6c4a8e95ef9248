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


@attrs.frozen
class CallInputs:
    """How one lookup call's inputs become features (`SparseInputs`).

    `positions`: None for a pooled call (one feature); for an unpooled call (`nn.Embedding` on ids
    of shape `[B, *tail]`), the number of id positions per sample, `prod(tail)`: one feature per
    position, whose bags hold that position's id, or nothing where it is `padding_idx`.
    """

    has_offsets: bool
    has_weights: bool
    include_last_offset: bool
    padding_idx: int | None = None
    positions: int | None = None
    table: str = ""  # for errors

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


class UnpooledViews(nn.Module):
    """The `dense_post` region, given per-feature values: the rows of an unpooled call's position
    features are stacked back into the call's result, `[B, *tail, dim]`.

    `calls`: per lookup call the number of its features and, for an unpooled call, the `tail`
    of its ids' shape; the first `leading` operands (dense values and inputs) pass through."""

    def __init__(self, region: fx.GraphModule, leading: int, calls: Sequence[tuple[int, tuple[int, ...] | None]]):
        super().__init__()
        self.region = region
        self.leading = leading
        self.calls = list(calls)

    def forward(self, *operands: Any) -> Any:
        args = list(operands[: self.leading])
        values = iter(operands[self.leading :])
        for n_features, tail in self.calls:
            rows = [next(values) for _ in range(n_features)]
            if tail is None:
                args += rows
            else:
                stacked = torch.stack(rows, 1) if len(rows) > 1 else rows[0].unsqueeze(1)
                args.append(stacked.view(stacked.shape[0], *tail, stacked.shape[-1]))
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

    @property
    def text(self) -> str:
        out = io.StringIO()
        Printer(stream=out).print_op(self.module)
        return out.getvalue() + "\n"

    def input_binding(self) -> dict[str, int]:
        """Model input path -> index of the step's forward block argument."""
        return {self.input_paths[i]: k for k, i in enumerate(self.tensor_inputs)}

    def output_binding(self) -> list[int]:
        """Model output i is forward-yield value i."""
        return list(range(self.module.body.block.first_op.num_outputs.data))
