"""SparseLift as a benchmarked system: a model compiled with `sparselift.compile`, its tables trained
with the benchmark's sparse optimizer (SGD by default) fused into backward, its dense part with SGD.

`CompiledRunner` compiles any model (its batches' forward arguments given by a function);
`SparseLiftRunner` is the DLRM of `bench dlrm` (the DIN of `bench seq` is in `bench.seq_systems`).

Same interface as the peers in `sparselift.bench.baselines`: `progress() -> loss` (one step of
`sparselift.TrainPipeline` over the runner's data, like TorchRec's pipeline), `step(local_batch)`
(one unpipelined step), `enable_stage_timing()`, `stage_times` (one `StageTimes` per timed step,
in ms).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import torch
import torch.nn.functional as F

from sparselift.bench.timing import StageTimes
from sparselift.codegen.table_facts import sharding_plan
from sparselift.data.batch import Batch
from sparselift.models.dlrm import DLRMConfig, build_dlrm
from sparselift.placement import ShardingPlan


def dlrm_inputs(batch: Batch) -> tuple:
    """A Batch as DLRM's forward arguments (offsets in the reference's B-entry convention)."""
    return batch.dense, [ids for ids, _ in batch.sparse], [offsets[:-1] for _, offsets in batch.sparse]


LOWERING_FIELDS = ("rows", "replicated_grads", "narrow_ids", "transport")
"""The `CompileOptions` fields a benchmark may set per system or ablation row: those that choose
the default lowering (lift-sparse's options), and the all-to-alls' transport."""


class CompiledRunner:
    """A model compiled by `sparselift.compile` and trained (sparse: `sparse_optimizer`, a
    `sparselift.optim` record, default SGD at `lr`, fused in backward; dense: `torch.optim.SGD`).
    `inputs_of(batch)` gives the model's forward arguments of a batch with a `labels` field;
    `batches` (optional) feeds `progress()` through `TrainPipeline`."""

    name = "SparseLift"

    def __init__(
        self,
        model: torch.nn.Module,
        example: Any,
        inputs_of: Callable[[Any], tuple],
        lr: float,
        *,
        table_init: Callable | None = None,
        kernels: str = "generated",
        sharding: str | ShardingPlan = "auto",
        batches: Iterable[Any] | None = None,
        passes: str | None = None,
        max_lengths: dict[str, int] | None = None,
        plan_cache: str | None = None,
        lowering: Mapping[str, Any] | None = None,
        sparse_optimizer: Any = None,
    ) -> None:
        """`passes`: an explicit pipeline after lift-sparse (no planning); None: the planner decides.
        `max_lengths`: `CompileOptions.max_lengths` (a TorchRec EmbeddingCollection's keys).
        `plan_cache`: refine the plan cached there (`plan="refine"`) instead of planning afresh.
        `lowering`: `CompileOptions` lowering fields other than the defaults (`LOWERING_FIELDS`).
        `sparse_optimizer`: the tables' record; a model whose tables carry in-backward optimizers
        (TorchRec's `apply_optimizer_in_backward`) trains with those, which must then be it."""
        import sparselift

        self.sparse_optimizer, compile_optimizer = _tables_optimizer(model, sparse_optimizer, lr)
        self._inputs_of = inputs_of
        self._timing = False
        start = time.perf_counter()
        self.compiled = sparselift.compile(
            model,
            inputs_of(example),
            sharding=sharding,
            sparse_optimizer=compile_optimizer,
            # A benchmark plans afresh (calibration reported in its setup time), never from a
            # plan cached by an earlier run; with `plan_cache` it goes on with the earlier runs'
            # undecided paired tests (calibrating as much as a fresh plan).
            options=attrs.evolve(
                sparselift.CompileOptions(
                    kernels=kernels,
                    benchmark=True,
                    passes=passes or "",
                    plan="none" if passes is not None else "refine" if plan_cache else "replan",
                    cache_dir=plan_cache,
                    table_init=table_init,
                    max_lengths=max_lengths,
                ),
                **dict(lowering or {}),
            ),
        )
        self.compile_s = time.perf_counter() - start
        record = getattr(self.compiled.plan, "record", None)
        self.plan_summary = {
            "pipeline": self.compiled.plan.lowering
            + (f",{record.spec}" if record is not None and record.spec else f",{passes}" if passes else ""),
            "calibration_s": getattr(self.compiled.plan, "calibration_s", 0.0),
            "planning": getattr(self.compiled.plan, "planning", ""),  # planned afresh, or refined from what
            "transport": getattr(self.compiled.plan, "transport", ""),  # the all-to-alls': shm or gloo
            # Why the planner chose this pipeline: what it kept from T0 (the default lowering),
            # each measured candidate and its verdict, and those the budget left untried.
            "decisions": plan_decisions(record),
            # Where each table lies in what compiled (the sharding asked for, or the plan's).
            "sharding": json.loads(sharding_plan(self.compiled.program.module).to_json()),
        }
        self.dense_opt = torch.optim.SGD([p for _, p in self.compiled.dense_named_parameters()], lr=lr)
        self._steps: list[StageTimes] = []
        self.pipeline = None
        if batches is not None:
            from sparselift.runtime.pipeline import TrainPipeline

            self.pipeline = TrainPipeline(
                self.compiled, self.dense_opt, ((inputs_of(b), b.labels) for b in batches), _bce
            )

    def enable_stage_timing(self, on: bool = True) -> None:
        self._timing = on

    @property
    def stage_times(self) -> list[StageTimes]:
        return list(self._steps)

    def forward(self, local_batch: Any) -> torch.Tensor:
        with torch.no_grad():
            return self.compiled(*self._inputs_of(local_batch))

    def progress(self) -> float:
        start = time.perf_counter()
        loss = self.pipeline.progress()
        self._record((time.perf_counter() - start) * 1e3)
        return float(loss)

    def step(self, local_batch: Any) -> float:
        start = time.perf_counter()
        self.dense_opt.zero_grad(set_to_none=False)
        out = self.compiled(*self._inputs_of(local_batch))
        loss = _bce(out, local_batch.labels)
        loss.backward()
        self.dense_opt.step()
        self._record((time.perf_counter() - start) * 1e3)
        return float(loss.detach())

    def _record(self, wall: float) -> None:
        if self._timing and self.compiled.stage_times:
            t = {k: v * 1e3 for k, v in self.compiled.stage_times[-1].items()}
            other = max(0.0, wall - sum(t.values()))
            self._steps.append(StageTimes(t["sparse_fwd"], t["other_fwd"], t["sparse_bwd"], t["other_bwd"], other))
        self.compiled.stage_times.clear()


def _tables_optimizer(model: torch.nn.Module, chosen: Any, lr: float) -> tuple[Any, Any]:
    """The tables' optimizer record, and what `compile(sparse_optimizer=)` takes: the record, or
    None where the model's tables carry in-backward optimizers (compile() refuses both at once;
    the carried ones must then be the chosen record, or `chosen` is None)."""
    from sparselift.optim import SGD, from_class, in_backward_optimizers

    carried = in_backward_optimizers(dict(model.named_parameters()))
    if not carried:
        record = chosen if chosen is not None else SGD(lr=lr)
        return record, record
    theirs = {from_class(cls, kwargs, where=name) for name, (cls, kwargs) in carried.items()}
    if chosen is not None and theirs != {chosen}:
        raise ValueError(
            f"the model's tables carry in-backward optimizers {sorted(map(repr, theirs))}, not the "
            f"benchmark's {chosen!r}: attach that one, or none"
        )
    return (chosen if chosen is not None else next(iter(theirs))), None


def _bce(out: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(out.reshape(-1), labels)


def plan_decisions(record) -> list[str]:
    """The planner's decisions worth a line in a benchmark's report: what it kept or accepted,
    each candidate it measured or began to test (a test the budget ended after 0 rounds
    included, so a schedule screened below the incumbent does not vanish from the report), and
    those the budget left untried or unscreened; not the candidates rejected before any
    measurement."""
    return [
        f"[{'accepted' if d.accepted else 'rejected'}] {d.family} {d.label}: {d.reason}"
        for d in (record.decisions if record is not None else ())
        if d.accepted
        or d.measured_us is not None
        or d.reason.startswith(("not tried", "not screened"))
        or "paired rounds" in d.reason
    ]


class SparseLiftRunner(CompiledRunner):
    """SparseLift on the DLRM: built on the meta device, so the compiled model materializes
    this rank's shards only, with the seeded values every other system draws too
    (`DLRM.table_init`)."""

    def __init__(
        self,
        config: DLRMConfig,
        rank: int,
        world: int,
        lr: float,
        seed: int,
        example: Batch,
        *,
        kernels: str = "generated",
        sharding: str | ShardingPlan = "auto",
        batches=None,
        passes: str | None = None,
        plan_cache: str | None = None,
        lowering: Mapping[str, Any] | None = None,
        sparse_optimizer: Any = None,
    ) -> None:
        model, _ = build_dlrm(
            attrs.evolve(config, return_logits=True), batch_size=example.batch_size, seed=seed, device="meta"
        )
        super().__init__(
            model,
            example,
            dlrm_inputs,
            lr,
            table_init=model.table_init,
            kernels=kernels,
            sharding=sharding,
            batches=batches,
            passes=passes,
            plan_cache=plan_cache,
            lowering=lowering,
            sparse_optimizer=sparse_optimizer,
        )
