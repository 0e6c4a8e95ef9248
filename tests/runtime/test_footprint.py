"""A rank's memory by phase and by category (`sparselift.runtime.footprint`)."""

from __future__ import annotations

import pytest
import torch

import sparselift
from sparselift.models import build
from sparselift.runtime.allocator import release_freed_memory
from sparselift.runtime.footprint import MemoryPhases, PeakWindow, rss_bytes

MIB = 2**20

pytestmark = pytest.mark.skipif(rss_bytes() is None, reason="needs /proc/self/status")


def _touch(mib: int) -> torch.Tensor:
    """`mib` MiB resident (written, so every page is mapped)."""
    return torch.ones(mib * MIB // 4, dtype=torch.float32)


def test_an_inner_phase_does_not_hide_the_outer_windows_peak():
    """A compile measures its phases inside a benchmark's window: the phases reset the kernel's
    peak, and the outer window must still see the highest point of its whole stretch."""
    # Freed memory an earlier test left in the heap would serve the allocations below without
    # growing the resident set: give it back first.
    release_freed_memory()
    outer = PeakWindow().start()
    phases = MemoryPhases()
    with phases.phase("big"):
        x = _touch(96)
        del x
        release_freed_memory()  # whatever allocator policy an earlier test left behind
    with phases.phase("small"):
        y = _touch(8)
        del y
    outer.stop()
    big, small = phases.phases
    if not outer.phase_local:
        pytest.skip("the kernel refused to reset the peak (clear_refs)")
    assert big.phase == "big" and big.peak_added_mb >= 90 and big.held_mb < 16
    assert small.peak_added_mb < 40  # its own peak, not the earlier phase's
    assert outer.peak_added is not None and outer.peak_added >= 90 * MIB


def test_a_compile_records_its_phases_and_explains_its_footprint(tmp_path):
    model, inputs = build("two-tower", rows_cap=2000, batch_size=512)
    compiled = sparselift.compile(
        model, inputs, options=sparselift.CompileOptions(plan="none", cache_dir=str(tmp_path))
    )
    phases = [p.phase for p in compiled.plan.memory_phases.phases]
    assert phases == ["export", "shards", "build"]
    tables = sum(t.numel() * t.element_size() for t in compiled.tables.values()) / MIB
    dense = sum(p.numel() * p.element_size() for p in compiled.regions.parameters()) / MIB
    assert compiled.plan.footprint["tables"] == pytest.approx(tables, abs=0.06)
    assert compiled.plan.footprint["dense_parameters"] == pytest.approx(dense, abs=0.06)
    assert compiled.plan.footprint["optimizer_state"] == 0.0  # SGD keeps none
    # At world size 1 no exchange: the declared buffers are the lookups' outputs.
    from sparselift.passes.step_buffers import declared_buffers

    declared = declared_buffers(compiled.program.module, 0)
    assert declared.exchanges == 0 and declared.outputs > 0
    assert compiled.plan.footprint["step_buffers"] == round(declared.total / MIB, 1)
    text = compiled.plan.explain()
    assert f"memory (this rank, MiB): tables {compiled.plan.footprint['tables']:.1f}" in text
    assert "compile memory by phase (this rank, MiB above the phase's start): export +" in text


def test_a_stateful_optimizers_state_is_its_own_category(tmp_path):
    model, inputs = build("two-tower", rows_cap=2000, batch_size=4)
    compiled = sparselift.compile(
        model,
        inputs,
        sparse_optimizer=sparselift.optim.Adam(lr=0.01),
        options=sparselift.CompileOptions(plan="none", cache_dir=str(tmp_path)),
    )
    # Adam: m and v per element, as much again as the tables twice.
    assert compiled.plan.footprint["optimizer_state"] == pytest.approx(2 * compiled.plan.footprint["tables"], rel=0.01)


def test_calibration_candidates_and_a_deleted_compiled_model_leave_no_plan_behind(tmp_path):
    """Every built plan registers itself for the custom ops (`plan_ops._PLANS`); the registry
    holds them weakly, so the planner's candidates (with their buffers and started exchanges)
    and a compiled model the user deletes are freed, not kept for the rest of the process."""
    import gc

    from sparselift.runtime import plan_ops

    gc.collect()
    before = set(plan_ops._PLANS)
    model, inputs = build("two-tower", rows_cap=2000, batch_size=64)
    options = sparselift.CompileOptions(plan="replan", cache_dir=str(tmp_path), calibration_budget_s=3)
    compiled = sparselift.compile(model, inputs, options=options)
    assert compiled.plan.record.measurements, "the planner built and timed candidates"
    gc.collect()
    assert set(plan_ops._PLANS) - before == {compiled.runner.handle}  # the candidates are gone
    del compiled
    gc.collect()
    assert set(plan_ops._PLANS) == before
