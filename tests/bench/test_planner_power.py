"""bench/planner_power.py: the residuals it resamples, and the accept rates it reports."""

from __future__ import annotations

import json
import math
import random

import pytest


@pytest.fixture(scope="module")
def power(bench_script):
    return bench_script("planner_power")


def test_residuals_are_each_tests_rounds_less_its_own_mean(power, tmp_path):
    # A record as `sparselift explain --json` writes it: the effect (a 10% gain) is taken out,
    # the spread around it kept, relative to the baseline's median, with both signs (the null is
    # symmetric); tests under 3 rounds skipped.
    tests = [
        {"baseline_rounds_us": [100.0, 100.0, 100.0], "candidate_rounds_us": [88.0, 90.0, 92.0]},
        {"baseline_rounds_us": [100.0, 100.0], "candidate_rounds_us": [50.0, 150.0]},
    ]
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"record": {"paired_tests": tests}}))
    scale = math.sqrt(3 / 2)
    r = 0.02 * scale
    assert power.residuals([str(path)]) == pytest.approx([r, -r, 0.0, 0.0, -r, r])


def test_accept_rates_separate_a_clear_gain_from_none(power):
    rng = random.Random(0)
    noise = [rng.gauss(0, 0.02) for _ in range(2000)]  # 2% of the step
    assert power.accept_rate(noise, 0.20, 8, 0.02, trials=200, seed=1) == 1.0
    assert power.accept_rate(noise, 0.0, 8, 0.02, trials=200, seed=1) <= 0.02
    # A smaller gain needs more rounds: the rate grows with the rounds the budget leaves.
    assert power.accept_rate(noise, 0.03, 4, 0.02, trials=200, seed=1) < power.accept_rate(
        noise, 0.03, 16, 0.02, trials=200, seed=1
    )
