"""`plan-sparse{profile=.. memory-cap-bytes=.. max-lanes=.. decisions=.. optimizations=..}`: the planner.

The planner decides which rewrites to apply, with which parameters, to a lifted step. A plan is
an ordered tuple of pass specs appended after `lift-sparse`, one per optimization family, in
the paper's order:

| family          | pass spec                                                      |
|-----------------|----------------------------------------------------------------|
| aggregation     | `aggregate-comm{roles=r1,r2 max-bytes=CAP}`                     |
| parallelism     | `parallelize-tables{groups=G max-workspace-bytes=CAP}`         |
| codegen         | `generate-kernels` (absent: reference kernels)                  |
| latency-hiding  | `hide-latency{forward=.. backward=.. max-inflight-bytes=CAP}`  |

A *candidate* is the incumbent plan with one family's spec added or changed. Each candidate is
applied to a clone of the lifted module and costed with `annotate-cost`'s analytic model (the
step's serial critical path); its *predicted increment* is its estimate minus the incumbent's.
Candidates are tried in order of predicted gain (ties broken by spec string), so the order is
deterministic. A candidate is rejected, with the reason recorded, when its pass is not
registered ("unavailable"), when the pass leaves the IR unchanged (its `remark`s, e.g. the
feasibility check of `aggregate-comm` that refused, or "no effect"), when the result does not
verify (dependency and ordering validity), or when it breaks a constraint: more `sched.parallel`
lanes than `max-lanes`, or more workspace or in-flight bytes than `memory-cap-bytes` (the cap is
also handed to the passes as their own byte limits, so they refuse with their own reason).

Who confirms an accepted candidate is pluggable (`Confirmer`). This pass uses the analytic model
alone (`AnalyticConfirmer`: accept the best predicted gain if it is a gain); the runtime planner
(`sparselift.planner`) confirms by measured lookahead on real batches. Without `decisions` the
pass plans and applies the chosen specs; with `decisions` (a JSON file: a `PlanRecord`, or an
object with a `pipeline` list of specs) it applies exactly those specs, which is how a cached
plan is replayed. Either way the module gets a `plan` attribute (the applied specs) and, when
planning, `plan_rejected` (one "label: reason" string per rejected candidate).

Every per-op price comes from the one cost model, `sparselift.passes.cost_model.op_terms` (split
into its `CATEGORIES`, which the runtime planner fits one scale each): the same figures
`annotate-cost` writes and `simulate` projects with. A fused kernel is charged its work (one
launch, plus its tables' gathers or updates, sized from the IR), so it saves launches, not the
gathers themselves.

No torch here: the runtime planner and `sparselift-opt` share this module.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import attrs
from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.exceptions import PassFailedException

from sparselift.ir.coll import AllReduceStartOp, AllToAllStartOp, WaitOp
from sparselift.ir.sched import ParallelOp, RemarkAttr, StepOp
from sparselift.passes.annotate_cost import annotate_step
from sparselift.passes.cost_model import CATEGORIES, op_terms
from sparselift.passes.pipeline import (
    format_spec,
    join_pipeline,
    load_decisions,
    pass_name,
    spec_options,
    split_pipeline,
)
from sparselift.passes.pipeline import run_pipeline as run_specs
from sparselift.passes.profiles import HardwareProfile, load_profile
from sparselift.passes.registry import plan_passes
from sparselift.passes.remarks import remarks_of
from sparselift.passes.srsv import (
    Sizer,
    TableEntry,
    build_srsv,
    peak_inflight,
    steps_of,
    table_names,
)

FAMILIES = ("codegen", "aggregation", "parallelism", "latency-hiding")
"""The optimization families, in the order the planner decides them: code generation first (it
changes every later measurement the most, e.g. 6x on dlrm-bench, so the subtler families are
measured on fast, steadier steps), latency hiding last (its schedule depends on the rest)."""

PASS_OF = {
    "aggregation": "aggregate-comm",
    "parallelism": "parallelize-tables",
    "codegen": "generate-kernels",
    "latency-hiding": "hide-latency",
}
FAMILY_OF = {v: k for k, v in PASS_OF.items()}
PASS_ORDER = tuple(PASS_OF.values())

# CATEGORIES (from `cost_model`, re-exported): the runtime planner fits one scale per category.

_EPS_US = 1e-6


# --------------------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------------------


@attrs.frozen
class PlanOptions:
    """Constraints and inputs of one planning run."""

    profile: str | HardwareProfile = "cpu-gloo"
    memory_cap_bytes: int = 0  # per rank, workspace and in-flight buffers; 0: no cap
    max_lanes: int = 4  # concurrent lanes (threads or streams) a rank may run
    allow_generated: bool = True  # False: the user asked for reference kernels
    families: tuple[str, ...] = FAMILIES

    def hardware(self) -> HardwareProfile:
        return self.profile if isinstance(self.profile, HardwareProfile) else load_profile(self.profile)


@attrs.frozen
class Candidate:
    """The incumbent plan with one family's pass spec added or changed."""

    family: str
    label: str  # short, human readable: "aggregate output_pooled", "G=4", "generated kernels"
    change: str  # the pass spec this candidate adds or changes
    pipeline: tuple[str, ...]  # the candidate's whole plan (specs after lift-sparse)
    available: bool = True
    reason: str = ""  # why it cannot be tried (unavailable, disabled, lane limit)
    lanes: int = 0  # lanes it asks for (parallelism), 0 when not applicable

    @property
    def spec(self) -> str:
        return join_pipeline(self.pipeline)


@attrs.frozen
class Prediction:
    """The analytic estimate of one plan (pipeline) on one profile."""

    spec: str
    est_us: float  # sum over steps of the serial critical path
    breakdown: tuple[tuple[str, float], ...]  # category -> us along the critical path
    text_hash: str  # of the optimized IR without remarks and costs (detects "no effect")
    remarks: tuple[RemarkAttr, ...] = ()  # `#sched.remark`s in the optimized IR (hashable attributes)
    error: str = ""  # the pipeline failed or the result does not verify
    lanes: int = 0  # most lanes of any sched.parallel
    workspace_bytes: int = 0  # per rank: pooled outputs of tables running in parallel lanes
    inflight_bytes: int = 0  # per rank: most bytes held by async collectives at once

    def category(self, name: str) -> float:
        return dict(self.breakdown).get(name, 0.0)


@attrs.frozen
class Decision:
    """What happened to one candidate: accepted or rejected, predicted vs measured increment."""

    family: str
    label: str
    change: str
    pipeline: tuple[str, ...]
    accepted: bool
    reason: str
    predicted_us: float | None = None  # est(candidate) - est(incumbent); negative is faster
    measured_us: float | None = None  # F(candidate) - F(incumbent), when measured
    incumbent_us: float | None = None  # F(incumbent) in that comparison
    candidate_us: float | None = None  # F(candidate)
    noise_us: float | None = None

    @property
    def spec(self) -> str:
        return join_pipeline(self.pipeline)

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self)
        d["pipeline"] = list(self.pipeline)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        data = dict(data)
        data["pipeline"] = tuple(data.get("pipeline", ()))
        return cls(**data)


# --------------------------------------------------------------------------------------
# Pass specs
# --------------------------------------------------------------------------------------


def with_change(incumbent: Sequence[str], change: str) -> tuple[str, ...]:
    """The incumbent with `change` replacing the spec of the same pass, or inserted in canonical order."""
    name = pass_name(change)
    specs = [s for s in incumbent if pass_name(s) != name] + [change]
    rank = {n: i for i, n in enumerate(PASS_ORDER)}
    return tuple(sorted(specs, key=lambda s: rank.get(pass_name(s), len(rank))))


def registered_passes() -> dict:
    """The passes a plan may name: every pass but `plan-sparse` (a plan never plans again)."""
    return plan_passes()


def run_pipeline(module: ModuleOp, specs: Sequence[str], ctx: Context | None = None) -> None:
    """Apply `specs` (passes of `registered_passes`) to `module` in place."""
    run_specs(module, specs, ctx, registered_passes())


# --------------------------------------------------------------------------------------
# Candidates
# --------------------------------------------------------------------------------------


def _cap_option(options: PlanOptions, key: str) -> dict[str, int]:
    return {key: options.memory_cap_bytes} if options.memory_cap_bytes > 0 else {}


def _table_count(module: ModuleOp) -> int:
    return len(table_names(module.walk()))


def _unavailable(family: str, incumbent: Sequence[str]) -> Candidate:
    name = PASS_OF[family]
    return Candidate(
        family, name, name, tuple(incumbent), available=False, reason=f"unavailable: pass '{name}' is not registered"
    )


def enumerate_candidates(
    module: ModuleOp, options: PlanOptions | None = None, incumbent: Sequence[str] = ()
) -> list[Candidate]:
    """Every candidate change to `incumbent` (pass specs after lift-sparse), family by family.

    `module` is the lifted step (it only sizes the enumeration: the number of tables bounds G).
    Candidates that cannot be tried come back with `available=False` and a reason, so the plan
    can say why an optimization was not taken.
    """
    options = options or PlanOptions()
    registry = registered_passes()
    current = {pass_name(s): s for s in incumbent}
    out: list[Candidate] = []

    def add(family: str, label: str, change: str, **kw) -> None:
        out.append(Candidate(family, label, change, with_change(incumbent, change), **kw))

    for family in options.families:
        name = PASS_OF[family]
        if name not in registry:
            out.append(_unavailable(family, incumbent))
            continue
        if family == "aggregation":
            from sparselift.passes.aggregate_comm import MERGEABLE_ROLES

            have = [r for r in spec_options(current.get(name, "")).get("roles", "").split(",") if r]
            for role in MERGEABLE_ROLES:
                if role in have:
                    continue
                roles = [r for r in MERGEABLE_ROLES if r in have or r == role]
                add(
                    family, f"aggregate {role}", format_spec(name, {"roles": roles} | _cap_option(options, "max-bytes"))
                )
        elif family == "parallelism":
            if name in current:
                continue
            n = _table_count(module)
            groups = sorted({g for g in (2, 4, 8, 16, 32, 64) if g <= n} | ({n} if 2 <= n <= 64 else set()))
            for g in groups:
                change = format_spec(name, {"groups": g} | _cap_option(options, "max-workspace-bytes"))
                if g > options.max_lanes:
                    add(
                        family,
                        f"G={g}",
                        change,
                        available=False,
                        lanes=g,
                        reason=f"lane limit: {g} lanes > max-lanes {options.max_lanes}",
                    )
                else:
                    add(family, f"G={g}", change, lanes=g)
        elif family == "codegen":
            if name in current:
                continue
            if not options.allow_generated:
                add(
                    family,
                    "generated kernels",
                    name,
                    available=False,
                    reason="disabled: reference kernels requested (kernels='reference')",
                )
            else:
                add(family, "generated kernels", name)
        elif family == "latency-hiding":
            if name in current:
                continue
            # The last schedule hides both directions' sparse exchanges but keeps the dense
            # gradients to one all-reduce after backward: whether overlapping that all-reduce
            # with backward pays depends on spare cores the model does not see, so it is measured.
            for fwd, bwd, dense, label in (
                (True, False, True, "forward"),
                (False, True, True, "backward"),
                (True, True, True, "forward+backward"),
                (True, True, False, "forward+backward, dense grads after backward"),
            ):
                add(
                    family,
                    f"hide {label}",
                    format_spec(
                        name,
                        {"forward": fwd, "backward": bwd}
                        | ({} if dense else {"dense-grads": False})
                        | _cap_option(options, "max-inflight-bytes"),
                    ),
                )
        else:
            raise ValueError(f"unknown optimization family '{family}'; known: {', '.join(FAMILIES)}")
    return out


# --------------------------------------------------------------------------------------
# Prediction
# --------------------------------------------------------------------------------------


def _canonical_text(module: ModuleOp) -> str:
    """The module printed without `remark` and `cost` attributes (mutates a clone, not `module`)."""
    clone = module.clone()
    for op in clone.walk():
        for key in ("remark", "cost"):
            op.attributes.pop(key, None)
    return _print(clone)


def _print(module: ModuleOp) -> str:
    import io

    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


def _remarks(module: ModuleOp) -> tuple[RemarkAttr, ...]:
    """The `#sched.remark`s the passes left in `module`, in walk order, without repeats."""
    return remarks_of(module)


def _wait_of(start: Operation) -> WaitOp | None:
    for use in start.results[0].uses:
        if isinstance(use.operation, WaitOp):
            return use.operation
    return None


def _inflight_bytes(step: StepOp, sizer: Sizer) -> int:
    """Most bytes held at once by async collectives between their start and their wait."""
    worst = 0
    for region in (step.forward, step.backward):
        events = []
        for op in region.block.ops:
            if isinstance(op, AllToAllStartOp | AllReduceStartOp):
                wait = _wait_of(op)
                sizes = [sizer.value_bytes(v) for v in (wait.outputs if wait is not None else op.inputs)]
                events.append(("start", id(wait), sum(s or 0.0 for s in sizes)))
            elif isinstance(op, WaitOp):
                events.append(("wait", id(op), 0.0))
        worst = max(worst, round(peak_inflight(events)[0]))
    return worst


def _parallel_usage(step: StepOp, tables: dict[str, TableEntry]) -> tuple[int, int]:
    """(most lanes, most workspace bytes) over the step's `sched.parallel` ops."""
    lanes = workspace = 0
    for op in step.walk():
        if not isinstance(op, ParallelOp):
            continue
        lanes = max(lanes, len(op.lanes))
        names = table_names(op.walk())
        workspace = max(workspace, sum(tables[n].workspace_bytes for n in names if n in tables))
    return lanes, workspace


@dataclass
class _Applied:
    module: ModuleOp | None
    text_hash: str
    remarks: tuple[RemarkAttr, ...]
    error: str


class Predictor:
    """Applies candidate pipelines to clones of one lifted module and costs them (cached)."""

    def __init__(self, module: ModuleOp, ctx: Context | None = None):
        self.module = module
        self.ctx = ctx
        self.tables: dict[str, TableEntry] = {}
        for step in steps_of(module):
            for t in build_srsv(step).tables:
                self.tables.setdefault(t.name, t)
        self._applied: dict[str, _Applied] = {}
        self._predictions: dict[tuple[str, HardwareProfile], Prediction] = {}

    def apply(self, pipeline: Sequence[str]) -> _Applied:
        spec = join_pipeline(pipeline)
        if spec not in self._applied:
            clone = self.module.clone()
            try:
                run_pipeline(clone, list(pipeline), self.ctx)
                clone.verify()
                for step in steps_of(clone):
                    build_srsv(step)  # dependency graph: raises on a cycle
            except Exception as e:  # a failing pass or an invalid result: the candidate is invalid
                self._applied[spec] = _Applied(None, "", (), f"{type(e).__name__}: {e}".strip())
            else:
                text = _canonical_text(clone)
                self._applied[spec] = _Applied(
                    clone, hashlib.sha256(text.encode()).hexdigest()[:16], _remarks(clone), ""
                )
        return self._applied[spec]

    def predict(self, pipeline: Sequence[str], profile: HardwareProfile | str = "cpu-gloo") -> Prediction:
        if not isinstance(profile, HardwareProfile):
            profile = load_profile(profile)
        spec = join_pipeline(pipeline)
        key = (spec, profile)
        if key in self._predictions:
            return self._predictions[key]
        applied = self.apply(pipeline)
        if applied.module is None:
            pred = Prediction(spec, float("inf"), (), "", (), applied.error)
        else:
            pred = self._cost(spec, applied, profile)
        self._predictions[key] = pred
        return pred

    def _cost(self, spec: str, applied: _Applied, profile: HardwareProfile) -> Prediction:
        assert applied.module is not None  # only pipelines that applied are costed
        total = 0.0
        breakdown = dict.fromkeys(CATEGORIES, 0.0)
        lanes = workspace = inflight = 0
        for step in steps_of(applied.module):
            annotate_step(step, profile)
            view = build_srsv(step)
            sizer = Sizer(view.world_size, view.batch)
            # The same terms annotate-cost sums into each op's `est_us` (fused kernels included).
            terms = {op: op_terms(op, view, profile, sizer) for op in view.graph.nodes}
            length, path = view.critical_path({op: t.total for op, t in terms.items()}, serial=True)
            total += length
            for op in path:
                for k, v in terms[op].as_dict().items():
                    breakdown[k] += v
            lanes_s, work_s = _parallel_usage(step, self.tables)
            lanes, workspace = max(lanes, lanes_s), max(workspace, work_s)
            inflight = max(inflight, _inflight_bytes(step, sizer))
        return Prediction(
            spec,
            round(total, 3),
            tuple((k, round(v, 3)) for k, v in breakdown.items()),
            applied.text_hash,
            applied.remarks,
            "",
            lanes,
            workspace,
            inflight,
        )


def predict(module: ModuleOp, spec: str | Sequence[str], profile: HardwareProfile | str = "cpu-gloo") -> Prediction:
    """The analytic estimate of `module` (lifted, unoptimized) after the pass specs `spec`."""
    specs = split_pipeline(spec) if isinstance(spec, str) else list(spec)
    return Predictor(module).predict(specs, profile)


def check_candidate(
    candidate: Candidate, prediction: Prediction, incumbent: Prediction, options: PlanOptions
) -> str | None:
    """Why `candidate` is infeasible or pointless, or None when it may be tried."""
    if not candidate.available:
        return candidate.reason
    if prediction.error:
        return f"invalid: {prediction.error}"
    if prediction.text_hash == incumbent.text_hash:
        # The candidate's own pass says why it refused: matched by the remark's pass field, and
        # only remarks the incumbent's IR did not carry already.
        name = pass_name(candidate.change)
        own = [r for r in prediction.remarks if r.pass_name.data == name and r not in incumbent.remarks]
        if own:
            return "; ".join(r.message for r in own)
        return f"no effect: {candidate.change} left the IR unchanged (nothing to rewrite)"
    if prediction.lanes > options.max_lanes:
        return f"lane limit: {prediction.lanes} lanes > max-lanes {options.max_lanes}"
    cap = options.memory_cap_bytes
    if cap > 0 and prediction.workspace_bytes > cap:
        return f"memory cap: parallel workspace {prediction.workspace_bytes} bytes > memory-cap-bytes {cap}"
    if cap > 0 and prediction.inflight_bytes > cap:
        return f"memory cap: in-flight buffers {prediction.inflight_bytes} bytes > memory-cap-bytes {cap}"
    return None


# --------------------------------------------------------------------------------------
# Search
# --------------------------------------------------------------------------------------


class Confirmer(Protocol):
    """Decides among a family's feasible variants (ordered by predicted gain)."""

    def profile(self, current: HardwareProfile) -> HardwareProfile:
        """The profile to predict the next family with (a re-fitted one, or `current`)."""
        ...

    def confirm(
        self,
        family: str,
        incumbent: tuple[str, ...],
        variants: list[tuple[Candidate, Prediction]],
        incumbent_prediction: Prediction,
    ) -> list[Decision]:
        """One decision per variant, at most one accepted."""
        ...


def decision(candidate: Candidate, accepted: bool, reason: str, predicted: float | None = None, **kw) -> Decision:
    return Decision(
        candidate.family,
        candidate.label,
        candidate.change,
        candidate.pipeline,
        accepted,
        reason,
        None if predicted is None else round(predicted, 3),
        **kw,
    )


class AnalyticConfirmer:
    """Accept the variant with the best predicted gain, if it is a gain."""

    def profile(self, current: HardwareProfile) -> HardwareProfile:
        return current

    def confirm(self, family, incumbent, variants, incumbent_prediction) -> list[Decision]:
        out = []
        chosen = None
        for cand, pred in variants:
            inc = pred.est_us - incumbent_prediction.est_us
            if chosen is None and inc < -_EPS_US:
                chosen = cand
                out.append(decision(cand, True, f"predicted increment {inc / 1e3:+.3f} ms < 0", inc))
            elif chosen is None:
                out.append(decision(cand, False, f"no predicted gain (increment {inc / 1e3:+.3f} ms)", inc))
            else:
                out.append(decision(cand, False, f"{chosen.label} is predicted faster", inc))
        return out


@attrs.frozen
class SearchResult:
    pipeline: tuple[str, ...]
    decisions: tuple[Decision, ...]
    profile: HardwareProfile


def _sort_key(item: tuple[Candidate, Prediction], base: float) -> tuple[float, str]:
    return (round(item[1].est_us - base, 6), item[0].spec)


def search(
    predictor: Predictor,
    options: PlanOptions | None = None,
    confirmer: Confirmer | None = None,
    incumbent: Sequence[str] = (),
) -> SearchResult:
    """Greedy over the families in order, from `incumbent` (default T0: the lifted plan).

    Aggregation adds roles one at a time (each accepted role becomes part of the incumbent);
    the variants of the other families are alternatives, of which at most one is kept.
    """
    options = options or PlanOptions()
    confirmer = confirmer or AnalyticConfirmer()
    profile = options.hardware()
    current = tuple(incumbent)
    decisions: list[Decision] = []
    for family in options.families:
        tried: set[str] = set()
        while True:
            profile = confirmer.profile(profile)
            base = predictor.predict(current, profile)
            cands = [
                c
                for c in enumerate_candidates(predictor.module, options, current)
                if c.family == family and c.label not in tried
            ]
            if not cands:
                break
            feasible: list[tuple[Candidate, Prediction]] = []
            for cand in cands:
                pred = predictor.predict(cand.pipeline, profile) if cand.available else None
                reason = check_candidate(cand, pred, base, options) if pred is not None else cand.reason
                if reason is not None:
                    inc = None if pred is None or pred.error else pred.est_us - base.est_us
                    decisions.append(decision(cand, False, reason, inc))
                    tried.add(cand.label)
                else:
                    assert pred is not None  # without a prediction, `reason` is the candidate's own (a str)
                    feasible.append((cand, pred))
            if not feasible:
                break
            feasible.sort(key=lambda item: _sort_key(item, base.est_us))
            # Aggregation: one role per round; the others (and everything once the confirmer's
            # budget is spent, so each candidate still gets its decision): all variants at once.
            exhausted = getattr(confirmer, "exhausted", False)
            batch = feasible[:1] if family == "aggregation" and not exhausted else feasible
            outcome = confirmer.confirm(family, current, batch, base)
            decisions.extend(outcome)
            tried.update(c.label for c, _ in batch)
            accepted = [d for d in outcome if d.accepted]
            if accepted:
                current = accepted[0].pipeline
            if family != "aggregation" or exhausted:
                break
    return SearchResult(current, tuple(decisions), confirmer.profile(profile))


# --------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanSparse(ModulePass):
    """Choose (or replay) the optimization pipeline of a lifted module."""

    name = "plan-sparse"

    profile: str = "cpu-gloo"
    memory_cap_bytes: int = 0
    max_lanes: int = 4
    decisions: str = ""
    optimizations: tuple[str, ...] = FAMILIES  # the families it may choose from

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.decisions:
            try:
                specs = load_decisions(self.decisions)
            except ValueError as e:
                raise PassFailedException(f"plan-sparse: {e}") from None
            unknown = [pass_name(s) for s in specs if pass_name(s) not in registered_passes()]
            if unknown:
                raise PassFailedException(f"plan-sparse: decisions name unknown pass '{unknown[0]}'")
            run_pipeline(op, specs, ctx)
            op.attributes["plan"] = StringAttr(join_pipeline(specs))
            return
        try:
            unknown = [f for f in self.optimizations if f not in FAMILIES]
            if unknown:
                raise ValueError(f"unknown optimization '{unknown[0]}'; known: {', '.join(FAMILIES)}")
            options = PlanOptions(
                self.profile, self.memory_cap_bytes, self.max_lanes, families=tuple(self.optimizations)
            )
            options.hardware()
        except ValueError as e:
            raise PassFailedException(f"plan-sparse: {e}") from None
        try:
            result = search(Predictor(op, ctx), options)
        except ValueError as e:
            raise PassFailedException(f"plan-sparse: {e}") from None
        run_pipeline(op, result.pipeline, ctx)
        op.attributes["plan"] = StringAttr(join_pipeline(result.pipeline))
        op.attributes["plan_rejected"] = ArrayAttr(
            [StringAttr(f"{d.family} {d.label}: {d.reason}") for d in result.decisions if not d.accepted]
        )


__all__ = [
    "FAMILIES",
    "PASS_OF",
    "CATEGORIES",
    "PlanOptions",
    "Candidate",
    "Prediction",
    "Decision",
    "Predictor",
    "Confirmer",
    "AnalyticConfirmer",
    "SearchResult",
    "enumerate_candidates",
    "predict",
    "check_candidate",
    "search",
    "registered_passes",
    "run_pipeline",
    "with_change",
    "PlanSparse",
]
