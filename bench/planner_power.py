"""How often the planner's paired test (`sparselift.plan_confirm.paired_test`) accepts a gain, by
its size and the rounds the budget leaves, under this VM's measured noise; and how often it
accepts no gain at all (an A/A test).

The noise is resampled from planner records (`sparselift explain ... --json RECORD`): each paired
test's per-round differences less that test's mean (its effect unknown, so only the spread around
it is kept), relative to the test's baseline step, scaled by sqrt(n / (n - 1)) for the mean taken
out, each residual also with its sign flipped: under no effect the two steps of a round, in
alternating order, are exchangeable, so their difference is symmetric (a candidate whose own steps
vary more would otherwise skew the null). A simulated round's difference is the true gain plus one
such residual, drawn at random. The test itself runs unchanged: its looks (`LOOKS`), stopping
rules, trimmed mean and t quantiles; only its error bound `alpha` varies, and the rounds the
budget leaves (64: what a refining plan cache may pile up over compiles). The gain column at
`WORTH` (1%) is the test's worst case: there the accept rate is its error, bounded by `alpha`.

    .venv/bin/python bench/planner_power.py RECORD.json [RECORD.json ...] [--trials 2000] [--gaussian]

`--gaussian` draws the noise from a normal distribution of the pool's deviation instead: what the
test's t quantiles assume, to tell its error from repeated looks apart from that of heavy tails.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from pathlib import Path

from sparselift.plan_confirm import ALPHA, LOOKS, WORTH, paired_test


def residuals(paths: list[str]) -> list[float]:
    """Relative per-round residuals of every paired test of at least 3 rounds in the records, each
    with both signs."""
    out: list[float] = []
    for path in paths:
        record = json.loads(Path(path).read_text())
        record = record.get("record", record)
        for test in record.get("paired_tests", []):
            base, cand = test["baseline_rounds_us"], test["candidate_rounds_us"]
            n = len(base)
            if n < 3:
                continue
            ref = statistics.median(base)
            diffs = [(b - c) / ref for b, c in zip(base, cand)]
            mean = sum(diffs) / n
            for d in diffs:
                r = (d - mean) * math.sqrt(n / (n - 1))
                out += [r, -r]
    return out


class _SimulatedPairs:
    """A `PairMeasure` whose rounds differ by `gain` (a share of a 1 s step) plus a drawn residual,
    and whose budget ends after `rounds` rounds."""

    def __init__(self, noise: list[float], gain: float, rounds: int, rng: random.Random) -> None:
        self.noise, self.gain, self.rounds, self.rng = noise, gain, rounds, rng
        self.done = 0
        self.exhausted = True

    def over_budget(self) -> bool:
        return self.done >= self.rounds

    def pair(self, baseline, candidate, candidate_first: bool) -> tuple[float, float]:
        self.done += 1
        return 1.0, 1.0 - self.gain - self.rng.choice(self.noise)


def accept_rate(noise: list[float], gain: float, rounds: int, alpha: float, trials: int, seed: int) -> float:
    rng = random.Random(seed)
    accepted = 0
    for _ in range(trials):
        measure = _SimulatedPairs(noise, gain, rounds, rng)
        test = paired_test(measure, "t0", "candidate", alpha=alpha, max_rounds=LOOKS[-1])
        accepted += test.verdict == "faster"
    return accepted / trials


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("records", nargs="+", help="planner records (`sparselift explain --json`)")
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gaussian", action="store_true", help="normal noise of the residuals' deviation")
    a = p.parse_args()
    noise = residuals(a.records)
    if len(noise) < 10:
        raise SystemExit(f"only {len(noise)} residuals in {a.records}: record more paired tests")
    sd = statistics.pstdev(noise)
    pool = f"{len(noise) // 2} residuals (each with both signs) from {len(a.records)} records"
    if a.gaussian:
        rng = random.Random(a.seed)
        noise = [rng.gauss(0.0, sd) for _ in range(20_000)]
        pool = f"normal noise of the deviation of {pool}"
    print(f"{pool}; paired sd {100 * sd:.1f}% of the step")
    gains = (0.0, WORTH, 0.02, 0.05, 0.10, 0.20)
    print(f"accepted as 'faster' (share of {a.trials} trials; a gain must clear {100 * WORTH:g}% of the step):")
    print(f"{'alpha':>6} {'rounds':>6} " + " ".join(f"{'gain ' + format(g, '.0%'):>9}" for g in gains))
    for alpha in (ALPHA, 0.05, 0.10):
        for rounds in (4, 8, 16, 32, 64):
            rates = [accept_rate(noise, g, rounds, alpha, a.trials, a.seed) for g in gains]
            print(f"{alpha:>6} {rounds:>6} " + " ".join(f"{r:>9.3f}" for r in rates))


if __name__ == "__main__":
    main()
