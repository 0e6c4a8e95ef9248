"""The plan record: the planner's chosen plan with its decisions and measurements, as JSON and as text.

What `sparselift.planner` caches and replays, `compiled.plan.explain()` and `sparselift explain`
print, and `plan-sparse{decisions=FILE}` replays (its `pipeline`). The search that produces the
decisions is `sparselift.passes.plan_sparse`; this module only stores and explains them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from sparselift.passes.pipeline import join_pipeline
from sparselift.passes.plan_sparse import Decision

RECORD_FORMAT = 1


@attrs.frozen
class Measurement:
    """The step time of one plan: F (max over ranks of each rank's minimum) and this rank's samples."""

    spec: str
    f_us: float
    noise_us: float
    observations_us: tuple[float, ...] = ()

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
    pipeline: tuple[str, ...] = ()  # pass specs after lift-sparse
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
    format: int = RECORD_FORMAT
    created: str = attrs.field(default="", eq=False)

    @property
    def spec(self) -> str:
        return join_pipeline(self.pipeline)

    def accepted(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if d.accepted)

    def rejected(self) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions if not d.accepted)

    # -- JSON -------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=False)
        d["pipeline"] = list(self.pipeline)
        d["decisions"] = [x.to_dict() for x in self.decisions]
        d["measurements"] = [x.to_dict() for x in self.measurements]
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
        values["pipeline"] = tuple(values["pipeline"])
        values["decisions"] = tuple(Decision.from_dict(x) for x in values.get("decisions", ()))
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


def _ms(us: float | None, digits: int = 3) -> str:
    return "-" if us is None else f"{us / 1e3:+.{digits}f}"


def explain_record(record: PlanRecord) -> str:
    """The chosen strategies, each decision's predicted vs measured increment, the rejected
    candidates with their reason, and the calibration time."""
    lines = [f"plan record {record.key} ({record.mode})"]
    lines.append(f"  pipeline: {record.spec or '(lifted plan, no optimization)'}")
    chosen = [f"{d.family}: {d.label}" for d in record.accepted()]
    lines.append(f"  chosen strategies: {', '.join(chosen) if chosen else 'none (T0 kept)'}; kernels: {record.kernels}")
    if record.sharding:
        lines.append("  sharding: chosen by the planner over 'auto' (see the sharding plan above)")
    if record.incumbent_us is not None and record.final_us is not None:
        lines.append(
            f"  step time F (max over ranks of each rank's min): T0 {record.incumbent_us / 1e3:.2f} ms"
            f" -> chosen {record.final_us / 1e3:.2f} ms"
        )
    budget = f" of a {record.budget_s:g} s budget" if record.budget_s else ""
    exhausted = " (budget exhausted: later candidates not tried)" if record.budget_exhausted else ""
    lines.append(f"  calibration: {record.calibration_s:.2f} s{budget}{exhausted}")
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
    lines.append("  decisions (increments in ms, negative is faster; predicted | measured):")
    for d in record.decisions:
        mark = "accepted" if d.accepted else "rejected"
        measured = "not measured" if d.measured_us is None else f"{_ms(d.measured_us, 2)}"
        noise = "" if d.noise_us is None else f" (noise {d.noise_us / 1e3:.2f})"
        lines.append(
            f"    [{mark}] {d.family:<14} {d.label:<24} predicted {_ms(d.predicted_us)} | measured {measured}{noise}"
        )
        lines.append(f"        {d.change}: {d.reason}")
    if record.fit:
        fit = record.fit
        parts = [f"{k} {v:.4g}" for k, v in fit.get("fitted", {}).items()]
        lines.append(
            f"  cost-model fit from {fit.get('points', 0)} measured plans"
            f" (residual {fit.get('residual_us', 0.0) / 1e3:.2f} ms): {', '.join(parts)}"
        )
    return "\n".join(lines)


__all__ = ["RECORD_FORMAT", "Measurement", "PlanRecord", "explain_record"]
