"""`rt.parallel`: the runtime of `sched.parallel` lanes (CPU thread pool) and a compiled plan using it."""

from __future__ import annotations

import threading
import time
import types

import pytest
import torch

from sparselift.runtime import plan_ops
from sparselift.runtime.backends import ReferenceKernels
from sparselift.runtime.kernels import CKernels
from sparselift.runtime.parity import check_parity


def plan(kernels=None):
    return types.SimpleNamespace(tables={}, kernels=kernels if kernels is not None else ReferenceKernels())


def test_results_come_lane_by_lane():
    lanes = [lambda: (1, 2), lambda: (), lambda: ("three",), lambda: (None, 5)]
    assert plan_ops.parallel(plan(), lanes) == (1, 2, "three", None, 5)
    assert plan_ops.parallel(plan(), [lambda: (7,)]) == (7,)


def test_lanes_run_concurrently():
    # Each lane waits for the other: run one after another, they would time out.
    barrier = threading.Barrier(2, timeout=10)
    names = []

    def lane():
        names.append(threading.current_thread().name)
        barrier.wait()
        return ()

    plan_ops.parallel(plan(), [lane, lane])
    assert all(n.startswith("sparselift-lane") for n in names)


def test_pool_is_persistent_and_grows():
    plan_ops.parallel(plan(), [lambda: (), lambda: ()])
    pool = plan_ops._pool(2)
    plan_ops.parallel(plan(), [lambda: (), lambda: ()])
    assert plan_ops._pool(2) is pool
    plan_ops.parallel(plan(), [lambda: (), lambda: (), lambda: ()])
    assert plan_ops._LANE_POOL_SIZE >= 3


def test_an_exception_names_its_lane_after_every_lane_finished():
    finished = []

    def slow():
        time.sleep(0.2)
        finished.append("slow")
        return (1,)

    def bad():
        raise ValueError("lookup of table 't3': id 99 is out of range for a table of 10 rows")

    with pytest.raises(ValueError, match=r"sched.parallel lane 1 of 3: lookup of table 't3': id 99 is out of range"):
        plan_ops.parallel(plan(), [slow, bad, slow])
    assert finished == ["slow", "slow"]  # no lane was left running behind the exception


def test_exception_without_a_message_gets_a_note():
    class Odd(Exception):
        pass

    def bad():
        raise Odd(1, 2)

    with pytest.raises(Odd) as info:
        plan_ops.parallel(plan(), [lambda: (), bad])
    assert "in sched.parallel lane 1 of 2" in info.value.__notes__


def test_lanes_split_the_c_kernel_threads_and_keep_grad_mode():
    kernels = CKernels(nthreads=8)

    def lane():
        return (kernels._threads(), torch.is_grad_enabled())

    with torch.no_grad():
        got = plan_ops.parallel(plan(kernels), [lane, lane, lane, lane])
    assert got == (2, False) * 4
    assert kernels._threads() == 8  # the share is the lane thread's own, not global


def test_compiled_plan_runs_its_lanes(monkeypatch):
    calls = []
    real = plan_ops.parallel

    def counting(p, lanes):
        calls.append(len(lanes))
        return real(p, lanes)

    monkeypatch.setattr(plan_ops, "parallel", counting)
    # One rank: every table-local op runs on it, so each group gets its lanes (reference kernels:
    # compile adds no generate-kernels of its own, so it runs after the lanes, fused per lane).
    check_parity(
        "dlrm-kaggle",
        1,
        steps=2,
        rows_cap=2000,
        kernels="reference",
        passes="parallelize-tables{groups=3},generate-kernels",
    )
    assert calls and set(calls) == {3}
