"""`sparselift simulate`'s front end: what the command parses (world sizes, calibration files,
its options) and what it prints (the text table, the plot).

The model it prices is the torch-free analysis `sparselift.passes.simulate`; the command itself
(exporting the model, then `sweep`) is `sparselift.tools.cli.cmd_simulate`.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from sparselift.passes.profiles import BUILTIN_PROFILES, load_profile
from sparselift.passes.simulate import STAGES, SimOptions, SimResult, calibrated, check_world_size


def load_calibration(path: str | Path) -> dict[str, Any]:
    """The fitted values in a calibration JSON file: an object of profile fields, or a planner
    plan record (or its fit report), whose `fit.profile` (`profile`) object is taken."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"calibration {path}: cannot read it: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"calibration {path}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"calibration {path}: expected a JSON object of profile fields, got {type(data).__name__}")
    if isinstance(data.get("fit"), dict) and isinstance(data["fit"].get("profile"), dict):
        return dict(data["fit"]["profile"])  # a plan record
    if isinstance(data.get("profile"), dict):
        return dict(data["profile"])  # a fit report
    return data


def parse_world_sizes(text: str) -> tuple[int, ...]:
    """World sizes from `8,16,64` or a geometric run `8,16,...,4096` (`8,...,4096` doubles).

    Sorted and deduplicated. Raises `ValueError` with a message on anything else.
    """
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p for p in parts):
        raise ValueError(f"bad sweep '{text}': expected comma-separated world sizes, e.g. 8,64,512 or 8,16,...,4096")
    sizes: list[int] = []
    i = 0
    while i < len(parts):
        p = parts[i]
        if p == "...":
            if not sizes or i + 1 >= len(parts) or parts[i + 1] == "...":
                raise ValueError(f"bad sweep '{text}': '...' needs a world size before and after it")
            end = _world_size(parts[i + 1], text)
            start = sizes[-1]
            ratio = sizes[-1] // sizes[-2] if len(sizes) >= 2 and sizes[-2] > 0 else 2
            if len(sizes) >= 2 and (ratio < 2 or sizes[-2] * ratio != sizes[-1]):
                raise ValueError(
                    f"bad sweep '{text}': '...' continues a geometric run, but {sizes[-2]},{sizes[-1]} "
                    "has no integer ratio >= 2"
                )
            n = start
            while n < end:
                n *= ratio
                sizes.append(n)
            if n != end:
                raise ValueError(f"bad sweep '{text}': the run from {start} by x{ratio} does not reach {end}")
            i += 2
            continue
        sizes.append(_world_size(p, text))
        i += 1
    return tuple(sorted(set(sizes)))


def _world_size(token: str, text: str) -> int:
    if not re.fullmatch(r"[0-9]+", token):
        raise ValueError(f"bad sweep '{text}': '{token}' is not a world size (a positive integer)")
    return check_world_size(int(token))


# The model is exported once at this world size for its tables, batch and FLOPs; the simulated
# world sizes are priced analytically (IR at N = 4096 would hold N x N split matrices).
EXPORT_WORLD_SIZE = 2
DEFAULT_BATCH = 2048  # per rank, when --batch-size is not given (a built-in model's example batch)


def simulate_inputs(args: argparse.Namespace):
    """Everything `simulate` checks before it builds the model: bad input fails fast (exit 2)."""
    if not (args.model or args.factory):
        raise ValueError("give --model NAME or path/to/file.py:factory")
    if args.world_size is None and args.sweep is None:
        raise ValueError("give --world-size N, --sweep N1,N2,... or both")
    sizes = set(parse_world_sizes(args.sweep)) if args.sweep is not None else set()
    if args.world_size is not None:
        sizes.add(check_world_size(args.world_size))
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.rows_cap is not None and args.rows_cap < 1:
        raise ValueError(f"--rows-cap must be at least 1, got {args.rows_cap}")
    profile = load_profile(args.profile)
    fields: list[str] = []
    if args.calibration:
        overrides = load_calibration(args.calibration)
        profile = calibrated(profile, overrides, where=f"calibration {args.calibration}")
        fields = sorted(overrides)
    if args.ranks_per_node is not None:
        profile = calibrated(profile, {"ranks_per_node": args.ranks_per_node}, where="--ranks-per-node")
    source = f"{args.profile} profile values" + (" (built-in)" if args.profile in BUILTIN_PROFILES else "")
    if fields:
        source += f", with fitted values from {args.calibration} for {', '.join(fields)}"
    else:
        source += "; no --calibration given"
    if args.png:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("--png needs matplotlib (pip install -e '.[bench]')") from None
    options = SimOptions(
        sharding=args.sharding, latency_hiding=not args.no_latency_hiding, aggregate_comm=not args.no_aggregation
    )
    return sorted(sizes), profile, source, fields, options


def plot_simulation(result, path: str) -> None:
    """Step time (log y) and the stage shares, against world size on a log2 axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r.world_size for r in result.rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    left.plot(sizes, [r.step_ms for r in result.rows], "o-", label="step time")
    left.plot(sizes, [r.exchange_ms for r in result.rows], "s--", label="exposed sparse exchange")
    left.set_yscale("log")
    left.set_ylabel("ms per step (simulated)")
    left.legend()
    bottom = [0.0] * len(sizes)
    for stage in STAGES:
        share = [100 * getattr(r.breakdown, stage) / r.step_ms if r.step_ms else 0.0 for r in result.rows]
        # Bars centred on each N on the log2 axis: width proportional to N.
        right.bar(sizes, share, width=[0.5 * n for n in sizes], bottom=bottom, label=stage)
        bottom = [b + x for b, x in zip(bottom, share)]
    right.set_ylabel("share of step time (%)")
    right.set_ylim(0, 100)
    right.legend(fontsize="small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(n) for n in sizes], rotation=45 if len(sizes) > 8 else 0)
        ax.set_xlabel("world size (ranks)")
        ax.grid(True, alpha=0.3)
    fig.suptitle(
        f"SIMULATED (analytic projection, not measured): {result.workload.model} on {result.profile.name}, "
        f"weak scaling, batch {result.workload.batch} per rank"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def format_table(result: SimResult) -> str:
    """The sweep as `sparselift simulate` prints it: labelled SIMULATED, one row per world size."""
    w, p = result.workload, result.profile
    lines = [
        f"SIMULATED step time (analytic projection, not a measurement): {w.model} on {p.name}",
        f"  weak scaling: batch {w.batch} per rank; {p.ranks_per_node} ranks per node; "
        f"{len(w.tables)} tables, {result.options.sharding} sharding at each world size",
        f"  plan: latency hiding {'on' if result.options.latency_hiding else 'off'}, "
        f"aggregate-comm {'on' if result.options.aggregate_comm else 'off'}",
        f"  per-op costs: {result.cost_source}",
        *(
            [f"  model built with every table capped at {result.notes['rows_cap']} rows (placement depends on sizes)"]
            if result.notes.get("rows_cap")
            else []
        ),
        "  stage columns in ms per step (the paper's five; they add up to step_ms)",
    ]
    header = ["world", "nodes", "step_ms", *STAGES, "exch_%", "samples/s", "tw/rw/dp"]
    rows = [
        [
            str(r.world_size),
            str(r.nodes),
            f"{r.step_ms:.3f}",
            *(f"{getattr(r.breakdown, k):.3f}" for k in STAGES),
            f"{100 * r.exchange_share:.1f}",
            f"{r.samples_per_s:,.0f}",
            "/".join(str(r.placements.get(k, 0)) for k in ("table_wise", "row_wise", "data_parallel")),
        ]
        for r in result.rows
    ]
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  " + "  ".join(c.rjust(wd) for c, wd in zip(row, widths)))
    return "\n".join(lines) + "\n"


__all__ = [
    "EXPORT_WORLD_SIZE",
    "DEFAULT_BATCH",
    "format_table",
    "load_calibration",
    "parse_world_sizes",
    "plot_simulation",
    "simulate_inputs",
]
