"""Shared fixtures of the benchmark tests: the measurement scripts under bench/, loaded as modules."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

_BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, _BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None, f"bench/{name}.py"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def bench_script():
    """`bench_script("planner_power")`: bench/planner_power.py as a module (they are scripts, not
    package modules)."""
    return _load
