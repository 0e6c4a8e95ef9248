"""bench/stage_bias.py: the dense stages' shift per candidate, paired by round against the baseline."""

from __future__ import annotations

import random

import pytest


@pytest.fixture(scope="module")
def bias(bench_script):
    return bench_script("stage_bias")


def _row(name: str, dense_ms: list[float], rest_ms: list[float]) -> dict:
    stages = [
        {"sparse_fwd": r / 2, "other_fwd": d / 3, "sparse_bwd": r / 2, "other_bwd": 2 * d / 3, "other": 0.0}
        for d, r in zip(dense_ms, rest_ms)
    ]
    steps = [d + r for d, r in zip(dense_ms, rest_ms)]
    return {"config": name, "step_ms_median": 0.0, "steps_ms": steps, "stage_steps_ms": stages}


def test_a_candidate_that_moves_the_dense_stages_shows_its_shift_and_the_noise_the_control_removes(bias):
    # 20 rounds of 2 steps each. The dense stages carry the round's noise (shared within a round
    # by every configuration, as drift is) plus their own per-step noise; "overlap" moves work
    # into them (+5 ms) and out of the rest (-8 ms); "sparse_only" changes the rest alone.
    rng = random.Random(0)
    rounds, per_round = 20, 2
    drift = [rng.gauss(0, 10) for _ in range(rounds)]

    def steps(dense_shift: float, rest_shift: float) -> tuple[list[float], list[float]]:
        dense = [60 + drift[i // per_round] + dense_shift + rng.gauss(0, 8) for i in range(rounds * per_round)]
        rest = [30 + rest_shift + rng.gauss(0, 1) for _ in range(rounds * per_round)]
        return dense, rest

    result = {
        "config": {"model": "dlrm-kaggle", "rounds": rounds},
        "rows": [_row("base", *steps(0, 0)), _row("overlap", *steps(5, -8)), _row("sparse_only", *steps(0, -3))],
    }
    out = {r["config"]: r for r in bias.compare(result)}
    dense, se = out["overlap"]["dense_shift_ms"]
    assert dense == pytest.approx(5, abs=3 * se) and dense > 3 * se  # a shift the control would hide
    assert out["overlap"]["step_shift_ms"][0] == pytest.approx(-3, abs=4)
    dense, se = out["sparse_only"]["dense_shift_ms"]
    assert abs(dense) < 3 * se
    assert out["sparse_only"]["rest_shift_ms"][0] == pytest.approx(-3, abs=0.5)
    assert out["sparse_only"]["sd_rest_ms"] < out["sparse_only"]["sd_step_ms"] / 3


def test_a_run_whose_steps_do_not_fill_its_rounds_is_refused(bias):
    row = _row("base", [1.0], [1.0])
    with pytest.raises(ValueError, match="row 'base': 1 steps, 1 stage records, 3 rounds"):
        bias.per_round(row, 3)
