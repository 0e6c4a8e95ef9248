"""Does a candidate change the dense stages? The bias check a control variate on them needs.

Reads a `sparselift bench ablation --json` run whose first row is the baseline (T0) and whose
configurations were interleaved round by round (`--steps S --rounds R`: S / R steps of each a
round). For every other row, paired by round against the baseline:
- the dense stages' shift (`other_fwd + other_bwd`, each the slowest rank's): mean +- 1 s.e. A
  control variate on the dense stages assumes a candidate leaves them as they are; a shift
  beyond noise means it would be biased for that candidate;
- the whole step's shift, and the same less the dense stages;
- the standard deviation of the per-round differences, of the whole step and of the step less
  its dense stages: how much of the paired noise a control variate would remove.

    .venv/bin/python bench/stage_bias.py ABLATION.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

DENSE = ("other_fwd", "other_bwd")


def per_round(row: dict, rounds: int) -> list[tuple[float, float]]:
    """Per round: the mean step and the mean dense stages of the row's steps in that round."""
    steps, stages = row["steps_ms"], row["stage_steps_ms"]
    k = len(steps) // rounds
    if k == 0 or len(stages) != len(steps):
        raise ValueError(f"row '{row['config']}': {len(steps)} steps, {len(stages)} stage records, {rounds} rounds")
    out = []
    for r in range(rounds):
        idx = range(r * k, (r + 1) * k)
        out.append(
            (statistics.fmean(steps[i] for i in idx), statistics.fmean(sum(stages[i][c] for c in DENSE) for i in idx))
        )
    return out


def _mean_se(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def compare(result: dict) -> list[dict]:
    rounds = int(result["config"]["rounds"])
    base, *others = result["rows"]
    b = per_round(base, rounds)
    out = []
    for row in others:
        c = per_round(row, rounds)
        d_step = [cs - bs for (cs, _), (bs, _) in zip(c, b)]
        d_dense = [cd - bd for (_, cd), (_, bd) in zip(c, b)]
        d_rest = [s - d for s, d in zip(d_step, d_dense)]
        out.append(
            {
                "config": row["config"],
                "dense_shift_ms": _mean_se(d_dense),
                "step_shift_ms": _mean_se(d_step),
                "rest_shift_ms": _mean_se(d_rest),
                "sd_step_ms": statistics.stdev(d_step),
                "sd_rest_ms": statistics.stdev(d_rest),
            }
        )
    return out


def _fmt(mean_se: tuple[float, float]) -> str:
    return f"{mean_se[0]:+.2f} +- {mean_se[1]:.2f}"


def main(path: str) -> None:
    result = json.loads(Path(path).read_text())
    base = result["rows"][0]
    cfg = result["config"]
    print(f"{cfg['model']}: against '{base['config']}' ({base['step_ms_median']:.1f} ms), {cfg['rounds']} rounds")
    for r in compare(result):
        print(
            f"  {r['config']}: dense stages {_fmt(r['dense_shift_ms'])} ms, step {_fmt(r['step_shift_ms'])}, "
            f"step less dense {_fmt(r['rest_shift_ms'])}; sd of round differences {r['sd_step_ms']:.1f} -> "
            f"{r['sd_rest_ms']:.1f} ms"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[-1])
    main(sys.argv[1])
