"""The runtime planner: measured lookahead on real batches, cost-model re-fitting, the plan cache.

`sparselift.compile` calls `resolve_plan` unless it is given an explicit pipeline. The search
itself (candidates, analytic predictions, constraints, the family order) is
`sparselift.passes.plan_search.search`; the `Planner` hands it a measuring `Confirmer`
(`plan_lookahead.Lookahead`) around the `PlanTimer` it is given (`plan_timing`: `resolve_plan`
makes one around the compiler's `CandidateBuilder`; tests give fake timings):

- **Measured lookahead.** Starting from the incumbent T0, the default lowering (what
  `plan="none"` compiles: generated kernels unless the reference ones were asked for;
  `plan_candidates.start_plan`), a candidate T1 is built like a real compile (by the caller's
  `CandidateBuilder`) on the rank's live table storage (every candidate shares it;
  `runtime.tables`) and scratch copies of the dense parameters, and timed on the example batch
  around a steady-state step as `TrainPipeline` runs it (forward, the next batch's input
  exchange started, backward). How each family is
  measured and decided, by sequential paired tests whose rounds are timed on the slowest rank so
  that every rank decides the same, is `sparselift.plan_lookahead`; the test itself is
  `sparselift.plan_confirm`.
- **Confirmation before return.** The chosen plan is tested against T0 in paired rounds; if it is
  not faster beyond noise, the planner falls back to the most optimized plan it passed through
  that is, or to T0 (`plan_confirm.confirm_choice`). The record says `confirmed`, with the tests.
- **Re-fitting.** After every accepted candidate, one scale per cost category is fitted to every
  plan measured so far, within physical bounds and only for categories enough plans exercise
  (`sparselift.cost_fit`); the next family is predicted with the fitted profile, and the record
  keeps the fit and the model's median relative error over the plans measured.
- **Bounded.** The budget scales with the step: `CompileOptions.calibration_steps` steps of the
  plan it would return now (50: 5% of a 1000-step run), at least `BUDGET_MIN_S`, never above
  `calibration_budget_s`; the search may spend all of it while its incumbent is T0 (a plan it
  accepts then was tested against T0, and needs no confirmation), `SEARCH_SHARE` of it once it
  has accepted a change, the confirmation the rest. Once it is spent (MAX over ranks),
  the remaining candidates are rejected as not tried.
- **Plan cache.** The chosen `PlanRecord` (`sparselift.plan_record`: pipeline, decisions with
  predicted and measured increments, measurements, fit, calibration seconds) is stored as JSON
  in the cache directory (key fields and record files: `sparselift.plan_key`)
  under a key hashing the exported IR (model structure, shapes, sharding, world size), the
  device kind, the versions of torch, xdsl and sparselift and the planner's constraints. The
  key's fields are stored too, so a miss says which field changed. Rank 0 looks the plan up
  and broadcasts it (every rank then runs the same plan); steady-state runs reuse it with zero
  calibration. `plan="refine"` plans again on a cached record, going on with its paired tests
  that were undecided for want of rounds (up to `plan_confirm.LOOKS[-1]` rounds each, within
  the test's error bound over all its looks) and keeping its decided ones without measuring them:
  the rounds one compile's budget cannot buy on a noisy host pile up over a user's runs.
"""

from __future__ import annotations

import datetime
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import numpy as np
import torch
import torch.distributed as dist
import torch.utils._pytree as pytree
from xdsl.passes import ModulePass

from sparselift import cache as cache_files
from sparselift.codegen.table_facts import sharding_plan
from sparselift.cost_fit import fit_profile
from sparselift.memory_budget import RankMemory, headroom, memory_need
from sparselift.optim import TableOptimizers
from sparselift.passes.pipeline import Pipeline, find_pass, run_pipeline
from sparselift.passes.plan_candidates import FAMILIES, Decision, PlanOptions, start_plan
from sparselift.passes.plan_predict import Predictor
from sparselift.passes.plan_search import search
from sparselift.passes.profiles import HardwareProfile
from sparselift.plan_confirm import Confirmation, PairedComparison, confirm_choice
from sparselift.plan_key import describe_miss, diff_fields, key_fields, plan_key, record_path
from sparselift.plan_lookahead import SEARCH_SHARE, Lookahead
from sparselift.plan_record import Measurement, PlanRecord
from sparselift.plan_timing import PlanTimer, example_ids_by_table
from sparselift.runtime.agree import same_outcome
from sparselift.runtime.compiled import CompileOptions, cache_dir
from sparselift.runtime.tables import LocalTables

log = logging.getLogger("sparselift")

PLAN_MODES = ("auto", "reuse-only", "replan", "refine", "none")

CALIBRATIONS = 0
"""Planning runs (calibrations) in this process; a reused plan does not add one."""

Measure = Callable[[str], float]
"""A fake step timer for tests: seconds of one step of the plan with this pass-spec text ("" for
T0, `sharding=POLICY` for another placement's T0)."""


class CandidateBuilder(Protocol):
    """How the planner builds and re-exports the plans it measures, given by its caller (the
    compiler: `sparselift.compiler.CompilerCandidateBuilder`), the way the search is given a
    `Confirmer`: the planner never imports the compiler."""

    def build(self, program: Any, local: LocalTables, pipeline: Pipeline, options: CompileOptions) -> Any:
        """This rank's runnable model of `program` (exported, not lifted) after the passes of
        `pipeline` (lift-sparse first), on the table storage `local` and scratch copies of the
        dense parameters (running it never touches the model's own)."""
        ...

    def export(self, sharding: Any) -> Any:
        """The model exported again, the same on every rank, with `sharding` (a placement policy
        name or a `ShardingPlan`)."""
        ...

    def take_shards(self, program: Any) -> LocalTables:
        """This rank's table storage for `program`'s placement."""
        ...


@attrs.frozen
class PlanOutcome:
    record: PlanRecord
    reused: bool
    reason: str  # why the planner planned, or where the reused plan came from
    calibration_s: float  # spent by this compile
    program: Any  # the exported program to build (re-exported when the plan fixes the sharding)


# --------------------------------------------------------------------------------------
# Keys
# --------------------------------------------------------------------------------------


def device_kind(tables: Mapping[str, torch.Tensor], example_inputs: tuple = ()) -> str:
    leaves = [t for t in (*tables.values(), *pytree.tree_leaves(example_inputs)) if isinstance(t, torch.Tensor)]
    device = leaves[0].device if leaves else torch.device("cpu")
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return device.type


def default_profile(device: str, transport: str = "gloo") -> str:
    """The built-in profile of a device kind; on the CPU, of the all-to-alls' transport as
    `compile` resolved it ("shm" or "gloo")."""
    if device.startswith("cuda"):
        return "h200-nccl" if "H200" in device.upper() else "h100-nccl"
    return "cpu-shm" if transport == "shm" else "cpu-gloo"


def planner_options(options: CompileOptions, device: str, headroom_bytes: int = 0) -> PlanOptions:
    """The search's constraints from the compile options (resolving the defaults here).

    `memory_cap_bytes` is the whole per-rank budget: the default plan's need (shards, optimizer
    state, dense parameters, step buffers) comes first; the workspace and in-flight buffers a
    candidate adds get the rest, `headroom_bytes` (`memory_budget.headroom`).
    """
    families = tuple(f for f in (options.optimizations or FAMILIES) if f in FAMILIES)
    unknown = [f for f in (options.optimizations or ()) if f not in (*FAMILIES, "sharding")]
    if unknown:
        raise ValueError(
            f"CompileOptions.optimizations: unknown '{unknown[0]}'; known: {', '.join(FAMILIES)}, sharding"
        )
    lanes = options.max_lanes or (4 if device.startswith("cuda") else max(1, torch.get_num_threads()))
    profile = options.profile if options.profile != "auto" else default_profile(device, options.transport)
    return PlanOptions(
        profile=profile,
        memory_cap_bytes=headroom_bytes if options.memory_cap_bytes else 0,
        max_lanes=lanes,
        allow_generated=options.kernels == "generated",
        families=families,
    )


def save_record(record: PlanRecord, path: Path) -> None:
    cache_files.atomic_write(path, record.to_json())


# --------------------------------------------------------------------------------------
# Resolution: reuse or plan
# --------------------------------------------------------------------------------------


def _broadcast(obj: Any, rank: int, world: int, pg) -> Any:
    if world == 1 or not (dist.is_available() and dist.is_initialized()):
        return obj
    payload = [obj if rank == 0 else None]
    dist.broadcast_object_list(payload, src=dist.get_global_rank(pg, 0) if pg is not None else 0, group=pg)
    return payload[0]


def _lookup(options: CompileOptions, directory: Path, key: str, fields: dict[str, str]) -> dict[str, Any]:
    """Rank 0's verdict: reuse a record (its JSON), plan (and why), or fail (and why)."""
    mode = options.plan
    if mode not in PLAN_MODES:  # a path to a plan record
        path = Path(mode)
        if not path.is_file():
            return {
                "action": "error",
                "reason": f"CompileOptions(plan={mode!r}): no such plan record file "
                f"(use one of {', '.join(PLAN_MODES)} or a path to a plan record JSON)",
            }
        try:
            record = PlanRecord.load(path)
        except ValueError as e:
            return {"action": "error", "reason": str(e)}
        diff = diff_fields(record.key_fields, fields)
        why = f"plan record {path}"
        if diff:
            why += f" (made for a different key: {', '.join(diff)})"
        return {"action": "reuse", "record": record.to_json(), "reason": why}
    path = record_path(directory, key)
    if mode == "replan":
        return {"action": "plan", "reason": "re-planning: plan='replan'"}
    if mode == "refine":
        return _refine(path, describe_miss(directory, fields, key) if not path.is_file() else "")
    if path.is_file():
        try:
            record = PlanRecord.load(path)
        except ValueError as e:
            if mode == "reuse-only":
                return {"action": "error", "reason": f"plan='reuse-only': {e}"}
            return {"action": "plan", "reason": f"re-planning: the cached record is unreadable ({e})"}
        return {"action": "reuse", "record": record.to_json(), "reason": f"plan reused from {path}"}
    miss = describe_miss(directory, fields, key)
    if mode == "reuse-only":
        return {"action": "error", "reason": f"plan='reuse-only' but {miss}"}
    return {"action": "plan", "reason": f"re-planning: {miss}"}


def _refine(path: Path, miss: str) -> dict[str, Any]:
    """Rank 0's verdict for plan='refine': plan again, going on with the cached record's paired
    tests (`Lookahead`'s `prior`), or plan afresh without one."""
    if miss:
        return {"action": "plan", "reason": f"plan='refine' with nothing to refine, planning: {miss}"}
    try:
        record = PlanRecord.load(path)
    except ValueError as e:
        return {"action": "plan", "reason": f"plan='refine' with an unreadable record, planning: {e}"}
    resumable = sum(PairedComparison.from_dict(t, "", "").resumable for t in record.paired_tests)
    return {
        "action": "plan",
        "reason": f"refining {path}: {resumable} of its {len(record.paired_tests)} paired tests go on",
        "prior": list(record.paired_tests),
    }


def resolve_plan(
    program,
    local: LocalTables,
    example_inputs: tuple,
    *,
    builder: CandidateBuilder,
    sharding,
    lift: ModulePass,
    rank: int,
    world: int,
    process_group,
    optimizer,
    options: CompileOptions,
    measure: Measure | None = None,
    needs: Sequence[RankMemory] | None = None,
) -> PlanOutcome:
    """The plan for this compile: reused from the cache (or a file) or planned now, same on every rank.

    Each stretch of local work between two collectives is a `same_outcome` block, so an error on
    one rank (the cache directory, the lookup on rank 0, ...) is raised on every rank. `needs`:
    each rank's memory need under a cap (`memory_budget.memory_need`), when the caller has it."""
    with same_outcome(process_group, world):
        device = device_kind(local.tables, example_inputs)
        cap = options.memory_cap_bytes
        if cap and needs is None:
            needs = memory_need(program, lift, world, TableOptimizers.of(optimizer))
        popts = planner_options(options, device, headroom(needs, cap))
        fields = key_fields(
            program, lift=lift, plan_options=popts, device=device, sharding_family=options.optimizations
        )
        key = plan_key(fields)
        directory = cache_dir(options)
        verdict = _lookup(options, directory, key, fields) if rank == 0 else None
    verdict = _broadcast(verdict, rank, world, process_group)
    if verdict["action"] == "error":
        raise RuntimeError(f"sparselift: {verdict['reason']}")
    if verdict["action"] == "reuse":
        record = PlanRecord.from_json(verdict["record"])
        log.info("sparselift: %s; no calibration", verdict["reason"])
        return PlanOutcome(record, True, verdict["reason"], 0.0, _with_sharding(program, record, world, builder))
    log.info("sparselift: %s", verdict["reason"])
    with same_outcome(process_group, world):
        timer = PlanTimer(
            program,
            local,
            example_inputs,
            lift=lift,
            world=world,
            process_group=process_group,
            options=options,
            builder=builder,
            measure=measure,
            sync=torch.cuda.synchronize if device.startswith("cuda") else None,
        )
        planner = Planner(timer, plan_options=popts, sharding=sharding, prior_tests=verdict.get("prior", ()))
    record = planner.run(key, fields)
    # Decisions agree already (F is combined over the ranks); the broadcast also makes every
    # rank hold rank 0's record (its observations and timings), the one the cache keeps.
    with same_outcome(process_group, world):
        payload = record.to_json() if rank == 0 else None
    record = PlanRecord.from_json(_broadcast(payload, rank, world, process_group))
    with same_outcome(process_group, world):  # rank 0 failing to write the record fails every rank
        if rank == 0:
            path = record_path(directory, key)
            save_record(record, path)
            log.info("sparselift: plan record %s written to %s (calibration %.2f s)", key, path, record.calibration_s)
    return PlanOutcome(record, False, verdict["reason"], record.calibration_s, planner.program)


def _with_sharding(program, record: PlanRecord, world: int, builder: CandidateBuilder):
    """The program to build: re-exported with the sharding the plan chose, if it chose one."""
    if record.sharding is None or record.sharding == sharding_plan(program.module).to_json():
        return program
    if record.key_fields.get("world_size") != str(world):  # a plan file made for another world size
        log.warning(
            "sparselift: the plan's sharding is for world size %s, not %s; keeping this export's",
            record.key_fields.get("world_size"),
            world,
        )
        return program
    from sparselift.placement import ShardingPlan

    return builder.export(ShardingPlan.from_json(record.sharding))


# --------------------------------------------------------------------------------------
# The measured lookahead
# --------------------------------------------------------------------------------------


class Planner:
    """Plans one program on every rank of the group.

    It is given how to measure: a `PlanTimer` (`sparselift.plan_timing`), made by its caller
    around the compiler's `CandidateBuilder` (or, in tests, around fake timings). It decides with
    a `Lookahead` (`sparselift.plan_lookahead`), the `Confirmer` it hands the search
    (`plan_search.search`), and confirms the chosen plan against T0 before returning it
    (`plan_confirm.confirm_choice`, with the timer as its `PairMeasure`)."""

    def __init__(
        self,
        timer: PlanTimer,
        *,
        plan_options: PlanOptions,
        sharding: Any = None,
        prior_tests: Sequence[Mapping[str, Any]] = (),
    ):
        self.timer, self.plan_options = timer, plan_options
        self.prior_tests = tuple(prior_tests)  # a refined compile's paired tests (`Lookahead`'s prior)
        # The sharding family re-exports the model with each placement policy (a torch.export
        # per alternative and rank), so it is only tried when asked for and "auto" was requested.
        self.try_sharding = (
            "sharding" in (timer.options.optimizations or ())
            and sharding == "auto"
            and timer.world > 1
            and timer.builder is not None
        )
        self.base_profile = plan_options.hardware()
        self.fit: dict[str, Any] = {}
        # T0: the default lowering. Every candidate is measured against it, and nothing slower is
        # returned, so planning never does worse than `plan="none"` (beyond noise).
        self.start = start_plan(plan_options)
        self.lookahead: Lookahead | None = None
        self.search_exhausted = False

    @property
    def program(self):
        """The program the chosen plan is built from (another placement's, if the plan chose one)."""
        return self.timer.program

    def _refit(self) -> HardwareProfile | None:
        """Re-fit the cost model's scales to every plan measured so far; the fitted profile."""
        assert self.lookahead is not None  # set by `run` before anything is measured
        points = []
        for plan, m in self._own_plans():
            pred = self.lookahead.predictor.predict(plan, self.base_profile)
            if math.isfinite(pred.est_us):
                points.append((dict(pred.breakdown), m.typical_us))
        if not points:
            return None
        fitted, self.fit = fit_profile(self.base_profile, points)
        return fitted

    def _own_plans(self) -> list[tuple[Pipeline, Measurement]]:
        """The plans measured that the predictor prices (not other placements' T0s)."""
        return [(p, m) for p, m in self.timer.measurements.items() if isinstance(p, tuple)]

    # -- the run -----------------------------------------------------------------------------
    def _search_and_confirm(self, lookahead: Lookahead) -> tuple[list[Decision], Any, Confirmation]:
        timer = self.timer
        # The search gets most of the budget (`Lookahead.confirm` sets its share); the
        # confirmation before return gets the rest.
        timer.budget_share = SEARCH_SHARE
        timer.settle(self.start)  # T0's first steps would bias the first paired test
        sharding_decisions = lookahead.decide_sharding(self.base_profile) if self.try_sharding else []
        result = search(lookahead.predictor, self.plan_options, lookahead, incumbent=self.start)
        self.search_exhausted, timer.exhausted, timer.budget_share = timer.exhausted, False, 1.0
        timer.share_family(None)  # the confirmation may spend all that is left
        timer.size_by(result.pipeline)
        accepted = [d.pipeline for d in result.decisions if d.accepted]
        fallbacks = [p for p in reversed(accepted[:-1]) if p != result.pipeline]
        confirmation = confirm_choice(timer, result.pipeline, fallbacks, self.start, earlier=lookahead.tests)
        return sharding_decisions, result, confirmation

    def _cost_model_report(self, lookahead: Lookahead) -> dict[str, Any]:
        """How far the fitted model's predictions sit from the plans measured (relative errors)."""
        predictor = lookahead.predictor
        errors, prior, plans = [], [], []
        for plan, m in self._own_plans():
            measured = m.typical_us
            if measured <= 0:
                continue
            fitted = predictor.predict(plan, lookahead.fitted or self.base_profile)
            base = predictor.predict(plan, self.base_profile)
            if math.isfinite(fitted.est_us) and math.isfinite(base.est_us):
                intercept = float(self.fit.get("intercept_us", 0.0)) if lookahead.fitted else 0.0
                errors.append(abs(fitted.est_us + intercept - measured) / measured)
                prior.append(abs(base.est_us - measured) / measured)
                plans.append(
                    {
                        "pipeline": m.spec,
                        "measured_us": round(measured, 3),
                        "predicted_us": round(fitted.est_us + intercept, 3),
                        "predicted_profile_us": round(base.est_us, 3),
                    }
                )
        return {
            "n_plans": len(errors),
            "median_rel_error": round(float(np.median(errors)), 4) if errors else None,
            "median_rel_error_profile": round(float(np.median(prior)), 4) if prior else None,
            "what": "in-sample: the final fit against every plan measured, each plan's median step "
            "(profile: before fitting)",
            "plans": plans,
        }

    def run(self, key: str = "", fields: Mapping[str, str] | None = None) -> PlanRecord:
        global CALIBRATIONS
        CALIBRATIONS += 1
        timer = self.timer
        timer.start(self.start)
        with same_outcome(timer.pg, timer.world):
            lifted = timer.program.module.clone()
            run_pipeline(lifted, (timer.lift,))
            lookahead = Lookahead(
                timer, Predictor(lifted), self.plan_options, self._refit, builder=timer.builder, prior=self.prior_tests
            )
            self.lookahead = lookahead
        # Calibration must not move the RNG streams training draws from (dropout, sampling).
        devices = [torch.cuda.current_device()] if timer.synchronizes else []
        with torch.random.fork_rng(devices=devices):
            sharding_decisions, result, confirmation = self._search_and_confirm(lookahead)
        if timer.measurements:  # the record's fit covers every plan measured, accepted or not
            lookahead.fitted = self._refit() or lookahead.fitted
        pipeline = confirmation.returned
        t0, final = self._confirmed_times(confirmation)
        calibration = timer.elapsed()
        # Nothing of the candidates outlives planning: their buffers, kernels and the other
        # placements' shards go; the rank's own storage is back as it was before calibration.
        timer.release()
        kernels = "generated" if find_pass(pipeline, "generate-kernels") else "reference"
        return PlanRecord(
            key=key,
            key_fields=dict(fields or {}),
            pipeline=pipeline,
            start=self.start,
            kernels=kernels,
            sharding=lookahead.sharding_json,
            decisions=(*sharding_decisions, *result.decisions),
            measurements=tuple(timer.measurements.values()),
            fit=self.fit,
            calibration_s=round(calibration, 3),
            spent=timer.spent_report(calibration),
            budget_s=timer.budget_s,
            budget_exhausted=self.search_exhausted or timer.exhausted,
            mode="measured",
            incumbent_us=t0,
            final_us=final,
            confirmed=confirmation.confirmed,
            confirmation=confirmation.to_dict(),
            cost_model=self._cost_model_report(lookahead),
            paired_tests=self._paired_tests(lookahead),
            created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )

    def _paired_tests(self, lookahead: Lookahead) -> tuple[dict[str, Any], ...]:
        """This compile's paired tests, then those of the refined record it did not reach (the
        budget ran out first): a later refining compile goes on with them."""
        tests = [t.to_dict() for t in lookahead.tests]
        reached = {(t["baseline"], t["candidate"]) for t in tests}
        return (*tests, *(t for t in self.prior_tests if (t["baseline"], t["candidate"]) not in reached))

    def _confirmed_times(self, confirmation: Confirmation) -> tuple[float | None, float | None]:
        """F(T0) and F(returned plan): from the confirmation's paired rounds when it ran them."""
        returned = [t for t in confirmation.tests if t.candidate == confirmation.returned]
        if returned:
            return round(returned[0].baseline_us, 3), round(returned[0].candidate_us, 3)
        t0 = self.timer.measurements.get(self.start)
        if confirmation.tests:  # fell back to T0: its paired median is the plan's time
            f0 = round(confirmation.tests[0].baseline_us, 3)
            return f0, f0
        return (None, None) if t0 is None else (t0.f_us, t0.f_us)


__all__ = [
    "PLAN_MODES",
    "CALIBRATIONS",
    "PlanOutcome",
    "Planner",
    "resolve_plan",
    "key_fields",
    "plan_key",
    "record_path",
    "describe_miss",
    "diff_fields",
    "fit_profile",
    "planner_options",
    "device_kind",
    "example_ids_by_table",
]
