"""The runtime planner: measured lookahead on real batches, cost-model re-fitting, the plan cache.

`sparselift.compile` calls `resolve_plan` unless it is given an explicit pipeline. The search
itself (candidates, analytic predictions, constraints, the family order) is
`sparselift.passes.plan_sparse.search`; this module is its `Confirmer`:

- **Measured lookahead.** Starting from the incumbent T0 (the lifted plan, reference kernels),
  a candidate T1 is built like a real compile (by the caller's `CandidateBuilder`) on the rank's live
  table storage (every candidate shares it; `runtime.tables`) and scratch copies of the dense
  parameters, and timed on the example batch with `time.perf_counter`
  around a steady-state step as `TrainPipeline` runs it (forward, the next batch's input
  exchange started, backward). Each rank takes the minimum of its observations and ranks combine
  with an all-reduce MAX, so F and every decision are identical on all ranks. T1 is accepted
  if F(T1) < F(T0) - noise, noise being half the spread (max - min, MAX over ranks) of the
  steadier of the two plans' observations, and at least 1% of F(T0) (`_noise`). A candidate
  faster than T0 but within the noise (or, for aggregation and code generation, predicted faster
  but measured slower) gets up to `EXTRA_ROUNDS` interleaved (T0, T1) rounds,
  each round timed by its slowest rank, and is accepted if it wins `WIN_SHARE` of them by a
  median gain of at least 1% of F(T0) (`_tie_break`). Among latency-hiding schedules, a
  runner-up that beat T0 too and is within noise of the best plays the best the same way: the
  budget's two observations each cannot order schedules a few percent apart.
- **Budgets per measurement point** (the paper's appendix): aggregation: one warmup pair, then
  two measured pairs per compatible role; parallelism: one warmup per variant, then a
  bidirectional sweep over G (from the best predicted G, up while faster, then down) with two
  observations per G; code generation: one warmup per implementation, then ref -> gen -> gen
  -> ref (stopped after ref -> gen when gen takes under half the time: `DECISIVE`); latency
  hiding: one warmup step, then two complete-step observations per schedule
  (interleaved with the incumbent's, round by round).
- **Re-fitting.** After every accepted candidate, one scale per cost category (collective
  alpha and beta, bytes/s of gathers, updates and copies, fixed overheads, dense FLOP/s) plus an
  intercept (what the model does not see) is fitted by least squares to the measured F of every
  plan so far, with a weak prior at scale 1 (there are fewer plans than categories). The next
  family is predicted with the fitted profile; the record keeps the fit.
- **Bounded.** `calibration_budget_s` bounds the calibration: once it is spent (checked before
  each candidate, MAX over ranks), the remaining candidates are rejected as not tried.
- **Plan cache.** The chosen `PlanRecord` (`sparselift.plan_record`: pipeline, decisions with
  predicted and measured increments, measurements, fit, calibration seconds) is stored as JSON
  in the cache directory (key fields and record files: `sparselift.plan_key`)
  under a key hashing the exported IR (model structure, shapes, sharding, world size), the
  device kind, the versions of torch, xdsl and sparselift and the planner's constraints. The
  key's fields are stored too, so a miss says which field changed. Rank 0 looks the plan up
  and broadcasts it (every rank then runs the same plan); steady-state runs reuse it with zero
  calibration.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import numpy as np
import torch
import torch.distributed as dist
import torch.utils._pytree as pytree

from sparselift import cache as cache_files
from sparselift.codegen.table_facts import describe_tables, sharding_plan
from sparselift.cost_fit import fit_profile
from sparselift.passes.pipeline import pass_name, split_pipeline
from sparselift.passes.plan_sparse import (
    FAMILIES,
    Candidate,
    Decision,
    PlanOptions,
    Prediction,
    Predictor,
    decision,
    run_pipeline,
    search,
)
from sparselift.passes.profiles import HardwareProfile
from sparselift.plan_key import describe_miss, diff_fields, key_fields, plan_key, record_path
from sparselift.plan_record import Measurement, PlanRecord
from sparselift.plan_timing import PlanTiming, example_ids_by_table
from sparselift.runtime.agree import same_outcome
from sparselift.runtime.compiled import CompileOptions, cache_dir
from sparselift.runtime.tables import LocalTables, TouchedRows, local_shard_bytes

log = logging.getLogger("sparselift")

PLAN_MODES = ("auto", "reuse-only", "replan", "none")

CALIBRATIONS = 0
"""Planning runs (calibrations) in this process; a reused plan does not add one."""

Measure = Callable[[tuple[str, ...]], float]
"""A fake step timer for tests: seconds of one step of the plan with these pass specs."""


class CandidateBuilder(Protocol):
    """How the planner builds and re-exports the plans it measures, given by its caller (the
    compiler: `sparselift.compiler.CompilerCandidateBuilder`), the way the search is given a
    `Confirmer`: the planner never imports the compiler."""

    def build(self, program: Any, local: LocalTables, pipeline: Sequence[str], options: CompileOptions) -> Any:
        """This rank's runnable model of `program` (exported, not lifted) after the pass specs
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


def default_profile(device: str) -> str:
    if device.startswith("cuda"):
        return "h200-nccl" if "H200" in device.upper() else "h100-nccl"
    return "cpu-gloo"


def planner_options(options: CompileOptions, device: str, shard_bytes: int = 0) -> PlanOptions:
    """The search's constraints from the compile options (resolving the defaults here).

    `memory_cap_bytes` is the whole per-rank budget: the largest rank's table shards and
    optimizer state (`shard_bytes`) come first, workspace and in-flight buffers get the rest.
    """
    families = tuple(f for f in (options.optimizations or FAMILIES) if f in FAMILIES)
    unknown = [f for f in (options.optimizations or ()) if f not in (*FAMILIES, "sharding")]
    if unknown:
        raise ValueError(
            f"CompileOptions.optimizations: unknown '{unknown[0]}'; known: {', '.join(FAMILIES)}, sharding"
        )
    lanes = options.max_lanes or (4 if device.startswith("cuda") else max(1, torch.get_num_threads()))
    profile = options.profile if options.profile != "auto" else default_profile(device)
    cap = max(1, options.memory_cap_bytes - shard_bytes) if options.memory_cap_bytes else 0
    return PlanOptions(
        profile=profile,
        memory_cap_bytes=cap,
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


def resolve_plan(
    program,
    local: LocalTables,
    example_inputs: tuple,
    *,
    builder: CandidateBuilder,
    sharding,
    lift: str,
    rank: int,
    world: int,
    process_group,
    optimizer,
    options: CompileOptions,
    measure: Measure | None = None,
) -> PlanOutcome:
    """The plan for this compile: reused from the cache (or a file) or planned now, same on every rank.

    Each stretch of local work between two collectives is a `same_outcome` block, so an error on
    one rank (the cache directory, the lookup on rank 0, ...) is raised on every rank."""
    with same_outcome(process_group, world):
        device = device_kind(local.tables, example_inputs)
        facts = describe_tables(program.module, world)
        shard_bytes = max(sum(local_shard_bytes(facts, r, optimizer.kind).values()) for r in range(world))
        popts = planner_options(options, device, shard_bytes)
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
        planner = Planner(
            program,
            local,
            example_inputs,
            lift=lift,
            rank=rank,
            world=world,
            builder=builder,
            process_group=process_group,
            optimizer=optimizer,
            options=options,
            plan_options=popts,
            measure=measure,
            sharding=sharding,
        )
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


# When the paper's budget leaves a candidate inconclusive (faster than the incumbent, but not
# beyond the noise margin; or, for aggregation and code generation, predicted faster but measured
# slower), up to EXTRA_ROUNDS more interleaved (incumbent, candidate) steps
# decide it: each round's time is the slowest rank's, and the candidate is accepted when it won
# at least WIN_SHARE of the rounds by a median gain of at least 1% of F(T0). Paired rounds
# cancel the machine's drift that inflates the spread of single observations.
EXTRA_ROUNDS = 8
WIN_SHARE = 0.75
# Code generation's comparison stops early when the generated step is this much faster.
DECISIVE = 0.5


def _noise(f0_us: float, incumbent_spread_us: float, candidate_spread_us: float) -> float:
    """The margin a candidate must beat the incumbent by.

    F is each plan's best observation, so one slow outlier of either plan does not move it; the
    margin is half the spread of the steadier of the two plans (how far the better of two
    observations can sit from the plan's typical step), and never below 1% of F(T0) (timer and
    scheduling jitter on a busy machine).
    """
    return max(0.01 * f0_us, 0.5 * min(incumbent_spread_us, candidate_spread_us))


class Planner(PlanTiming):
    """Plans one program on every rank of the group (a `Confirmer` for `plan_sparse.search`);
    building and timing its plans is `PlanTiming`'s (`sparselift.plan_timing`)."""

    def __init__(
        self,
        program,
        local: LocalTables,
        example_inputs: tuple,
        *,
        lift: str,
        rank: int,
        world: int,
        process_group,
        optimizer,
        options: CompileOptions,
        plan_options: PlanOptions,
        measure: Measure | None = None,
        clock: Callable[[], float] = time.perf_counter,
        cache_models: int = 3,
        builder: CandidateBuilder | None = None,
        sharding: Any = None,
    ):
        self.program, self.inputs = program, example_inputs
        # Table storage per program (the sharding family's alternatives place tables elsewhere),
        # and the rows its calibration steps touch, put back after every step.
        self._locals: dict[int, LocalTables] = {id(program): local}
        self._touched: dict[int, TouchedRows] = {}
        # Builds the candidates; without one (tests with `measure`), only injected timings.
        self.builder = builder
        # The sharding family re-exports the model with each placement policy (a torch.export
        # per alternative and rank), so it is only tried when asked for and "auto" was requested.
        self.try_sharding = (
            "sharding" in (options.optimizations or ()) and sharding == "auto" and world > 1 and builder is not None
        )
        self.sharding_json: str | None = None
        self.lift, self.rank, self.world, self.pg = lift, rank, world, process_group
        self.optimizer, self.options, self.plan_options = optimizer, options, plan_options
        self.measure, self.clock = measure, clock
        self.budget_s = float(options.calibration_budget_s)
        self.base_profile = plan_options.hardware()
        self.fitted: HardwareProfile | None = None
        self.fit: dict[str, Any] = {}
        self.exhausted = False
        self.measurements: dict[str, Measurement] = {}
        self.predictor: Predictor | None = None
        self._models: OrderedDict[tuple[int, str], Any] = OrderedDict()
        self._cache_models = cache_models
        self._start = 0.0
        # Where calibration time goes: building candidate plans (IR, plan module, kernels),
        # timed steps (warmups included), exports of sharding alternatives; the rest is analysis
        # (candidates, predictions, fits) and waiting for the other ranks.
        self.spent: dict[str, float] = {
            "build_s": 0.0,
            "steps_s": 0.0,
            "steps": 0,
            "export_s": 0.0,
            "tie_break_rounds": 0,
        }
        cuda = device_kind(local.tables, example_inputs).startswith("cuda")
        self._sync = torch.cuda.synchronize if cuda else None

    # -- the Confirmer protocol --------------------------------------------------------------
    def profile(self, current: HardwareProfile) -> HardwareProfile:
        return self.fitted or current

    def confirm(
        self,
        family: str,
        incumbent: tuple[str, ...],
        variants: list[tuple[Candidate, Prediction]],
        incumbent_prediction: Prediction,
    ) -> list[Decision]:
        predicted = {c.label: p.est_us - incumbent_prediction.est_us for c, p in variants}
        if self._over_budget():
            return [self._not_tried(c, predicted[c.label]) for c, _ in variants]
        error = self._ready([incumbent])
        if error:  # the incumbent itself cannot run: nothing can be confirmed
            return [decision(c, False, f"incumbent {error}", predicted[c.label]) for c, _ in variants]
        if family == "parallelism":
            out = self._sweep(incumbent, variants, predicted)
        elif family in ("aggregation", "codegen") and len(variants) == 1:
            cand = variants[0][0]
            error = self._ready([cand.pipeline])
            if error:
                return [decision(cand, False, f"candidate {error}", predicted[cand.label])]
            o0, o1 = (self._codegen if family == "codegen" else self._pairs)(incumbent, cand.pipeline)
            (f0, f1), (noise, spread) = self._combine([o0, o1])
            self._record(incumbent, f0, noise, o0)
            self._record(cand.pipeline, f1, spread, o1)
            margin = _noise(f0, noise, spread)
            out = [self._judge(cand, predicted[cand.label], f0, f1, margin)]
            # Paired rounds decide when the budget's observations are inconclusive, or when they
            # contradict the cost model (a predicted gain measured as a loss: one slow moment on
            # a busy machine must not throw away a whole family).
            if not out[0].accepted and (f1 < f0 or predicted[cand.label] < 0):
                out = [self._tie_break(incumbent, cand, predicted[cand.label], f0, margin) or out[0]]
        else:
            out = self._alternatives(incumbent, variants, predicted)
        if any(d.accepted for d in out):
            self._refit()
        return out

    def _not_tried(self, cand: Candidate, predicted: float | None) -> Decision:
        return decision(
            cand,
            False,
            f"not tried: calibration budget exhausted ({self._elapsed():.1f} s of {self.budget_s:g} s)",
            predicted,
        )

    def _judge(
        self, cand: Candidate, predicted: float, f0: float, f1: float, noise: float, better: str = ""
    ) -> Decision:
        inc = f1 - f0
        kw = {
            "measured_us": round(inc, 3),
            "incumbent_us": round(f0, 3),
            "candidate_us": round(f1, 3),
            "noise_us": round(noise, 3),
        }
        if better:
            return decision(
                cand, False, f"measured increment {inc / 1e3:+.2f} ms; {better} was faster", predicted, **kw
            )
        if f1 < f0 - noise:
            return decision(
                cand, True, f"measured increment {inc / 1e3:+.2f} ms beyond noise {noise / 1e3:.2f} ms", predicted, **kw
            )
        return decision(
            cand,
            False,
            f"measured increment {inc / 1e3:+.2f} ms: not faster than the incumbent beyond noise {noise / 1e3:.2f} ms",
            predicted,
            **kw,
        )

    def _paired_rounds(self, inc: tuple[str, ...], cand: tuple[str, ...], f0: float) -> tuple[str, float] | None:
        """Up to EXTRA_ROUNDS interleaved (inc, cand) steps, each round timed by its slowest rank.
        If `cand` won WIN_SHARE of them by a median gain of at least 1% of `f0`: (what the rounds
        showed, the median gain in us); else None."""
        t_inc, t_cand = [], []
        for _ in range(EXTRA_ROUNDS):
            if self._over_budget():
                break
            t_inc.append(self._observe(inc))
            t_cand.append(self._observe(cand))
        n = len(t_inc)
        if n < 4:
            return None
        slowest = self._max([*t_inc, *t_cand])  # a step ends when its slowest rank ends
        gains = [(a - b) * 1e6 for a, b in zip(slowest[:n], slowest[n:])]
        wins = sum(g > 0 for g in gains)
        median = float(np.median(gains))
        self.spent["tie_break_rounds"] += n
        if wins < WIN_SHARE * n or median < 0.01 * f0:
            return None
        return f"faster in {wins} of {n} extra paired rounds, median gain {median / 1e3:.2f} ms", median

    def _tie_break(
        self, inc: tuple[str, ...], cand: Candidate, predicted: float, f0: float, noise: float
    ) -> Decision | None:
        """Extra paired rounds for an inconclusive candidate; its acceptance, or None (rejected)."""
        won = self._paired_rounds(inc, cand.pipeline, f0)
        if won is None:
            return None
        shown, median = won
        return decision(
            cand,
            True,
            f"not confirmed by the paper's budget (noise {noise / 1e3:.2f} ms); {shown}",
            predicted,
            measured_us=round(-median, 3),
            incumbent_us=round(f0, 3),
            candidate_us=round(f0 - median, 3),
            noise_us=round(noise, 3),
        )

    # Budgets of the paper's appendix, one function per kind of measurement point.
    def _pairs(self, inc: tuple[str, ...], cand: tuple[str, ...]) -> tuple[list[float], list[float]]:
        """One warmup pair, then two measured pairs (T0, T1)."""
        self._observe(inc)
        self._observe(cand)
        o0, o1 = [], []
        for _ in range(2):
            o0.append(self._observe(inc))
            o1.append(self._observe(cand))
        return o0, o1

    def _codegen(self, ref: tuple[str, ...], gen: tuple[str, ...]) -> tuple[list[float], list[float]]:
        """One warmup per implementation, then ref -> gen -> gen -> ref; stopped after ref -> gen
        when the generated step takes under `DECISIVE` of the reference one (slowest ranks): no
        noise margin (at most half a spread) can overturn that, and the reference lowering's
        steps are the dearest of the whole calibration."""
        self._observe(ref)
        self._observe(gen)
        o0 = [self._observe(ref)]
        o1 = [self._observe(gen)]
        t_ref, t_gen = self._max([o0[0], o1[0]])
        if t_gen < DECISIVE * t_ref:
            return o0, o1
        o1.append(self._observe(gen))
        o0.append(self._observe(ref))
        return o0, o1

    def _baseline(self, inc: tuple[str, ...]) -> tuple[float, float]:
        o0 = self._steps(inc)
        (f0,), (noise,) = self._combine([o0])
        self._record(inc, f0, noise, o0)
        return f0, noise

    def _variant(self, cand: Candidate) -> float | str:
        error = self._ready([cand.pipeline])
        if error:
            return error
        o1 = self._steps(cand.pipeline)
        (f1,), (spread,) = self._combine([o1])
        self._record(cand.pipeline, f1, spread, o1)
        return f1

    def _alternatives(self, inc, variants, predicted) -> list[Decision]:
        """Mutually exclusive variants (latency-hiding schedules): each measured, the best kept.

        One warmup step each, then two rounds of one complete step per schedule, the incumbent
        included, interleaved so that drift of the machine hits every schedule alike.
        """
        results: dict[str, float | str] = {}
        ready = []
        for cand, _ in variants:
            error = self._ready([cand.pipeline])
            if error:
                results[cand.label] = error
            else:
                ready.append(cand)
        plans = [inc, *(c.pipeline for c in ready)]
        # Every schedule stays built across the rounds: an evicted one would be rebuilt and its
        # next observation would be a cold first step, not a steady-state one.
        self._cache_models = max(self._cache_models, len(plans))
        for pipeline in plans:
            self._observe(pipeline)
        obs: list[list[float]] = [[] for _ in plans]
        for _ in range(2):
            for i, pipeline in enumerate(plans):
                obs[i].append(self._observe(pipeline))
        f, spread = self._combine(obs)
        for i, pipeline in enumerate(plans):
            self._record(pipeline, f[i], spread[i], obs[i])
        for i, cand in enumerate(ready):
            results[cand.label] = f[i + 1]
        return self._pick(variants, predicted, results, f[0], spread[0], "", inc, rivals=True)

    def _sweep(self, inc, variants, predicted) -> list[Decision]:
        """Bidirectional sweep over G from the best predicted G: up while faster, then down."""
        f0, noise = self._baseline(inc)
        by_g = sorted((c for c, _ in variants), key=lambda c: (c.lanes, c.label))
        start = by_g.index(variants[0][0])  # variants come best predicted first
        results: dict[str, float | str] = {}
        stopped = ""
        for direction in (1, -1):
            prev = results.get(by_g[start].label) if direction == -1 else None
            prev = prev if isinstance(prev, float) else None
            i = start if direction == 1 else start - 1
            while 0 <= i < len(by_g):
                if self._over_budget():
                    stopped = "budget"
                    break
                f = self._variant(by_g[i])
                results[by_g[i].label] = f
                if isinstance(f, float):
                    if prev is not None and f >= prev:
                        break  # slower than its neighbour: the sweep turns
                    prev = f
                i += direction
        return self._pick(variants, predicted, results, f0, noise, stopped, inc)

    def _pick(self, variants, predicted, results, f0, noise, stopped, inc=None, rivals=False) -> list[Decision]:
        """At most one variant: the fastest measured, if it beats the incumbent beyond noise.

        With `rivals` (mutually exclusive schedules), a runner-up that also beat the incumbent and
        sits within noise of the best is played against it in paired rounds: two observations
        each cannot order schedules a few percent apart on a noisy machine.
        """
        timed = {k: v for k, v in results.items() if isinstance(v, float)}
        best = min(timed, key=lambda k: (timed[k], k)) if timed else None
        if best is not None:
            spec = next(",".join(c.pipeline) for c, _ in variants if c.label == best)
            noise = _noise(f0, noise, self.measurements[spec].noise_us if spec in self.measurements else noise)
        keep = best is not None and timed[best] < f0 - noise
        confirmed = None
        by_label = {c.label: c for c, _ in variants}
        if best is not None and not keep and timed[best] < f0 and inc is not None:
            confirmed = self._tie_break(inc, by_label[best], predicted[best], f0, noise)
            keep = confirmed is not None
        if keep and rivals:
            runner_up = min(
                (k for k in timed if k != best and timed[k] < f0 and timed[k] - timed[best] < noise),
                key=lambda k: (timed[k], k),
                default=None,
            )
            won = (
                None
                if runner_up is None
                else self._paired_rounds(by_label[best].pipeline, by_label[runner_up].pipeline, timed[best])
            )
            if won is not None:
                shown, median = won
                gain = f0 - (timed[best] - median)
                confirmed = decision(
                    by_label[runner_up],
                    True,
                    f"beat the incumbent by {gain / 1e3:.2f} ms (best of the budget's "
                    f"observations: {best}); {shown} against {best}",
                    predicted[runner_up],
                    measured_us=round(-gain, 3),
                    incumbent_us=round(f0, 3),
                    candidate_us=round(f0 - gain, 3),
                    noise_us=round(noise, 3),
                )
                best = runner_up
        out = []
        for cand, _ in variants:
            r = results.get(cand.label)
            if r is None:
                why = (
                    f"not tried: calibration budget exhausted ({self._elapsed():.1f} s of {self.budget_s:g} s)"
                    if stopped == "budget" or self.exhausted
                    else "not measured: the sweep turned before it"
                )
                out.append(decision(cand, False, why, predicted[cand.label]))
            elif isinstance(r, str):
                out.append(decision(cand, False, r, predicted[cand.label]))
            elif keep and cand.label != best:
                out.append(self._judge(cand, predicted[cand.label], f0, r, noise, better=best))
            elif confirmed is not None and cand.label == best:
                out.append(confirmed)
            else:
                out.append(self._judge(cand, predicted[cand.label], f0, r, noise))
        return out

    def _refit(self) -> None:
        """Re-fit the cost model's scales to every plan measured so far."""
        points = []
        for m in self.measurements.values():
            if m.spec.startswith("sharding="):  # another program's T0: not this predictor's plan
                continue
            pred = self.predictor.predict(split_pipeline(m.spec), self.base_profile)
            if math.isfinite(pred.est_us):
                points.append((dict(pred.breakdown), m.f_us))
        if points:
            self.fitted, self.fit = fit_profile(self.base_profile, points)

    # -- sharding ----------------------------------------------------------------------------
    def _decide_sharding(self) -> list[Decision]:
        """The placement "auto" chose against the other policies, each as its own lifted T0:
        one warmup step and two observations each (like the alternatives of a family)."""
        profile = self.base_profile
        base = self.predictor.predict((), profile)
        current = sharding_plan(self.program.module).to_json()
        out: list[Decision] = []
        variants: list[tuple[Candidate, Prediction]] = []
        programs: dict[str, tuple[Any, Predictor]] = {}
        for choice in ("table_wise", "row_wise", "data_parallel"):
            cand = Candidate("sharding", choice, f"sharding={choice}", ())
            if self._over_budget():
                out.append(self._not_tried(cand, None))
                continue
            start = time.perf_counter()
            program = self.builder.export(choice)
            self.spent["export_s"] += time.perf_counter() - start
            if sharding_plan(program.module).to_json() == current:
                out.append(decision(cand, False, "no effect: the same placement as 'auto'"))
                continue
            lifted = program.module.clone()
            run_pipeline(lifted, [self.lift])
            predictor = Predictor(lifted)
            variants.append((cand, predictor.predict((), profile)))
            programs[choice] = (program, predictor)
        if not variants:
            return out
        variants.sort(key=lambda item: (round(item[1].est_us - base.est_us, 6), item[0].label))
        predicted = {c.label: p.est_us - base.est_us for c, p in variants}
        if self._over_budget():
            return out + [self._not_tried(c, predicted[c.label]) for c, _ in variants]
        error = self._ready([()])
        if error:
            return out + [decision(c, False, f"incumbent {error}", predicted[c.label]) for c, _ in variants]
        o0 = self._steps((), label="sharding=auto")
        (f0,), (noise,) = self._combine([o0])
        self._record(("sharding=auto",), f0, noise, o0)
        results: dict[str, float | str] = {}
        for cand, _ in variants:
            if self._over_budget():
                break
            program = programs[cand.label][0]
            error = self._ready([()], program)
            if error:
                results[cand.label] = error
                continue
            o1 = self._steps((), program, label=cand.change)
            (f1,), (spread,) = self._combine([o1])
            self._record((cand.change,), f1, spread, o1)
            results[cand.label] = f1
        decided = self._pick(variants, predicted, results, f0, noise, "budget" if self.exhausted else "")
        chosen = [d for d in decided if d.accepted]
        if chosen:
            self.program, self.predictor = programs[chosen[0].label]
            self.sharding_json = sharding_plan(self.program.module).to_json()
            self._models.clear()
            self._refit()
        return out + decided

    # -- the run -----------------------------------------------------------------------------
    def run(self, key: str = "", fields: Mapping[str, str] | None = None) -> PlanRecord:
        global CALIBRATIONS
        CALIBRATIONS += 1
        self._start = self.clock()
        with same_outcome(self.pg, self.world):
            lifted = self.program.module.clone()
            run_pipeline(lifted, [self.lift])
            self.predictor = Predictor(lifted)
        # Calibration must not move the RNG streams training draws from (dropout, sampling).
        devices = [torch.cuda.current_device()] if self._sync is not None else []
        with torch.random.fork_rng(devices=devices):
            sharding_decisions = self._decide_sharding() if self.try_sharding else []
            result = search(self.predictor, self.plan_options, self)
        if self.measurements:  # the record's fit covers every plan measured, accepted or not
            self._refit()
        t0 = self.measurements.get("")
        final = self.measurements.get(",".join(result.pipeline))
        calibration = self._elapsed()
        # Nothing of the candidates outlives planning: their buffers, kernels and the other
        # placements' shards go; the rank's own storage is back as it was before calibration.
        self._models.clear()
        self._touched.clear()
        self._locals = {id(self.program): self._locals[id(self.program)]} if id(self.program) in self._locals else {}
        local = time.perf_counter() - self._start if self.clock is time.perf_counter else calibration
        spent = {k: round(v, 3) for k, v in self.spent.items()}
        spent["analysis_s"] = round(
            max(0.0, local - self.spent["build_s"] - self.spent["steps_s"] - self.spent["export_s"]), 3
        )
        kernels = "generated" if any(pass_name(s) == "generate-kernels" for s in result.pipeline) else "reference"
        return PlanRecord(
            key=key,
            key_fields=dict(fields or {}),
            pipeline=result.pipeline,
            kernels=kernels,
            sharding=self.sharding_json,
            decisions=(*sharding_decisions, *result.decisions),
            measurements=tuple(self.measurements.values()),
            fit=self.fit,
            calibration_s=round(calibration, 3),
            spent=spent,
            budget_s=self.budget_s,
            budget_exhausted=self.exhausted,
            mode="measured",
            incumbent_us=None if t0 is None else t0.f_us,
            final_us=None if final is None else final.f_us,
            created=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        )


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
