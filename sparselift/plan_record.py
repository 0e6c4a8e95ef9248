"""The plan record: the planner's chosen plan with its decisions and measurements, as JSON and as text.

What `sparselift.planner` caches and replays, `compiled.plan.explain()` and `sparselift explain`
print, and `plan-sparse{decisions=FILE}` replays (its `pipeline`). The search that produces the
decisions is `sparselift.passes.plan_search`; this module only stores and explains them. In memory
the plan is typed (`sparselift.passes.pipeline.Pipeline`, pass objects); the JSON holds its pass specs.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import attrs

from sparselift.passes.pipeline import Pipeline, parse_pipeline, pipeline_specs, pipeline_text
from sparselift.passes.plan_candidates import Decision, change_text
from sparselift.plan_confirm import PairedComparison

RECORD_FORMAT = 2  # 2: the confirmation before return, the cost model's error


@attrs.frozen
class Measurement:
    """The step time of one plan: F (max over ranks of each rank's minimum, in its latest comparison)
    and its samples over every comparison it was in."""

    spec: str
    f_us: float
    noise_us: float
    observations_us: tuple[float, ...] = ()

    @property
    def typical_us(self) -> float:
        """The median step of the observations (F without any): what the cost model is fitted to.
        A minimum is biased low, by more the more steps a plan was given (a paired test takes up
        to 16, a screening 2), so minima would tell plans apart by how long they were tested."""
        return float(statistics.median(self.observations_us)) if self.observations_us else self.f_us

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "f_us": self.f_us,
            "noise_us": self.noise_us,
            "observations_us": list(self.observations_us),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        return cls(data["spec"], data["f_us"], data["noise_us"], tuple(data.get("observations_us", ())))


@attrs.frozen
class PlanRecord:
    """A chosen plan with everything needed to reuse and explain it (persisted as JSON)."""

    key: str
    key_fields: dict[str, str] = attrs.field(factory=dict)
    pipeline: Pipeline = ()  # the passes after lift-sparse
    start: Pipeline = ()  # T0, the plan the search started from (`plan_candidates.start_plan`)
    kernels: str = "reference"  # runtime kernels: "generated" exactly when generate-kernels is planned
    sharding: str | None = None  # a sharding plan (JSON) the planner chose over "auto"; None: as exported
    decisions: tuple[Decision, ...] = ()
    measurements: tuple[Measurement, ...] = ()
    fit: dict[str, Any] = attrs.field(factory=dict)
    calibration_s: float = 0.0
    spent: dict[str, float] = attrs.field(factory=dict, eq=False)  # where calibration went (rank 0)
    budget_s: float = 0.0
    budget_exhausted: bool = False
    mode: str = "measured"  # measured (lookahead on real batches) | analytic (cost model only)
    incumbent_us: float | None = None  # F(T0)
    final_us: float | None = None  # F(chosen plan)
    confirmed: bool | None = None  # the returned plan measured not slower than T0 (None: not planned by measurement)
    confirmation: dict[str, Any] = attrs.field(factory=dict)  # plan_confirm.Confirmation.to_dict()
    cost_model: dict[str, Any] = attrs.field(factory=dict)  # the fitted model's error over the plans measured
    # Every sequential paired test of the search, in order, with its rounds (PairedComparison.to_dict()).
    paired_tests: tuple[dict[str, Any], ...] = attrs.field(default=(), converter=tuple)
    format: int = RECORD_FORMAT
    created: str = attrs.field(default="", eq=False)

    @property
    def spec(self) -> str:
        """The plan as pass-spec text."""
        return pipeline_text(self.pipeline)

    def accepted(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.accepted)

    def rejected(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if not d.accepted)

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=False)
        d["pipeline"] = pipeline_specs(self.pipeline)
        d["start"] = pipeline_specs(self.start)
        d["decisions"] = [x.to_dict() for x in self.decisions]
        d["measurements"] = [x.to_dict() for x in self.measurements]
        d["paired_tests"] = list(self.paired_tests)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, data: Any, where: str = "plan record") -> PlanRecord:
        if not isinstance(data, dict) or "pipeline" not in data or "key" not in data:
            raise ValueError(f"{where}: not a plan record (expected a JSON object with 'key' and 'pipeline')")
        if data.get("format", RECORD_FORMAT) != RECORD_FORMAT:
            raise ValueError(f"{where}: plan record format {data.get('format')} is not {RECORD_FORMAT}")
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{where}: unknown fields {', '.join(unknown)}")
        values = dict(data)
        try:
            values["pipeline"] = parse_pipeline(values["pipeline"])
            values["start"] = parse_pipeline(values.get("start", ()))
            values["decisions"] = tuple(Decision.from_dict(x) for x in values.get("decisions", ()))
            for i, test in enumerate(values.get("paired_tests", ())):  # a refining compile goes on from them
                if not isinstance(test, dict) or not all(
                    isinstance(test.get(k), str) for k in ("baseline", "candidate")
                ):
                    raise ValueError(f"paired test {i} is not an object naming its baseline and candidate plans")
                try:
                    PairedComparison.from_dict(test, test.get("baseline"), test.get("candidate"))
                except ValueError as e:
                    raise ValueError(f"paired test {i}: {e}") from None
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        values["measurements"] = tuple(Measurement.from_dict(x) for x in values.get("measurements", ()))
        return cls(**values)

    @classmethod
    def from_json(cls, text: str, where: str = "plan record") -> PlanRecord:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON: {e}") from None
        return cls.from_dict(data, where)

    @classmethod
    def load(cls, path: str | Path) -> PlanRecord:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise ValueError(f"plan record {path}: cannot read it: {e}") from None
        return cls.from_json(text, where=f"plan record {path}")

    # -- explain ----------------------------------------------------------------------------
    def explain(self) -> str:
        return explain_record(self)

    def summary(self) -> dict[str, Any]:
        """What `sparselift explain --json` writes: the outcome, the cost model's error and
        every decision's predicted and measured increment with its +-, then the whole record."""
        pm = self.fit.get("residual_us", 0.0) * 2**0.5 if self.fit else None
        decisions = [
            {
                "family": d.family,
                "label": d.label,
                "change": change_text(d.change),
                "accepted": d.accepted,
                "predicted_us": d.predicted_us,
                "predicted_pm_us": None if d.predicted_us is None or pm is None else round(pm, 3),
                "measured_us": d.measured_us,
                "measured_se_us": d.noise_us,
                "reason": d.reason,
            }
            for d in self.decisions
        ]
        return {
            "pipeline": pipeline_specs(self.pipeline),
            "start": pipeline_specs(self.start),
            "t0_us": self.incumbent_us,
            "chosen_us": self.final_us,
            "confirmed": self.confirmed,
            "calibration_s": self.calibration_s,
            "budget_s": self.budget_s,
            "cost_model": dict(self.cost_model),
            "confirmation": dict(self.confirmation),
            "decisions": decisions,
            "record": self.to_dict(),
        }


def _ms(us: float | None, digits: int = 3) -> str:
    return "-" if us is None else f"{us / 1e3:+.{digits}f}"


def explain_record(record: PlanRecord) -> str:
    """The chosen strategies, each decision's predicted vs measured increment, the rejected
    candidates with their reason, and the calibration time."""
    lines = [f"plan record {record.key} ({record.mode})"]
    lines.append(f"  pipeline: {record.spec or '(lifted plan, no optimization)'}")
    lines.append(f"  T0, the start plan: {pipeline_text(record.start) or '(lifted plan, no optimization)'}")
    chosen = [f"{d.family}: {d.label}" for d in record.accepted()]
    lines.append(f"  chosen strategies: {', '.join(chosen) if chosen else 'none (T0 kept)'}; kernels: {record.kernels}")
    if record.sharding:
        lines.append("  sharding: chosen by the planner over 'auto' (see the sharding plan above)")
    if record.incumbent_us is not None and record.final_us is not None:
        lines.append(
            f"  step time F (max over ranks of each rank's min): T0 {record.incumbent_us / 1e3:.2f} ms"
            f" -> chosen {record.final_us / 1e3:.2f} ms"
        )
    lines.extend(_confirmation_lines(record))
    budget = f" of a {record.budget_s:g} s budget" if record.budget_s else ""
    exhausted = " (budget exhausted: later candidates not tried)" if record.budget_exhausted else ""
    lines.append(f"  calibration: {record.calibration_s:.2f} s{budget}{exhausted}")
    undecided = sum(PairedComparison.from_dict(t, "", "").resumable for t in record.paired_tests)
    if undecided:
        lines.append(
            f"    {undecided} paired test{'s' if undecided > 1 else ''} stopped unclear for want of rounds: "
            "plan='refine' (sparselift explain --refine) goes on with them"
        )
    if record.spent:
        sp = record.spent
        parts = [
            f"building candidate plans {sp.get('build_s', 0.0):.2f} s",
            f"{int(sp.get('steps', 0))} timed steps {sp.get('steps_s', 0.0):.2f} s",
        ]
        if sp.get("export_s"):
            parts.append(f"sharding exports {sp['export_s']:.2f} s")
        parts.append(f"analysis and waiting {sp.get('analysis_s', 0.0):.2f} s")
        lines.append(f"    spent on rank 0: {', '.join(parts)}")
    # A predicted increment is a difference of two predictions: +- sqrt 2 x the fit's RMS residual.
    pm = record.fit.get("residual_us", 0.0) * 2**0.5 if record.fit else 0.0
    lines.append("  decisions (increments in ms, negative is faster; predicted +- fit | measured +- 1 s.e.):")
    for d in record.decisions:
        mark = "accepted" if d.accepted else "rejected"
        measured = "not measured" if d.measured_us is None else f"{_ms(d.measured_us, 2)}"
        noise = "" if d.noise_us is None else f" +- {d.noise_us / 1e3:.2f}"
        predicted = _ms(d.predicted_us) + (f" +- {pm / 1e3:.2f}" if pm and d.predicted_us is not None else "")
        lines.append(f"    [{mark}] {d.family:<14} {d.label:<24} predicted {predicted} | measured {measured}{noise}")
        lines.append(f"        {change_text(d.change)}: {d.reason}")
    if record.fit:
        fit = record.fit
        parts = [f"{k} {v:.4g}" for k, v in fit.get("fitted", {}).items()]
        lines.append(
            f"  cost-model fit from {fit.get('points', 0)} measured plans"
            f" (residual {fit.get('residual_us', 0.0) / 1e3:.2f} ms): {', '.join(parts)}"
        )
    if record.cost_model.get("median_rel_error") is not None:
        cm = record.cost_model
        lines.append(
            f"  cost model: median relative error {100 * cm['median_rel_error']:.1f}% over {cm['n_plans']} measured"
            f" plans after the fit ({100 * cm['median_rel_error_profile']:.1f}% with the profile's values)"
        )
    return "\n".join(lines)


def _confirmation_lines(record: PlanRecord) -> list[str]:
    """What the confirmation before return found (sequential paired rounds against T0)."""
    c = record.confirmation
    if not c:
        return []
    out = [f"  confirmed: {'yes' if record.confirmed else 'no'}; {c.get('note', '')}"]
    start = pipeline_text(record.start)

    def name(plan: str) -> str:
        return "T0" if plan == start else plan or "the lifted plan"

    for t in c.get("tests", ()):
        se = "-" if t.get("se_us") is None else f"{t['se_us'] / 1e3:.2f}"
        out.append(
            f"    {name(t['candidate'])} against {name(t['baseline'])}: {t['verdict']}, gain"
            f" {t['mean_gain_us'] / 1e3:+.2f} +- {se} ms over {t['rounds']} paired rounds ({t['stopped']})"
        )
    return out


__all__ = ["RECORD_FORMAT", "Measurement", "PlanRecord", "explain_record"]
