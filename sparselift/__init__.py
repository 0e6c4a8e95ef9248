"""SparseLift: a compiler for the sparse path of recommendation-model training.

Import-light on purpose: `sparselift.ir`, `sparselift.passes` and `sparselift-opt` never import
torch. The torch-facing API is loaded on first use:

- `sparselift.export(model, example_inputs, world_size=...)` -> `SparseProgram`
- `sparselift.compile(model, example_inputs, sharding=..., sparse_optimizer=...)` -> module
- `sparselift.launch(fn, world_size)`: run `fn(rank, world_size)` on local gloo ranks
- `sparselift.load_checkpoint(compiled, dir)`: a DCP checkpoint loaded after checking it fits
- `sparselift.CompileOptions`, `sparselift.optim` (SGD, Adagrad, RowWiseAdagrad, Adam, AdamW,
  PartialRowWiseAdam), `sparselift.ShardingPlan`
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "export": ("sparselift.frontend.export", "export"),
    "ExportError": ("sparselift.frontend.errors", "ExportError"),
    "compile": ("sparselift.compiler", "compile"),
    "CompileOptions": ("sparselift.runtime.compiled", "CompileOptions"),
    "launch": ("sparselift.runtime.distributed", "launch"),
    "TrainPipeline": ("sparselift.runtime.pipeline", "TrainPipeline"),
    "init_from_env": ("sparselift.runtime.distributed", "init_from_env"),
    "ShardingPlan": ("sparselift.placement", "ShardingPlan"),
    "optim": ("sparselift.optim", None),
    "load_checkpoint": ("sparselift.runtime.sharded", "load_checkpoint"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'sparselift' has no attribute '{name}'")
    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    return module if attr is None else getattr(module, attr)


__all__ = ["__version__", *_LAZY]
