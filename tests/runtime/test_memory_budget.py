"""`CompileOptions(memory_cap_bytes=...)` against a compile's whole need per rank: table shards,
optimizer state, dense parameters and the default plan's step buffers (`sparselift.memory_budget`),
refused on every rank before anything is allocated, naming the largest consumers."""

from __future__ import annotations

import pytest
import torch

import sparselift
from sparselift.compiler import lift_pass
from sparselift.memory_budget import RankMemory, check_memory_need, headroom, memory_need
from sparselift.models import build
from sparselift.optim import SGD, RowWiseAdagrad
from sparselift.passes.step_buffers import StepBuffers

MODEL, ROWS, BATCH = "dlrm-kaggle", 2000, 64


def _needs(model, inputs, world: int, optimizer) -> list[RankMemory]:
    program = sparselift.export(model, inputs, world_size=world, sharding="table_wise")
    return memory_need(program, lift_pass(optimizer), world, "rowwise_adagrad" if optimizer.kind != "sgd" else "sgd")


def test_the_need_counts_every_consumer():
    model, inputs = build(MODEL, rows_cap=ROWS, batch_size=BATCH)
    needs = _needs(model, inputs, 2, RowWiseAdagrad(lr=0.1))
    tables = {n: p for n, p in model.named_parameters() if "emb" in n}
    table_bytes = sum(p.numel() * p.element_size() for p in tables.values())
    assert sum(sum(n.tables.values()) for n in needs) == table_bytes  # table-wise: each table once
    for n in needs:
        assert all(n.states[t] == b // 16 for t, b in n.tables.items())  # one float per row of dim 16
        assert n.dense > 0 and n.buffers.exchanges > 0 and n.buffers.outputs > 0
        assert n.total == sum(n.tables.values()) + sum(n.states.values()) + n.dense + n.buffers.total
        assert [b for _, b in n.consumers()] == sorted((b for _, b in n.consumers()), reverse=True)


def test_the_message_names_the_largest_consumers_and_headroom_is_what_is_left():
    need = RankMemory(1, {"big": 3 << 20, "small": 10}, {"big": 0, "small": 0}, 2 << 20, StepBuffers(5 << 20, 7, 9))
    check_memory_need([need], need.total)  # exactly at the cap: fits
    with pytest.raises(MemoryError) as e:
        check_memory_need([need], need.total - 1)
    text = str(e.value)
    assert text.startswith("sparselift: rank 1 needs 10.0 MiB (step buffers: exchanges 5.0 MiB, table 'big' 3.0 MiB,")
    assert "dense parameters 2.0 MiB" in text and "nothing was allocated" in text
    assert headroom([need], need.total + 100) == 100 and headroom([need], None) == 0
    assert headroom([need], 1) == 1  # never 0 under a cap: 0 means no cap to the planner


def _capped_worker(rank, world, cache, slack):
    torch.manual_seed(0)
    model, inputs = build(MODEL, rows_cap=ROWS, batch_size=BATCH)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    need = max(n.total for n in _needs(model, inputs, world, SGD(lr=0.01)))
    shards = max(sum(n.tables.values()) for n in _needs(model, inputs, world, SGD(lr=0.01)))
    options = sparselift.CompileOptions(plan="none", cache_dir=cache, memory_cap_bytes=need + slack)
    try:
        compiled = sparselift.compile(model, inputs, sharding="table_wise", options=options)
    except MemoryError as e:
        unchanged = all(torch.equal(before[k], v) for k, v in model.state_dict().items())
        return {"error": str(e), "shards_fit": shards < need + slack, "unchanged": unchanged}
    return {"error": None, "step_buffers": compiled.plan.footprint["step_buffers"]}


def test_a_cap_the_shards_fit_but_the_buffers_do_not_is_refused_on_every_rank(tmp_path, world=2):
    refused = sparselift.launch(_capped_worker, world, str(tmp_path), -1, timeout_s=120)
    assert len({r["error"] for r in refused}) == 1, refused  # the same error on every rank
    for r in refused:
        assert r["shards_fit"] and r["unchanged"], r
        assert "step buffers: exchanges" in r["error"] and "nothing was allocated" in r["error"], r
    fits = sparselift.launch(_capped_worker, world, str(tmp_path), 0, timeout_s=120)
    assert all(r["error"] is None and r["step_buffers"] > 0 for r in fits), fits


# -- a rank's resident set, phase by phase, against its declared need -------------------------

ROWS_300MB = 1_200_000  # 4 tables x 1.2M x 16 x 4 bytes = 307 MB, 154 MB a rank table-wise
ALLOWANCE_MIB = 80  # measured here: export keeps ~15 MiB, calibration's plan cache ~11, the rest small


def _phases_worker(rank, world, cache):
    import gc

    from test_real_size import BagsWithInit, _inputs, _train  # tests/runtime is on sys.path

    from sparselift.passes.step_buffers import declared_buffers
    from sparselift.runtime.allocator import release_freed_memory
    from sparselift.runtime.footprint import MemoryPhases, rss_bytes

    torch.set_num_threads(1)
    gc.collect()
    release_freed_memory()
    base = rss_bytes()
    compiled = sparselift.compile(
        BagsWithInit(rows=ROWS_300MB, device="meta"),  # each rank materializes only its shards
        _inputs(ROWS_300MB, 1024, rank),
        sharding="table_wise",
        options=sparselift.CompileOptions(plan="replan", cache_dir=cache, calibration_budget_s=10),
    )
    steps = MemoryPhases()
    with steps.phase("first steps"):
        _train(compiled, ROWS_300MB, 1024, rank, 3)
    with steps.phase("steady steps"):
        _train(compiled, ROWS_300MB, 1024, rank, 3)
    need = sum(t.numel() * t.element_size() for t in (*compiled.tables.values(), *compiled.states.values()))
    need += sum(p.numel() * p.element_size() for p in compiled.regions.parameters())
    need += declared_buffers(compiled.program.module, rank).total
    phases = [(p.phase, p.peak_added_mb, p.held_mb) for p in (*compiled.plan.memory_phases.phases, *steps.phases)]
    return {
        "phases": phases,
        "need_mib": need / 2**20,
        "end_mib": (rss_bytes() - base) / 2**20,
        "calibrated": bool(compiled.plan.record.measurements),
    }


def test_every_phase_stays_within_the_declared_need_plus_a_small_allowance(tmp_path):
    """Export, shard taking, planning (calibration), the build and the first and steady steps:
    at no phase's peak does a rank hold more above where it started than its shards, optimizer
    state, dense parameters and declared step buffers, plus a small fixed allowance. A copy of
    the tables per candidate, the model's tables kept, or a second copy of a shard breaks it,
    and the assertion names the phase."""
    for rank, r in enumerate(sparselift.launch(_phases_worker, 2, str(tmp_path), timeout_s=300)):
        assert r["calibrated"], r
        bound = r["need_mib"] + ALLOWANCE_MIB
        resident = 0.0  # MiB above the rank's start when each phase begins
        for phase, peak_added, held in r["phases"]:
            assert resident + peak_added <= bound, (
                f"rank {rank}: phase '{phase}' peaked at {resident + peak_added:.0f} MiB above the start, over "
                f"{bound:.0f} MiB (need {r['need_mib']:.0f} + {ALLOWANCE_MIB} allowance): {r['phases']}"
            )
            resident += held
        assert r["end_mib"] <= bound, (rank, r)
