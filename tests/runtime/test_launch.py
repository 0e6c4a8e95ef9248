"""`launch` starts ranks from a fork server: fast, and each rank sees the caller's environment of the call."""

from __future__ import annotations

import os
import sys

from sparselift.runtime.distributed import launch

MARK = "SPARSELIFT_TEST_LAUNCH_MARK"


def _rank_view(rank: int, world: int) -> tuple[int, str | None, bool]:
    return rank, os.environ.get(MARK), "torch" in sys.modules


def test_a_rank_sees_the_environment_of_its_launch_not_of_the_server_start(monkeypatch):
    monkeypatch.delenv(MARK, raising=False)
    first = launch(_rank_view, 2, timeout_s=60)  # starts the fork server (if no test did) without MARK
    assert [m for _, m, _ in first] == [None, None]
    monkeypatch.setenv(MARK, "second")
    second = launch(_rank_view, 3, timeout_s=60)
    assert second == [(0, "second", True), (1, "second", True), (2, "second", True)]
    monkeypatch.delenv(MARK)
    assert [m for _, m, _ in launch(_rank_view, 2, timeout_s=60)] == [None, None]


def _lazy_modules_loaded(rank: int, world: int) -> list[str]:
    return [m for m in ("torch._dynamo", "torch.export._trace", "sympy") if m not in sys.modules]


def test_a_rank_starts_with_what_torch_export_loads_lazily():
    # Each rank of each launch would otherwise import them on its first compile: seconds a rank.
    assert launch(_lazy_modules_loaded, 2, timeout_s=60) == [[], []]
