"""The sparse optimizer every benchmarked system trains its tables with (`--sparse-optimizer`):
its `sparselift.optim` record, each peer's equivalent, and why a peer lacks one, found by trying."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import attrs

SPARSE_OPTIMIZERS = ("sgd", "adagrad", "rowwise-adagrad", "adam", "adamw", "partial-rowwise-adam")

# Why a peer cannot train its tables with an optimizer, found by trying (torch 2.13, torchrec 1.8.0,
# fbgemm-gpu-cpu 1.8.0; tests/bench/test_bench_cli.py checks FBGEMM's refusals still hold).
# SparseLift has every one.
UNAVAILABLE: dict[str, dict[str, str]] = {
    "baseline": {
        "rowwise_adagrad": "torch has no row-wise Adagrad",
        "adam": "torch.optim.Adam refuses sparse gradients, and torch.optim.SparseAdam is not the same update "
        "(eps added before the bias correction), so it is not substituted",
        "adamw": "torch.optim.AdamW refuses sparse gradients, and torch.optim.SparseAdam is not the same update "
        "(no weight decay, eps added before the bias correction), so it is not substituted",
        "partial_rowwise_adam": "torch has no partial row-wise Adam",
    },
    "torchrec": {
        "adam": "TorchRec on CPU has no Adam: FBGEMM's Adam is GPU-only (its CPU TBE: "
        "'Optimizer adam is not supported in CPU mode.')",
        "adamw": "TorchRec on CPU has no AdamW: TorchRec maps no AdamW class to FBGEMM ('Cannot cast "
        "torch.optim.AdamW to an EmbOptimType'), and FBGEMM's Adam (decoupled weight decay) is GPU-only",
        "partial_rowwise_adam": "TorchRec on CPU has no partial row-wise Adam: FBGEMM's PARTIAL_ROWWISE_ADAM is "
        "GPU-only (its CPU TBE: 'Optimizer partial_row_wise_adam is not supported in CPU mode.')",
    },
}


def sparse_optimizer_arg(text: str) -> str:
    """`--sparse-optimizer`: one of `SPARSE_OPTIMIZERS`, dashes or underscores; its `OptimizerKind`
    value (`rowwise_adagrad`)."""
    kind = text.strip().lower().replace("-", "_")
    if kind.replace("_", "-") not in SPARSE_OPTIMIZERS:
        raise argparse.ArgumentTypeError(
            f"unknown sparse optimizer '{text}'; choose from {', '.join(SPARSE_OPTIMIZERS)}"
        )
    return kind


def sparse_optimizer_record(kind: str, lr: float):
    """The `sparselift.optim` record of `kind` at learning rate `lr`, its other hyperparameters the
    record's defaults (the Adam family's betas and eps, AdamW's weight decay)."""
    from sparselift.optim import RECORDS
    from sparselift.optim_rules import OptimizerKind

    return RECORDS[OptimizerKind(kind)](lr=lr)


def unavailable(system: str, kind: str) -> str | None:
    """Why `system` ("baseline", "torchrec", ...) cannot train its tables with `kind`; None if it can."""
    return UNAVAILABLE.get(system, {}).get(kind)


def torch_sparse_optimizer(record, params, reference: bool = False) -> Any:
    """The baselines' embedding optimizer: the torch optimizer of `record` on sparse gradients;
    with `reference`, for the optimizers torch has no sparse form of, the reference semantics
    written out (`runtime.parity.ReferenceSparseOptimizer`: what quality runs compare against)."""
    import torch

    h = record.hyperparameters()
    if record.kind == "sgd":
        return torch.optim.SGD(params, lr=h["lr"])
    if record.kind == "adagrad":
        return torch.optim.Adagrad(params, lr=h["lr"], eps=h["eps"])
    if reference:
        from sparselift.runtime.parity import ReferenceSparseOptimizer

        return ReferenceSparseOptimizer(params, record)
    raise ValueError(f"the baseline cannot train with {record!r}: {unavailable('baseline', str(record.kind))}")


def torchrec_optimizer(record) -> tuple[type, dict[str, float]]:
    """`apply_optimizer_in_backward`'s class and kwargs for `record` (what FBGEMM fuses on CPU)."""
    import torch
    import torchrec.optim

    reason = unavailable("torchrec", str(record.kind))
    if reason:
        raise ValueError(f"TorchRec cannot train with {record!r}: {reason}")
    h = record.hyperparameters()
    if record.kind == "sgd":
        return torch.optim.SGD, {"lr": h["lr"]}
    cls = torch.optim.Adagrad if record.kind == "adagrad" else torchrec.optim.RowWiseAdagrad
    return cls, {"lr": h["lr"], "eps": h["eps"]}


def available_systems(cfg: Any) -> tuple[Any, dict[str, str]]:
    """`cfg` without the systems that lack its sparse optimizer, and why each is left out."""
    skipped = {s: r for s in cfg.systems if (r := unavailable(s, cfg.sparse_optimizer))}
    return attrs.evolve(cfg, systems=tuple(s for s in cfg.systems if s not in skipped)), skipped


def optimizer_summary(cfg: Any, skipped: Mapping[str, str]) -> dict[str, Any]:
    """The JSON's record of the tables' optimizer: its kind, record, hyperparameters, and the
    systems left out for lack of it."""
    record = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    return {"kind": str(record.kind), "record": repr(record), **record.hyperparameters(), "skipped": dict(skipped)}
