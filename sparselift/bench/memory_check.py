"""`sparselift bench memory`: what compiling and training a DLRM costs a rank in memory.

On local gloo ranks, each rank builds the model (on the CPU, whole, as a user without meta-device
support would; or on the meta device), compiles it with the planner on (calibration included),
drops the model and trains a few steps. It reports per rank: the model's parameter bytes, its
local table shards, the peak resident memory the build and compile added, and what remains
after the model is dropped and training ran, against the bounds of the "Real table sizes" issue
(peak <= model + 1.3 x shards + 900 MB; after <= 1.3 x shards + 900 MB; a meta build has no model
bytes to pay).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import attrs

from sparselift.bench.dlrm import BenchConfig, dlrm_config, report
from sparselift.bench.memory import AddedMemory, rss_bytes
from sparselift.tools.arguments import rows_cap_arg

MB = 2**20
FIXED_MB = 900


@attrs.frozen
class MemoryConfig:
    model: str = "dlrm-bench"
    world_size: int = 2
    rows_cap: int | None = 1_000_000
    build: str = "cpu"  # "cpu" | "meta"
    batch_size: int = 2048
    steps: int = 3
    calibration_budget_s: float = 30.0


def memory_worker(rank: int, world: int, cfg: MemoryConfig) -> dict[str, Any]:
    import torch

    import sparselift
    from sparselift.bench.baselines import synthetic_source
    from sparselift.bench.systems import _bce, dlrm_inputs
    from sparselift.models.dlrm import build_dlrm

    torch.set_num_threads(1)
    config = dlrm_config(BenchConfig(model=cfg.model, rows_cap=cfg.rows_cap))
    source = synthetic_source(config)
    batches = [
        next(iter(source.batches(cfg.batch_size, 1, rank=rank, world_size=world, start_step=i)))
        for i in range(cfg.steps + 1)
    ]
    gc.collect()
    base = rss_bytes()
    added = AddedMemory().start()
    start = time.perf_counter()
    model, _ = build_dlrm(attrs.evolve(config, return_logits=True), batch_size=1, device=cfg.build)
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if p.device.type != "meta")
    built_tables = sum(
        e.weight.numel() * e.weight.element_size() for e in model.emb_l if e.weight.device.type != "meta"
    )
    with tempfile.TemporaryDirectory() as cache:
        compiled = sparselift.compile(
            model,
            dlrm_inputs(batches[0]),
            sparse_optimizer=sparselift.optim.SGD(lr=0.1),
            options=sparselift.CompileOptions(
                plan="replan",
                cache_dir=cache,
                table_init=model.table_init,
                calibration_budget_s=cfg.calibration_budget_s,
            ),
        )
    compile_s = time.perf_counter() - start
    added.stop()
    shards = sum(t.numel() * t.element_size() for t in compiled.tables.values())
    del model
    opt = torch.optim.SGD([p for _, p in compiled.dense_named_parameters()], lr=0.1)
    for b in batches[1:]:
        opt.zero_grad()
        _bce(compiled(*dlrm_inputs(b)), b.labels).backward()
        opt.step()
    gc.collect()
    after = rss_bytes() - base
    return {
        "model_mb": model_bytes / MB,
        "model_tables_mb": built_tables / MB,
        "shards_mb": shards / MB,
        "compile_peak_mb": added.peak_mb,
        "after_drop_mb": after / MB,
        "compile_s": compile_s,
        "calibration_s": compiled.plan.calibration_s,
        "pipeline": compiled.plan.record.spec,
    }


def format_table(result: dict[str, Any]) -> str:
    cfg = result["config"]
    lines = [
        f"Memory per rank: {cfg['model']} (rows cap {cfg['rows_cap']}), built on {cfg['build']}, "
        f"{cfg['world_size']} ranks, planner on (budget {cfg['calibration_budget_s']:g} s)",
        "",
        f"{'rank':<6}{'model MB':>10}{'shards MB':>11}{'peak MB':>10}{'bound':>8}{'after MB':>10}{'bound':>8}"
        f"{'compile s':>11}",
    ]
    for rank, r in enumerate(result["ranks"]):
        lines.append(
            f"{rank:<6}{r['model_mb']:>10.0f}{r['shards_mb']:>11.0f}{r['compile_peak_mb']:>10.0f}"
            f"{r['peak_bound_mb']:>8.0f}{r['after_drop_mb']:>10.0f}{r['after_bound_mb']:>8.0f}"
            f"{r['compile_s']:>11.1f}"
        )
    lines += [
        "",
        f"within the bounds on every rank: {result['within_bounds']}",
        f"pipeline: lift-sparse,{result['ranks'][0]['pipeline']}",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sparselift bench memory", description=__doc__.split("\n")[0])
    p.add_argument("--model", default="dlrm-bench", choices=("dlrm-kaggle", "dlrm-bench", "dlrm-terabyte"))
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--rows-cap", type=rows_cap_arg, default=1_000_000)
    p.add_argument("--build", default="cpu", choices=("cpu", "meta"), help="where the model is built")
    p.add_argument("--batch-size", type=int, default=2048)
    p.add_argument("--steps", type=int, default=3, help="training steps after the model is dropped")
    p.add_argument("--calibration-budget", type=float, default=30.0)
    p.add_argument("--json", help="write the results as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    cfg = MemoryConfig(
        model=a.model,
        world_size=a.world_size,
        rows_cap=a.rows_cap,
        build=a.build,
        batch_size=a.batch_size,
        steps=a.steps,
        calibration_budget_s=a.calibration_budget,
    )
    from sparselift.runtime.distributed import launch

    ranks = launch(memory_worker, cfg.world_size, cfg, timeout_s=1800)
    for r in ranks:
        r["peak_bound_mb"] = r["model_mb"] + 1.3 * r["shards_mb"] + FIXED_MB
        r["after_bound_mb"] = 1.3 * r["shards_mb"] + FIXED_MB
    within = all(
        r["compile_peak_mb"] <= r["peak_bound_mb"] and r["after_drop_mb"] <= r["after_bound_mb"] for r in ranks
    )
    result = {"config": attrs.asdict(cfg), "ranks": ranks, "within_bounds": within}
    report(result, "memory", argv, format_table, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
