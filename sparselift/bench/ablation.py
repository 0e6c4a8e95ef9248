"""`sparselift bench ablation`: what each of the four optimizations is worth, the paper's way.

One run compiles the same DLRM (or, `--model din`, `bench seq`'s DIN) under ten pass pipelines
and trains each through `TrainPipeline` on 2 local gloo ranks, interleaving the configurations
round by round so machine drift cancels out:

- `unoptimized`: `lift-sparse` alone (reference kernels, synchronous exchanges);
- each optimization alone: `+aggregate-comm`, `+parallelize-tables`, `+generate-kernels`,
  `+hide-latency`;
- `all four`;
- all four minus each one.

`generate-kernels` selects the generated C kernels (without it the per-table reference
lowering runs). The planner is off: each row is exactly its pipeline. Per row: median and
p25/p75 step time, the five-column stage breakdown and the speedup over `unoptimized`. Every row
trains its tables with `--sparse-optimizer` (default SGD) at `--lr`, its dense part with SGD.

Cost-model accuracy: first the planner calibrates as `compile()` does; its fitted profile then
predicts every row's forward + backward time, next to the measured one (median absolute error
in `cost_model`; `--no-cost-model` skips this). `--pipeline NAME=PIPELINE` (repeated) runs those
pipelines instead of the ten rows: an interleaved A/B of chosen schedules; `--sharding
NAME=SHARDING` compiles row NAME under another placement (a policy or a plan JSON file), so one
run compares placements too, and `--lowering NAME=FIELD=VALUE` another default lowering or
transport (a `CompileOptions` field of `LOWERING_FIELDS`, e.g. `narrow_ids=false`, `transport=gloo`).
JSON: `{"rows": [{"config", "pipeline", "kernels", "sharding", "lowering", "placed", "step_ms_median", "step_ms_p25",
"step_ms_p75", "speedup", "breakdown": {...}, "steps_ms": [...], "stage_steps_ms": [{...}]}],
"config": {...}, "machine": {...}}`; `steps_ms` and `stage_steps_ms` are every timed step (the
slowest rank's, each stage's slowest rank) in timed order.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import attrs

from sparselift.bench.dlrm import (
    COLUMNS,
    BenchConfig,
    _pct,
    _progress,
    add_optimizer_arguments,
    apply_host_memory,
    dlrm_config,
    machine_info,
    report,
    rows_cap_arg,
    sparse_optimizer_record,
)
from sparselift.placement import ShardingPlan
from sparselift.tools.arguments import add_host_memory_argument, load_sharding

SEQUENCE_MODELS = ("din",)  # `bench seq`'s model: batch 1,024 per rank by default, no cost-model rows

OPTIMIZATIONS = {
    "aggregate-comm": "aggregate-comm",
    "parallelize-tables": "parallelize-tables{groups=2}",
    "generate-kernels": "generate-kernels",
    "hide-latency": "hide-latency",
}


@attrs.frozen
class AblationRow:
    """One configuration: its name, pass pipeline (after lift-sparse) and runtime kernels."""

    config: str
    pipeline: str
    kernels: str
    sharding: str | ShardingPlan = "auto"  # the row's placement (`--sharding NAME=...`)
    lowering: tuple[tuple[str, Any], ...] = ()  # CompileOptions lowering fields (`--lowering NAME=...`)


def ablation_rows() -> list[AblationRow]:
    names = list(OPTIMIZATIONS)

    def row(label: str, enabled: Sequence[str]) -> AblationRow:
        pipeline = ",".join(OPTIMIZATIONS[n] for n in names if n in enabled)
        return AblationRow(label, pipeline, "generated" if "generate-kernels" in enabled else "reference")

    rows = [row("unoptimized", [])]
    rows += [row(f"+{n}", [n]) for n in names]
    rows.append(row("all four", names))
    rows += [row(f"all four - {n}", [m for m in names if m != n]) for n in names]
    return rows


def custom_rows(
    specs: Sequence[str], shardings: Sequence[str] = (), lowerings: Sequence[str] = ()
) -> list[AblationRow]:
    """`NAME=PIPELINE` per row (the pipeline after lift-sparse; generated kernels when it has
    `generate-kernels`): an A/B of chosen pipelines, interleaved like the ten rows.
    `shardings`: `NAME=SHARDING` for a row placed otherwise than "auto"; `lowerings`:
    `NAME=FIELD=VALUE` for a row lowered otherwise than by default."""
    from sparselift.passes.pipeline import find_pass, parse_pipeline

    rows = []
    for spec in specs:
        name, sep, pipeline = (part.strip() for part in spec.partition("="))
        if not sep or not name:
            raise ValueError(f"--pipeline '{spec}': expected NAME=PIPELINE, e.g. 'hide=generate-kernels,hide-latency'")
        if name in {r.config for r in rows}:
            raise ValueError(f"--pipeline '{spec}': the name '{name}' is given twice")
        try:
            plan = parse_pipeline(pipeline)
        except ValueError as e:
            raise ValueError(f"--pipeline '{spec}': {e}") from None
        kernels = "generated" if find_pass(plan, "generate-kernels") else "reference"
        rows.append(AblationRow(name, pipeline, kernels))
    placed: dict[str, str | ShardingPlan] = {}
    for spec in shardings:
        name, sep, value = (part.strip() for part in spec.partition("="))
        if not sep or name not in {r.config for r in rows} or name in placed:
            raise ValueError(f"--sharding '{spec}': expected NAME=SHARDING once for a --pipeline row's NAME")
        placed[name] = load_sharding(value)
    lowered = _lowering_of(rows, lowerings)
    return [
        attrs.evolve(
            r, sharding=placed.get(r.config, "auto"), lowering=tuple(sorted(lowered.get(r.config, {}).items()))
        )
        for r in rows
    ]


def _lowering_of(rows: Sequence[AblationRow], specs: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per row name, the lowering fields its `--lowering NAME=FIELD=VALUE` options set (checked by
    `CompileOptions`' own validators)."""
    from sparselift.bench.systems import LOWERING_FIELDS
    from sparselift.runtime.compiled import CompileOptions

    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        name, _, assignment = (part.strip() for part in spec.partition("="))
        field, sep, text = (part.strip() for part in assignment.partition("="))
        if not sep or name not in {r.config for r in rows} or field not in LOWERING_FIELDS:
            raise ValueError(
                f"--lowering '{spec}': expected NAME=FIELD=VALUE for a --pipeline row's NAME, FIELD one of "
                f"{', '.join(LOWERING_FIELDS)}"
            )
        value: Any = {"true": True, "false": False}.get(text.lower(), text) if field == "narrow_ids" else text
        if field == "narrow_ids" and not isinstance(value, bool):
            raise ValueError(f"--lowering '{spec}': narrow_ids is true or false")
        try:
            CompileOptions(**{field: value})
        except (TypeError, ValueError) as e:  # attrs' validators: the message, then what they checked
            raise ValueError(f"--lowering '{spec}': {e.args[0] if e.args else e}") from None
        out.setdefault(name, {})[field] = value
    return out


def _calibrated_predictions(cfg: BenchConfig, config, example, rows: list[AblationRow], rank: int) -> dict[str, Any]:
    """The planner's calibrated cost model's step time (forward + backward) for every row.

    The planner calibrates on this rank group as `compile()` does (`plan="replan"`, its own
    measured candidates), then the fitted profile and intercept price each row's pipeline.
    """
    import tempfile

    import sparselift
    from sparselift.bench.systems import dlrm_inputs
    from sparselift.compiler import lift_pass
    from sparselift.models.dlrm import build_dlrm
    from sparselift.passes.pipeline import parse_pipeline, run_pipeline
    from sparselift.passes.plan_predict import Predictor
    from sparselift.passes.profiles import HardwareProfile

    model, _ = build_dlrm(attrs.evolve(config, return_logits=True), batch_size=example.batch_size, seed=cfg.seed)
    opt = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        compiled = sparselift.compile(
            model,
            dlrm_inputs(example),
            sparse_optimizer=opt,
            options=sparselift.CompileOptions(plan="replan", cache_dir=cache),
        )
        calibration_s = time.perf_counter() - start
    record = compiled.plan.record
    if rank != 0 or not record.fit:
        return {"calibration_s": calibration_s, "rows": {}}
    program = sparselift.export(model, dlrm_inputs(example), world_size=cfg.world_size, sharding="auto")
    run_pipeline(program.module, (lift_pass(opt),))
    predictor = Predictor(program.module)
    profile = HardwareProfile.from_dict(record.fit["profile"])
    intercept = float(record.fit.get("intercept_us", 0.0))
    # The rows placed and lowered as here ("auto", the default lowering): another's program is not this one.
    out = {
        r.config: (intercept + predictor.predict(parse_pipeline(r.pipeline), profile).est_us) / 1e3
        for r in rows
        if r.sharding == "auto" and not r.lowering
    }
    return {
        "calibration_s": calibration_s,
        "rows": out,
        "fit": {k: v for k, v in record.fit.items() if k != "profile"},
        "chosen": record.spec,
    }


def _compile_each(make_runner, rows: list[AblationRow], example, batches) -> tuple[dict[str, Any], dict[str, float]]:
    """One runner per row, compiled under the row's pipeline; and each one's setup time (s)."""
    import itertools

    runners, setup_s = {}, {}
    for r in rows:
        start = time.perf_counter()
        runners[r.config] = make_runner(
            example,
            kernels=r.kernels,
            passes=r.pipeline,
            sharding=r.sharding,
            lowering=dict(r.lowering),
            batches=itertools.cycle(batches),
        )
        setup_s[r.config] = time.perf_counter() - start
    return runners, setup_s


def _runners(
    cfg: BenchConfig, rank: int, world: int, rows: list[AblationRow], cost_model: bool
) -> tuple[dict[str, Any], dict[str, float], dict[str, Any] | None]:
    """The model's runners under each row's pipeline, their setup times, and the cost model's
    predictions (DLRM only; None for `bench seq`'s DIN, whose model, data and runner are used)."""
    from functools import partial

    record = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    if cfg.model in SEQUENCE_MODELS:
        from sparselift.bench.seq_systems import din_config, din_source, din_sparselift_runner

        config = din_config(cfg.rows_cap, cfg.seed)
        source = din_source(config, seed=cfg.seed)
        locals_ = [source.local_batch(i, cfg.batch_size, rank, world) for i in range(cfg.data_pool)]
        make = partial(din_sparselift_runner, config, rank, world, cfg.lr, cfg.seed, sparse_optimizer=record)
        return (*_compile_each(make, rows, locals_[0], locals_), None)
    from sparselift.bench.baselines import synthetic_source
    from sparselift.bench.systems import SparseLiftRunner

    config = dlrm_config(cfg)
    source = synthetic_source(config, seed=cfg.seed)
    locals_ = [
        next(iter(source.batches(cfg.batch_size, 1, rank=rank, world_size=world, start_step=i)))
        for i in range(cfg.data_pool)
    ]
    predicted = _calibrated_predictions(cfg, config, locals_[0], rows, rank) if cost_model else None
    make = partial(SparseLiftRunner, config, rank, world, cfg.lr, cfg.seed, sparse_optimizer=record)
    return (*_compile_each(make, rows, locals_[0], locals_), predicted)


def ablation_worker(
    rank: int, world: int, cfg: BenchConfig, rows: list[AblationRow], cost_model: bool = True
) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(cfg.threads)
    apply_host_memory(cfg)  # before any runner exists, as `bench seq` does
    runners, setup_s, predicted = _runners(cfg, rank, world, rows, cost_model)
    for runner in runners.values():
        dist.barrier()
        for _ in range(cfg.warmup):
            runner.progress()
        runner.enable_stage_timing(True)
    per_round = max(1, cfg.steps // cfg.rounds)
    step_ms: dict[str, list[float]] = {n: [] for n in runners}
    bar = _progress(cfg.rounds * per_round * len(runners), rank, f"ablation {cfg.model}")
    for _ in range(cfg.rounds):
        for name, runner in runners.items():
            dist.barrier()
            for _ in range(per_round):
                start = time.perf_counter()
                runner.progress()
                step_ms[name].append((time.perf_counter() - start) * 1e3)
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    return {
        "step_ms": step_ms,
        "breakdown": {n: [attrs.asdict(t) for t in r.stage_times] for n, r in runners.items()},
        "setup_s": setup_s,
        "compiled": {n: r.plan_summary["pipeline"] for n, r in runners.items()},  # what actually ran
        "placed": {n: r.plan_summary["sharding"] for n, r in runners.items()},
        "predicted": predicted,
    }


def summarize(cfg: BenchConfig, rows: list[AblationRow], per_rank: list[dict[str, Any]]) -> dict[str, Any]:
    out = []
    for r in rows:
        name = r.config
        n = len(per_rank[0]["step_ms"][name])
        steps = [max(p["step_ms"][name][i] for p in per_rank) for i in range(n)]  # a step ends with its slowest rank
        records = per_rank[0]["breakdown"][name]
        # Per step, each stage's slowest rank (as a step ends with its slowest rank).
        stage_steps = [
            {c: max(p["breakdown"][name][i][c] for p in per_rank) for c in COLUMNS} for i in range(len(records))
        ]
        breakdown = {
            c: statistics.median(st[c] for st in stage_steps) if stage_steps else float("nan") for c in COLUMNS
        }
        out.append(
            {
                "config": name,
                "pipeline": "lift-sparse" + (f",{r.pipeline}" if r.pipeline else ""),
                "kernels": r.kernels,
                "sharding": r.sharding if isinstance(r.sharding, str) else json.loads(r.sharding.to_json()),
                "lowering": dict(r.lowering),
                "step_ms_median": statistics.median(steps),
                "step_ms_p25": _pct(steps, 0.25),
                "step_ms_p75": _pct(steps, 0.75),
                "breakdown": breakdown,
                # In timed order, `steps // rounds` a round: for paired analyses across rows
                # (`bench/stage_bias.py`).
                "steps_ms": steps,
                "stage_steps_ms": stage_steps,
                "setup_s": max(p["setup_s"][name] for p in per_rank),
                "compiled": per_rank[0]["compiled"][name],
                "placed": per_rank[0]["placed"][name],
            }
        )
    base = out[0]["step_ms_median"]
    for row in out:
        row["speedup"] = base / row["step_ms_median"]
    result = {"rows": out, "config": attrs.asdict(cfg), "machine": machine_info()}
    predicted = per_rank[0].get("predicted")
    if predicted and predicted["rows"]:
        # Forward + backward (the planner's F): the step without the optimizer and data ("other").
        errors = []
        for row in out:
            measured = sum(v for c, v in row["breakdown"].items() if c != "other")
            row["fwd_bwd_ms"] = measured
            if row["config"] not in predicted["rows"]:
                continue
            row["predicted_fwd_bwd_ms"] = predicted["rows"][row["config"]]
            row["cost_model_error_pct"] = 100.0 * abs(row["predicted_fwd_bwd_ms"] - measured) / measured
            errors.append(row["cost_model_error_pct"])
        result["cost_model"] = {
            "median_abs_error_pct": statistics.median(errors),
            "calibration_s": predicted["calibration_s"],
            "planner_choice": predicted["chosen"],
            "fit": predicted["fit"],
        }
    return result


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"Ablation: {cfg['model']}, {cfg['world_size']} ranks (gloo), batch {cfg['batch_size']} per rank, "
        f"rows cap {cfg['rows_cap']}, {cfg['steps']} timed steps per configuration in {cfg['rounds']} "
        "interleaved rounds"
        + (", freed host memory retained" if cfg.get("host_memory") == "retain" else "")
        + f", sparse optimizer {cfg.get('sparse_optimizer', 'sgd')} (lr {cfg['lr']}; dense SGD)",
        "",
        f"{'configuration':<34}{'median ms':>10}{'p25':>9}{'p75':>9}{'speedup':>9}"
        + "".join(f"{c:>11}" for c in COLUMNS),
    ]
    for r in result["rows"]:
        b = r["breakdown"]
        lines.append(
            f"{r['config']:<34}{r['step_ms_median']:>10.1f}{r['step_ms_p25']:>9.1f}{r['step_ms_p75']:>9.1f}"
            f"{r['speedup']:>8.2f}x" + "".join(f"{b[c]:>11.1f}" for c in COLUMNS)
        )
    cm = result.get("cost_model")
    if cm:
        lines += [
            "",
            "cost model after the planner's calibration (forward + backward, ms):",
            f"{'configuration':<34}{'measured':>10}{'predicted':>11}{'error':>8}",
        ]
        for r in result["rows"]:
            lines.append(
                f"{r['config']:<34}{r['fwd_bwd_ms']:>10.1f}{r['predicted_fwd_bwd_ms']:>11.1f}"
                f"{r['cost_model_error_pct']:>7.1f}%"
            )
        lines.append(
            f"median absolute error {cm['median_abs_error_pct']:.1f}% (calibration {cm['calibration_s']:.1f} s; "
            f"planner chose: lift-sparse{',' + cm['planner_choice'] if cm['planner_choice'] else ''})"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sparselift bench ablation", description=__doc__.split("\n")[0])
    models = ("dlrm-kaggle", "dlrm-bench", "dlrm-terabyte", *SEQUENCE_MODELS)
    p.add_argument("--model", default="dlrm-kaggle", choices=models)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=12, help="timed steps per configuration")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--batch-size", type=int, help="per rank (default 2048; din: 1024, as `bench seq`)")
    p.add_argument(
        "--rows-cap", type=rows_cap_arg, default=50_000, help="ten compiled copies live at once: keep tables small"
    )
    add_host_memory_argument(p)
    add_optimizer_arguments(p)
    p.add_argument("--quick", action="store_true", help="small batch, rows cap and few steps")
    p.add_argument(
        "--no-cost-model",
        action="store_true",
        help="skip the planner calibration that predicts every row (cost-model accuracy)",
    )
    p.add_argument(
        "--pipeline",
        action="append",
        default=[],
        metavar="NAME=PIPELINE",
        help="instead of the ten rows, these pipelines (after lift-sparse), in this order; "
        "the speedup is over the first (repeat the option)",
    )
    p.add_argument(
        "--sharding",
        action="append",
        default=[],
        metavar="NAME=SHARDING",
        help="compile --pipeline row NAME under this placement: auto, table_wise, row_wise, data_parallel or "
        "a plan JSON file (default auto; repeat the option)",
    )
    p.add_argument(
        "--lowering",
        action="append",
        default=[],
        metavar="NAME=FIELD=VALUE",
        help="compile --pipeline row NAME with this CompileOptions lowering field (rows, replicated_grads, "
        "narrow_ids) or all-to-all transport (transport: auto, gloo, shm), e.g. 'wide=narrow_ids=false' or "
        "'tcp=transport=gloo' (repeat the option)",
    )
    p.add_argument("--json", help="write the results as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.world_size < 2:
        p.error("--world-size must be at least 2 (the optimizations act on exchanges between ranks)")
    try:
        if (a.sharding or a.lowering) and not a.pipeline:
            raise ValueError("--sharding and --lowering name --pipeline rows; give the rows with --pipeline")
        rows = custom_rows(a.pipeline, a.sharding, a.lowering) if a.pipeline else ablation_rows()
    except ValueError as e:
        p.error(str(e))
    cfg = BenchConfig(
        model=a.model,
        world_size=a.world_size,
        systems=("sparselift",),
        steps=a.steps,
        rounds=a.rounds,
        warmup=a.warmup,
        batch_size=a.batch_size or (1024 if a.model in SEQUENCE_MODELS else 2048),
        rows_cap=a.rows_cap,
        host_memory=a.host_memory,
        lr=a.lr,
        sparse_optimizer=a.sparse_optimizer,
    )
    if a.quick:
        cfg = attrs.evolve(
            cfg,
            steps=min(cfg.steps, 6),
            rounds=min(cfg.rounds, 2),
            warmup=1,
            batch_size=min(cfg.batch_size, 256),
            rows_cap=min(cfg.rows_cap or 5_000, 5_000),
        )
    from sparselift.runtime.distributed import launch

    result = summarize(
        cfg, rows, launch(ablation_worker, cfg.world_size, cfg, rows, not a.no_cost_model, timeout_s=1800)
    )
    report(result, "ablation", argv, format_table, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
