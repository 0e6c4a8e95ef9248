"""Building and timing the planner's candidate plans: steady-state steps on the live tables, combined over ranks.

`sparselift.planner.Planner` decides; `PlanTiming`, its base class, gives it the observations
(a complete step as `TrainPipeline` runs it, on the rank's live table storage with the touched
rows put back after every step, `runtime.tables.TouchedRows`), the MAX over ranks that makes F
and every decision the same on all ranks, and the calibration budget's clock. The state it works
on (program, tables, builder, options, budget, timings) is the planner's, set in its `__init__`.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import torch
import torch.distributed as dist
import torch.utils._pytree as pytree

from sparselift.codegen.table_facts import describe_features, describe_tables
from sparselift.passes.pipeline import Pipeline, find_pass, pipeline_text
from sparselift.passes.plan_candidates import PlacementChoice, plan_label
from sparselift.plan_record import Measurement
from sparselift.runtime.agree import same_outcome
from sparselift.runtime.compiled import CompileOptions
from sparselift.runtime.tables import LocalTables, TouchedRows

log = logging.getLogger("sparselift")


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


class PlanTiming:
    """Builds and times plans for `sparselift.planner.Planner` (its base class; the attributes
    below are set by the planner's `__init__`)."""

    program: Any
    inputs: tuple
    builder: Any  # a `planner.CandidateBuilder`, or None (tests with `measure`: injected timings)
    lift: Any  # the lift-sparse pass every plan starts with
    world: int
    pg: Any
    options: CompileOptions
    measure: Callable[[str], float] | None
    clock: Callable[[], float]
    budget_s: float
    exhausted: bool
    measurements: dict[Pipeline | PlacementChoice, Measurement]
    spent: dict[str, float]
    _locals: dict[int, LocalTables]
    _touched: dict[int, TouchedRows]
    _models: OrderedDict[tuple[int, Pipeline], Any]
    _cache_models: int
    _start: float
    _longest_step_s: float  # the longest step observed (what the budget keeps in reserve)
    _sync: Callable[[], None] | None

    # -- collective helpers ------------------------------------------------------------------
    def _max(self, values: Sequence[float]) -> list[float]:
        """Element-wise MAX over the ranks (identity on one rank)."""
        if self.world == 1 or not (dist.is_available() and dist.is_initialized()):
            return [float(v) for v in values]
        device = "cuda" if self._sync is not None and dist.get_backend(self.pg) == "nccl" else "cpu"
        t = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.pg)
        return t.cpu().tolist()

    def _elapsed(self) -> float:
        return self._max([self.clock() - self._start])[0]

    def _over_budget(self) -> bool:
        """Spent, or too little left for one more paired round (two of the longest steps seen, on
        the slowest rank): the budget is a bound, not a mark to overrun by a round of slow T0 steps."""
        if not self.exhausted:
            elapsed, longest = self._max([self.clock() - self._start, self._longest_step_s])
            if elapsed + 2 * longest > self.budget_s:
                self.exhausted = True
        return self.exhausted

    # -- building and timing plans -----------------------------------------------------------
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
        model = self.builder.build(program, self._local(program), [self.lift, *pipeline], opts)
        self.spent["build_s"] += time.perf_counter() - start
        self._models[key] = model
        while len(self._models) > self._cache_models:
            self._models.popitem(last=False)
        return model

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
            self._touched[key] = TouchedRows(self._locals[key], ids, process_group=self.pg, world=self.world)
        return self._locals[key]

    def _ready(self, pipelines: Sequence[Pipeline], program=None) -> str | None:
        """Build the plans (on the live tables, scratch dense copies).

        Returns the error, the same on every rank, if any rank failed."""
        error = ""
        if self.measure is None:
            for p in pipelines:
                try:
                    self._model(p, program)
                except Exception as e:  # a candidate that cannot be built is rejected, not fatal
                    error = f"{type(e).__name__}: {e}"
                    log.warning("sparselift: calibration could not build %s: %s", plan_label(p), error)
                    break
        failed = self._max([1.0 if error else 0.0])[0]
        if failed:
            return f"failed to build: {error}" if error else "failed to build on another rank"
        return None

    def _observe(self, pipeline: Pipeline, program=None, label: str = "") -> float:
        """One complete step (forward + backward) of `pipeline` on the example batch, in seconds."""
        self.spent["steps"] += 1
        if self.measure is not None:  # a test's fake timings, by the plan's text
            dt = float(self.measure(label or pipeline_text(pipeline)))
            self._longest_step_s = max(self._longest_step_s, dt)
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
        self._longest_step_s = max(self._longest_step_s, dt)
        self._touched[id(program or self.program)].restore()  # every step starts from the same tables
        for p in model._dense_params:
            p.grad = None
        self.spent["steps_s"] += time.perf_counter() - t0
        return dt

    def _combine(self, obs: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
        """Per plan: F (us), the MAX over ranks of each rank's minimum, and the noise (us), the
        MAX over ranks of each rank's spread (max - min)."""
        local = [min(o) * 1e6 for o in obs] + [(max(o) - min(o)) * 1e6 for o in obs]
        combined = self._max(local)
        return combined[: len(obs)], combined[len(obs) :]

    def _record(self, plan: Pipeline | PlacementChoice, f_us: float, noise_us: float, obs: Sequence[float]) -> None:
        self.measurements.pop(plan, None)  # latest last
        text = str(plan) if isinstance(plan, PlacementChoice) else pipeline_text(plan)
        self.measurements[plan] = Measurement(
            text, round(f_us, 3), round(noise_us, 3), tuple(round(o * 1e6, 3) for o in obs)
        )

    def _steps(self, pipeline: Pipeline, program=None, label: str = "") -> list[float]:
        """One warmup step, then two complete-step observations."""
        self._observe(pipeline, program, label)
        return [self._observe(pipeline, program, label), self._observe(pipeline, program, label)]


__all__ = ["PlanTiming", "example_ids_by_table"]
