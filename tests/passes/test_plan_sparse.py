"""`plan-sparse`: candidates, analytic predictions, constraints, deterministic search, replay, records."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
from test_srsv import context, parse  # tests/passes is on sys.path (rootdir-relative import)
from xdsl.utils.exceptions import PassFailedException, VerifyException

import sparselift.passes.plan_candidates as pc
from sparselift.ir.sched import RemarkAttr
from sparselift.ir.sparse import FusedTableOp
from sparselift.passes.aggregate_comm import AggregateComm
from sparselift.passes.annotate_cost import annotate_step, op_cost
from sparselift.passes.cost_model import op_terms
from sparselift.passes.generate_kernels import GenerateKernels
from sparselift.passes.hide_latency import HideLatency
from sparselift.passes.lift_sparse import LiftSparse
from sparselift.passes.parallelize_tables import ParallelizeTables
from sparselift.passes.pipeline import parse_pipeline, pass_spec, pipeline_text, run_pipeline
from sparselift.passes.plan_candidates import (
    Candidate,
    Decision,
    PlanOptions,
    decision,
    enumerate_candidates,
    with_change,
)
from sparselift.passes.plan_predict import Prediction, Predictor, check_candidate, predict
from sparselift.passes.plan_search import AnalyticConfirmer, search
from sparselift.passes.plan_sparse import PlanSparse
from sparselift.passes.profiles import CPU_GLOO
from sparselift.passes.remarks import remark, remarks_of
from sparselift.passes.srsv import Sizer, build_srsv, steps_of
from sparselift.plan_record import Measurement, PlanRecord

INPUTS = Path(__file__).resolve().parents[1] / "filecheck" / "inputs"
# The tests use the two optimizations that are finished; the others join as they land.
FAMILIES = ("aggregation", "codegen")


def lifted(name: str = "two-tower-ws2"):
    module = parse((INPUTS / f"{name}.mlir").read_text())
    run_pipeline(module, (LiftSparse(),), context())
    return module


def test_plans_are_pass_objects_and_text_only_at_the_edges():
    # Text -> typed passes (xDSL's pass specs) -> text: options are fields, defaults left out.
    plan = parse_pipeline(
        "aggregate-comm{roles=input,grad_pooled max-bytes=5},generate-kernels,hide-latency{backward=false}"
    )
    assert plan == (
        AggregateComm(roles=("input", "grad_pooled"), max_bytes=5),
        GenerateKernels(),
        HideLatency(backward=False),
    )
    assert parse_pipeline(pipeline_text(plan)) == plan and parse_pipeline("") == ()
    assert pass_spec(HideLatency(forward=True, backward=True)) == "hide-latency"
    # Unknown passes and ill-typed options are clear errors, with the pipeline they came from.
    with pytest.raises(ValueError, match=r"pipeline 'generate-kernel': unknown pass 'generate-kernel'; known: "):
        parse_pipeline("generate-kernel")
    with pytest.raises(ValueError, match=r"Incompatible types: given \('two',\), expected <class 'int'>"):
        parse_pipeline("parallelize-tables{groups=two}")
    # A change replaces the same pass, else goes where its family belongs (the paper's order).
    plan = with_change((GenerateKernels(),), AggregateComm(roles=("input",)))
    assert plan == (AggregateComm(roles=("input",)), GenerateKernels())
    assert with_change(plan, AggregateComm(roles=("input", "grad_pooled"))) == (
        AggregateComm(roles=("input", "grad_pooled")),
        GenerateKernels(),
    )


def test_candidates_per_family_relative_to_the_incumbent(monkeypatch):
    module = lifted()
    cands = enumerate_candidates(module, PlanOptions(families=FAMILIES))
    roles = [c.label for c in cands if c.family == "aggregation"]
    assert "aggregate output_pooled" in roles and "aggregate grad_pooled" in roles
    assert [c.change for c in cands if c.family == "codegen"] == [GenerateKernels()]
    # Relative to an incumbent that aggregates output_pooled: the next role adds to it (the
    # incumbent's pass with another role: its other fields kept).
    inc = (AggregateComm(roles=("output_pooled",), max_bytes=7),)
    nxt = [
        c
        for c in enumerate_candidates(module, PlanOptions(families=("aggregation",)), inc)
        if c.label == "aggregate grad_pooled"
    ][0]
    assert nxt.change == AggregateComm(roles=("output_pooled", "grad_pooled"), max_bytes=7)
    assert nxt.pipeline == (nxt.change,)
    # A memory cap is handed to the pass as its byte limit.
    capped = enumerate_candidates(module, PlanOptions(memory_cap_bytes=64, families=("aggregation",)))
    assert capped and all(c.change.max_bytes == 64 for c in capped)
    # Reference kernels requested: code generation is a candidate that cannot be tried, with the reason.
    ref = enumerate_candidates(module, PlanOptions(allow_generated=False, families=("codegen",)))
    assert [(c.available, c.reason) for c in ref] == [
        (False, "disabled: reference kernels requested (kernels='reference')")
    ]
    # A pass missing from the registry is an unavailable optimization, not an error.
    registry = {k: v for k, v in pc.registered_passes().items() if k != "parallelize-tables"}
    monkeypatch.setattr(pc, "registered_passes", lambda: registry)
    par = enumerate_candidates(module, PlanOptions(families=("parallelism",)))
    assert [(c.available, c.reason) for c in par] == [
        (False, "unavailable: pass 'parallelize-tables' is not registered")
    ]


def test_a_directions_pooled_and_rows_roles_are_also_proposed_together():
    # Where the step exchanges both pooled vectors and unpooled rows (padded rows: static splits),
    # the planner also proposes each direction's two roles at once: with one group of each, either
    # role alone would change nothing.
    module = lifted("sequence-ws2")
    cands = {c.label: c for c in enumerate_candidates(module, PlanOptions(families=("aggregation",)))}
    pair = cands["aggregate output_pooled+output_rows"]
    assert pair.change == AggregateComm(roles=("output_pooled", "output_rows"))
    assert cands["aggregate grad_pooled+grad_rows"].change == AggregateComm(roles=("grad_pooled", "grad_rows"))
    applied = Predictor(module, context()).apply(pair.pipeline).module
    merged = [o for o in applied.walk() if o.name == "coll.all_to_all" and len(o.role.role_list) > 1]
    assert [o.role.role_list for o in merged] == [["output_rows", "output_pooled"]]
    # Once either role is in the incumbent, the pair is not proposed again (the other role alone is).
    inc = (AggregateComm(roles=("output_pooled",)),)
    labels = [c.label for c in enumerate_candidates(module, PlanOptions(families=("aggregation",)), inc)]
    assert "aggregate output_rows" in labels and not any("+output_rows" in label for label in labels)
    # A step without unpooled rows gets no pairs.
    assert not any("+" in c.label for c in enumerate_candidates(lifted(), PlanOptions(families=("aggregation",))))


def test_latency_hiding_schedules_include_one_dense_all_reduce_after_backward():
    # Overlapping the dense gradients' all-reduce with backward is itself a measured choice.
    cands = enumerate_candidates(lifted(), PlanOptions(families=("latency-hiding",)))
    assert [c.change for c in cands] == [
        HideLatency(forward=True, backward=False),
        HideLatency(forward=False, backward=True),
        HideLatency(forward=True, backward=True),
        HideLatency(forward=True, backward=True, dense_grads=False),
    ]
    assert len({predict(lifted(), c.pipeline, CPU_GLOO).text_hash for c in cands}) == 4  # four distinct schedules


def test_cost_terms_add_up_to_annotate_cost():
    # The categories the runtime planner fits must be annotate-cost's estimate, split.
    module = lifted()
    for step in steps_of(module):
        view = build_srsv(step)
        sizer = Sizer(view.world_size, view.batch)
        for op in view.graph.nodes:
            want = op_cost(op, view, CPU_GLOO, sizer).est_us
            terms = op_terms(op, view, CPU_GLOO, sizer).as_dict()
            assert sum(terms.values()) == pytest.approx(want, rel=1e-9, abs=1e-9), op.name


def test_prediction_of_t0_is_annotate_costs_step_estimate_and_codegen_saves_launches():
    module = lifted()
    t0 = predict(module, (), CPU_GLOO)
    clone = module.clone()
    want = sum(annotate_step(step, CPU_GLOO) for step in steps_of(clone))
    assert t0.est_us == pytest.approx(want, abs=1e-2)
    assert sum(v for _, v in t0.breakdown) == pytest.approx(t0.est_us, abs=1e-2)
    gen = predict(module, (GenerateKernels(),), CPU_GLOO)
    # A fused kernel still gathers its tables' rows: it saves per-table launches and overheads,
    # and the reference lowering's torch passes.
    saved = t0.est_us - gen.est_us
    assert t0.category("reference") > 0 and gen.category("reference") == 0
    assert t0.category("reference") < saved < t0.category("reference") + t0.category("fixed")
    assert gen.category("gather") == pytest.approx(t0.category("gather"), rel=1e-6)
    assert gen.text_hash != t0.text_hash and module.is_structurally_equivalent(lifted())  # module untouched
    assert any(isinstance(op, FusedTableOp) for op in Predictor(module).apply((GenerateKernels(),)).module.walk())


def test_tiny_memory_cap_rejects_aggregation_with_the_pass_reason():
    result = search(Predictor(lifted()), PlanOptions(memory_cap_bytes=1, families=FAMILIES))
    rejected = {d.label: d.reason for d in result.decisions if not d.accepted}
    assert rejected["aggregate output_pooled"] == (
        "aggregate-comm refused (max-bytes): not merged: the merged buffer would hold 6144 bytes, over max-bytes 1"
    )
    assert "over max-bytes 1" in rejected["aggregate grad_pooled"]
    # Only the replicated table's gradient riding with the dense ones stays: it adds no buffer.
    assert [p.roles for p in result.pipeline if isinstance(p, AggregateComm)] == [("dense_grad",)]


def test_refusal_comes_from_the_candidates_own_pass_remarks():
    # Three remarks in an IR that the candidate left unchanged: one of its own pass, one of
    # another pass, and one its pass had left on the incumbent already. Only the first counts.
    own = RemarkAttr("aggregate-comm", "dependency", "not merged: the collectives depend on each other")
    other = RemarkAttr("hide-latency", "no-overlap", "aggregate-comm: nothing independent")
    old = RemarkAttr("aggregate-comm", "max-bytes", "not merged: over max-bytes 1")
    change = AggregateComm(roles=("sparse_grad",))
    cand = Candidate("aggregation", "aggregate sparse_grad", change, (change,))
    incumbent = Prediction((), 10.0, (), "h", (old,))
    pred = Prediction((change,), 10.0, (), "h", (other, own, old))
    reason = check_candidate(cand, pred, incumbent, PlanOptions())
    assert reason == "aggregate-comm refused (dependency): not merged: the collectives depend on each other"
    # Another pass's remark (even one whose text starts with the name) is no refusal of this pass.
    reason = check_candidate(cand, Prediction((change,), 10.0, (), "h", (other, old)), incumbent, PlanOptions())
    assert reason == 'no effect: aggregate-comm{roles="sparse_grad"} left the IR unchanged (nothing to rewrite)'


def test_remarks_of_reads_the_structured_remarks_of_a_run():
    module = lifted()
    run_pipeline(module, (AggregateComm(max_bytes=1),), context())
    found = remarks_of(module)
    assert found and found == remarks_of(module.clone())
    assert {(r.pass_name.data, r.check.data) for r in found} == {("aggregate-comm", "max-bytes")}
    assert len(set(found)) == len(found)  # hashable, without repeats
    with pytest.raises(VerifyException, match="kebab-case, got 'max bytes'"):
        remark(next(iter(module.walk())), "aggregate-comm", "max bytes", "why")


def test_tiny_memory_cap_rejects_parallelism_for_its_workspace():
    # Enough lanes allowed: only the cap on the lanes' concurrent workspace stands in the way.
    result = search(Predictor(lifted()), PlanOptions(memory_cap_bytes=1, max_lanes=8, families=("parallelism",)))
    parallel = [d for d in result.decisions if d.family == "parallelism"]
    assert parallel and not any(d.accepted for d in parallel)
    for d in parallel:
        assert d.reason.startswith("memory cap: parallel workspace ") and d.reason.endswith("> memory-cap-bytes 1")
    assert not any(isinstance(p, ParallelizeTables) for p in result.pipeline)


def test_lane_limit_rejects_parallelism_before_applying_it():
    result = search(Predictor(lifted()), PlanOptions(max_lanes=1, families=("parallelism",)))
    reasons = {d.reason for d in result.decisions}
    assert result.pipeline == ()
    assert reasons and all(r.startswith("lane limit:") or r.startswith("unavailable") for r in reasons)


def test_search_is_deterministic_and_orders_by_predicted_gain():
    a = search(Predictor(lifted()), PlanOptions(families=FAMILIES))
    b = search(Predictor(lifted()), PlanOptions(families=FAMILIES))
    assert a == b
    assert a.pipeline[-1] == GenerateKernels()
    agg = [p for p in a.pipeline if isinstance(p, AggregateComm)][0]
    assert "output_pooled" in agg.roles and "grad_pooled" in agg.roles
    # Accepted aggregation roles come in order of predicted gain (most negative first).
    gains = [d.predicted_us for d in a.decisions if d.accepted and d.family == "aggregation"]
    assert gains == sorted(gains) and all(g < 0 for g in gains)


class ScriptedConfirmer(AnalyticConfirmer):
    """Confirms with fixed 'measured' step times: the search follows the measurements."""

    def __init__(self, times: dict[str, float]):
        self.times = times  # by plan text

    def confirm(self, family, incumbent, variants, incumbent_prediction):
        f0 = self.times.get(pipeline_text(incumbent), 100.0)
        out = []
        for cand, pred in variants:
            f1 = self.times.get(pipeline_text(cand.pipeline), f0)
            ok = f1 < f0 and not any(d.accepted for d in out)
            out.append(decision(cand, ok, "scripted", pred.est_us - incumbent_prediction.est_us, measured_us=f1 - f0))
        return out


def test_same_measurements_give_the_same_plan():
    times = {"generate-kernels": 90.0}  # aggregation measured as no gain, code generation as a gain
    runs = [search(Predictor(lifted()), PlanOptions(families=FAMILIES), ScriptedConfirmer(times)) for _ in range(2)]
    assert runs[0] == runs[1]
    assert runs[0].pipeline == (GenerateKernels(),)


def test_decisions_replay_applies_exactly_those_specs(tmp_path):
    plan = (AggregateComm(roles=("grad_pooled",)), GenerateKernels())
    path = tmp_path / "decisions.json"
    record = PlanRecord(key="k", pipeline=plan)
    path.write_text(record.to_json())
    assert json.loads(path.read_text())["pipeline"] == ['aggregate-comm{roles="grad_pooled"}', "generate-kernels"]
    replayed = lifted()
    PlanSparse(decisions=str(path)).apply(context(), replayed)
    direct = lifted()
    run_pipeline(direct, plan, context())
    assert parse_pipeline(replayed.attributes["plan"].data) == plan
    del replayed.attributes["plan"]
    assert str(replayed) == str(direct)
    # A bare {"pipeline": [...]} works too; a pass that does not exist is a clear error.
    path.write_text(json.dumps({"pipeline": ["no-such-pass"]}))
    with pytest.raises(PassFailedException, match="decisions .*: pipeline 'no-such-pass': unknown pass 'no-such-pass'"):
        PlanSparse(decisions=str(path)).apply(context(), lifted())


def test_plan_record_round_trips_and_explains_every_decision(tmp_path):
    cand = Candidate("codegen", "generated kernels", GenerateKernels(), (GenerateKernels(),))
    accepted = decision(
        cand,
        True,
        "measured increment -3.00 ms beyond noise 0.50 ms",
        -120.0,
        measured_us=-3000.0,
        incumbent_us=20000.0,
        candidate_us=17000.0,
        noise_us=500.0,
    )
    rejected = Decision(
        "aggregation",
        "aggregate input",
        AggregateComm(roles=("input",), max_bytes=1),
        (),
        False,
        "aggregate-comm refused (max-bytes): input exchanges not merged: over max-bytes 1",
    )
    record = PlanRecord(
        key="abc",
        key_fields={"world_size": "2"},
        pipeline=(GenerateKernels(),),
        kernels="generated",
        decisions=(rejected, accepted),
        measurements=(Measurement("", 20000.0, 500.0, (20000.0, 20500.0)),),
        fit={"points": 2, "residual_us": 10.0, "fitted": {"launch_us": 7.0}},
        calibration_s=1.25,
        budget_s=30.0,
        incumbent_us=20000.0,
        final_us=17000.0,
        created="now",
    )
    path = tmp_path / "r.json"
    path.write_text(record.to_json())
    assert PlanRecord.load(path) == record
    text = record.explain()
    assert "pipeline: generate-kernels" in text and "codegen: generated kernels" in text
    # The predicted increment's +- is sqrt 2 x the fit's 10 us residual; the measured one's its s.e.
    assert "predicted -0.120 +- 0.01 | measured -3.00 +- 0.50" in text
    assert "aggregate-comm refused (max-bytes): input exchanges not merged: over max-bytes 1" in text
    assert "calibration: 1.25 s of a 30 s budget" in text and "T0 20.00 ms -> chosen 17.00 ms" in text
    with pytest.raises(ValueError, match="not a plan record"):
        PlanRecord.from_json("[1, 2]")


def test_pass_failures_are_clear():
    with pytest.raises(PassFailedException, match="unknown hardware profile 'nope'"):
        PlanSparse(profile="nope").apply(context(), lifted())
    with pytest.raises(PassFailedException, match="unknown optimization 'sharding'"):
        PlanSparse(optimizations=("sharding",)).apply(context(), lifted())


class GainsPredictor:
    """The real predictor's IR checks, with scripted step times: T0 is 1000 us and each pass
    in a plan takes off its scripted gain, so the families' predicted gains are known."""

    def __init__(self, module, gains: dict[type, float]):
        self.real = Predictor(module)
        self.module = self.real.module
        self.gains = gains

    def predict(self, plan, profile):
        pred = self.real.predict(plan, profile)
        return attrs.evolve(pred, est_us=1000.0 - sum(self.gains.get(type(p), 0.0) for p in plan))


class FamilyOrder(AnalyticConfirmer):
    def __init__(self):
        self.families: list[str] = []

    def confirm(self, family, incumbent, variants, incumbent_prediction):
        if family not in self.families:
            self.families.append(family)
        return super().confirm(family, incumbent, variants, incumbent_prediction)


@pytest.mark.parametrize(
    ("hide", "aggregate", "expected"),
    [
        (60.0, 30.0, ["codegen", "latency-hiding", "aggregation", "parallelism"]),
        (30.0, 60.0, ["codegen", "aggregation", "latency-hiding", "parallelism"]),
    ],
)
def test_after_the_first_family_the_most_promising_goes_next(hide, aggregate, expected):
    # A budget that runs out mid-search should have been spent on the families predicted to gain
    # most: with FAMILIES' fixed order, latency hiding always came last and went untried.
    gains = {GenerateKernels: 100.0, HideLatency: hide, AggregateComm: aggregate}
    order = FamilyOrder()
    result = search(GainsPredictor(lifted(), gains), PlanOptions(families=pc.FAMILIES), order)
    assert order.families == expected
    assert GenerateKernels() in result.pipeline and any(isinstance(p, HideLatency) for p in result.pipeline)


class FamilyStarts(AnalyticConfirmer):
    """Records each `begin_family` call: how many searchable families the search says follow."""

    def __init__(self):
        self.starts: list[int] = []
        self.families: list[str] = []

    def begin_family(self, families_after: int) -> None:
        self.starts.append(families_after)

    def confirm(self, family, incumbent, variants, incumbent_prediction):
        if family not in self.families:
            self.families.append(family)
        return super().confirm(family, incumbent, variants, incumbent_prediction)


def test_each_family_start_counts_only_the_searchable_families_after_it():
    # The measuring confirmer splits its budget evenly between the family it starts and the ones
    # after it; a family with nothing to try (deduplication on a model with no unpooled table)
    # must not take a part it would never spend.
    gains = {GenerateKernels: 100.0, HideLatency: 60.0, AggregateComm: 30.0}
    starts = FamilyStarts()
    search(GainsPredictor(lifted(), gains), PlanOptions(families=pc.FAMILIES), starts)
    assert "deduplication" in pc.FAMILIES and "deduplication" not in starts.families
    assert len(starts.starts) == len(pc.FAMILIES)
    assert starts.starts[0] == len(starts.families) - 1  # codegen first: every searched one follows
    assert starts.starts[-1] == 0
    assert all(a >= b for a, b in zip(starts.starts, starts.starts[1:]))
