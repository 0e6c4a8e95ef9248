"""The `sparselift` command: export models to IR (and, as they land, compile, bench, explain).

Subcommands import torch lazily so `sparselift --help` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

MODEL_NAMES = ("dlrm-kaggle", "dlrm-terabyte", "dlrm-bench", "two-tower", "torchrec-ebc")


def _load_model(spec: str, rows_cap: int | None, batch_size: int, seed: int):
    from sparselift.models import build, load_user_factory

    if ":" in spec and spec.split(":", 1)[0].endswith(".py"):
        return load_user_factory(spec)
    return build(spec, rows_cap=rows_cap, batch_size=batch_size, seed=seed)


def _sharding(value: str):
    from sparselift.frontend.export import SHARDING_CHOICES
    from sparselift.passes.sharding import ShardingPlan

    if value in SHARDING_CHOICES:
        return value
    path = Path(value)
    if not path.exists():
        raise SystemExit(f"sparselift: --sharding must be one of {', '.join(SHARDING_CHOICES)} or a plan JSON file; '{value}' is neither")
    try:
        return ShardingPlan.from_json(path.read_text())
    except (ValueError, KeyError, TypeError) as e:  # bad JSON, a missing key, a bad kind
        detail = f"missing key {e}" if isinstance(e, KeyError) else str(e)
        raise SystemExit(f"sparselift: --sharding {value} is not a valid sharding plan: {detail}") from None


def cmd_export(args: argparse.Namespace) -> int:
    from sparselift.frontend.errors import ExportError
    from sparselift.frontend.export import export

    spec = args.model or args.factory
    if not spec:
        raise SystemExit("sparselift export: give --model NAME or path/to/file.py:factory")
    try:
        model, inputs = _load_model(spec, args.rows_cap, args.batch_size, args.seed)
        program = export(model, inputs, world_size=args.world_size, sharding=_sharding(args.sharding))
    except (ExportError, ValueError, FileNotFoundError, AttributeError, TypeError) as e:
        print(f"sparselift export: {e}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_text(program.text)
    else:
        sys.stdout.write(program.text)
    if args.plan_json:
        Path(args.plan_json).write_text(program.sharding.to_json() + "\n")
    if args.verbose:
        print(program.sharding.describe(), file=sys.stderr)
    return 0


BENCHES = {"dlrm": "sparselift.bench.dlrm", "quality": "sparselift.bench.quality", "kernels": "sparselift.bench.kernels"}


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    return importlib.import_module(BENCHES[args.which]).main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparselift", description="SparseLift: compile the sparse path of recommendation training.")
    sub = parser.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("export", help="export a model to SparseLift IR (opaque sparse groups)")
    ex.add_argument("factory", nargs="?", help="path/to/file.py:factory returning (model, example_inputs)")
    ex.add_argument("--model", choices=MODEL_NAMES, help="a built-in example model")
    ex.add_argument("--world-size", type=int, required=True)
    ex.add_argument("--sharding", default="auto", help="auto | table_wise | row_wise | data_parallel | PLAN.json")
    ex.add_argument("--rows-cap", type=int, default=None, help="cap every table's rows (keeps big models in memory)")
    ex.add_argument("--batch-size", type=int, default=128, help="example batch per rank")
    ex.add_argument("--seed", type=int, default=0)
    ex.add_argument("-o", "--output", help="write the IR here instead of stdout")
    ex.add_argument("--plan-json", help="also write the sharding plan as JSON")
    ex.add_argument("-v", "--verbose", action="store_true", help="print the sharding plan to stderr")
    ex.set_defaults(func=cmd_export)

    bench = sub.add_parser("bench", help="benchmarks: dlrm (vs DLRM-Baseline and TorchRec), quality, kernels")
    bench.add_argument("which", choices=sorted(BENCHES))
    bench.add_argument("rest", nargs=argparse.REMAINDER, help="options of that benchmark (see --help)")
    bench.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
