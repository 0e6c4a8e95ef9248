"""Building and timing the planner's candidate plans: steady-state steps on the live tables, combined over ranks.

`PlanTimer` is what the planner is given to measure with (`sparselift.planner.Planner` receives
one, made by `resolve_plan` with the compiler's `CandidateBuilder`): it builds plans through the
builder and times them, a complete step as `TrainPipeline` runs it, on the rank's live table
storage with the touched rows put back after every step (`runtime.tables.TouchedRows`). It is the
`plan_confirm.PairMeasure` of every sequential paired test (rounds combined by MAX over the ranks,
so every rank decides the same), screens plans, keeps their measurements, and keeps the
calibration budget's clock. Tests give it a fake `measure` instead of a builder.
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import torch.distributed as dist
import torch.utils._pytree as pytree
from xdsl.passes import ModulePass

from sparselift.codegen.table_facts import describe_features, describe_tables
from sparselift.passes.pipeline import Pipeline, find_pass, pipeline_text
from sparselift.passes.plan_candidates import PlacementChoice
from sparselift.plan_record import Measurement
from sparselift.runtime.agree import same_outcome
from sparselift.runtime.allocator import release_freed_memory
from sparselift.runtime.compiled import CompileOptions
from sparselift.runtime.tables import LocalTables, TouchedRows

log = logging.getLogger("sparselift")

BUDGET_MIN_S = 5.0
"""Enough to build a model's plans (compiling their kernels) and test them against each other."""

SETTLE_MIN_STEPS = 4
SETTLE_MAX_STEPS = 8
SETTLE_TOLERANCE = 0.10
"""`PlanTimer.settle`: T0 runs at least `SETTLE_MIN_STEPS` steps, then until the last two are within
`SETTLE_TOLERANCE` of the fastest, at most `SETTLE_MAX_STEPS`. In a fresh process at real size
the first steps run slow: DIN's T0 took 366, 429, 315 and 355 ms, then 274-313 ms (a planner
record, bench/RESULTS.md "2026-12-05 (evening session)"). A paired test started then reads
the difference as the candidate's gain. No rule can see a drop still to come after a plateau of
slow steps: the minimum covers the steps seen slow."""


def _loss(out) -> torch.Tensor | None:
    leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
    if not leaves:
        return None
    return sum(t.float().sum() for t in leaves)


def example_ids_by_table(program, example_inputs: tuple) -> dict[str, torch.Tensor]:
    """Every id the example batch looks up, by IR table name (what calibration steps can update)."""
    from sparselift.ir.sched import DenseOp, StepOp

    step = next(op for op in program.module.body.block.ops if isinstance(op, StepOp))
    forward = step.forward.block
    sp_op = next(
        op for op in forward.ops if isinstance(op, DenseOp) and op.callee.root_reference.data == "sparse_inputs"
    )
    flat = pytree.tree_leaves((example_inputs, {}))
    tensors = [flat[i] for i in program.tensor_inputs]
    args = [tensors[list(forward.args).index(v)] for v in sp_op.operands]
    with torch.no_grad():
        per_feature = program.regions["sparse_inputs"](*args)
    out: dict[str, list[torch.Tensor]] = {t.name: [] for t in describe_tables(program.module)}
    for f, (ids, _offsets, _weights) in zip(describe_features(program.module), per_feature):
        out[f.table].append(ids.reshape(-1))
    return {name: torch.cat(ids) if ids else torch.zeros(0, dtype=torch.int64) for name, ids in out.items()}


def _freeze_tables(model) -> None:
    """A candidate's sparse updates with a learning rate of 0: each kernel does all of its work
    (the same time), but `w - 0 * update` is `w`, so its steps leave the tables as they were
    (a -0.0 entry may come back +0.0, the same value) and only the optimizer states change."""
    for group in model.sparse_optimizer.param_groups:
        group["lr"] = 0.0


class PlanTimer:
    """Builds and times plans on this rank of the group; a `plan_confirm.PairMeasure`."""

    def __init__(
        self,
        program,
        local: LocalTables,
        example_inputs: tuple,
        *,
        lift: ModulePass,
        world: int,
        process_group,
        options: CompileOptions,
        builder: Any = None,
        measure: Callable[[str], float] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        cache_models: int = 3,
        sync: Callable[[], None] | None = None,
    ):
        self.program, self.inputs = program, example_inputs  # `program`: what plans are built from
        self.lift, self.world, self.pg, self.options = lift, world, process_group, options
        # Builds the candidates (`planner.CandidateBuilder`); without one (tests with `measure`),
        # only injected timings: `measure(plan text)` -> seconds.
        self.builder, self.measure, self.clock, self._sync = builder, measure, clock, sync
        # Table storage per program (the sharding family's alternatives place tables elsewhere),
        # and the rows its calibration steps touch, put back after every step.
        self._locals: dict[int, LocalTables] = {id(program): local} if program is not None else {}
        self._touched: dict[int, TouchedRows] = {}
        self._models: OrderedDict[tuple[int, Pipeline], Any] = OrderedDict()
        self._warm: set[tuple[int, Pipeline]] = set()  # built plans that have run a step since
        self.cache_models = cache_models
        self.placements: dict[PlacementChoice, Any] = {}  # other placements' programs (sharding)
        self.measurements: dict[Pipeline | PlacementChoice, Measurement] = {}  # latest last
        self.budget_s = float(options.calibration_budget_s)
        self.budget_share = 1.0  # of the budget the current phase may spend (the search's, then all)
        self.exhausted = False
        # The family being decided gets an even part of what the search has left (`share_family`):
        # (elapsed when it started, or None until the next budget check, and how many come after).
        self._family_share: tuple[float | None, int] | None = None
        self.share_spent = False  # the current family's part is spent (the budget may not be)
        self._start = 0.0
        self._longest_step_s = 0.0  # the longest step observed (what the budget keeps in reserve)
        # Each plan's fastest step (not warmups), and the plan the budget is sized to: the one the
        # planner would return now (the incumbent, then what it accepts, then the chosen plan).
        self._fastest: dict[tuple[int, Pipeline], float] = {}
        # T0: where the search starts (`plan_candidates.start_plan`, set by the planner); another
        # placement's plan is measured as its own T0.
        self.start_plan: Pipeline = ()
        self._sized_by: tuple[int, Pipeline] = (id(program), ())
        # Where calibration time goes: building candidate plans (IR, plan module, kernels), timed
        # steps (warmups included), exports of sharding alternatives; the rest is analysis
        # (candidates, predictions, fits) and waiting for the other ranks.
        self.spent: dict[str, float] = {
            "build_s": 0.0,
            "steps_s": 0.0,
            "steps": 0,
            "settle_steps": 0,
            "builds": 0,
            "export_s": 0.0,
            "paired_rounds": 0,
        }

    def start(self, start_plan: Pipeline = ()) -> None:
        """Start the budget's clock, from T0 = `start_plan` (the budget is sized to it until the
        search accepts something)."""
        self._start = self.clock()
        self.start_plan = tuple(start_plan)
        self._sized_by = (id(self.program), self.start_plan)

    @property
    def synchronizes(self) -> bool:
        """Steps are timed on a device that runs asynchronously (CUDA): each timing synchronizes."""
        return self._sync is not None

    def spent_report(self, calibration_s: float) -> dict[str, float]:
        """Where this rank's calibration went; `analysis_s` is the rest (candidates, predictions,
        fits, waiting for the other ranks)."""
        local = time.perf_counter() - self._start if self.clock is time.perf_counter else calibration_s
        spent = {k: round(v, 3) for k, v in self.spent.items()}
        busy = self.spent["build_s"] + self.spent["steps_s"] + self.spent["export_s"]
        spent["analysis_s"] = round(max(0.0, local - busy), 3)
        return spent

    def use_program(self, program) -> None:
        """Build plans from `program` from now on (the sharding family chose its placement)."""
        self.program = program
        self._sized_by = (id(program), self.start_plan)
        self._models.clear()
        self._warm.clear()

    def release(self) -> None:
        """Drop every candidate's buffers and kernels and the other placements' shards, and give
        the freed memory back to the OS: the rank's own storage is back as it was before
        calibration."""
        self._models.clear()
        self._warm.clear()
        self._touched.clear()
        own = id(self.program)
        self._locals = {own: self._locals[own]} if own in self._locals else {}
        self.placements.clear()
        gc.collect()  # the candidates' plans may sit in reference cycles (autograd, closures)
        release_freed_memory()  # else glibc keeps calibration's high-water mark resident

    # -- collective helpers ------------------------------------------------------------------
    def max(self, values: Sequence[float]) -> list[float]:
        """Element-wise MAX over the ranks (identity on one rank)."""
        if self.world == 1 or not (dist.is_available() and dist.is_initialized()):
            return [float(v) for v in values]
        device = "cuda" if self._sync is not None and dist.get_backend(self.pg) == "nccl" else "cpu"
        t = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.pg)
        return t.cpu().tolist()

    def elapsed(self) -> float:
        return self.max([self.clock() - self._start])[0]

    def _sized_budget(self, fastest_s: float) -> float:
        """`CompileOptions.calibration_steps` steps of the plan the planner would return now (by
        default 50: 5% of a 1000-step run of what it has found, so calibration pays for itself in
        a short run), at least BUDGET_MIN_S, never above `calibration_budget_s` (0: none). It
        shrinks as faster plans are accepted (with reference kernels, a T0 step at real size can
        take 3 s, the generated plan's 0.5 s)."""
        cap = float(self.options.calibration_budget_s)
        if cap <= 0 or not fastest_s < math.inf:
            return cap
        return round(min(cap, max(BUDGET_MIN_S, self.options.calibration_steps * fastest_s)), 3)

    def size_by(self, plan: Pipeline) -> None:
        """Size the budget to `plan`'s step from now on: the plan the planner would return now.
        Not to the fastest step seen: a candidate's fast steps would shrink the budget in the
        middle of the very test that decides whether to take it (at real size a T0 round of the
        reference lowering costs seconds)."""
        self._sized_by = (id(self.program), plan)

    def share_family(self, families_after: int | None) -> None:
        """Give the family about to be decided an even part of what is left of the search's
        budget, shared with the `families_after` still to come (None: no family part, the whole
        budget, as for the confirmation). Without it, the first family to test a close call
        (a gain within the noise) spends the whole budget on it and the later ones go untried,
        however much they would gain; a family that finishes early leaves its rest to the next."""
        self._family_share = None if families_after is None else (None, max(0, families_after))
        self.share_spent = False

    def _standing(self) -> tuple[float, float, float, float, float]:
        """(elapsed, longest step, limit, the sized plan's fastest step, mean build): the slowest
        rank's figures; the budget is re-sized to the plan the planner would return now."""
        now = self.clock() - self._start
        step = self._fastest.get(self._sized_by, math.inf)
        builds = self.spent["builds"]
        build = self.spent["build_s"] / builds if builds else 0.0
        elapsed, longest, fastest, build = self.max([now, self._longest_step_s, step, build])
        self.budget_s = self._sized_budget(fastest)
        return elapsed, longest, self.budget_share * self.budget_s, fastest, build

    def _family_limit(self, elapsed: float, limit: float) -> float | None:
        """Where the current family's part ends (None: no family part); its start is the first
        budget check after `share_family`."""
        if self._family_share is None:
            return None
        started, after = self._family_share
        if started is None:
            started = elapsed
            self._family_share = (started, after)
        return started + (limit - started) / (after + 1)

    def over_budget(self) -> bool:
        """Spent (`budget_share` of the budget, sized to the returned plan's step, or the current
        family's part of it: `share_family`), or too little left for one more paired round (two of
        the longest steps seen): the budget is a bound, not a mark to overrun by a round of slow
        T0 steps. Every figure is the slowest rank's."""
        if self.exhausted:
            return True
        elapsed, longest, limit, _, _ = self._standing()
        if elapsed + 2 * longest > limit:
            self.exhausted = True
            return True
        family = self._family_limit(elapsed, limit)
        if family is not None:
            self.share_spent = elapsed + 2 * longest > family
        return self.share_spent

    def fits(self, steps: int, builds: int = 0) -> bool:
        """Whether `steps` more steps of the plan the budget is sized to (its fastest so far, else
        the longest seen) and `builds` more plan builds (the mean so far) still fit in the current
        family's part and in the budget, with `over_budget`'s reserve. Marks nothing spent; every
        rank gets the same answer."""
        if self.exhausted:
            return False
        elapsed, longest, limit, fastest, build = self._standing()
        step = fastest if math.isfinite(fastest) else longest
        end = elapsed + 2 * longest + steps * step + builds * build
        family = self._family_limit(elapsed, limit)
        return end <= limit and (family is None or end <= family)

    # -- building plans ----------------------------------------------------------------------
    def _model(self, pipeline: Pipeline, program=None):
        program = program or self.program
        key = (id(program), pipeline)
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key]
        if self.builder is None:
            raise RuntimeError("the planner was given no way to build candidate plans (no builder)")
        kernels = "generated" if find_pass(pipeline, "generate-kernels") else "reference"
        opts = attrs.evolve(self.options, kernels=kernels, benchmark=False)
        start = time.perf_counter()
        model = self.builder.build(program, self._local(program), (self.lift, *pipeline), opts)
        _freeze_tables(model)
        self.spent["build_s"] += time.perf_counter() - start
        self.spent["builds"] += 1
        self._models[key] = model
        self._warm.discard(key)  # built anew: cold until it has run once
        self.keep_models(self.cache_models)
        return model

    def keep_models(self, n: int) -> None:
        """Keep at most `n` built plans from now on, the most recently used: the others are
        dropped now (their buffers freed)."""
        self.cache_models = n
        while len(self._models) > n:
            self._warm.discard(self._models.popitem(last=False)[0])

    def _local(self, program) -> LocalTables:
        """The table storage `program`'s candidates run on; the first time, also the rows the
        example batch touches on it (an all-gather: every rank builds in the same order)."""
        key = id(program)
        if key not in self._touched:
            # Local work first, agreed on every rank: a rank failing here must not leave the
            # others in TouchedRows' all-gather.
            with same_outcome(self.pg, self.world):
                if key not in self._locals:
                    if self.builder is None:
                        raise RuntimeError("the planner was given no way to place another program's tables")
                    self._locals[key] = self.builder.take_shards(program)
                ids = example_ids_by_table(program, self.inputs)
            # Candidates train with a learning rate of 0 (`_model`): the tables stay as they are,
            # only the optimizer states' touched rows are saved and put back.
            self._touched[key] = TouchedRows(
                self._locals[key], ids, process_group=self.pg, world=self.world, tables_frozen=True
            )
        return self._locals[key]

    def ready(self, pipelines: Sequence[Pipeline], program=None) -> str | None:
        """Build the plans (on the live tables, scratch dense copies).

        Returns the error, the same on every rank, if any rank failed."""
        error = ""
        if self.measure is None:
            for p in pipelines:
                try:
                    self._model(p, program)
                except Exception as e:  # a candidate that cannot be built is rejected, not fatal
                    error = f"{type(e).__name__}: {e}"
                    what = pipeline_text(p) or "the lifted plan"
                    log.warning("sparselift: calibration could not build %s: %s", what, error)
                    break
        failed = self.max([1.0 if error else 0.0])[0]
        if failed:
            return f"failed to build: {error}" if error else "failed to build on another rank"
        return None

    def warm(self, plan: Pipeline | PlacementChoice) -> None:
        """One step of `plan` unless it ran since it was built: the first step after a build (or
        a rebuild, once evicted) is not a steady-state one. Not an observation."""
        placed = isinstance(plan, PlacementChoice)
        pipeline, program = (self.start_plan, self.placements[plan]) if placed else (plan, self.program)
        if (id(program), pipeline) not in self._warm:
            self.observe(pipeline, program, str(plan) if isinstance(plan, PlacementChoice) else "", warmup=True)

    def settle(
        self,
        plan: Pipeline,
        *,
        min_steps: int = SETTLE_MIN_STEPS,
        max_steps: int = SETTLE_MAX_STEPS,
        tolerance: float = SETTLE_TOLERANCE,
    ) -> list[float]:
        """Warmup steps of `plan` (T0, before the search's first test) until its step time has
        settled: at least `min_steps`, and the last two within `tolerance` of the fastest (each the
        slowest rank's, so every rank stops at the same step), at most `max_steps` or until the
        budget is spent. A process's first steps run slower than its later ones (heap growth,
        page faults, caches); the first paired test would otherwise read that as the candidate's
        gain. Returns the steps' seconds; none of them is an observation, but the last two size
        the budget until `plan` has one."""
        steps: list[float] = []
        while len(steps) < max_steps and not self.over_budget():
            steps.append(self.max([self.observe(plan, warmup=True)])[0])
            self.spent["settle_steps"] += 1
            if len(steps) >= max(2, min_steps) and all(s <= (1 + tolerance) * min(steps) for s in steps[-2:]):
                break
        if steps:
            # The last steps size the budget and price the next steps until `plan` has an
            # observation. Without them the first family to decide would plan its screening
            # against the budget's cap, with steps that cost nothing, screen every schedule, and
            # leave its race no rounds (as at real size, where latency hiding is decided first).
            for step in steps[-2:]:
                self._note_step((id(self.program), plan), step)
        return steps

    def observe(self, pipeline: Pipeline, program=None, label: str = "", warmup: bool = False) -> float:
        """One complete step (forward + backward) of `pipeline` on the example batch, in seconds
        (a `warmup` step is not taken as an observation: neither the fastest nor the longest)."""
        self.spent["steps"] += 1
        key = (id(program or self.program), pipeline)
        if self.measure is not None:  # a test's fake timings, by the plan's text
            dt = float(self.measure(label or pipeline_text(pipeline)))
            self._warm.add(key)
            if not warmup:
                self._note_step(key, dt)
            return dt
        model = self._model(pipeline, program)
        if self._sync:
            self._sync()
        t0 = time.perf_counter()
        out = model(*self.inputs)
        # A steady-state step as TrainPipeline runs it: the next batch's input exchange starts
        # during this one (plans without start ops do nothing here) and moves on after backward.
        model.start(*self.inputs)
        loss = _loss(out)
        if loss is not None:
            loss.backward()
        model.advance()
        if self._sync:
            self._sync()
        dt = time.perf_counter() - t0
        self._warm.add(key)
        if not warmup:
            self._note_step(key, dt)
        self._touched[id(program or self.program)].restore()  # every step starts from the same tables
        for p in model._dense_params:
            p.grad = None
        self.spent["steps_s"] += time.perf_counter() - t0
        return dt

    def _note_step(self, key: tuple[int, Pipeline], dt: float) -> None:
        self._longest_step_s = max(self._longest_step_s, dt)
        self._fastest[key] = min(self._fastest.get(key, math.inf), dt)

    def _combine(self, obs: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
        """Per plan: F (us), the MAX over ranks of each rank's minimum, and the noise (us), the
        MAX over ranks of each rank's spread (max - min)."""
        local = [min(o) * 1e6 for o in obs] + [(max(o) - min(o)) * 1e6 for o in obs]
        combined = self.max(local)
        return combined[: len(obs)], combined[len(obs) :]

    def record(self, plan: Pipeline | PlacementChoice, f_us: float, noise_us: float, obs: Sequence[float]) -> None:
        """The latest F and noise of `plan`, and its observations added to those of earlier
        comparisons: the cost model is fitted to their median, which two screening steps with one
        spike (a 2x step is common on this VM) would otherwise decide."""
        earlier = self.measurements.pop(plan, None)  # latest last
        text = str(plan) if isinstance(plan, PlacementChoice) else pipeline_text(plan)
        observations = (earlier.observations_us if earlier else ()) + tuple(round(o * 1e6, 3) for o in obs)
        self.measurements[plan] = Measurement(text, round(f_us, 3), round(noise_us, 3), observations)

    # -- what a decision measures ------------------------------------------------------------
    def observe_plan(self, plan: Pipeline | PlacementChoice) -> float:
        """One step of a plan of this program, or of another placement's T0 (sharding)."""
        if isinstance(plan, PlacementChoice):
            return self.observe(self.start_plan, self.placements[plan], str(plan))
        return self.observe(plan)

    def pair(self, baseline, candidate, candidate_first: bool) -> tuple[float, float]:
        """One step of each plan, back to back; each the slowest rank's (seconds)."""
        order = (candidate, baseline) if candidate_first else (baseline, candidate)
        first, second = (self.observe_plan(p) for p in order)
        t_base, t_cand = (second, first) if candidate_first else (first, second)
        slowest = self.max([t_base, t_cand])
        self.spent["paired_rounds"] += 1
        return slowest[0], slowest[1]

    def screen(self, plans: Sequence[Pipeline | PlacementChoice]) -> list[float]:
        """A warmup step of each plan not yet warm, then two interleaved rounds; F per plan (us), recorded."""
        for plan in plans:
            self.warm(plan)
        obs: list[list[float]] = [[] for _ in plans]
        for _ in range(2):
            for i, plan in enumerate(plans):
                obs[i].append(self.observe_plan(plan))
        f, spread = self._combine(obs)
        # The cost model is refitted to the recorded observations and the next candidates are
        # ordered by its predictions: each rank's own steps would fit a different model on each
        # rank, and the ranks would go on to time different plans (exchanges that do not match).
        slowest = self.max([o for steps in obs for o in steps])
        for i, plan in enumerate(plans):
            self.record(plan, f[i], spread[i], slowest[2 * i : 2 * i + 2])
        return f


__all__ = ["BUDGET_MIN_S", "PlanTimer", "example_ids_by_table"]
