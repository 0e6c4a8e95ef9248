"""The planner's measured lookahead: each family's candidates decided by sequential paired tests on real steps.

`Lookahead` is the search's `Confirmer` (`plan_search.search`) when the planner measures
(`sparselift.planner.Planner` makes one around the `PlanTimer` it is given): how a family's
candidates are measured and decided, family by family:

Every plan gets one warmup step after it is built (`PlanTimer.warm`), not before every comparison.

- **One variant** (an aggregation role, generated kernels): a sequential paired test against the
  incumbent (`plan_confirm.paired_test`). Accepted only when the test says "faster" (a gain of at
  least 1% of the step with 3 standard errors of the paired rounds to spare).
- **Alternatives** (latency-hiding schedules): two interleaved screening
  rounds of every schedule and the incumbent (schedules are built best predicted first, and no
  more once the family's part of the budget is spent: a build costs seconds at real size). The
  two fastest screened schedules that screened
  below the incumbent are tested against it; if both are faster, they are tested against each
  other, and when that stays unclear the earlier in the planner's fixed candidate order wins, so
  a tie is decided the same way in every run. When the family's part has no room to screen even
  one schedule and then test it, but room to test one, the best predicted schedule is tested
  directly, unscreened.
- **Parallelism**: a sweep over G (from the best predicted G, up while faster, then down) with
  two observations per G, then the fastest G tested against the incumbent.
- **Sharding** (opt-in): each placement policy's own T0 (the start plan on that placement)
  screened against "auto"'s, then tested.

The search tells the lookahead when each family starts (`begin_family`): the family gets an even
part of the budget left, shared with the searchable families after it (`PlanTimer.share_family`).

Every paired test's rounds are timed on every rank and combined by MAX (a step ends when its
slowest rank ends), so every rank reaches the same verdict. Building and timing plans is the
`PlanTimer`'s (`sparselift.plan_timing`).
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from sparselift.codegen.table_facts import sharding_plan
from sparselift.passes.pipeline import Pipeline, run_pipeline
from sparselift.passes.plan_candidates import Candidate, Decision, PlacementChoice, decision, enumerate_candidates
from sparselift.passes.plan_predict import Prediction, Predictor
from sparselift.passes.profiles import HardwareProfile
from sparselift.plan_confirm import LOOKS, MAX_ROUNDS, MIN_ROUNDS_FASTER, PairedComparison, paired_test, plan_text
from sparselift.plan_timing import PlanTimer

SEARCH_SHARE = 0.8
"""The share of the budget the search may spend once it has accepted a change; the rest is the
confirmation's (`plan_confirm.confirm_choice`). While the incumbent is still T0 the search may
spend it all: a candidate accepted then was tested against T0 itself, and needs no confirmation."""

Measured = Pipeline | PlacementChoice
"""What a paired test compares: a plan of this program, or another placement's T0 (sharding)."""


def measured(cand: Candidate) -> Measured:
    """What measuring `cand` times: its plan, or for the sharding family its placement's T0."""
    return cand.change if isinstance(cand.change, PlacementChoice) else cand.pipeline


def _screen_and_race_steps(schedules: int) -> int:
    """Steps to screen `schedules` new schedules beside a warm incumbent (a warmup and two rounds
    each, two rounds of the incumbent), then test the fastest against it for the fewest rounds a
    clear gain needs."""
    return 3 * schedules + 2 + 2 * MIN_ROUNDS_FASTER


def _no_room_to_screen(room: str) -> str:
    """The decision's reason for a schedule the family's part of the budget left unbuilt."""
    return (
        f"not screened: this family's part of the budget leaves room to screen and test {room} "
        "(built best predicted first)"
    )


def _direct_test_steps() -> int:
    """Steps to test one new schedule against a warm incumbent without screening it first: its
    warmup step, then the fewest paired rounds a clear gain needs."""
    return 1 + 2 * MIN_ROUNDS_FASTER


class Lookahead:
    """The measured decisions: a `plan_search.Confirmer` that measures with a `PlanTimer`.

    `refit` re-fits the cost model to every plan measured so far and returns the fitted profile
    (the planner's); the next family is predicted with it. The sharding family may change the
    program (and so the timer's program and the predictor).

    `prior` are the paired tests of an earlier compile of the same program (a refining plan
    cache, `plan="refine"`: the record's `paired_tests`): a test of the same two plans goes on
    from its rounds, up to `LOOKS[-1]` in all, if it was undecided for want of rounds; if it was
    decided, its verdict stands and nothing is built or timed for it."""

    def __init__(
        self,
        timer: PlanTimer,
        predictor: Predictor,
        plan_options,
        refit: Callable[[], HardwareProfile | None],
        *,
        builder: Any = None,
        prior: Iterable[Mapping[str, Any]] = (),
    ):
        self.timer, self.predictor, self.plan_options = timer, predictor, plan_options
        # The last earlier test of each pair of plans, by the plans' text (the record keeps them
        # so; `PlanRecord` checked them when it loaded).
        self.prior = {
            (str(t["baseline"]), str(t["candidate"])): PairedComparison.from_dict(t, t["baseline"], t["candidate"])
            for t in prior
        }
        # A refining compile may take any test to the last look; otherwise one compile's limit.
        self.max_rounds = LOOKS[-1] if self.prior else MAX_ROUNDS
        self._refit_with, self.builder = refit, builder
        self.fitted: HardwareProfile | None = None
        self.sharding_json: str | None = None  # the placement chosen over "auto", if any
        self.tests: list[PairedComparison] = []  # every sequential paired test, in order

    @property
    def exhausted(self) -> bool:
        """The budget is spent: the search hands every remaining candidate over at once."""
        return self.timer.exhausted

    def profile(self, current: HardwareProfile) -> HardwareProfile:
        return self.fitted or current

    def _refit(self) -> None:
        self.fitted = self._refit_with() or self.fitted

    def _earlier(self, baseline: Measured, candidate: Measured) -> PairedComparison | None:
        """This pair's test in the compile being refined, if any."""
        earlier = self.prior.get((plan_text(baseline), plan_text(candidate)))
        return None if earlier is None else attrs.evolve(earlier, baseline=baseline, candidate=candidate)

    def _resumes(self, baseline: Measured, candidate: Measured) -> bool:
        """An earlier compile tested this pair and did not reject the candidate: the test goes on
        (or its "faster" stands) in place of screening."""
        earlier = self._earlier(baseline, candidate)
        return earlier is not None and (earlier.resumable or earlier.verdict == "faster")

    def _decided_earlier(self, baseline: Measured, candidate: Measured) -> bool:
        earlier = self._earlier(baseline, candidate)
        return earlier is not None and not earlier.resumable

    def _test(self, baseline: Measured, candidate: Measured) -> PairedComparison:
        earlier = self._earlier(baseline, candidate)
        if earlier is not None and not earlier.resumable:
            test = attrs.evolve(earlier, earlier_rounds=earlier.rounds)  # decided: it stands
        elif earlier is not None:
            rounds = (earlier.baseline_rounds_us, earlier.candidate_rounds_us)
            test = paired_test(self.timer, baseline, candidate, prior=rounds, max_rounds=self.max_rounds)
        else:
            test = paired_test(self.timer, baseline, candidate, max_rounds=self.max_rounds)
        self.tests.append(test)
        new = slice(test.earlier_rounds, None)  # this compile's rounds: the machine's state now
        if test.rounds > test.earlier_rounds:
            se = 0.0 if math.isinf(test.se_us) else test.se_us
            base, cand = test.baseline_rounds_us[new], test.candidate_rounds_us[new]
            self.timer.record(baseline, min(base), se, [t / 1e6 for t in base])
            self.timer.record(candidate, min(cand), se, [t / 1e6 for t in cand])
        return test

    # -- the Confirmer protocol's decisions --------------------------------------------------
    def confirm(
        self,
        family: str,
        incumbent: Pipeline,
        variants: list[tuple[Candidate, Prediction]],
        incumbent_prediction: Prediction,
    ) -> list[Decision]:
        self._check_same_candidates(family, variants)
        predicted = {c.label: p.est_us - incumbent_prediction.est_us for c, p in variants}
        self.timer.size_by(incumbent)  # what the planner would return now
        self.timer.budget_share = 1.0 if incumbent == self.timer.start_plan else SEARCH_SHARE
        if self.timer.over_budget():
            return [self._not_tried(c, predicted[c.label]) for c, _ in variants]
        error = self.timer.ready([incumbent])
        if error:  # the incumbent itself cannot run: nothing can be confirmed
            return [decision(c, False, f"incumbent {error}", predicted[c.label]) for c, _ in variants]
        if family == "parallelism":
            out = self._sweep(incumbent, variants, predicted)
        elif len(variants) == 1:
            out = [self._single(incumbent, variants[0][0], predicted[variants[0][0].label])]
        else:
            out = self._alternatives(incumbent, variants, predicted)
        accepted = [d for d in out if d.accepted]
        if accepted:
            self.timer.size_by(accepted[0].pipeline)
            self._refit()
        return out

    def _check_same_candidates(self, family: str, variants: list[tuple[Candidate, Prediction]]) -> None:
        """Every rank must be about to time the same candidates in the same order: plans that
        differ between ranks would exchange messages that do not match. The search decides from
        figures combined over the ranks, so this holds unless a rank-local figure slips in; then
        this is a clear error on every rank, not a size mismatch deep in an exchange."""
        labels = "\n".join(c.label for c, _ in variants)
        mine = float(zlib.crc32(labels.encode()))
        high, neg_low = self.timer.max([mine, -mine])
        if high != mine or -neg_low != mine:
            raise RuntimeError(
                f"sparselift: the ranks disagree on the {family} candidates to measure (this rank: "
                f"{labels.replace(chr(10), ', ') or 'none'}); the planner's decisions must not depend on "
                "one rank's own timings"
            )

    def begin_family(self, families_after: int) -> None:
        """The search starts deciding a family, with `families_after` more to come: it gets an
        even part of the budget left (`PlanTimer.share_family`)."""
        self.timer.share_family(families_after)

    def _not_tried(self, cand: Candidate, predicted: float | None) -> Decision:
        spent = "calibration budget exhausted" if self.timer.exhausted else "this family's part of the budget spent"
        return decision(
            cand,
            False,
            f"not tried: {spent} ({self.timer.elapsed():.1f} s of {self.timer.budget_s:g} s)",
            predicted,
        )

    def _tested(self, cand: Candidate, predicted: float | None, test: PairedComparison, note: str = "") -> Decision:
        """The decision a paired test of `cand` against its incumbent gives (accepted: "faster")."""
        accepted = test.verdict == "faster" and not note
        if test.verdict == "unclear" and not note:
            note = "the incumbent (fewer passes) is kept"
        se = None if math.isinf(test.se_us) else round(test.se_us, 3)
        return decision(
            cand,
            accepted,
            test.describe() + (f"; {note}" if note else ""),
            predicted,
            measured_us=round(-test.mean_us, 3) if test.rounds else None,
            incumbent_us=round(test.baseline_us, 3) if test.rounds else None,
            candidate_us=round(test.candidate_us, 3) if test.rounds else None,
            noise_us=se,
        )

    def _single(self, inc: Pipeline, cand: Candidate, predicted: float) -> Decision:
        if self._decided_earlier(inc, cand.pipeline):  # nothing to build or time
            return self._tested(cand, predicted, self._test(inc, cand.pipeline))
        error = self.timer.ready([cand.pipeline])
        if error:
            return decision(cand, False, f"candidate {error}", predicted)
        self.timer.warm(inc)  # first steps after a build are not steady-state ones
        self.timer.warm(cand.pipeline)
        return self._tested(cand, predicted, self._test(inc, cand.pipeline))

    def _alternatives(self, inc: Pipeline, variants, predicted) -> list[Decision]:
        """Mutually exclusive variants (latency-hiding schedules): screened, then raced."""
        # Every schedule stays built from its build to the end of the race: an evicted one would
        # be rebuilt and its next observation would be a cold first step, not a steady-state
        # one. Then the cache goes back to its size: each built plan holds its own buffers, and
        # the later families' plans would otherwise be built beside all of them.
        resumed = [v for v in variants if self._resumes(inc, v[0].pipeline)]
        if resumed:  # refining: the schedule an earlier compile tested against this incumbent
            rest = [v for v in variants if v not in resumed]
            out = self._direct(inc, resumed[:1] + rest, predicted, "the one an earlier compile tested")
            order = {c.label: i for i, (c, _) in enumerate(variants)}
            return sorted(out, key=lambda d: order[d.label])
        if not self.timer.fits(_screen_and_race_steps(1), builds=1):
            return self._direct(inc, variants, predicted)
        previous = self.timer.cache_models
        self.timer.cache_models = max(previous, len(variants) + 1)
        try:
            results: dict[str, float | str] = {}
            ready: list[Candidate] = []
            for i, (cand, _) in enumerate(variants):  # best predicted first
                # Building stops where the family's part would no longer pay for screening one more
                # and then testing the fastest: screened without a test, a gain is never taken. A
                # family that cannot test even the first builds and screens nothing.
                if not self.timer.fits(_screen_and_race_steps(len(ready) + 1), builds=1):
                    room = f"{len(ready)} schedule{'s' if len(ready) > 1 else ''}" if ready else "none"
                    for rest, _ in variants[i:]:
                        results[rest.label] = _no_room_to_screen(room)
                    break
                error = self.timer.ready([cand.pipeline])
                if error:
                    results[cand.label] = error
                else:
                    ready.append(cand)
            if not ready:
                return [decision(c, False, str(results[c.label]), predicted[c.label]) for c, _ in variants]
            f = self.timer.screen([inc, *(c.pipeline for c in ready)])
            for i, cand in enumerate(ready):
                results[cand.label] = f[i + 1]
            return self._race(inc, [c for c, _ in variants], predicted, results, f[0])
        finally:
            self.timer.keep_models(previous)

    def _direct(self, inc: Pipeline, variants, predicted, chosen: str = "") -> list[Decision]:
        """The family's part leaves no room to screen even one schedule and race it, but may leave
        room to test one directly: screening only chooses among schedules, so with room for one
        the choice is the best predicted that builds. At real size on a 2-core host (DIN's 230 ms
        steps, a 50-step budget shared by the families) this is what lets latency hiding be
        measured at all. A refining compile (`chosen`) puts first the schedule an earlier compile
        tested, and goes on with that test."""
        out: list[Decision] = []
        tested: Candidate | None = None
        for cand, _ in variants:  # best predicted first
            p = predicted[cand.label]
            if tested is not None:
                which = chosen or "the best predicted that builds"
                reason = (
                    "not screened: this family's part of the budget leaves room to test one schedule "
                    f"unscreened, {which} ({tested.label})"
                )
                out.append(decision(cand, False, reason, p))
                continue
            if self._decided_earlier(inc, cand.pipeline):  # its verdict stands: nothing to build
                out.append(self._tested(cand, p, self._test(inc, cand.pipeline)))
                tested = cand
                continue
            if not self.timer.fits(_direct_test_steps(), builds=1):
                out.append(decision(cand, False, _no_room_to_screen("none"), p))
                continue
            error = self.timer.ready([cand.pipeline])
            if error:
                out.append(decision(cand, False, error, p))
                continue
            self.timer.warm(inc)
            self.timer.warm(cand.pipeline)
            out.append(self._tested(cand, p, self._test(inc, cand.pipeline)))
            tested = cand
        return out

    def _sweep(self, inc: Pipeline, variants, predicted) -> list[Decision]:
        """Bidirectional sweep over G from the best predicted G: up while faster, then down."""
        f0 = self.timer.screen([inc])[0]
        by_g = sorted((c for c, _ in variants), key=lambda c: (c.lanes, c.label))
        start = by_g.index(variants[0][0])  # variants come best predicted first
        results: dict[str, float | str] = {}
        for direction in (1, -1):
            prev = results.get(by_g[start].label) if direction == -1 else None
            prev = prev if isinstance(prev, float) else None
            i = start if direction == 1 else start - 1
            while 0 <= i < len(by_g) and not self.timer.over_budget():
                error = self.timer.ready([by_g[i].pipeline])
                f: float | str = error if error else self.timer.screen([by_g[i].pipeline])[0]
                results[by_g[i].label] = f
                if isinstance(f, float):
                    if prev is not None and f >= prev:
                        break  # slower than its neighbour: the sweep turns
                    prev = f
                i += direction
        return self._race(inc, [c for c, _ in variants], predicted, results, f0, contenders=1)

    def _fixed_order(self, inc: Pipeline, cands: Sequence[Candidate]) -> dict[Any, int]:
        """The planner's candidate order (enumeration order): who wins a tie."""
        if self.predictor is None:  # scripted planners in tests: the order they were given
            return {c.change: i for i, c in enumerate(cands)}
        return {c.change: i for i, c in enumerate(enumerate_candidates(self.predictor.module, self.plan_options, inc))}

    def _race(
        self, inc: Measured, cands: list[Candidate], predicted, results, f0: float, contenders: int = 2
    ) -> list[Decision]:
        """At most one variant: of the (two) fastest screened below the incumbent, those a paired
        test finds faster; two such are tested against each other, a tie going to the earlier in
        the fixed candidate order."""
        by_label = {c.label: c for c in cands}
        timed = {k: v for k, v in results.items() if isinstance(v, float)}
        below = sorted((k for k in timed if timed[k] < f0), key=lambda k: (timed[k], k))[:contenders]
        tests = {k: self._test(inc, measured(by_label[k])) for k in below}
        winners = [k for k in below if tests[k].verdict == "faster"]
        best, duel_note = (winners[0] if winners else None), ""
        if len(winners) == 2:
            order = self._fixed_order(inc, cands)
            first, second = sorted(winners, key=lambda k: order.get(by_label[k].change, len(order)))
            duel = self._test(measured(by_label[first]), measured(by_label[second]))
            best = second if duel.verdict == "faster" else first
            tie = " (a tie: the earlier in the planner's order)" if duel.verdict == "unclear" else ""
            duel_note = f"against {first if best == second else second}: {duel.describe()}{tie}"
        out = []
        for cand in cands:
            r = results.get(cand.label)
            p = predicted.get(cand.label)
            if r is None:
                not_measured = decision(cand, False, "not measured", p)
                spent = self.timer.exhausted or self.timer.share_spent
                out.append(self._not_tried(cand, p) if spent else not_measured)
            elif isinstance(r, str):
                out.append(decision(cand, False, r, p))
            elif cand.label in tests:
                note = "" if cand.label == best else (f"{best} was chosen" if best else "")
                d = self._tested(cand, p, tests[cand.label], note)
                if cand.label == best and duel_note:
                    d = _with_reason(d, f"{d.reason}; {duel_note}")
                out.append(d)
            else:
                one = "not the fastest screened, which was tested"
                among = f"not among the {contenders} fastest screened, which were tested"
                why = "slower" if r >= f0 else f"faster, but {one if contenders == 1 else among}"
                screened = f"screened at {r / 1e3:.2f} ms against the incumbent's {f0 / 1e3:.2f} ms"
                out.append(
                    decision(
                        cand,
                        False,
                        f"{screened}: not a contender ({why})",
                        p,
                        measured_us=round(r - f0, 3),
                        incumbent_us=round(f0, 3),
                        candidate_us=round(r, 3),
                    )
                )
        return out

    # -- sharding ----------------------------------------------------------------------------
    def decide_sharding(self, profile: HardwareProfile) -> list[Decision]:
        """The placement "auto" chose against the other policies, each as its own T0 (the start
        plan on a new export per policy, by the builder); the chosen one's program becomes the timer's."""
        t0 = self.timer.start_plan
        base = self.predictor.predict(t0, profile)
        current = sharding_plan(self.timer.program.module).to_json()
        out: list[Decision] = []
        variants: list[tuple[Candidate, Prediction]] = []
        programs: dict[str, tuple[Any, Predictor]] = {}
        for choice in ("table_wise", "row_wise", "data_parallel"):
            cand = Candidate("sharding", choice, PlacementChoice(choice), t0)
            if self.timer.over_budget():
                out.append(self._not_tried(cand, None))
                continue
            start = time.perf_counter()
            program = self.builder.export(choice)
            self.timer.spent["export_s"] += time.perf_counter() - start
            if sharding_plan(program.module).to_json() == current:
                out.append(decision(cand, False, "no effect: the same placement as 'auto'"))
                continue
            lifted = program.module.clone()
            run_pipeline(lifted, (self.timer.lift,))
            predictor = Predictor(lifted)
            variants.append((cand, predictor.predict(t0, profile)))
            programs[choice] = (program, predictor)
        if not variants:
            return out
        predicted = {c.label: p.est_us - base.est_us for c, p in variants}
        auto = PlacementChoice("auto")
        self.timer.placements[auto] = self.timer.program
        results: dict[str, float | str] = {}
        ready = []
        for cand, _ in variants:
            self.timer.placements[PlacementChoice(cand.label)] = programs[cand.label][0]
            error = self.timer.ready([t0], programs[cand.label][0])
            if error:
                results[cand.label] = error
            else:
                ready.append(cand)
        error = self.timer.ready([t0])
        if error:
            return out + [decision(c, False, f"incumbent {error}", predicted[c.label]) for c, _ in variants]
        f = self.timer.screen([auto, *(measured(c) for c in ready)])
        for i, cand in enumerate(ready):
            results[cand.label] = f[i + 1]
        decided = self._race(auto, [c for c, _ in variants], predicted, results, f[0], contenders=1)
        chosen = [d for d in decided if d.accepted]
        if chosen:
            program, self.predictor = programs[chosen[0].label]
            self.timer.use_program(program)
            self.sharding_json = sharding_plan(program.module).to_json()
            self._refit()
        return out + decided


def _with_reason(d: Decision, reason: str) -> Decision:
    return attrs.evolve(d, reason=reason)


__all__ = ["SEARCH_SHARE", "Lookahead", "Measured", "measured"]
