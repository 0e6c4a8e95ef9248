"""The planner's search: greedy over the optimization families, each decided by a `Confirmer`.

Starting from an incumbent (by default the lifted plan, no optimization; the runtime planner
starts from T0, the default lowering, `plan_candidates.start_plan`), the families are decided one after another:
the first of `FAMILIES` (code generation) first, then the most promising family by predicted gain
on the incumbent, and so on. Each family's candidates (`plan_candidates.enumerate_candidates`) are
applied to clones and priced (`plan_predict.Predictor`); the infeasible ones are rejected with
their reason (`check_candidate`), the rest are handed, best predicted first (ties by spec text,
so the order is deterministic), to the confirmer, which accepts at most one. Aggregation adds one
role per round. The confirmer is pluggable: `AnalyticConfirmer` accepts the best predicted gain
(what `plan-sparse` does on its own); the runtime planner confirms by measured lookahead
(`sparselift.plan_lookahead`). Torch-free.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Protocol

import attrs

from sparselift.passes.pipeline import Pipeline, find_pass, pass_spec, pipeline_text
from sparselift.passes.plan_candidates import (
    PASS_OF,
    Candidate,
    Decision,
    PlanOptions,
    decision,
    enumerate_candidates,
)
from sparselift.passes.plan_predict import Prediction, Predictor, check_candidate
from sparselift.passes.profiles import HardwareProfile

_EPS_US = 1e-6


class Confirmer(Protocol):
    """Decides among a family's feasible variants (ordered by predicted gain)."""

    def profile(self, current: HardwareProfile) -> HardwareProfile:
        """The profile to predict the next family with (a re-fitted one, or `current`)."""
        ...

    def confirm(
        self,
        family: str,
        incumbent: Pipeline,
        variants: list[tuple[Candidate, Prediction]],
        incumbent_prediction: Prediction,
    ) -> list[Decision]:
        """One decision per variant, at most one accepted."""
        ...


class AnalyticConfirmer:
    """Accept the variant with the best predicted gain, if it is a gain."""

    def profile(self, current: HardwareProfile) -> HardwareProfile:
        return current

    def confirm(self, family, incumbent, variants, incumbent_prediction) -> list[Decision]:
        out = []
        chosen = None
        for cand, pred in variants:
            inc = pred.est_us - incumbent_prediction.est_us
            if chosen is None and inc < -_EPS_US:
                chosen = cand
                out.append(decision(cand, True, f"predicted increment {inc / 1e3:+.3f} ms < 0", inc))
            elif chosen is None:
                out.append(decision(cand, False, f"no predicted gain (increment {inc / 1e3:+.3f} ms)", inc))
            else:
                out.append(decision(cand, False, f"{chosen.label} is predicted faster", inc))
        return out


@attrs.frozen
class SearchResult:
    pipeline: Pipeline
    decisions: tuple[Decision, ...]
    profile: HardwareProfile


def _sort_key(item: tuple[Candidate, Prediction], base: float) -> tuple[float, str]:
    return (round(item[1].est_us - base, 6), pipeline_text(item[0].pipeline))


def _best_gain(predictor: Predictor, options: PlanOptions, current: Pipeline, profile, family: str) -> float:
    """The most negative predicted increment (us) of `family`'s available candidates on
    `current`; 0 when none is predicted to gain."""
    base = predictor.predict(current, profile).est_us
    best = 0.0
    for cand in enumerate_candidates(predictor.module, options, current):
        if cand.family == family and cand.available:
            pred = predictor.predict(cand.pipeline, profile)
            if not pred.error:
                best = min(best, pred.est_us - base)
    return best


def _weighed(
    predictor: Predictor,
    options: PlanOptions,
    current: Pipeline,
    profile,
    family: str,
    skip: AbstractSet[str] = frozenset(),
) -> list[tuple[Candidate, Prediction | None, str | None]]:
    """`family`'s candidates on `current` (but those labelled in `skip`), each with its prediction
    (None when unavailable) and why it is rejected before measuring (None: feasible)."""
    base = predictor.predict(current, profile)
    out: list[tuple[Candidate, Prediction | None, str | None]] = []
    for cand in enumerate_candidates(predictor.module, options, current):
        if cand.family != family or cand.label in skip:
            continue
        pred = predictor.predict(cand.pipeline, profile) if cand.available else None
        out.append((cand, pred, check_candidate(cand, pred, base, options) if pred is not None else cand.reason))
    return out


def _searchable(predictor: Predictor, options: PlanOptions, current: Pipeline, profile, family: str) -> bool:
    """Whether `family` has a feasible candidate on `current`: one the search would hand the confirmer."""
    return any(reason is None for _, _, reason in _weighed(predictor, options, current, profile, family))


def _kept_from_start(incumbent: Pipeline, options: PlanOptions) -> list[Decision]:
    """A decision for each family whose pass the start plan already holds: kept, not searched
    (the other families' candidates are measured against a plan that has it)."""
    out = []
    for family in options.families:
        kept = find_pass(incumbent, PASS_OF[family].name) if family in PASS_OF else None
        if kept is not None:
            label = "generated kernels" if family == "codegen" else pass_spec(kept)
            reason = "in the start plan T0 (the default lowering, what plan='none' compiles): kept, not searched"
            out.append(Decision(family, label, kept, incumbent, True, reason))
    return out


def search(
    predictor: Predictor,
    options: PlanOptions | None = None,
    confirmer: Confirmer | None = None,
    incumbent: Pipeline = (),
) -> SearchResult:
    """Greedy over the families, from `incumbent` (default: the lifted plan).

    The first of `options.families` is decided first. After it, the family whose best candidate
    is predicted to gain most on the incumbent goes next (a stable sort: ties, and families with
    no predicted gain, keep `options.families`' order), so a budget that runs out mid-search has
    spent itself on the most promising families.

    A measuring confirmer that has `begin_family(families_after)` is told when each family
    starts and how many searchable ones (with a feasible candidate) come after it, so that it
    can split its budget between them.

    Aggregation adds roles one at a time (each accepted role becomes part of the incumbent);
    the variants of the other families are alternatives, of which at most one is kept. A family
    whose pass `incumbent` already holds is recorded as kept (an accepted decision, unmeasured)
    and, aggregation apart, not searched.
    """
    options = options or PlanOptions()
    confirmer = confirmer or AnalyticConfirmer()
    profile = options.hardware()
    current = tuple(incumbent)
    decisions: list[Decision] = _kept_from_start(current, options)
    remaining = list(options.families)
    begin_family = getattr(confirmer, "begin_family", None)  # a measuring confirmer's budget split
    while remaining:
        family = remaining.pop(0)
        tried: set[str] = set()
        if begin_family is not None:
            begin_family(sum(_searchable(predictor, options, current, profile, f) for f in remaining))
        while True:
            profile = confirmer.profile(profile)
            base = predictor.predict(current, profile)
            weighed = _weighed(predictor, options, current, profile, family, skip=tried)
            if not weighed:
                break
            feasible: list[tuple[Candidate, Prediction]] = []
            for cand, pred, reason in weighed:
                if reason is not None:
                    inc = None if pred is None or pred.error else pred.est_us - base.est_us
                    decisions.append(decision(cand, False, reason, inc))
                    tried.add(cand.label)
                else:
                    assert pred is not None  # without a prediction, `reason` is the candidate's own (a str)
                    feasible.append((cand, pred))
            if not feasible:
                break
            feasible.sort(key=lambda item: _sort_key(item, base.est_us))
            # Aggregation: one role per round; the others (and everything once the confirmer's
            # budget is spent, so each candidate still gets its decision): all variants at once.
            exhausted = getattr(confirmer, "exhausted", False)
            batch = feasible[:1] if family == "aggregation" and not exhausted else feasible
            outcome = confirmer.confirm(family, current, batch, base)
            decisions.extend(outcome)
            tried.update(c.label for c, _ in batch)
            accepted = [d for d in outcome if d.accepted]
            if accepted:
                current = accepted[0].pipeline
            if family != "aggregation" or exhausted:
                break
        if len(remaining) > 1:
            profile = confirmer.profile(profile)
            remaining.sort(key=lambda f: _best_gain(predictor, options, current, profile, f))
    return SearchResult(current, tuple(decisions), confirmer.profile(profile))


__all__ = ["Confirmer", "AnalyticConfirmer", "SearchResult", "search"]
