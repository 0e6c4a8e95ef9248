"""Summarize `sparselift explain --replan --json` files (bench/issue16_replan_runs.sh) as a Markdown table.

Usage: python bench/issue16_summary.py OUT_DIR
One row per run: the chosen pipeline, confirmed, T0 and chosen step (paired medians), the cost
model's median relative error over the plans measured (after the fit; with the profile's values),
the calibration time and budget; then per model whether every run chose the same pipeline.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def main(out_dir: str) -> None:
    rows = []
    for path in sorted(Path(out_dir).glob("*.json")):
        model, run = path.stem.rsplit("-", 1)
        data = json.loads(path.read_text())
        cm, rec = data["cost_model"], data["record"]
        rows.append((model, run, data, cm, rec))
    columns = "model run pipeline confirmed T0_ms chosen_ms error_(fit) error_(profile) plans calibration_s budget_s"
    print("| " + " | ".join(c.replace("_", " ") for c in columns.split()) + " |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    chosen = defaultdict(list)
    for model, run, data, cm, rec in rows:
        pipeline = ",".join(data["pipeline"]) or "(T0)"
        chosen[model].append(pipeline)
        ms = lambda us: "-" if us is None else f"{us / 1e3:.1f}"  # noqa: E731
        pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
        print(
            f"| {model} | {run} | `{pipeline}` | {data['confirmed']} | {ms(data['t0_us'])} | {ms(data['chosen_us'])} "
            f"| {pct(cm['median_rel_error'])} | {pct(cm.get('median_rel_error_profile'))} | {cm['n_plans']} "
            f"| {data['calibration_s']:.1f} | {rec['budget_s']:g} |"
        )
    print()
    for model, pipelines in chosen.items():
        same = max(pipelines.count(p) for p in set(pipelines))
        print(f"- {model}: the same pipeline in {same} of {len(pipelines)} runs")


if __name__ == "__main__":
    main(sys.argv[1])
