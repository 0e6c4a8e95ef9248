"""`sparselift bench dlrm`: DLRM-Baseline vs TorchRec vs SparseLift, side by side in one run.

All systems run in the same ranks (gloo on localhost), on the same synthetic Criteo-shaped data,
from the same seeded weights, with the same batch per rank and learning rate (`--lr`). The
tables train with the sparse optimizer `--sparse-optimizer` names (default SGD; the others:
Adagrad, row-wise Adagrad, Adam, AdamW, partial row-wise Adam), every system with the same
one where it has it; a system without it is left out of the run with the reason printed and
recorded (`skipped` in the JSON; `UNAVAILABLE` says which, found by trying). The dense part
trains with SGD in every system. Repeats are
interleaved (rounds of A, B, C, ...) so drift of the machine cancels out; warmup and
compilation are excluded from the timed steps and reported separately. The dense-only step
(the same MLPs with the pooled embeddings given) is measured in the same rounds: it is the floor
no sparse-path optimization can beat, and `step - dense_only` is a system's exposed sparse time.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import attrs

from sparselift.bench.memory import AddedMemory
from sparselift.bench.sparse_optimizers import (  # noqa: F401 - the benchmarks import them from here too
    SPARSE_OPTIMIZERS,
    UNAVAILABLE,
    available_systems,
    optimizer_summary,
    sparse_optimizer_arg,
    sparse_optimizer_record,
    torch_sparse_optimizer,
    torchrec_optimizer,
    unavailable,
)
from sparselift.tools.arguments import add_host_memory_argument, rows_cap_arg

SYSTEMS = ("baseline", "torchrec", "sparselift")
LABELS = {"baseline": "DLRM-Baseline", "torchrec": "TorchRec", "sparselift": "SparseLift", "dense_only": "dense-only"}
COLUMNS = ("sparse_fwd", "other_fwd", "sparse_bwd", "other_bwd", "other")


@attrs.frozen
class BenchConfig:
    model: str = "dlrm-kaggle"
    world_size: int = 2
    systems: tuple[str, ...] = SYSTEMS
    steps: int = 12  # timed steps per system (split over the rounds)
    rounds: int = 3
    warmup: int = 3
    batch_size: int = 2048  # per rank
    rows_cap: int | None = 100_000
    lr: float = 0.1  # the sparse optimizer's and the dense SGD's
    seed: int = 0
    threads: int = 1  # per rank: 2 ranks on 2 cores
    kernels: str = "generated"
    data_pool: int = 4  # distinct batches, generated before timing and cycled
    # "retain": every rank keeps freed heap memory for reuse (`runtime.allocator`), for every
    # system alike; "default": glibc's own policy (big temporaries faulted in again each step).
    host_memory: str = "default"
    # A directory: SparseLift refines the plan cached there (`plan="refine"`), going on with the
    # paired tests earlier runs left unclear; None: it plans afresh.
    plan_cache: str | None = None
    sparse_optimizer: str = "sgd"  # an OptimizerKind value: the tables' optimizer in every system


def dlrm_config(cfg: BenchConfig):
    from sparselift.models import dlrm

    preset = {"dlrm-kaggle": dlrm.dlrm_kaggle, "dlrm-terabyte": dlrm.dlrm_terabyte, "dlrm-bench": dlrm.dlrm_bench}
    if cfg.model not in preset:
        raise ValueError(f"unknown model '{cfg.model}'; use one of {', '.join(preset)}")
    return attrs.evolve(preset[cfg.model](rows_cap=cfg.rows_cap), return_logits=True)


def _progress(total: int, rank: int, desc: str):
    if rank != 0:
        return None
    try:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, file=sys.stderr, leave=False)
    except ImportError:  # pragma: no cover - tqdm comes with the bench extra
        return None


def _build_runner(name: str, cfg: BenchConfig, config, rank: int, world: int, locals_: list) -> Any:
    """One system, built on this rank (its tables on the meta device where it supports it)."""
    import itertools

    from sparselift.bench.baselines import (
        BaselineRunner,
        DenseOnlyRunner,
        TorchRecRunner,
        quiet_torchrec_setup,
    )
    from sparselift.bench.systems import SparseLiftRunner

    record = sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr)
    if name == "baseline":
        return BaselineRunner(config, rank, world, cfg.lr, cfg.seed, sparse_optimizer=record)
    if name == "torchrec":
        with quiet_torchrec_setup():
            return TorchRecRunner(
                config, rank, world, cfg.lr, cfg.seed, itertools.cycle(locals_), sparse_optimizer=record
            )
    if name == "sparselift":
        return SparseLiftRunner(config, rank, world, cfg.lr, cfg.seed, locals_[0], **compiled_options(cfg, locals_))
    if name == "dense_only":
        return DenseOnlyRunner(config, rank, world, cfg.lr, cfg.seed)
    raise ValueError(f"unknown system '{name}'; use {', '.join(SYSTEMS)}")


def compiled_options(cfg: Any, locals_: Sequence[Any]) -> dict[str, Any]:
    """A compiled system's options from the benchmark's config (`CompiledRunner`'s): its kernels,
    its training batches (this rank's, cycled), the plan cache it refines, if any, and the
    tables' optimizer."""
    import itertools

    return {
        "kernels": cfg.kernels,
        "batches": itertools.cycle(locals_),
        "plan_cache": cfg.plan_cache,
        "sparse_optimizer": sparse_optimizer_record(cfg.sparse_optimizer, cfg.lr),
    }


def apply_host_memory(cfg: Any) -> None:
    """The rank's host-allocator policy (`cfg.host_memory`, of a `BenchConfig` or `bench ops`'
    config), set before any system is built (it is process-wide, so every system of the run gets
    the same)."""
    if cfg.host_memory == "retain":
        from sparselift.runtime.allocator import retain_freed_memory

        if not retain_freed_memory():
            raise RuntimeError("--host-memory retain needs glibc's mallopt, which this process lacks")


def bench_worker(rank: int, world: int, cfg: BenchConfig) -> dict[str, Any]:
    import torch

    from sparselift.bench.baselines import synthetic_source

    torch.set_num_threads(cfg.threads)
    apply_host_memory(cfg)
    config = dlrm_config(cfg)
    source = synthetic_source(config, seed=cfg.seed)
    global_bs = cfg.batch_size * world
    globals_ = [source.global_batch(i, global_bs) for i in range(cfg.data_pool)]
    locals_ = [
        next(iter(source.batches(cfg.batch_size, 1, rank=rank, world_size=world, start_step=i)))
        for i in range(cfg.data_pool)
    ]

    def build(name: str) -> Any:
        return _build_runner(name, cfg, config, rank, world, locals_)

    return measure_systems(cfg, rank, build, globals_, locals_)


def measure_systems(
    cfg: Any, rank: int, build: Callable[[str], Any], globals_: Sequence[Any], locals_: Sequence[Any]
) -> dict[str, Any]:
    """One rank's measurements: build each of `cfg.systems` and the dense-only floor (`build(name)`,
    its setup time and memory), warm each up, then time their steps in interleaved rounds, cycling
    through the data pool (`globals_`: global batches, the baseline reads them whole; `locals_`:
    this rank's slices of them). `summarize` combines the ranks' records."""
    import itertools

    import torch.distributed as dist

    built: dict[str, Any] = {}
    setup_s: dict[str, float] = {}
    memory: dict[str, dict[str, float | None]] = {}
    names = (*cfg.systems, "dense_only")
    # SparseLift before the peers: its planner decides by timing candidate plans, which needs a
    # quiet rank. Built after them (TorchRec's sharded modules and their threads), its
    # calibration steps at real size varied by hundreds of ms and it kept plans it would
    # otherwise confirm. The dense-only floor first: the process's one-time costs (allocator,
    # autograd, gloo buffers) land in the floor's memory, not in the first system's.
    order = {"dense_only": 0, "sparselift": 1, "sparselift_ec": 1}
    for name in sorted(names, key=lambda n: order.get(n, 2)):
        _fresh_heap()
        added = AddedMemory().start()
        start = time.perf_counter()
        built[name] = build(name)
        setup_s[name] = time.perf_counter() - start
        added.stop()
        memory[name] = {"setup_peak_mb": added.peak_mb, "resident_mb": added.resident_mb}
    runners = {name: built[name] for name in names}  # timed in the configured order

    counter = itertools.count()
    global_bs = cfg.batch_size * dist.get_world_size()

    def one(name: str) -> float:
        i = next(counter) % cfg.data_pool
        runner = runners[name]
        if name == "baseline":
            return runner.step(globals_[i], runner.local_rows(global_bs))
        if name == "torchrec" or name.startswith("sparselift"):  # they train through their pipelines
            return runner.progress()
        return runner.step(locals_[i])

    warmup_s = _warm_up(cfg.warmup, runners, one, memory)

    per_round = max(1, cfg.steps // cfg.rounds)
    step_ms: dict[str, list[float]] = {n: [] for n in runners}
    losses: dict[str, list[float]] = {n: [] for n in runners}
    bar = _progress(cfg.rounds * per_round * len(runners), rank, f"bench {cfg.model}")
    for _ in range(cfg.rounds):
        for name in runners:
            dist.barrier()
            for _ in range(per_round):
                start = time.perf_counter()
                losses[name].append(one(name))
                step_ms[name].append((time.perf_counter() - start) * 1e3)
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    breakdown = {n: [attrs.asdict(t) for t in runners[n].stage_times] for n in runners}
    return {
        "step_ms": step_ms,
        "breakdown": breakdown,
        "setup_s": setup_s,
        "warmup_s": warmup_s,
        "memory": memory,
        "losses": losses,
        "torchrec_pipeline": getattr(runners.get("torchrec"), "pipeline", None),
        "sparselift_plan": _summary(runners.get("sparselift")),
        "sparselift_ec_plan": _summary(runners.get("sparselift_ec")),
    }


def _warm_up(steps: int, runners: Mapping[str, Any], one: Callable[[str], float], memory: dict) -> dict[str, float]:
    """`steps` untimed steps of each runner (then its stage timing on); each one's time, and its
    peak memory over its life so far into `memory`."""
    import torch.distributed as dist

    warmup_s = {}
    for name, runner in runners.items():
        _fresh_heap()
        dist.barrier()
        added = AddedMemory().start()
        start = time.perf_counter()
        for _ in range(steps):
            one(name)
        warmup_s[name] = time.perf_counter() - start
        added.stop()
        memory[name].update(_peak_of(memory[name], added))
        runner.enable_stage_timing(True)
    return warmup_s


def _fresh_heap() -> None:
    """Garbage collected and freed heap memory given back to the OS before a system's setup and
    before its first steps: each system's memory is measured from the same state, not from a
    heap another system's freed memory keeps warm (the one measured later would look smaller)."""
    import gc

    from sparselift.runtime.allocator import release_freed_memory

    gc.collect()
    release_freed_memory()


def _summary(runner) -> dict | None:
    """A compiled system's plan summary, with what its shared-memory exchange buffers reserved
    on rank 0 by the end of the run (None where it exchanged over gloo), rank 0's footprint by
    category and its compile's memory by phase."""
    if runner is None or getattr(runner, "plan_summary", None) is None:
        return None
    plan = runner.compiled.plan
    shm = getattr(plan, "shm", None)
    phases = getattr(plan, "memory_phases", None)
    return {
        **runner.plan_summary,
        "exchange_buffers_mib": None if shm is None else round(shm.reserved / 2**20, 1),
        # rank 0's steady-state footprint by category, and its compile's memory by phase (MiB)
        "footprint_mb": plan.footprint_now(),
        "compile_memory_mb": phases.to_list() if phases is not None else [],
    }


def _peak_of(setup: dict[str, float | None], steps: AddedMemory) -> dict[str, float | None]:
    """A system's peak over its life in this rank: building it (tables, state, compile and
    calibration), or training steps on top of what it keeps resident."""
    if setup["setup_peak_mb"] is None or steps.peak_mb is None:
        return {"peak_rss_mb": None, "step_peak_mb": None}
    return {
        "peak_rss_mb": max(setup["setup_peak_mb"], setup["resident_mb"] + steps.peak_mb),
        "step_peak_mb": steps.peak_mb,
    }


def _pct(values: Sequence[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summarize(cfg: BenchConfig, per_rank: list[dict[str, Any]], labels: Mapping[str, str] = LABELS) -> dict[str, Any]:
    names = list(per_rank[0]["step_ms"])
    systems: dict[str, Any] = {}
    for name in names:
        # A step ends when its slowest rank ends: combine ranks with max, step by step.
        steps = [max(r["step_ms"][name][i] for r in per_rank) for i in range(len(per_rank[0]["step_ms"][name]))]
        breakdown = {
            c: statistics.median(
                max(r["breakdown"][name][i][c] for r in per_rank) for i in range(len(per_rank[0]["breakdown"][name]))
            )
            if per_rank[0]["breakdown"][name]
            else float("nan")
            for c in COLUMNS
        }
        median = statistics.median(steps)
        systems[name] = {
            "label": labels[name],
            "step_ms_median": median,
            "step_ms_p25": _pct(steps, 0.25),
            "step_ms_p75": _pct(steps, 0.75),
            "samples_per_s": cfg.batch_size * cfg.world_size / (median / 1e3),
            "breakdown": breakdown,
            "steps_ms": steps,
            "setup_s": max(r["setup_s"][name] for r in per_rank),
            "warmup_s": max(r["warmup_s"][name] for r in per_rank),
            # Per rank: what this system adds to the rank's resident memory (sparselift.bench.memory).
            "peak_rss_mb_per_rank": [r["memory"][name]["peak_rss_mb"] for r in per_rank],
            "resident_mb_per_rank": [r["memory"][name]["resident_mb"] for r in per_rank],
            "peak_rss_mb": _max_known(r["memory"][name]["peak_rss_mb"] for r in per_rank),
            # Per rank, by phase: the build's peak and what it kept (setup), the warmup steps'
            # peak above that (first steps), and the life peak of the two.
            "memory_by_phase_per_rank": [dict(r["memory"][name]) for r in per_rank],
        }
    dense = systems.pop("dense_only")
    for s in systems.values():
        s["exposed_sparse_ms"] = s["step_ms_median"] - dense["step_ms_median"]
    ratios: dict[str, float] = {}
    for ours in (s for s in ("sparselift", "sparselift_ec") if s in systems):
        for peer in ("baseline", "torchrec"):
            if peer in systems:
                ratios[f"{ours}_vs_{peer}"] = systems[peer]["step_ms_median"] / systems[ours]["step_ms_median"]
    if "torchrec" in systems:
        ratios["ceiling_vs_torchrec"] = systems["torchrec"]["step_ms_median"] / dense["step_ms_median"]
    return {
        "systems": systems,
        "dense_only_step_ms": dense["step_ms_median"],
        "dense_only": dense,
        "ratios": ratios,
        "config": attrs.asdict(cfg),
        "torchrec_pipeline": per_rank[0].get("torchrec_pipeline"),
        "sparselift_plan": per_rank[0].get("sparselift_plan"),
        "sparselift_ec_plan": per_rank[0].get("sparselift_ec_plan"),
        "machine": machine_info(),
    }


def _rows_label(rows_cap: int | None) -> str:
    return "real sizes (no rows cap)" if rows_cap is None else f"rows cap {rows_cap}"


def _max_known(values) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def machine_info() -> dict[str, Any]:
    """Where a benchmark ran (recorded with every result)."""
    import os

    import torch

    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "backend": "gloo",
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def format_table(result: dict[str, Any], title: str = "DLRM benchmark", labels: Mapping[str, str] = LABELS) -> str:
    cfg = result["config"]
    rows = list(result["systems"].items()) + [("dense_only", result["dense_only"])]
    width = max(17, *(len(s["label"]) + 2 for _, s in rows))
    lines = [
        f"{title}: {cfg['model']}, {cfg['world_size']} ranks (gloo), batch {cfg['batch_size']} per rank, "
        f"{_rows_label(cfg['rows_cap'])}, {cfg['steps']} timed steps per system in {cfg['rounds']} interleaved rounds"
        + (", freed host memory retained (every system)" if cfg.get("host_memory") == "retain" else "")
        + (f", SparseLift's plan refined in {cfg['plan_cache']}" if cfg.get("plan_cache") else ""),
        *_optimizer_lines(result, labels),
        "",
        f"{'system':<{width}}{'median ms':>10}{'p25':>9}{'p75':>9}{'samples/s':>11}"
        + "".join(f"{c:>11}" for c in COLUMNS)
        + f"{'exposed':>10}{'peak MB/rank':>14}",
    ]
    for _, s in rows:
        b = s["breakdown"]
        exposed = s.get("exposed_sparse_ms")
        lines.append(
            f"{s['label']:<{width}}{s['step_ms_median']:>10.1f}{s['step_ms_p25']:>9.1f}{s['step_ms_p75']:>9.1f}"
            f"{s['samples_per_s']:>11.0f}"
            + "".join(f"{b[c]:>11.1f}" for c in COLUMNS)
            + (f"{exposed:>10.1f}" if exposed is not None else f"{'(floor)':>10}")
            + (f"{s['peak_rss_mb']:>14.0f}" if s.get("peak_rss_mb") is not None else f"{'?':>14}")
        )
    lines.append("")
    for k, v in result["ratios"].items():
        lines.append(f"{k:<31}{v:6.3f}x")
    setup = ", ".join(f"{s['label']} {s['setup_s']:.1f}s/{s['warmup_s']:.1f}s" for s in result["systems"].values())
    lines.append(f"setup/warmup (excluded from timing): {setup}")
    lines.append(
        "peak MB/rank: the most resident memory a system added to a rank (its tables, optimizer state and "
        "buffers; its build, compile and calibration peak included), max over ranks"
    )
    if result.get("torchrec_pipeline"):
        lines.append(f"TorchRec pipeline: {result['torchrec_pipeline']}")
    for key, label in (("sparselift_plan", "SparseLift"), ("sparselift_ec_plan", "SparseLift (TorchRec model)")):
        plan = result.get(key)
        if not plan:
            continue
        lines.append(
            f"{label} plan (planner): {plan['pipeline']}; calibration {plan['calibration_s']:.1f} s "
            "(in its setup time, excluded from the timed steps)"
        )
        if plan.get("transport"):
            buffers = plan.get("exchange_buffers_mib")
            lines.append(
                f"  exchanges: {plan['transport']}"
                + (f" ({buffers} MiB of shared-memory buffers reserved on rank 0)" if buffers is not None else "")
            )
        lines += [f"  {d}" for d in plan.get("decisions", [])]
    return "\n".join(lines)


def _optimizer_lines(result: dict[str, Any], labels: Mapping[str, str]) -> list[str]:
    """The tables' optimizer, and each system left out for lack of it (none in older results)."""
    opt = result.get("sparse_optimizer")
    if not opt:
        return []
    lines = [f"sparse optimizer (every system that has it): {opt['record']}; dense: SGD(lr={opt['lr']})"]
    for name, reason in opt["skipped"].items():
        lines.append(f"skipped {labels.get(name, name)}: {reason}")
    return lines


def _bar_label(label: str) -> str:
    """A system's label under a bar: its qualifier on a line of its own, so labels do not overlap."""
    return label.replace(" (", "\n(")


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(18, 4.8), gridspec_kw={"width_ratios": [3, 3, 2]})
    cfg = result["config"]
    global_bs = cfg["batch_size"] * cfg["world_size"]
    items = list(result["systems"].items()) + [("dense_only", result["dense_only"])]
    for _, s in items:
        tput = [global_bs / (ms / 1e3) for ms in s["steps_ms"]]
        ax1.plot(range(1, len(tput) + 1), tput, marker="o", ms=3, label=s["label"])
    ax1.axvspan(0, 0.5, color="0.85", label=f"warmup ({cfg['warmup']} steps, excluded)")
    ax1.set_xlabel("timed step (steady state)")
    ax1.set_ylabel("samples/s (global)")
    ax1.set_title(f"Throughput per step: {cfg['model']}, {cfg['world_size']} ranks")
    ax1.legend(fontsize=8)
    bottom = [0.0] * len(items)
    for c in COLUMNS:
        vals = [s["breakdown"][c] for _, s in items]
        ax2.bar([_bar_label(s["label"]) for _, s in items], vals, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax2.set_ylabel("ms per step (median per stage)")
    ax2.set_title("Where the time goes")
    ax2.legend(fontsize=8)
    peaks = [(_bar_label(s["label"]), s.get("peak_rss_mb")) for s in result["systems"].values()]
    ax3.bar([n for n, _ in peaks], [v or 0.0 for _, v in peaks], color="0.45")
    for i, (_, v) in enumerate(peaks):
        ax3.annotate("?" if v is None else f"{v:.0f}", (i, v or 0.0), ha="center", va="bottom", fontsize=8)
    ax3.set_ylabel("MB per rank (max over ranks)")
    ax3.set_title(f"Peak memory a system adds\n({_rows_label(cfg['rows_cap'])})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(cfg: BenchConfig) -> dict[str, Any]:
    from sparselift.runtime.distributed import launch

    ran, skipped = available_systems(cfg)
    for name, reason in skipped.items():
        print(f"bench {cfg.model}: skipping {LABELS.get(name, name)}: {reason}", file=sys.stderr)
    per_rank = launch(bench_worker, ran.world_size, ran, timeout_s=1800)
    return {**summarize(cfg, per_rank), "sparse_optimizer": optimizer_summary(cfg, skipped)}


def add_arguments(
    p: argparse.ArgumentParser,
    models: Sequence[str] = ("dlrm-kaggle", "dlrm-bench", "dlrm-terabyte"),
    batch_size: int = 2048,
    rows_cap: int | None = 100_000,
    extra_systems: Sequence[str] = (),
) -> None:
    """The benchmark's flags (`bench seq` passes its model and defaults, and the systems it
    offers beside `SYSTEMS`, run only when named)."""
    p.add_argument("--model", default=models[0], choices=models)
    p.add_argument("--world-size", type=int, default=2)
    known = ",".join((*SYSTEMS, *extra_systems))
    p.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, some of: {known}")
    p.set_defaults(known_systems=(*SYSTEMS, *extra_systems))
    p.add_argument("--steps", type=int, default=12, help="timed steps per system")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=batch_size, help=f"per rank (default {batch_size})")
    p.add_argument(
        "--rows-cap",
        type=rows_cap_arg,
        default=rows_cap,
        help=f"cap every table's rows; 'none': the real cardinalities (default {rows_cap or 'none'})",
    )
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (default 1: 2 ranks on 2 cores)")
    p.add_argument("--kernels", default="generated", choices=("reference", "generated"))
    add_optimizer_arguments(p)
    add_host_memory_argument(p)
    p.add_argument(
        "--plan-cache",
        help="SparseLift refines the plan cached in this directory (plan='refine': it goes on with the paired "
        "tests earlier runs left unclear, their rounds piling up); default: it plans afresh",
    )
    p.add_argument("--quick", action="store_true", help="small rows cap and few steps (under a minute here)")
    p.add_argument("--json", help="write the results as JSON")
    p.add_argument("--plot", help="write a PNG: throughput per step and the stage breakdown")


def add_optimizer_arguments(p: argparse.ArgumentParser, lr: float = 0.1) -> None:
    """`--sparse-optimizer NAME` and `--lr` (every benchmark that trains takes them)."""
    p.add_argument(
        "--sparse-optimizer",
        type=sparse_optimizer_arg,
        default="sgd",
        metavar="NAME",
        help=f"the tables' optimizer, every system's where it has it: {', '.join(SPARSE_OPTIMIZERS)} (dashes or "
        "underscores; default sgd; the Adam family with the betas and eps of sparselift.optim's records); "
        "a system without it is skipped, with the reason",
    )
    p.add_argument("--lr", type=float, default=lr, help=f"its learning rate, and the dense SGD's (default {lr})")


def config_from_args(a: argparse.Namespace) -> BenchConfig:
    cfg = BenchConfig(
        model=a.model,
        world_size=a.world_size,
        systems=tuple(s for s in a.systems.split(",") if s),
        steps=a.steps,
        rounds=a.rounds,
        warmup=a.warmup,
        batch_size=a.batch_size,
        rows_cap=a.rows_cap,
        threads=a.threads,
        kernels=a.kernels,
        host_memory=a.host_memory,
        plan_cache=a.plan_cache,
        lr=a.lr,
        sparse_optimizer=a.sparse_optimizer,
    )
    known = getattr(a, "known_systems", SYSTEMS)
    unknown = [s for s in cfg.systems if s not in known]
    if unknown:
        raise SystemExit(f"unknown system(s) {', '.join(unknown)}; use some of {', '.join(known)}")
    if a.quick:
        # The benchmark's batch, not a smaller one: at a few hundred rows per rank every system's
        # step is mostly fixed per-step costs and the comparison says little about training.
        cfg = attrs.evolve(
            cfg,
            steps=min(cfg.steps, 24),
            rounds=min(cfg.rounds, 4),
            warmup=min(cfg.warmup, 2),
            rows_cap=min(cfg.rows_cap or 10_000, 10_000),
        )
    return cfg


def report(result: dict[str, Any], bench: str, argv: Sequence[str] | None, table, json_path: str | None) -> None:
    """Every benchmark's ending: record the command, print the table, write the JSON."""
    result["command"] = f"sparselift bench {bench} " + " ".join(argv if argv is not None else sys.argv[1:])
    print(table(result))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=2)


def cli_main(argv: Sequence[str] | None, bench: str, description: str, run_fn, table, **defaults: Any) -> int:
    """A side-by-side benchmark's command: parse (`add_arguments(**defaults)`), run, report, plot."""
    p = argparse.ArgumentParser(prog=f"sparselift bench {bench}", description=description)
    add_arguments(p, **defaults)
    a = p.parse_args(argv)
    result = run_fn(config_from_args(a))
    report(result, bench, argv, table, a.json)
    if a.plot:
        plot(result, a.plot)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return cli_main(argv, "dlrm", __doc__.split("\n")[0], run, format_table)


if __name__ == "__main__":
    sys.exit(main())
