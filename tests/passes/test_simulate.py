"""`sparselift.passes.simulate`: the analytic step-time projection at large world sizes.

Workloads come from the exported IR fixtures (tests/filecheck/inputs, batch 8, tables capped at
20,000 rows) re-batched to realistic sizes, or are written by hand; no torch is needed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_srsv import parse  # tests/passes is on sys.path (rootdir-relative import)

from sparselift.passes.profiles import BUILTIN_PROFILES, CPU_GLOO, H100_NCCL
from sparselift.passes.simulate import (
    STAGES,
    SimOptions,
    SimTable,
    Workload,
    _Exchange,
    _Network,
    calibrated,
    simulate,
    sweep,
    workload_from_module,
)
from sparselift.tools.simulate_cli import format_table, load_calibration, parse_world_sizes

INPUTS = Path(__file__).resolve().parents[1] / "filecheck" / "inputs"
POWERS = [2**k for k in range(3, 13)]  # 8 .. 4096
MIXED = sorted({*POWERS, 12, 24, 48, 96, 384, 3000})
DENSE_PARAM_BYTES = 1_903_940  # the Kaggle DLRM's MLPs (f32)


def _workload(fixture: str, batch: int = 2048) -> Workload:
    module = parse((INPUTS / fixture).read_text())
    return workload_from_module(module, dense_param_bytes=DENSE_PARAM_BYTES).with_batch(batch)


@pytest.fixture(scope="module")
def workloads() -> dict[str, Workload]:
    return {name: _workload(f"{name}-ws2.mlir") for name in ("dlrm-kaggle", "dlrm-terabyte", "two-tower")}


def _big_tables_workload() -> Workload:
    """Eight 1M-row tables (dlrm-bench shapes): row-wise over every rank at every N <= 4096."""
    tables = [SimTable(f"t{i}", "emb", rows=1_000_000, dim=64, pooling_factor=100.0) for i in range(8)]
    return Workload("bench-like", 2048, tables, 6e6, 12e6, 1e6, 2e6, 3, 2, DENSE_PARAM_BYTES)


# -- reading the workload ------------------------------------------------------------------


def test_workload_from_exported_kaggle_ir():
    w = _workload("dlrm-kaggle-ws2.mlir", batch=8)
    assert w.batch == 8 and w.model == "DLRM"
    assert len(w.tables) == 26
    assert all(t.dim == 16 and t.dtype_bytes == 4 and t.features == 1 and t.index_bytes == 8 for t in w.tables)
    assert all(t.rows <= 20000 and t.pooling_factor == 1.0 for t in w.tables)
    # Bottom MLP 13-512-256-64-16: 2 x 155,136 multiply-adds per sample, all before the embeddings.
    assert w.dense_pre_fwd_flops_per_sample == pytest.approx(2 * (13 * 512 + 512 * 256 + 256 * 64 + 64 * 16))
    assert w.dense_pre_fwd_flops_per_sample < w.dense_fwd_flops_per_sample
    assert w.dense_bwd_flops_per_sample == pytest.approx(2 * w.dense_fwd_flops_per_sample)
    assert w.dense_pre_bwd_flops_per_sample == pytest.approx(2 * w.dense_pre_fwd_flops_per_sample)
    assert (w.dense_fwd_regions, w.dense_bwd_regions) == (3, 2)  # sparse_inputs, dense_pre, dense_post
    assert w.dense_param_bytes == DENSE_PARAM_BYTES


def test_workload_from_two_tower_keeps_modules_weights_and_pooling():
    w = _workload("two-tower-ws2.mlir", batch=8)
    by_name = {t.name: t for t in w.tables}
    assert {t.module for t in w.tables} == {"user", "item"}
    assert by_name["user.emb.1"].pooling == "mean"
    assert sum(t.weighted_pooling_factor for t in w.tables) > 0
    assert all(t.weighted_pooling_factor <= t.pooling_factor for t in w.tables)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sched.step @s world_size = 1 outputs = 0 {\n  sched.yield\n} backward {\n  sched.yield\n}\n", "batch"),
        (
            'sched.step @s world_size = 1 outputs = 0 attributes {batch = "4"} {\n  sched.yield\n} '
            "backward {\n  sched.yield\n}\n",
            "embedding_bag_collection",
        ),
    ],
)
def test_workload_from_module_rejects_ir_without_what_it_needs(text, message):
    with pytest.raises(ValueError, match=message):
        workload_from_module(parse(text))


def test_workload_validates_its_fields():
    with pytest.raises(ValueError, match="no embedding tables"):
        Workload("m", 8, ())
    with pytest.raises(ValueError, match="batch"):
        Workload("m", 0, (SimTable("t", "emb", rows=10, dim=4),))
    with pytest.raises(ValueError, match="rows"):
        SimTable("t", "emb", rows=0, dim=4)


# -- the network model ---------------------------------------------------------------------


@pytest.mark.parametrize(("world", "per_node", "seed"), [(2, 8, 0), (8, 8, 1), (12, 8, 2), (13, 4, 3), (30, 7, 4)])
def test_exchange_closed_form_matches_the_sum_over_every_pair(world, per_node, seed):
    rng = random.Random(seed)
    profile = attrs.evolve(H100_NCCL, ranks_per_node=per_node)
    u = tuple(rng.choice([0.0, rng.uniform(0, 1e6)]) for _ in range(world))
    v = tuple(rng.choice([0.0, rng.uniform(0, 1e6)]) for _ in range(world))
    us, max_sent = _Network(profile, world).exchange(_Exchange(u, v))

    def beta(s, p):
        return profile.beta_us_per_byte(s, p)

    worst = 0.0
    for r in range(world):
        send = sum((u[r] + v[p]) * beta(r, p) for p in range(world) if p != r)
        recv = sum((u[s] + v[r]) * beta(s, r) for s in range(world) if s != r)
        worst = max(worst, send, recv)
    expected = profile.coll_alpha_us + profile.coll_peer_alpha_us * (world - 1) + worst
    assert us == pytest.approx(expected, rel=1e-9)
    assert max_sent == pytest.approx(max(sum(u[r] + v[p] for p in range(world) if p != r) for r in range(world)))


def test_ring_all_reduce_uses_the_slow_link_once_it_spans_nodes():
    one_node = _Network(H100_NCCL, 8).ring_all_reduce(8e6)
    two_nodes = _Network(H100_NCCL, 16).ring_all_reduce(8e6)
    p = H100_NCCL
    assert one_node == pytest.approx(p.coll_alpha_us + 14 * (p.coll_peer_alpha_us + 1e6 / (p.net_bw_gbps * 1e3)))
    assert two_nodes == pytest.approx(
        p.coll_alpha_us + 30 * (p.coll_peer_alpha_us + 0.5e6 / (p.inter_node_bw_gbps * 1e3))
    )
    assert _Network(H100_NCCL, 1).ring_all_reduce(8e6) == 0.0


# -- one step by hand ----------------------------------------------------------------------


def test_one_rank_step_by_hand():
    """One table, one rank: route + lookup + pack + unpack forward, with round profile numbers."""
    profile = attrs.evolve(
        CPU_GLOO,
        mem_bw_gbps=1.0,
        copy_bw_gbps=1.0,
        kernel_launch_us=5.0,
        lookup_overhead_us=15.0,
        update_factor=2.0,
        reference_op_us=100.0,
        reference_lookup_ns=50.0,
        reference_update_ns=200.0,
        reference_byte_ns=1.0,
    )
    table = SimTable("t", "emb", rows=1000, dim=8, pooling_factor=2.0)
    w = Workload("hand", 100, (table,))
    row = simulate(w, profile, 1)
    # 1 GB/s = 1000 bytes/us; copy(x) = 2x / 1000.
    route = 5 + 2 * 100 * (2 * 8 + 4) / 1000  # ids (i64) and lengths (i32) of 100 samples
    # 200 rows of 32 bytes, and the reference lowering's torch passes: per op, per id, per byte.
    lookup = 20 + 100 * 2 * 8 * 4 / 1000 + 100 + (200 * 50 + 200 * 32 * 1.0) / 1000
    pack = unpack = 5 + 2 * 100 * 32 / 1000
    assert row.breakdown.sparse_fwd * 1e3 == pytest.approx(route + lookup + pack + unpack)
    update = 20 + 2 * 100 * 2 * 8 * 4 / 1000 + 100 + (200 * 200 + 200 * 32 * 1.0) / 1000
    assert row.breakdown.sparse_bwd * 1e3 == pytest.approx(pack + unpack + update)
    assert row.exchange_ms == 0.0 and row.hidden_ms == 0.0
    assert row.breakdown.other_fwd == row.breakdown.other_bwd == row.breakdown.other == 0.0


# -- sanity of the projection --------------------------------------------------------------


@pytest.mark.parametrize("name", ["dlrm-kaggle", "dlrm-terabyte", "two-tower"])
def test_breakdown_sums_to_the_step_and_throughput_follows(workloads, name):
    w = workloads[name]
    for row in sweep(w, H100_NCCL, [1, 2, *POWERS]).rows:
        parts = [getattr(row.breakdown, k) for k in STAGES]
        assert all(x >= 0 for x in parts)
        assert sum(parts) == pytest.approx(row.step_ms)
        assert row.samples_per_s == pytest.approx(row.world_size * w.batch / (row.step_ms / 1e3))
        assert 0 <= row.exchange_ms <= row.breakdown.sparse_fwd + row.breakdown.sparse_bwd + 1e-12
        assert sum(row.placements.values()) == len(w.tables)
        assert row.nodes == -(-row.world_size // 8)


@pytest.mark.parametrize("profile", ["h100-nccl", "h200-nccl", "cpu-gloo"])
@pytest.mark.parametrize("batch", [256, 2048])
@pytest.mark.parametrize("name", ["dlrm-kaggle", "dlrm-terabyte", "two-tower"])
def test_weak_scaling_step_time_never_falls_as_ranks_grow(workloads, name, batch, profile):
    rows = sweep(workloads[name].with_batch(batch), BUILTIN_PROFILES[profile], MIXED).rows
    steps = [r.step_ms for r in rows]
    assert steps == sorted(steps), list(zip(MIXED, steps))


def test_sparse_exchange_share_grows_with_the_world(workloads):
    for name in ("dlrm-kaggle", "dlrm-terabyte", "two-tower"):
        rows = {r.world_size: r for r in sweep(workloads[name], H100_NCCL, POWERS).rows}
        assert rows[8].exchange_share < rows[64].exchange_share < rows[4096].exchange_share
        assert rows[4096].exchange_share > 0.5  # at 512 nodes the exchange dominates
    # With a placement whose shape does not change (every table row-wise over every rank) on full
    # nodes, the share rises at every step.
    full_nodes = [n for n in MIXED if n % 8 == 0]
    rows = sweep(_big_tables_workload(), H100_NCCL, full_nodes, SimOptions(sharding="row_wise")).rows
    assert all(r.placements["row_wise"] == 8 for r in rows)
    shares = [r.exchange_share for r in rows]
    assert shares == sorted(shares)


def _double_bandwidths(profile, which=("mem_bw_gbps", "copy_bw_gbps", "net_bw_gbps", "inter_node_bw_gbps")):
    return attrs.evolve(profile, **{f: 2 * getattr(profile, f) for f in which})


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(["dlrm-kaggle", "dlrm-terabyte", "two-tower"]),
    profile=st.sampled_from(sorted(BUILTIN_PROFILES)),
    world=st.sampled_from([1, 2, 8, 12, 64, 100, 512, 4096]),
    batch=st.sampled_from([16, 512, 2048]),
    hiding=st.booleans(),
    aggregate=st.booleans(),
    which=st.sets(st.sampled_from(["mem_bw_gbps", "copy_bw_gbps", "net_bw_gbps", "inter_node_bw_gbps"]), min_size=1),
)
def test_more_bandwidth_never_slows_the_step(workloads, name, profile, world, batch, hiding, aggregate, which):
    w = workloads[name].with_batch(batch)
    options = SimOptions(latency_hiding=hiding, aggregate_comm=aggregate)
    base = BUILTIN_PROFILES[profile]
    slow = simulate(w, base, world, options)
    every = simulate(w, _double_bandwidths(base), world, options)
    some = simulate(w, _double_bandwidths(base, tuple(which)), world, options)
    assert every.step_ms <= slow.step_ms * (1 + 1e-12)
    assert some.step_ms <= slow.step_ms * (1 + 1e-12)


@pytest.mark.parametrize("profile", sorted(BUILTIN_PROFILES))
def test_one_big_node_is_never_slower_than_nodes_of_eight(workloads, profile):
    base = BUILTIN_PROFILES[profile]
    for name, w in workloads.items():
        for world in [8, 12, 16, 64, 512, 4096]:
            eight = simulate(w, attrs.evolve(base, ranks_per_node=8), world)
            one_node = simulate(w, attrs.evolve(base, ranks_per_node=world), world)
            assert one_node.nodes == 1
            assert one_node.step_ms <= eight.step_ms * (1 + 1e-12), (name, world)
            if world > 8:
                assert one_node.step_ms < eight.step_ms  # the inter-node link is the slow one


def test_latency_hiding_and_aggregation_never_hurt(workloads):
    for w in workloads.values():
        for world in [2, 8, 64, 4096]:
            best = simulate(w, H100_NCCL, world)
            assert best.step_ms <= simulate(w, H100_NCCL, world, SimOptions(latency_hiding=False)).step_ms
            assert best.step_ms <= simulate(w, H100_NCCL, world, SimOptions(aggregate_comm=False)).step_ms
            assert best.forward_overlap in ("input", "output")


def test_world_size_one_has_no_communication(workloads):
    row = simulate(workloads["dlrm-kaggle"], H100_NCCL, 1)
    assert row.exchange_ms == row.hidden_ms == row.dense_allreduce_ms == row.max_exchange_bytes == 0.0
    assert row.placements["table_wise"] == 26 and row.forward_overlap == "none"


def test_world_size_limits():
    w = Workload("m", 8, (SimTable("t", "emb", rows=10, dim=4),))
    for bad in (0, -3, 1 << 20):
        with pytest.raises(ValueError, match="world size"):
            simulate(w, H100_NCCL, bad)


# -- calibration and world-size lists ------------------------------------------------------


def test_calibration_overrides_profile_fields(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"mem_bw_gbps": 900.5, "coll_alpha_us": 22, "ranks_per_node": 4.0}))
    fitted = calibrated(H100_NCCL, load_calibration(path))
    assert (fitted.mem_bw_gbps, fitted.coll_alpha_us, fitted.ranks_per_node) == (900.5, 22, 4)
    assert fitted.net_bw_gbps == H100_NCCL.net_bw_gbps and fitted.name == "h100-nccl"
    # A planner plan record carries its fitted profile under fit.profile.
    record = tmp_path / "plan.json"
    record.write_text(json.dumps({"key": "k", "pipeline": [], "fit": {"profile": {"flops_per_s": 5e13}}}))
    assert calibrated(H100_NCCL, load_calibration(record)).flops_per_s == 5e13


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"mem_bw": 1}', "unknown field 'mem_bw'"),
        ('{"net_bw_gbps": -1}', "must be a positive number"),
        ('{"ranks_per_node": 2.5}', "positive integer"),
        ("[1, 2]", "JSON object"),
        ("{not json", "not valid JSON"),
    ],
)
def test_bad_calibration_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "fit.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        calibrated(H100_NCCL, load_calibration(path))
    with pytest.raises(ValueError, match="cannot read"):
        load_calibration(tmp_path / "missing.json")


def test_parse_world_sizes():
    assert parse_world_sizes("8,16,...,4096") == tuple(POWERS)
    assert parse_world_sizes("8,...,64") == (8, 16, 32, 64)
    assert parse_world_sizes("4,12,...,108") == (4, 12, 36, 108)
    assert parse_world_sizes(" 64, 8,8 ") == (8, 64)
    for bad, message in [
        ("", "bad sweep"),
        ("8,,16", "bad sweep"),
        ("8,x", "'x' is not a world size"),
        ("8,-16", "not a world size"),
        ("0,8", "at least 1"),
        ("8,16,...,100", "does not reach 100"),
        ("8,12,...,64", "no integer ratio"),
        ("...,64", "needs a world size"),
        ("8,...", "needs a world size"),
        ("8,131072", "above the simulated maximum"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_world_sizes(bad)


def test_result_json_and_table_say_simulated(workloads):
    result = sweep(workloads["dlrm-kaggle"], H100_NCCL, [64, 8], cost_source="h100-nccl profile values")
    data = json.loads(json.dumps(result.to_json()))
    assert data["simulated"] is True
    assert {"model", "profile", "rows", "cost_source", "profile_fields", "ranks_per_node", "batch_per_rank"} <= set(
        data
    )
    assert [r["world_size"] for r in data["rows"]] == [8, 64]
    for r in data["rows"]:
        assert {"world_size", "step_ms", "breakdown", "samples_per_s", "exchange_share"} <= set(r)
        assert set(r["breakdown"]) == set(STAGES)
    table = format_table(result)
    assert table.startswith("SIMULATED")
    assert "h100-nccl profile values" in table
