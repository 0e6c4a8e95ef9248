"""Deciding between two plans by measurement: the sequential paired test, and the confirmation of a chosen plan.

A single step on this kind of machine varies by 5-35 ms, so two observations per plan (the
paper's budget) cannot order plans a few percent apart, and decisions taken on them change from
run to run. Here every comparison is a *sequential paired test*: rounds of one step of each plan,
back to back and in alternating order (so drift and order effects hit both alike), each round's
difference taken on the slowest rank. The gain is estimated twice, by the rounds' mean and by
their 20%-trimmed mean (Yuen's trimmed t, `trimmed_gain`), and a verdict holds when either estimate
gives it. One round that caught a stall of the machine (a step of 740 ms among steps of 370,
measured at real size on this 2-core VM) inflates the mean's standard error enough to hide a 20%
gain for the whole budget; the trimmed mean ignores it. Trimming in turn loses to the plain mean
when the rounds are two-valued (slow drift under the alternating order).

*Faster* means the gain, less `look_z(alpha)` standard errors (as a Student t quantile:
`t_critical`), is still at least `WORTH` of the baseline step (a gain worth a pass, for sure). The
test looks for it only at the rounds of `LOOKS`, and its error is spent over every look it may
make, each estimate at each look (Bonferroni): a candidate whose true gain is below `WORTH` is
called faster in at most `alpha` of tests (`ALPHA`, 2%), however many looks the test makes,
including those of earlier compiles that a refining plan cache resumes (`prior`). Looking at
every round at a fixed 3 standard errors, the rule before, erred beyond that over as many rounds
(2.8% against 1.4% now at a true gain of exactly `WORTH`, 64 rounds, 10% normal noise:
`tests/runtime/test_plan_confirm.py`), against the "~0.1% per test" it stated.
*Slower* (the gain plus `z` standard errors still a loss) and futility (a gain worth the pass
ruled out) keep the incumbent, so they spend none of that error and are checked at every round
from `min_rounds` on. The test stops at a clear verdict, futility, the round limit or the
calibration budget; then the effect is *unclear*, and the plan with fewer passes is kept.

`confirm_choice` runs the test on the plan the search chose against T0 before it is returned: a
plan that is not faster than T0 beyond noise is never returned; the planner falls back to the
best less-optimized plan it passed through that is confirmed, or to T0 itself.

Torch-free and collective-free: the caller's `PairMeasure` times the rounds (and agrees them over
the ranks), so tests drive it with fake timings. A plan here is any hashable value the measure
knows how to run (the planner's: a typed pipeline, or another placement's T0); as text it is its
passes' specs joined by commas.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from statistics import NormalDist
from typing import Any, Protocol

import attrs

VERDICTS = ("faster", "slower", "unclear")

PlanKey = Hashable
"""A plan as the `PairMeasure` knows it."""


def plan_text(plan: PlanKey) -> str:
    """A plan as text: its passes' specs joined by commas ("" for T0)."""
    return ",".join(map(str, plan)) if isinstance(plan, tuple) else str(plan)


Z_CLEAR = 3.0
"""Standard errors a loss must clear for "slower", and a gain's optimistic end for futility: both
keep the incumbent, so they spend none of `ALPHA`."""
ALPHA = 0.02
"""The share of tests, at most, that call a candidate "faster" when its true gain is below `WORTH`
(spent over every look of `LOOKS` and both estimates: `look_z`). Near what the rule before erred
unbounded (2.8% over 64 rounds, the module docstring), now a bound that holds across the compiles
a refining cache adds."""
LOOKS = (3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64)
"""The rounds at which a test may stop as "faster": dense early, where a family's part of the
budget ends a test, and sparse late, where a refining cache resumes it (`prior`). A test has at
most `LOOKS[-1]` rounds."""
MAX_ROUNDS = 16
"""The rounds one compile's test may run (a refining compile resumes it up to `LOOKS[-1]`)."""
WORTH = 0.01
"""The smallest gain worth a pass, as a share of the baseline step: a candidate is "faster" only
when its gain is at least this for sure (`look_z`'s standard errors to spare); "unclear" keeps the plan
with fewer passes."""
TRIM = 0.2
"""The share of rounds trimmed from each end of the gains (Wilcox's usual 20%): none below 5 rounds,
one each side from 5, two from 10."""


class PairMeasure(Protocol):
    """Times one round of two plans (seconds, each the slowest rank's), and says whether the
    calibration budget is spent; the same answers on every rank."""

    def pair(self, baseline: PlanKey, candidate: PlanKey, candidate_first: bool) -> tuple[float, float]:
        """One step of each plan, in the given order: (baseline s, candidate s)."""
        ...

    def over_budget(self) -> bool: ...


@attrs.frozen
class PairedComparison:
    """The outcome of one sequential paired test of `candidate` against `baseline`."""

    baseline: PlanKey
    candidate: PlanKey
    baseline_rounds_us: tuple[float, ...]  # per round, the slowest rank's step
    candidate_rounds_us: tuple[float, ...]
    verdict: str  # faster | slower | unclear
    stopped: str  # clear | futile | rounds | budget | share
    earlier_rounds: int = 0  # the first rounds, from an earlier compile (a refining cache)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], baseline: PlanKey, candidate: PlanKey) -> PairedComparison:
        """A test as `to_dict` wrote it, between the plans the caller knows as `baseline` and
        `candidate` (the dict has them as text only). A malformed one is a `ValueError` saying
        which field is wrong: a refining compile must not go on from rounds it cannot read."""
        try:
            test = cls(
                baseline,
                candidate,
                tuple(float(t) for t in d["baseline_rounds_us"]),
                tuple(float(t) for t in d["candidate_rounds_us"]),
                str(d["verdict"]),
                str(d["stopped"]),
                int(d.get("earlier_rounds", 0)),
            )
        except KeyError as e:
            raise ValueError(f"a paired test without its field {e}") from None
        except (TypeError, ValueError) as e:
            raise ValueError(f"a paired test with a malformed field: {e}") from None
        if len(test.baseline_rounds_us) != len(test.candidate_rounds_us):
            raise ValueError(
                f"a paired test of {len(test.baseline_rounds_us)} baseline and "
                f"{len(test.candidate_rounds_us)} candidate rounds"
            )
        if test.verdict not in VERDICTS:
            raise ValueError(f"a paired test with verdict {test.verdict!r}, not one of {', '.join(VERDICTS)}")
        return test

    @property
    def resumable(self) -> bool:
        """Undecided only for want of rounds: a later compile may go on with it (`paired_test`'s
        `prior`). A clear verdict, futility or "unclear" at `LOOKS[-1]` rounds is a decision."""
        return self.verdict == "unclear" and self.stopped in ("rounds", "budget", "share") and self.rounds < LOOKS[-1]

    @property
    def gains_us(self) -> tuple[float, ...]:
        """Per round: baseline - candidate (positive: the candidate is faster)."""
        return tuple(b - c for b, c in zip(self.baseline_rounds_us, self.candidate_rounds_us))

    @property
    def baseline_us(self) -> float:
        """The median baseline step over the rounds."""
        return _median(self.baseline_rounds_us)

    @property
    def rounds(self) -> int:
        return len(self.gains_us)

    @property
    def mean_us(self) -> float:
        return self._estimate(0.0)[0]

    @property
    def se_us(self) -> float:
        """Standard error of the mean gain (inf under 2 rounds)."""
        return self._estimate(0.0)[1]

    @property
    def trimmed(self) -> tuple[float, float]:
        """The trimmed mean gain and its standard error (`trimmed_gain`; inf under 2 rounds)."""
        return self._estimate(TRIM)

    def _estimate(self, trim: float) -> tuple[float, float]:
        return trimmed_gain(self.gains_us, trim)[:2] if self.gains_us else (0.0, math.inf)

    @property
    def candidate_us(self) -> float:
        return self.baseline_us - self.mean_us

    def describe(self) -> str:
        se = "inf" if math.isinf(self.se_us) else f"{self.se_us / 1e3:.2f}"
        why = {
            "clear": "",
            "futile": " (stopped: a gain worth the pass is ruled out)",
            "rounds": " (round limit reached)",
            "budget": " (calibration budget spent)",
            "share": " (this family's part of the calibration budget spent)",
        }[self.stopped]
        earlier = f", {self.earlier_rounds} of them in earlier compiles" if self.earlier_rounds else ""
        return (
            f"{self.verdict}: mean gain {self.mean_us / 1e3:+.2f} ms +- {se} ms (1 s.e.)"
            f"{self._trimmed_text()} over {self.rounds} paired rounds{earlier}{why}"
        )

    def _trimmed_text(self) -> str:
        if int(TRIM * self.rounds) == 0:  # nothing trimmed: the same as the mean
            return ""
        mean, se = self.trimmed
        return f", {TRIM:.0%}-trimmed {mean / 1e3:+.2f} +- {se / 1e3:.2f} ms"

    def to_dict(self) -> dict[str, Any]:
        trimmed_mean, trimmed_se = self.trimmed
        return {
            "baseline": plan_text(self.baseline),
            "candidate": plan_text(self.candidate),
            "rounds": self.rounds,
            "mean_gain_us": round(self.mean_us, 3),
            "se_us": None if math.isinf(self.se_us) else round(self.se_us, 3),
            "trimmed_gain_us": round(trimmed_mean, 3),
            "trimmed_se_us": None if math.isinf(trimmed_se) else round(trimmed_se, 3),
            "baseline_us": round(self.baseline_us, 3),
            "candidate_us": round(self.candidate_us, 3),
            "verdict": self.verdict,
            "stopped": self.stopped,
            "earlier_rounds": self.earlier_rounds,
            "baseline_rounds_us": [round(t, 1) for t in self.baseline_rounds_us],
            "candidate_rounds_us": [round(t, 1) for t in self.candidate_rounds_us],
        }


def _median(values: Sequence[float]) -> float:
    s = sorted(values)
    n = len(s)
    return 0.0 if n == 0 else (s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2]))


def t_critical(z: float, dof: int) -> float:
    """Student's t quantile matching the normal quantile `z` at `dof` degrees of freedom
    (Cornish-Fisher expansion to the fourth order): with a handful of rounds the standard error is
    itself noisy, and 3 estimated standard errors at 3 degrees of freedom are a ~6% event, not a
    0.1% one. At z = 3 it gives 17.2 at 2 degrees of freedom (exactly: 19.2), 9.0 at 3 (9.2), 5.5 at 5 (5.5)."""
    v = float(max(1, dof))
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


def look_z(alpha: float = ALPHA, looks: Sequence[int] = LOOKS) -> float:
    """The normal quantile each look's check of "faster" uses: all `looks`, each with two
    estimates, err together at most `alpha` (Bonferroni: 3.14 standard errors at 2% over `LOOKS`)."""
    return NormalDist().inv_cdf(1.0 - alpha / (2 * len(looks)))


def trimmed_gain(gains: Sequence[float], trim: float = TRIM) -> tuple[float, float, int]:
    """Yuen's trimmed mean of `gains`, its standard error and degrees of freedom: the lowest and
    highest `trim` of the rounds are left out of the mean, and set to the nearest kept value
    (winsorized) for the variance; with h rounds kept of n, se = sqrt((n - 1) s_w^2 / (h (h - 1)))
    at h - 1 degrees of freedom. Under 5 rounds nothing is trimmed: the plain mean and t."""
    n = len(gains)
    cut = int(trim * n)
    ordered = sorted(gains)
    kept = ordered[cut : n - cut]
    h = len(kept)
    mean = sum(kept) / h
    if n < 2:
        return mean, math.inf, 0
    winsorized = [kept[0]] * cut + kept + [kept[-1]] * cut
    w_mean = sum(winsorized) / n
    w_var = sum((g - w_mean) ** 2 for g in winsorized) / (n - 1)
    return mean, math.sqrt((n - 1) * w_var / (h * (h - 1))), h - 1


def _intervals(gains: Sequence[float], z: float) -> list[tuple[float, float]]:
    """The gain's intervals, estimate -+ t x its standard error: the mean's, and from 5 rounds on
    (when something is trimmed) also the trimmed mean's."""
    estimates = [trimmed_gain(gains, trim=0.0)]
    if int(TRIM * len(gains)):
        estimates.append(trimmed_gain(gains))
    return [(mean - t_critical(z, dof) * se, mean + t_critical(z, dof) * se) for mean, se, dof in estimates]


def _faster(gains: Sequence[float], baseline_us: float, z: float, worth: float) -> bool:
    """Even the low end of either of the gain's intervals (`_intervals`) is a gain worth a pass
    (`worth` of the baseline step). Testing against the gain worth a pass rather than against
    zero is what makes decisions repeat: a real 3% effect measured at 3.5 standard errors in one
    run and 2.5 in the next flips a test against zero, while it stays below the bar of "at least
    1% for sure" in both."""
    return len(gains) >= 2 and any(low > worth * baseline_us for low, _ in _intervals(gains, z))


def _slower(gains: Sequence[float], z: float) -> bool:
    """Even the high end of either of the gain's intervals is a loss."""
    return len(gains) >= 2 and any(high < 0 for _, high in _intervals(gains, z))


MIN_ROUNDS_FASTER = LOOKS[0]
"""The fewest paired rounds after which a clear gain may stop a test."""


def paired_test(
    measure: PairMeasure,
    baseline: PlanKey,
    candidate: PlanKey,
    *,
    min_rounds: int = 6,
    max_rounds: int = MAX_ROUNDS,
    alpha: float = ALPHA,
    z: float = Z_CLEAR,
    worth: float = WORTH,
    prior: tuple[Sequence[float], Sequence[float]] = ((), ()),
    looks: Sequence[int] = LOOKS,
) -> PairedComparison:
    """Paired rounds of `baseline` and `candidate` until the verdict is clear (the module
    docstring): "faster", checked at the rounds of `LOOKS` only, means a gain of at least `worth`
    of the baseline step with `look_z(alpha)` standard errors to spare; "slower" and futility
    (even the optimistic end of the gain's interval would not pay for the pass) need `min_rounds`
    rounds: so few rounds can also understate the noise, and an early rejection of a real gain
    would make the decision change from run to run. With the t quantile at 2 degrees of freedom
    only a large, steady gain is clear at the first look, and at real size a round costs seconds.

    `prior` (baseline and candidate steps, us) are rounds of this same test in an earlier compile
    (a refining plan cache): the test goes on from them, up to `max_rounds` in all, and its looks
    stay those of `looks`, so the earlier compiles' looks are within `alpha` too."""
    if not 1 <= max_rounds <= looks[-1]:
        raise ValueError(f"paired_test: max_rounds={max_rounds}; a test looks at most {looks[-1]} rounds")
    if len(prior[0]) != len(prior[1]):
        raise ValueError(f"paired_test: prior rounds of {len(prior[0])} baseline and {len(prior[1])} candidate steps")
    z_faster = look_z(alpha, looks)
    base, cand = [float(t) for t in prior[0]], [float(t) for t in prior[1]]
    stopped, faster = "rounds", False
    while len(base) < max_rounds:
        if measure.over_budget():
            stopped = "budget" if getattr(measure, "exhausted", True) else "share"
            break
        t_base, t_cand = measure.pair(baseline, candidate, candidate_first=bool(len(base) % 2))
        base.append(t_base * 1e6)
        cand.append(t_cand * 1e6)
        gains = [b - c for b, c in zip(base, cand)]
        faster = len(gains) in looks and _faster(gains, _median(base), z_faster, worth)
        if faster or (len(gains) >= min_rounds and _slower(gains, z)):
            stopped = "clear"
            break
        if len(gains) >= min_rounds and all(high < worth * _median(base) for _, high in _intervals(gains, z)):
            stopped = "futile"
            break
    gains = [b - c for b, c in zip(base, cand)]
    verdict = "faster" if faster else ("slower" if _slower(gains, z) else "unclear")
    return PairedComparison(baseline, candidate, tuple(base), tuple(cand), verdict, stopped, len(prior[0]))


@attrs.frozen
class Confirmation:
    """What the confirmation before return found: the plan returned and the tests behind it."""

    chosen: PlanKey  # what the search chose
    returned: PlanKey  # what the planner returns (the chosen plan, a fallback, or T0)
    confirmed: bool  # `returned` measured faster than T0 beyond noise (or it is T0)
    tests: tuple[PairedComparison, ...]
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": plan_text(self.chosen),
            "returned": plan_text(self.returned),
            "confirmed": self.confirmed,
            "note": self.note,
            "tests": [t.to_dict() for t in self.tests],
        }


def confirm_choice(
    measure: PairMeasure,
    chosen: PlanKey,
    fallbacks: Sequence[PlanKey] = (),
    t0: PlanKey = (),
    earlier: Sequence[PairedComparison] = (),
    **test_options: Any,
) -> Confirmation:
    """Test `chosen` against `t0`; if it is not faster beyond noise, test the `fallbacks` (the
    plans the search passed through, most optimized first) the same way and return the first
    confirmed one, or T0. Nothing slower than (or indistinguishable from) T0 is ever returned.

    A plan the search itself already found faster than `t0` in a paired test (`earlier`: the
    first change the search accepts is tested against T0 itself) is not tested again: that test
    is this one, and at real size a round takes a second. Once the budget is spent, the fallbacks
    not yet tested are skipped, but one the search already found faster is still returned."""
    if chosen == t0:
        return Confirmation(chosen, t0, True, (), "the search kept T0: nothing to confirm")
    found = {t.candidate: t for t in earlier if t.baseline == t0 and t.verdict == "faster"}
    tests: list[PairedComparison] = []
    spent = False
    for plan in (chosen, *(f for f in fallbacks if f not in (chosen, t0))):
        if spent and plan not in found:  # no budget to test it; a plan already found faster still counts
            continue
        test = found.get(plan) or paired_test(measure, t0, plan, **test_options)
        tests.append(test)
        if test.verdict == "faster":
            note = (
                "the chosen plan beat T0"
                if plan == chosen
                else (f"the chosen plan did not beat T0 ({tests[0].verdict}); fell back to {plan_text(plan)}")
            )
            if plan in found:
                note += " (in the search's own paired test against T0, not repeated)"
            return Confirmation(chosen, plan, True, tuple(tests), note)
        spent = spent or test.stopped == "budget"
    why = ", ".join(f"{plan_text(t.candidate)}: {t.verdict}" for t in tests)
    return Confirmation(
        chosen, t0, True, tuple(tests), f"no plan beat T0 beyond noise ({why}); T0 returned (the start plan)"
    )


__all__ = [
    "MIN_ROUNDS_FASTER",
    "VERDICTS",
    "ALPHA",
    "LOOKS",
    "MAX_ROUNDS",
    "Z_CLEAR",
    "WORTH",
    "TRIM",
    "PairMeasure",
    "PlanKey",
    "plan_text",
    "PairedComparison",
    "Confirmation",
    "look_z",
    "t_critical",
    "trimmed_gain",
    "paired_test",
    "confirm_choice",
]
