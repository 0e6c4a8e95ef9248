"""The `sparselift` command: export models to IR, simulate large world sizes (and, as they land,
compile, bench, explain).

Subcommands import torch lazily so `sparselift --help` stays fast. An error is one line and a
non-zero exit; `--traceback` (or SPARSELIFT_TRACEBACK=1) adds the Python traceback
(`sparselift/tools/errors.py`). Usage errors are argparse's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from sparselift.tools.arguments import max_length_arg, rows_cap_arg
from sparselift.tools.errors import TRACEBACK_FLAG, TRACEBACK_HELP, report, traceback_requested

MODEL_NAMES = ("dlrm-kaggle", "dlrm-terabyte", "dlrm-bench", "two-tower", "torchrec-ebc", "din")


def _load_model(spec: str, rows_cap: int | None, batch_size: int, seed: int):
    from sparselift.models import build, load_user_factory

    if ":" in spec and spec.split(":", 1)[0].endswith(".py"):
        return load_user_factory(spec)
    return build(spec, rows_cap=rows_cap, batch_size=batch_size, seed=seed)


_SHOW_TRACEBACK = False  # set by main()


def _error(prefix: str, e: BaseException, code: int = 2) -> int:
    """A handled error: `PREFIX: MESSAGE` on stderr (after the traceback with --traceback)."""
    if _SHOW_TRACEBACK:
        import traceback

        traceback.print_exception(e, file=sys.stderr)
    print(f"{prefix}: {e}", file=sys.stderr)
    return code


def _sharding(value: str):
    from sparselift.tools.arguments import load_sharding

    try:
        return load_sharding(value)
    except ValueError as e:
        raise SystemExit(f"sparselift: {e}") from None


def cmd_export(args: argparse.Namespace) -> int:
    from sparselift.frontend.errors import ExportError
    from sparselift.frontend.export import export

    spec = args.model or args.factory
    if not spec:
        raise SystemExit("sparselift export: give --model NAME or path/to/file.py:factory")
    try:
        model, inputs = _load_model(spec, args.rows_cap, args.batch_size, args.seed)
        program = export(
            model,
            inputs,
            world_size=args.world_size,
            sharding=_sharding(args.sharding),
            max_lengths=dict(args.max_length) or None,
        )
    except (ExportError, ValueError, FileNotFoundError, AttributeError, TypeError) as e:
        return _error("sparselift export", e)
    if args.output:
        Path(args.output).write_text(program.text)
    else:
        sys.stdout.write(program.text)
    from sparselift.codegen.table_facts import sharding_plan

    if args.plan_json:
        Path(args.plan_json).write_text(sharding_plan(program.module).to_json() + "\n")
    if args.verbose:
        print(sharding_plan(program.module).describe(), file=sys.stderr)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    import json

    from sparselift.tools.simulate_cli import (
        DEFAULT_BATCH,
        EXPORT_WORLD_SIZE,
        format_table,
        plot_simulation,
        simulate_inputs,
    )

    try:
        sizes, profile, source, fields, options = simulate_inputs(args)
    except ValueError as e:
        return _error("sparselift simulate", e)

    from sparselift.codegen.table_facts import describe_tables
    from sparselift.frontend.errors import ExportError
    from sparselift.frontend.export import export
    from sparselift.passes.simulate import sweep, workload_from_module

    spec = args.model or args.factory
    try:
        model, inputs = _load_model(spec, args.rows_cap, args.batch_size or DEFAULT_BATCH, args.seed)
        program = export(model, inputs, world_size=EXPORT_WORLD_SIZE, sharding="auto")
        tables = {t.param for t in describe_tables(program.module)}
        dense_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if n not in tables)
        workload = workload_from_module(program.module, dense_param_bytes=dense_bytes, model=args.model or spec)
        if args.batch_size:  # FLOPs and pooling are per sample: a user factory's example batch can be rescaled
            workload = workload.with_batch(args.batch_size)
        notes = {
            "rows_cap": args.rows_cap,
            "export_world_size": EXPORT_WORLD_SIZE,
            "calibration": args.calibration,
            "headline_world_size": args.world_size,
        }
        result = sweep(workload, profile, sizes, options, source, fields, notes)
    except (ExportError, ValueError, FileNotFoundError, AttributeError, TypeError) as e:
        return _error("sparselift simulate", e)
    sys.stdout.write(format_table(result))
    try:
        if args.json:
            Path(args.json).write_text(json.dumps(result.to_json(), indent=2) + "\n")
        if args.png:
            plot_simulation(result, args.png)
    except OSError as e:
        print(f"sparselift simulate: cannot write {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    return 0


def _explain_worker(
    rank: int, world: int, spec: str, rows_cap, batch_size: int, seed: int, sharding: str, options: dict
) -> dict:
    """One rank of `sparselift explain`: compile (plan or reuse) and describe the plan."""
    import os
    import time

    import torch

    import sparselift

    # Local ranks share the cores: one rank per core (as `bench dlrm`), else they thrash.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    model, inputs = _load_model(spec, rows_cap, batch_size, seed)
    start = time.perf_counter()
    compiled = sparselift.compile(model, inputs, sharding=sharding, options=sparselift.CompileOptions(**options))
    record = compiled.plan.record
    return {
        "explain": compiled.plan.explain(),
        "compile_s": time.perf_counter() - start,
        "record": None if record is None else record.to_json(),
    }


def cmd_explain(args: argparse.Namespace) -> int:
    """Print the planner's decisions: from a saved plan record, or by compiling on local ranks."""
    import time

    from sparselift.plan_record import PlanRecord

    if args.plan and not (args.model or args.factory):
        try:
            print(PlanRecord.load(args.plan).explain())
        except ValueError as e:
            return _error("sparselift explain", e)
        return 0
    spec = args.model or args.factory
    if not spec:
        print(
            "sparselift explain: give --model NAME (or path/to/file.py:factory), or --plan RECORD.json", file=sys.stderr
        )
        return 2
    if args.world_size < 1:
        print(f"sparselift explain: --world-size must be at least 1, got {args.world_size}", file=sys.stderr)
        return 2
    chosen = [
        flag
        for flag, on in (("--plan RECORD.json", args.plan), ("--replan", args.replan), ("--refine", args.refine))
        if on
    ]
    if len(chosen) > 1:  # each says how to plan; one would silently win
        print(f"sparselift explain: give one of {', '.join(chosen)}, not several", file=sys.stderr)
        return 2
    if args.calibration_steps < 1:
        print(
            f"sparselift explain: --calibration-steps must be at least 1, got {args.calibration_steps}", file=sys.stderr
        )
        return 2
    options = {
        "plan": args.plan or ("replan" if args.replan else "refine" if args.refine else "auto"),
        "calibration_budget_s": args.budget,
        "calibration_steps": args.calibration_steps,
        "memory_cap_bytes": args.memory_cap_bytes,
        "max_lanes": args.max_lanes,
        "cache_dir": args.cache_dir,
        "optimizations": tuple(args.optimizations.split(",")) if args.optimizations else None,
    }
    start = time.perf_counter()
    call = (spec, args.rows_cap, args.batch_size, args.seed, args.sharding, options)
    try:
        if args.world_size == 1:
            results = [_explain_worker(0, 1, *call)]
        else:
            from sparselift.runtime.distributed import launch

            results = launch(_explain_worker, args.world_size, *call, timeout_s=args.timeout)
    except (RuntimeError, ValueError, TimeoutError) as e:
        return _error("sparselift explain", e, code=1)
    out = results[0]
    print(out["explain"])
    print(
        f"(compile on {args.world_size} rank(s), rank 0: {out['compile_s']:.2f} s; "
        f"wall {time.perf_counter() - start:.2f} s including process start-up)"
    )
    if args.json and out["record"] is not None:
        summary = PlanRecord.from_json(out["record"]).summary()
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


BENCHES = {
    "dlrm": "sparselift.bench.dlrm",
    "ablation": "sparselift.bench.ablation",
    "quality": "sparselift.bench.quality",
    "kernels": "sparselift.bench.kernels",
    "gpu": "sparselift.bench.gpu",
    "ops": "sparselift.bench.ops",
    "reference-ops": "sparselift.bench.reference_ops",
    "memory": "sparselift.bench.memory_check",
    "seq": "sparselift.bench.seq",
    "seq-quality": "sparselift.bench.seq_quality",
}


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    return importlib.import_module(BENCHES[args.which]).main(args.rest)


def _add_export_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`sparselift export`: a model to SparseLift IR."""
    ex = sub.add_parser("export", parents=[common], help="export a model to SparseLift IR (opaque sparse groups)")
    ex.add_argument("factory", nargs="?", help="path/to/file.py:factory returning (model, example_inputs)")
    ex.add_argument("--model", choices=MODEL_NAMES, help="a built-in example model")
    ex.add_argument("--world-size", type=int, required=True)
    ex.add_argument("--sharding", default="auto", help="auto | table_wise | row_wise | data_parallel | PLAN.json")
    ex.add_argument(
        "--rows-cap", type=rows_cap_arg, default=None, help="cap every table's rows (keeps big models in memory)"
    )
    ex.add_argument("--batch-size", type=int, default=128, help="example batch per rank")
    ex.add_argument("--seed", type=int, default=0)
    ex.add_argument(
        "--max-length",
        type=max_length_arg,
        action="append",
        default=[],
        metavar="KEY=N",
        help="the longest bag of KeyedJaggedTensor key KEY an EmbeddingCollection looks up (default: the example's)",
    )
    ex.add_argument("-o", "--output", help="write the IR here instead of stdout")
    ex.add_argument("--plan-json", help="also write the sharding plan as JSON")
    ex.add_argument("-v", "--verbose", action="store_true", help="print the sharding plan to stderr")
    ex.set_defaults(func=cmd_export)


def _add_simulate_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`sparselift simulate`: the analytic step-time projection at N ranks."""
    sim = sub.add_parser(
        "simulate",
        parents=[common],
        help="SIMULATED step time and stage breakdown at N ranks (analytic projection, weak scaling)",
        description="Project the per-rank step time and the five-column stage breakdown at large world sizes "
        "from a hardware profile and an alpha-beta network model. The output is a simulation, not a measurement.",
    )
    sim.add_argument("factory", nargs="?", help="path/to/file.py:factory returning (model, example_inputs)")
    sim.add_argument("--model", choices=MODEL_NAMES, help="a built-in example model")
    sim.add_argument("--world-size", type=int, help="the world size to project (added to --sweep)")
    sim.add_argument("--profile", default="h100-nccl", help="cpu-gloo | cpu-shm | h100-nccl | h200-nccl | PROFILE.json")
    sim.add_argument("--ranks-per-node", type=int, default=None, help="ranks sharing a node (default: the profile's)")
    sim.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="samples per rank per step, fixed as N grows (default 2048; a factory's example batch)",
    )
    sim.add_argument(
        "--rows-cap",
        type=rows_cap_arg,
        default=100_000,
        help="cap every table's rows when building the model (default 100000; placement depends on it)",
    )
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--sweep", help="world sizes: 8,64,512 or a doubling run 8,16,...,4096")
    sim.add_argument(
        "--sharding",
        default="auto",
        choices=("auto", "table_wise", "row_wise", "data_parallel"),
        help="placement at every world size (default auto, as export)",
    )
    sim.add_argument("--calibration", help="JSON object of fitted HardwareProfile fields overriding the profile's")
    sim.add_argument("--no-latency-hiding", action="store_true", help="project the schedule without overlap")
    sim.add_argument("--no-aggregation", action="store_true", help="project without aggregate-comm merging")
    sim.add_argument("--json", help="write the projection as JSON here")
    sim.add_argument("--png", help="write a plot (step time and stage shares vs world size) here")
    sim.set_defaults(func=cmd_simulate)


def _add_explain_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`sparselift explain`: the planner's decisions."""
    exp = sub.add_parser(
        "explain",
        parents=[common],
        help="show the planner's decisions: chosen strategies, predicted vs measured increments, rejections",
        description="Compile on local gloo ranks (planning, or reusing the cached plan) and print the plan's "
        "decisions; with --plan RECORD.json alone, print a saved plan record.",
    )
    exp.add_argument("factory", nargs="?", help="path/to/file.py:factory returning (model, example_inputs)")
    exp.add_argument("--model", choices=MODEL_NAMES, help="a built-in example model")
    exp.add_argument("--world-size", type=int, default=2)
    exp.add_argument("--plan", help="a plan record JSON: printed as is (alone), or used for the compile")
    exp.add_argument("--replan", action="store_true", help="calibrate even if a cached plan matches")
    exp.add_argument(
        "--refine",
        action="store_true",
        help="calibrate again, going on with the cached plan's undecided paired tests (their rounds pile up)",
    )
    exp.add_argument("--budget", type=float, default=60.0, help="cap of the calibration budget in seconds (default 60)")
    exp.add_argument(
        "--calibration-steps",
        type=int,
        default=50,
        help="the calibration budget in steps of the best plan found so far (default 50: 5%% of a 1000-step run)",
    )
    exp.add_argument(
        "--memory-cap-bytes", type=int, default=None, help="per-rank cap for workspace and in-flight buffers"
    )
    exp.add_argument("--max-lanes", type=int, default=None, help="concurrent lanes per rank (default: torch threads)")
    exp.add_argument("--optimizations", help="families the planner may choose, e.g. aggregation,codegen (default all)")
    exp.add_argument("--sharding", default="auto", help="auto | table_wise | row_wise | data_parallel")
    exp.add_argument(
        "--rows-cap",
        type=rows_cap_arg,
        default=100_000,
        help="cap every table's rows (default 100000; 'none': real sizes)",
    )
    exp.add_argument("--batch-size", type=int, default=2048, help="example batch per rank (default 2048)")
    exp.add_argument("--seed", type=int, default=0)
    exp.add_argument(
        "--cache-dir", default=None, help="plan cache (default $SPARSELIFT_CACHE_DIR or ~/.cache/sparselift)"
    )
    exp.add_argument("--timeout", type=float, default=300.0, help="seconds before the ranks are stopped")
    exp.add_argument(
        "--json", help="also write the outcome (pipeline, t0_us, chosen_us, confirmed, cost_model, decisions) here"
    )
    exp.set_defaults(func=cmd_explain)


# `--sparse-optimizer`'s names (sparselift.bench.dlrm.SPARSE_OPTIMIZERS; not imported here, so
# `sparselift --help` stays fast; tests/bench/test_bench_cli.py checks they agree).
SPARSE_OPTIMIZERS = ("sgd", "adagrad", "rowwise-adagrad", "adam", "adamw", "partial-rowwise-adam")


def _add_bench_parser(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """`sparselift bench`: the benchmarks (each parses its own options: `BENCHES[name].main(rest)`)."""
    bench = sub.add_parser(
        "bench",
        parents=[common],
        help=(
            "benchmarks: dlrm (vs DLRM-Baseline and TorchRec), seq (a DIN sequence model, vs a PyTorch baseline "
            "and TorchRec), ablation, quality, seq-quality, kernels, gpu, ops (per-op time of a plan), memory (per "
            "rank, against the real-size bounds). dlrm, seq, ablation, quality and seq-quality train the tables "
            f"with --sparse-optimizer NAME ({', '.join(SPARSE_OPTIMIZERS)}; default sgd) at --lr; kernels times "
            "a fwd+bwd row per optimizer (--optimizers NAME,...)"
        ),
        description="Run a benchmark; its options follow its name (`sparselift bench NAME --help`).",
    )
    bench.add_argument("which", choices=sorted(BENCHES))
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="options of that benchmark (see --help)")
    bench.set_defaults(func=cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    # --traceback before or after the subcommand (SUPPRESS: a subcommand's default does not
    # override the flag given before it).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(TRACEBACK_FLAG, action="store_true", default=argparse.SUPPRESS, help=TRACEBACK_HELP)
    parser = argparse.ArgumentParser(
        prog="sparselift",
        parents=[common],
        description="SparseLift: compile the sparse path of recommendation training.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_export_parser, _add_simulate_parser, _add_explain_parser, _add_bench_parser):
        add(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    global _SHOW_TRACEBACK
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.command == "bench":  # its options follow it verbatim: take --traceback out of them
        args.rest = [a for a in args.rest if a != TRACEBACK_FLAG]
    _SHOW_TRACEBACK = traceback_requested(argv)
    try:
        return args.func(args)
    except Exception as e:  # noqa: BLE001 - every unhandled error is one message (a traceback on request)
        return report(f"sparselift {args.command}", e, _SHOW_TRACEBACK)


if __name__ == "__main__":
    sys.exit(main())
