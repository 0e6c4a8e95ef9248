"""`annotate-cost`: a `#sched.cost` on every op, the step total as the critical path, profiles."""

from __future__ import annotations

import json

import attrs
import pytest
from test_srsv import SMALL, context, parse  # tests/passes is on sys.path (rootdir-relative import)
from xdsl.dialects.builtin import IntAttr, StringAttr
from xdsl.utils.exceptions import PassFailedException

from sparselift.ir.coll import AllToAllOp
from sparselift.ir.sched import CostAttr, DenseOp
from sparselift.passes import get_all_passes
from sparselift.passes.annotate_cost import AnnotateCost, annotate_step
from sparselift.passes.profiles import BUILTIN_PROFILES, CPU_GLOO, H100_NCCL, HardwareProfile, load_profile
from sparselift.passes.srsv import build_srsv, steps_of


def annotated(text: str = SMALL, profile: str = "cpu-gloo"):
    module = parse(text)
    AnnotateCost(profile=profile).apply(context(), module)
    module.verify()
    return module, steps_of(module)[0]


def a2a(step, role):
    return next(op for op in step.walk() if isinstance(op, AllToAllOp) and op.role.role_list == [role])


def test_every_op_gets_a_cost_and_nothing_is_deleted():
    before = [op.name for op in steps_of(parse(SMALL))[0].walk()]
    module, step = annotated()
    after = [op.name for op in step.walk()]
    assert after == before
    for op in step.walk():  # the step included
        assert isinstance(op.attributes.get("cost"), CostAttr), op.name
    lookup = next(op for op in step.walk() if op.name == "sparse.lookup")
    # t0: 16 rows of 32 B gathered.
    assert (lookup.attributes["cost"].bytes.data, lookup.attributes["cost"].lookups.data) == (512, 16)
    assert lookup.attributes["cost"].est_us.data > CPU_GLOO.kernel_launch_us
    # The annotated IR prints and parses back.
    assert str(parse(str(module))) == str(module)


def test_collective_cost_is_alpha_plus_beta_times_bytes_and_grows_with_bytes():
    _, step = annotated()
    pooled = a2a(step, "output_pooled").attributes["cost"]
    lengths = a2a(step, "input_lengths").attributes["cost"]
    # Rank 1 sends the most: 256 B to rank 0 (one peer message).
    assert pooled.bytes.data == 256
    expected = CPU_GLOO.coll_alpha_us + CPU_GLOO.coll_peer_alpha_us + 256 / (CPU_GLOO.net_bw_gbps * 1e3)
    assert pooled.est_us.data == pytest.approx(expected, abs=1e-3)
    assert lengths.bytes.data == 16 and lengths.est_us.data < pooled.est_us.data
    # The same collective at 100x the batch moves 100x the bytes and costs more.
    _, big = annotated(SMALL.replace('batch = "4"', 'batch = "400"'))
    big_pooled = a2a(big, "output_pooled").attributes["cost"]
    assert big_pooled.bytes.data == 100 * 256
    assert big_pooled.est_us.data > pooled.est_us.data


def test_step_total_is_the_serial_critical_path():
    # One compute stream per rank: the total is the longest path once ops run in program order,
    # which is at least the fully overlapped lower bound.
    _, step = annotated()
    total = step.attributes["cost"]
    assert isinstance(total, CostAttr)
    view = build_srsv(step)
    length, path = view.critical_path(serial=True)
    assert length >= view.critical_path()[0]
    assert total.est_us.data == pytest.approx(length, abs=1e-3)
    assert total.est_us.data == pytest.approx(sum(op.attributes["cost"].est_us.data for op in path), abs=1e-2)
    # The step's bytes and lookups sum those of its ops.
    ops = [op for op in step.walk() if op is not step]
    assert total.bytes.data == pytest.approx(sum(op.attributes["cost"].bytes.data for op in ops), abs=len(ops))
    assert total.lookups.data == 2 * (16 + 24)  # every row is looked up and updated once


def test_dense_flops_attribute_is_read():
    module = parse(SMALL)
    step = steps_of(module)[0]
    fwd = next(op for op in step.walk() if isinstance(op, DenseOp) and op.phase.data == "forward")
    bwd = next(op for op in step.walk() if isinstance(op, DenseOp) and op.phase.data == "backward")
    fwd.attributes["flops"] = IntAttr(9_000_000)
    bwd.attributes["flops"] = StringAttr("18000000")
    base = annotate_step(steps_of(parse(SMALL))[0], CPU_GLOO)
    total = annotate_step(step, CPU_GLOO)
    assert fwd.attributes["cost"].est_us.data == pytest.approx(9e6 / CPU_GLOO.flops_per_s * 1e6, abs=1e-3)
    assert bwd.attributes["cost"].est_us.data == pytest.approx(2 * fwd.attributes["cost"].est_us.data, abs=1e-3)
    assert total == pytest.approx(base + 3 * fwd.attributes["cost"].est_us.data, abs=1e-2)


def test_profiles_give_different_totals():
    totals = {}
    for name in ("cpu-gloo", "h100-nccl", "h200-nccl"):
        _, step = annotated(profile=name)
        totals[name] = step.attributes["cost"].est_us.data
    assert totals["cpu-gloo"] != totals["h100-nccl"]
    assert totals["h100-nccl"] < totals["cpu-gloo"]
    assert totals["h200-nccl"] <= totals["h100-nccl"]


def test_profiles_load_from_json(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(H100_NCCL.to_json())
    assert load_profile(str(path)) == H100_NCCL
    assert HardwareProfile.from_dict(json.loads(CPU_GLOO.to_json())) == CPU_GLOO
    # Missing fields come from cpu-gloo; the name defaults to the file's stem.
    path.write_text(json.dumps({"net_bw_gbps": 10.0, "ranks_per_node": 4}))
    mine = load_profile(path)
    assert mine == attrs.evolve(CPU_GLOO, name="mine", net_bw_gbps=10.0, ranks_per_node=4)
    # As the pass option.
    _, step = annotated(profile=str(path))
    _, ref = annotated(profile="cpu-gloo")
    assert step.attributes["cost"].est_us.data < ref.attributes["cost"].est_us.data
    for name, profile in BUILTIN_PROFILES.items():
        assert load_profile(name) is profile and profile.name == name


def test_profile_errors(tmp_path):
    bad_field = tmp_path / "bad_field.json"
    bad_field.write_text(json.dumps({"mem_bw_gbps": 5, "nic_gbps": 3}))
    with pytest.raises(ValueError, match="unknown field 'nic_gbps'"):
        load_profile(bad_field)
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{mem_bw_gbps: 5")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_profile(bad_json)
    not_object = tmp_path / "list.json"
    not_object.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        load_profile(not_object)
    bad_value = tmp_path / "neg.json"
    bad_value.write_text(json.dumps({"copy_bw_gbps": -1}))
    with pytest.raises(ValueError, match="copy_bw_gbps"):
        load_profile(bad_value)
    with pytest.raises(ValueError, match="unknown hardware profile 'tpu-v9'.*cpu-gloo"):
        load_profile("tpu-v9")
    with pytest.raises(PassFailedException, match="annotate-cost: unknown hardware profile 'tpu-v9'"):
        annotated(profile="tpu-v9")


def test_world_size_one_and_registry():
    assert set(get_all_passes()) >= {"lift-sparse", "print-srsv", "annotate-cost"}
    assert get_all_passes()["annotate-cost"]() is AnnotateCost
    single = """
    sched.step @one world_size = 1 outputs = 1 attributes {batch = "8"} {
    ^bb0(%ids: tensor<?xi64>, %off: tensor<?xi64>):
      %p = sparse.embedding_bag_collection "emb" ids(%ids : tensor<?xi64>) offsets(%off : tensor<?xi64>) tables = [#sparse.table<"t", rows = 10, dim = 4, f32, sum>] features = [#sparse.feature<"f" -> "t", pooling_factor = 2.0>] placements = [#sparse.placement<"t", table_wise, rank = 0>] -> tensor<?x4xf32>
      %out = sched.dense @top(%p) phase "forward" : (tensor<?x4xf32>) -> tensor<?xf32>
      sched.yield %out : tensor<?xf32>
    } backward {
    ^bb0(%g: tensor<?xf32>):
      %gp = sched.dense @top(%g) phase "backward" : (tensor<?xf32>) -> tensor<?x4xf32>
      sched.yield
    }
    """
    from sparselift.passes.lift_sparse import LiftSparse

    module = parse(single)
    LiftSparse().apply(context(), module)
    AnnotateCost().apply(context(), module)
    step = steps_of(module)[0]
    view = build_srsv(step)
    assert view.collectives == ()
    # 8 bags x 2 ids, 16 B rows.
    assert view.table("t").lookups_per_rank == 16 and view.table("t").bytes_gathered == 256
    assert all("cost" in op.attributes for op in step.walk())
    assert step.attributes["cost"].est_us.data > 0


def test_reannotation_overwrites_estimates_and_keeps_measurements():
    module = parse(SMALL)
    step = steps_of(module)[0]
    lookup = next(op for op in step.walk() if op.name == "sparse.lookup")
    lookup.attributes["cost"] = CostAttr(1, 2, 3.0, measured_us=42.0)
    AnnotateCost().apply(context(), module)
    first = str(module)
    assert lookup.attributes["cost"].measured == 42.0
    assert lookup.attributes["cost"].bytes.data == 512
    AnnotateCost().apply(context(), module)
    assert str(module) == first
    AnnotateCost(profile="h100-nccl").apply(context(), module)
    assert lookup.attributes["cost"].measured == 42.0
    assert lookup.attributes["cost"].est_us.data == pytest.approx(13.0, abs=1e-3)
