"""The planner's analytic predictions: a plan applied to a clone of the lifted module, priced by the cost model.

Every per-op price comes from `sparselift.passes.cost_model.op_terms` (split into its
`CATEGORIES`, which the runtime planner fits one scale each): the same figures `annotate-cost`
writes and `simulate` projects with. A plan's estimate is the step's serial critical path; a
fused kernel is charged its work (one launch, plus its tables' gathers or updates, sized from
the IR), so it saves launches, not the gathers themselves. `check_candidate` says why a
candidate cannot or need not be tried (its pass refused, it did nothing, it breaks a
constraint). Torch-free.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass

import attrs
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.printer import Printer

from sparselift.ir.coll import AllReduceStartOp, AllToAllStartOp, WaitOp
from sparselift.ir.sched import ParallelOp, RemarkAttr, StepOp
from sparselift.passes.annotate_cost import annotate_step
from sparselift.passes.cost_model import CATEGORIES, op_terms
from sparselift.passes.pipeline import Pipeline, run_pipeline
from sparselift.passes.plan_candidates import Candidate, PlacementChoice, PlanOptions, change_text
from sparselift.passes.profiles import HardwareProfile, load_profile
from sparselift.passes.remarks import remarks_of
from sparselift.passes.srsv import Sizer, TableEntry, build_srsv, peak_inflight, steps_of, table_names


@attrs.frozen
class Prediction:
    """The analytic estimate of one plan on one profile."""

    plan: Pipeline
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


def _canonical_text(module: ModuleOp) -> str:
    """The module printed without `remark` and `cost` attributes (mutates a clone, not `module`)."""
    clone = module.clone()
    for op in clone.walk():
        for key in ("remark", "cost"):
            op.attributes.pop(key, None)
    return _print(clone)


def _print(module: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out).print_op(module)
    return out.getvalue()


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
        self._applied: dict[Pipeline, _Applied] = {}
        self._predictions: dict[tuple[Pipeline, HardwareProfile], Prediction] = {}

    def apply(self, plan: Pipeline) -> _Applied:
        if plan not in self._applied:
            clone = self.module.clone()
            try:
                run_pipeline(clone, plan, self.ctx)
                clone.verify()
                for step in steps_of(clone):
                    build_srsv(step)  # dependency graph: raises on a cycle
            except Exception as e:  # a failing pass or an invalid result: the candidate is invalid
                self._applied[plan] = _Applied(None, "", (), f"{type(e).__name__}: {e}".strip())
            else:
                text = _canonical_text(clone)
                self._applied[plan] = _Applied(
                    clone, hashlib.sha256(text.encode()).hexdigest()[:16], remarks_of(clone), ""
                )
        return self._applied[plan]

    def predict(self, plan: Pipeline, profile: HardwareProfile | str = "cpu-gloo") -> Prediction:
        if not isinstance(profile, HardwareProfile):
            profile = load_profile(profile)
        key = (plan, profile)
        if key in self._predictions:
            return self._predictions[key]
        applied = self.apply(plan)
        if applied.module is None:
            pred = Prediction(plan, float("inf"), (), "", (), applied.error)
        else:
            pred = self._cost(plan, applied, profile)
        self._predictions[key] = pred
        return pred

    def _cost(self, plan: Pipeline, applied: _Applied, profile: HardwareProfile) -> Prediction:
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
            plan,
            round(total, 3),
            tuple((k, round(v, 3)) for k, v in breakdown.items()),
            applied.text_hash,
            applied.remarks,
            "",
            lanes,
            workspace,
            inflight,
        )


def predict(module: ModuleOp, plan: Pipeline, profile: HardwareProfile | str = "cpu-gloo") -> Prediction:
    """The analytic estimate of `module` (lifted, unoptimized) after the passes of `plan`."""
    return Predictor(module).predict(plan, profile)


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
        name = str(candidate.change) if isinstance(candidate.change, PlacementChoice) else candidate.change.name
        own = [r for r in prediction.remarks if r.pass_name.data == name and r not in incumbent.remarks]
        if own:
            return "; ".join(r.message for r in own)
        return f"no effect: {change_text(candidate.change)} left the IR unchanged (nothing to rewrite)"
    if prediction.lanes > options.max_lanes:
        return f"lane limit: {prediction.lanes} lanes > max-lanes {options.max_lanes}"
    cap = options.memory_cap_bytes
    if cap > 0 and prediction.workspace_bytes > cap:
        return f"memory cap: parallel workspace {prediction.workspace_bytes} bytes > memory-cap-bytes {cap}"
    if cap > 0 and prediction.inflight_bytes > cap:
        return f"memory cap: in-flight buffers {prediction.inflight_bytes} bytes > memory-cap-bytes {cap}"
    return None


__all__ = ["Prediction", "Predictor", "predict", "check_candidate"]
