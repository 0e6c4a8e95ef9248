"""Argument types the command-line tools share (`sparselift explain`, `export`, `simulate` and the benchmarks)."""

from __future__ import annotations

import argparse


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


__all__ = ["add_host_memory_argument", "max_length_arg", "rows_cap_arg"]
