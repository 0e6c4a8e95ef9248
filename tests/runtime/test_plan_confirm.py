"""The sequential paired test and the confirmation before return, driven by a fake confirmer."""

from __future__ import annotations

import random

import pytest

from sparselift.plan_confirm import confirm_choice, paired_test

T0: tuple[str, ...] = ()
GEN = ("generate-kernels",)
GEN_HIDE = ("generate-kernels", "hide-latency")


class FakeMeasure:
    """Seconds per step drawn around each plan's true mean with Gaussian noise; a budget in rounds."""

    def __init__(self, means_ms: dict, noise_ms: float = 0.0, budget_rounds: int = 10_000, seed: int = 0):
        self.means, self.noise = means_ms, noise_ms
        self.rng = random.Random(seed)
        self.rounds, self.budget_rounds = 0, budget_rounds
        self.orders: list[bool] = []

    def _step(self, plan) -> float:
        return (self.means[plan] + self.rng.gauss(0.0, self.noise)) / 1e3

    def pair(self, baseline, candidate, candidate_first):
        self.rounds += 1
        self.orders.append(candidate_first)
        return self._step(baseline), self._step(candidate)

    def over_budget(self) -> bool:
        return self.rounds >= self.budget_rounds


def test_a_clear_gain_stops_early_and_alternates_the_order():
    m = FakeMeasure({T0: 40.0, GEN: 30.0}, noise_ms=1.0)
    test = paired_test(m, T0, GEN)
    assert test.verdict == "faster" and test.stopped == "clear"
    # A 25% gain against ~1.4 ms of round-to-round noise: clear within a few rounds (at 3 rounds
    # the t quantile for 3 standard errors is 17, so a clear answer needs a steady gain).
    assert 3 <= test.rounds <= 6
    assert m.orders == [False, True, False, True, False, True][: test.rounds]
    assert test.mean_us == pytest.approx(10_000, rel=0.2)
    assert "faster: mean gain +" in test.describe()


def test_a_gain_inside_the_noise_stays_unclear_until_the_round_limit():
    m = FakeMeasure({T0: 40.0, GEN: 39.9}, noise_ms=5.0, seed=3)
    test = paired_test(m, T0, GEN, max_rounds=12)
    assert (test.verdict, test.stopped, test.rounds) == ("unclear", "rounds", 12)


def test_a_slower_candidate_is_slower():
    m = FakeMeasure({T0: 30.0, GEN: 45.0}, noise_ms=1.0)
    assert paired_test(m, T0, GEN).verdict == "slower"


def test_the_budget_stops_the_rounds():
    m = FakeMeasure({T0: 40.0, GEN: 39.0}, noise_ms=5.0, budget_rounds=3)
    test = paired_test(m, T0, GEN)
    assert (test.stopped, test.rounds, test.verdict) == ("budget", 3, "unclear")


def test_identical_timings_are_not_a_gain():
    m = FakeMeasure({T0: 40.0, GEN: 40.0})
    assert paired_test(m, T0, GEN).verdict == "unclear"


@pytest.mark.parametrize("seed", range(20))
def test_decisions_repeat_under_noise(seed):
    """A 5% effect with 10% step noise: every run of the test reaches the same verdict (it needs
    33 to 307 rounds over these seeds to show the gain is at least the 1% worth a pass)."""
    m = FakeMeasure({T0: 40.0, GEN: 38.0}, noise_ms=4.0, seed=seed)
    assert paired_test(m, T0, GEN, max_rounds=400).verdict == "faster"


@pytest.mark.parametrize("seed", range(20))
def test_a_gain_below_what_a_pass_is_worth_is_never_faster(seed):
    """A real 0.5% gain, measured precisely: still not worth a pass (under `WORTH`, 1% of the
    step), so it never flips between runs into an accepted pass."""
    m = FakeMeasure({T0: 40.0, GEN: 39.8}, noise_ms=0.2, seed=seed)
    test = paired_test(m, T0, GEN)
    assert test.verdict == "unclear" and test.stopped in ("futile", "rounds")


def test_a_confirmed_choice_is_returned():
    m = FakeMeasure({T0: 40.0, GEN: 30.0, GEN_HIDE: 25.0}, noise_ms=1.0)
    c = confirm_choice(m, GEN_HIDE, [GEN])
    assert (c.returned, c.confirmed) == (GEN_HIDE, True)
    assert [t.candidate for t in c.tests] == [GEN_HIDE]


def test_a_chosen_plan_slower_than_t0_falls_back_to_the_best_confirmed():
    """The search's increments claimed a gain, but the whole plan measures slower than T0."""
    m = FakeMeasure({T0: 40.0, GEN: 30.0, GEN_HIDE: 44.0}, noise_ms=1.0)
    c = confirm_choice(m, GEN_HIDE, [GEN])
    assert c.returned == GEN and c.confirmed
    assert [t.verdict for t in c.tests] == ["slower", "faster"]
    assert "fell back to generate-kernels" in c.note
    assert c.to_dict()["tests"][0]["verdict"] == "slower"


def test_nothing_beats_t0_returns_t0():
    m = FakeMeasure({T0: 40.0, GEN: 40.0, GEN_HIDE: 41.0}, noise_ms=2.0)
    c = confirm_choice(m, GEN_HIDE, [GEN], max_rounds=10)
    assert c.returned == T0 and c.chosen == GEN_HIDE
    assert "T0 returned" in c.note


def test_t0_chosen_needs_no_rounds():
    m = FakeMeasure({T0: 40.0})
    c = confirm_choice(m, T0, [])
    assert (c.returned, c.tests, m.rounds) == (T0, (), 0)


def test_a_gain_too_small_to_pay_is_stopped_early():
    """0.1% gain, little noise: once even the optimistic bound is under 1% of the step, stop."""
    m = FakeMeasure({T0: 40.0, GEN: 39.96}, noise_ms=0.05)
    test = paired_test(m, T0, GEN)
    assert (test.verdict, test.stopped) == ("unclear", "futile") and test.rounds < 10
    assert "ruled out" in test.describe()


def test_a_plan_the_search_already_found_faster_than_t0_is_not_tested_again():
    # The codegen family tests generated kernels against T0; when that is the chosen plan, the
    # confirmation is that test (a T0 step of the reference lowering can take seconds).
    m = FakeMeasure({T0: 40.0, GEN: 30.0, GEN_HIDE: 41.0}, noise_ms=1.0)
    search_test = paired_test(m, T0, GEN)
    before = m.rounds
    c = confirm_choice(m, GEN, [], earlier=[search_test])
    assert (c.returned, c.confirmed, c.tests, m.rounds) == (GEN, True, (search_test,), before)
    assert "not repeated" in c.note
    # An earlier test that was not "faster", or against another baseline, is not reused.
    unclear = paired_test(FakeMeasure({T0: 40.0, GEN: 40.0}), T0, GEN)
    c = confirm_choice(m, GEN, [], earlier=[unclear, paired_test(m, GEN_HIDE, GEN)])
    assert c.returned == GEN and c.tests[0] not in (unclear,) and m.rounds > before
