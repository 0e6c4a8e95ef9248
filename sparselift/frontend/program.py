"""`SparseProgram`: what `sparselift.export` returns: the IR plus the torch regions it names."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import attrs
import torch
from torch import fx, nn
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer


class SparseInputs(nn.Module):
    """Per-feature `(ids, offsets, weights)` from the model inputs, offsets always with B+1 entries.

    Wraps the extracted region that computes the embedding bags' ids/offsets/weights; a 2-D ids
    input becomes 1-D with offsets every `n` ids, as `nn.EmbeddingBag` defines it.
    """

    def __init__(self, region: fx.GraphModule, layout: Sequence[tuple[bool, bool, bool]]):
        super().__init__()
        self.region = region
        self.layout = list(layout)  # per feature: (has offsets, has weights, include_last_offset)

    def forward(self, *inputs: Any) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]]:
        flat = list(self.region(*inputs))
        out = []
        for has_offsets, has_weights, include_last in self.layout:
            ids = flat.pop(0)
            offsets = flat.pop(0) if has_offsets else None
            weights = flat.pop(0) if has_weights else None
            if ids.dim() == 2:  # [B, n] ids: one bag per row
                b, n = ids.shape
                offsets = torch.arange(0, b * n + 1, n, dtype=torch.int64, device=ids.device)
                ids = ids.reshape(-1)
                weights = None if weights is None else weights.reshape(-1)
            elif not include_last:
                offsets = torch.cat([offsets, offsets.new_tensor([ids.numel()])])
            out.append((ids, offsets, weights))
        return out


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
