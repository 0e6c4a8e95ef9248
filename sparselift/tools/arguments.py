"""Argument types the command-line tools share (`sparselift explain`, `export`, `simulate` and the benchmarks)."""

from __future__ import annotations

import argparse
from pathlib import Path


def rows_cap_arg(text: str) -> int | None:
    """`--rows-cap`: a positive row count, or "none" for the real cardinalities."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a row count or 'none', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (or 'none'), got {value}")
    return value


def max_length_arg(text: str) -> tuple[str, int]:
    """`--max-length KEY=N`: the longest bag of KeyedJaggedTensor key KEY an EmbeddingCollection
    looks up (`sparselift.export`'s `max_lengths`)."""
    key, sep, value = text.partition("=")
    if not sep or not key or not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected KEY=N with N a positive integer, got '{text}'")
    return key, int(value)


def load_sharding(value: str):
    """`--sharding`: a policy name (`export`'s `SHARDING_CHOICES`) or a plan JSON file, as a
    `ShardingPlan`; `ValueError` says which it is not."""
    from sparselift.frontend.export import SHARDING_CHOICES
    from sparselift.placement import ShardingPlan

    if value in SHARDING_CHOICES:
        return value
    path = Path(value)
    if not path.exists():
        raise ValueError(
            f"--sharding must be one of {', '.join(SHARDING_CHOICES)} or a plan JSON file; '{value}' is neither"
        )
    try:
        return ShardingPlan.from_json(path.read_text())
    except (ValueError, KeyError, TypeError) as e:  # bad JSON, a missing key, a bad kind
        detail = f"missing key {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"--sharding {value} is not a valid sharding plan: {detail}") from None


def sharding_arg(text: str):
    """`load_sharding` as an argparse type."""
    try:
        return load_sharding(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--sharding ")) from None


def add_host_memory_argument(parser: argparse.ArgumentParser) -> None:
    """`--host-memory default|retain`, the ranks' host-allocator policy, alike in every benchmark
    (`sparselift.bench.dlrm.apply_host_memory` applies it)."""
    parser.add_argument(
        "--host-memory",
        default="default",
        choices=("default", "retain"),
        help="retain: every rank keeps freed heap memory for reuse instead of faulting big temporaries in "
        "again each step (glibc mallopt, process-wide: every system alike); default: glibc's policy",
    )


__all__ = ["add_host_memory_argument", "load_sharding", "max_length_arg", "rows_cap_arg", "sharding_arg"]
