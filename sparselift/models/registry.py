"""Name -> factory registry of the built-in models, and loading of user model factories.

Every factory returns ``(model, example_inputs)`` where ``example_inputs`` is the positional
argument tuple for ``model(*example_inputs)`` and ``torch.export.export(model, example_inputs)``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

__all__ = ["DEFAULT_BATCH_SIZE", "MODELS", "build", "dynamic_shapes", "load_user_factory"]

DEFAULT_BATCH_SIZE = 128

Factory = Callable[..., tuple[nn.Module, tuple]]


def _dlrm(preset: str) -> Factory:
    def factory(*, rows_cap: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0):
        # The submodule itself, not the package (`sparselift.models` imports this registry).
        import sparselift.models.dlrm as dlrm

        config = getattr(dlrm, preset)(rows_cap=rows_cap)
        return dlrm.build_dlrm(config, batch_size=batch_size, seed=seed)

    factory.__doc__ = f"DLRM preset {preset}()."
    return factory


def _two_tower(*, rows_cap: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0):
    from sparselift.models.two_tower import build_two_tower

    return build_two_tower(rows_cap=rows_cap, seed=seed, batch_size=batch_size)


def _torchrec_ebc(*, rows_cap: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0):
    # Tables are small (<= 1000 rows); rows_cap is accepted for a uniform signature.
    from sparselift.models.torchrec_ebc import build_torchrec_ebc

    return build_torchrec_ebc(seed=seed, batch_size=batch_size)


def _din(*, rows_cap: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0):
    from sparselift.models.din import build_din

    return build_din(rows_cap=rows_cap, seed=seed, batch_size=batch_size)


MODELS: dict[str, Factory] = {
    "dlrm-kaggle": _dlrm("dlrm_kaggle"),
    "dlrm-terabyte": _dlrm("dlrm_terabyte"),
    "dlrm-bench": _dlrm("dlrm_bench"),
    "two-tower": _two_tower,
    "torchrec-ebc": _torchrec_ebc,
    "din": _din,
}


def build(
    name: str, *, rows_cap: int | None = None, batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0
) -> tuple[nn.Module, tuple]:
    """Build built-in model ``name`` -> ``(model, example_inputs)``.

    ``rows_cap`` caps every table's rows (uncapped, dlrm-kaggle holds 33.8M rows / 2.2 GB and
    dlrm-terabyte ~244M rows / 62 GB).
    """
    try:
        factory = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))}") from None
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return factory(rows_cap=rows_cap, batch_size=batch_size, seed=seed)


def load_user_factory(spec: str, **kwargs: Any) -> tuple[nn.Module, tuple]:
    """Import ``path/to/file.py`` and call its ``factory(**kwargs)`` for ``"path/to/file.py:factory"``.

    The factory must return ``(nn.Module, tuple_of_example_inputs)``.
    """
    path_str, sep, attr = spec.rpartition(":")
    if not sep or not path_str or not attr:
        raise ValueError(f"expected 'path/to/file.py:factory', got {spec!r}")
    path = Path(path_str)
    if not path.is_file():
        raise FileNotFoundError(f"model file not found: {path} (from {spec!r})")
    module_name = f"sparselift_user_model_{abs(hash(str(path.resolve())))}"
    mod_spec = importlib.util.spec_from_file_location(module_name, path)
    if mod_spec is None or mod_spec.loader is None:
        raise ValueError(f"cannot import {path} as a Python module")
    module = importlib.util.module_from_spec(mod_spec)
    sys.modules[module_name] = module  # dataclasses/pickling look the module up here
    try:
        mod_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    factory = getattr(module, attr, None)
    if factory is None:
        public = sorted(n for n in vars(module) if not n.startswith("_") and callable(vars(module)[n]))
        raise AttributeError(f"{path} has no attribute {attr!r}; callables there: {', '.join(public) or '(none)'}")
    if not callable(factory):
        raise TypeError(f"{path}:{attr} is not callable (it is a {type(factory).__name__})")
    result = factory(**kwargs)
    if (
        not isinstance(result, tuple)
        or len(result) != 2
        or not isinstance(result[0], nn.Module)
        or not isinstance(result[1], tuple)
    ):
        raise TypeError(
            f"{spec}: the factory must return (torch.nn.Module, tuple of example inputs), got {_describe(result)}"
        )
    return result


def _describe(x: Any) -> str:
    if isinstance(x, tuple):
        return "(" + ", ".join(type(v).__name__ for v in x) + ")"
    return type(x).__name__


def dynamic_shapes(model: nn.Module, example_inputs: tuple) -> Any:
    """A ``dynamic_shapes`` for ``torch.export.export``: dim 0 of every tensor input is ``Dim.AUTO``.

    That makes the batch and every id/values length symbolic (export infers which sizes are
    equal, e.g. all offsets share the batch). Works for plain tensors, lists of them and
    KeyedJaggedTensors. A size of 0 or 1 in the example still specializes to a constant.
    """
    import torch
    import torch.utils._pytree as pytree
    from torch.export import Dim, ShapesCollection

    sc = ShapesCollection()
    for leaf in pytree.tree_leaves(example_inputs):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            sc[leaf] = {0: Dim.AUTO}
    return sc.dynamic_shapes(model, example_inputs)
