"""The planner's search space: optimization families, constraints, and candidate plans.

A plan is a typed `Pipeline` (`sparselift.passes.pipeline`): the pass objects appended after
`lift-sparse`, at most one per optimization family, in the paper's order:

| family          | pass                                                             |
|-----------------|------------------------------------------------------------------|
| deduplication   | `DedupIds()` (unpooled ids sent once per destination)            |
| aggregation     | `AggregateComm(roles=(r1, r2), max_bytes=CAP)`                   |
| parallelism     | `ParallelizeTables(groups=G, max_workspace_bytes=CAP)`           |
| codegen         | `GenerateKernels()` (absent: reference kernels)                  |
| latency-hiding  | `HideLatency(forward=.., backward=.., max_inflight_bytes=CAP)`   |

A *candidate* is the incumbent plan with one family's pass added or changed
(`dataclasses.replace` of the incumbent's pass, or a new one). What happened to it is a
`Decision`, the search's record of one candidate: accepted or rejected, why, and its predicted
and measured increments. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import attrs
from xdsl.passes import ModulePass

from sparselift.ir.coll import AllToAllOp
from sparselift.passes.aggregate_comm import MERGEABLE_ROLES, AggregateComm
from sparselift.passes.dedup_ids import DedupIds
from sparselift.passes.generate_kernels import GenerateKernels
from sparselift.passes.hide_latency import HideLatency
from sparselift.passes.parallelize_tables import ParallelizeTables
from sparselift.passes.pipeline import Pipeline, find_pass, parse_pipeline, pass_spec, pipeline_specs
from sparselift.passes.profiles import HardwareProfile, load_profile
from sparselift.passes.registry import plan_passes
from sparselift.passes.srsv import table_names

FAMILIES = ("codegen", "deduplication", "aggregation", "parallelism", "latency-hiding")
"""The optimization families. The search decides the first one first: code generation (it
changes every later measurement the most, e.g. 6x on dlrm-bench, so the subtler families are
measured on fast, steadier steps; the runtime planner starts with it, `start_plan`). The others
follow by predicted gain on the incumbent (`plan_search.search`); this order breaks ties and
places families with no predicted gain."""

PASS_OF: dict[str, type[ModulePass]] = {
    "deduplication": DedupIds,  # first: it rewrites the jagged rows path the others schedule
    "aggregation": AggregateComm,
    "parallelism": ParallelizeTables,
    "codegen": GenerateKernels,
    "latency-hiding": HideLatency,
}
PASS_ORDER = tuple(cls.name for cls in PASS_OF.values())
"""Where a family's pass goes in a plan (the paper's order), whatever order they were decided in."""


@attrs.frozen
class PlacementChoice:
    """A placement policy the planner's sharding family tries: not a pass of the plan but another
    export of the model, measured like a plan (`sparselift.plan_lookahead`)."""

    policy: str

    def __str__(self) -> str:
        return f"sharding={self.policy}"


Change = ModulePass | PlacementChoice


def change_text(change: Change) -> str:
    """A candidate's change as text: its pass spec, or `sharding=POLICY`."""
    return str(change) if isinstance(change, PlacementChoice) else pass_spec(change)


@attrs.frozen
class PlanOptions:
    """Constraints and inputs of one planning run."""

    profile: str | HardwareProfile = "cpu-gloo"
    memory_cap_bytes: int = 0  # per rank, workspace and in-flight buffers; 0: no cap
    max_lanes: int = 4  # concurrent lanes (threads or streams) a rank may run
    allow_generated: bool = True  # False: the user asked for reference kernels
    families: tuple[str, ...] = FAMILIES

    def hardware(self) -> HardwareProfile:
        return self.profile if isinstance(self.profile, HardwareProfile) else load_profile(self.profile)


@attrs.frozen
class Candidate:
    """The incumbent plan with one family's pass added or changed."""

    family: str
    label: str  # short, human readable: "aggregate output_pooled", "G=4", "generated kernels"
    change: Change  # the pass this candidate adds or changes (a placement, for the sharding family)
    pipeline: Pipeline  # the candidate's whole plan (passes after lift-sparse)
    available: bool = True
    reason: str = ""  # why it cannot be tried (unavailable, disabled, lane limit)
    lanes: int = 0  # lanes it asks for (parallelism), 0 when not applicable


@attrs.frozen
class Decision:
    """What happened to one candidate: accepted or rejected, predicted vs measured increment."""

    family: str
    label: str
    change: Change
    pipeline: Pipeline
    accepted: bool
    reason: str
    predicted_us: float | None = None  # est(candidate) - est(incumbent); negative is faster
    measured_us: float | None = None  # F(candidate) - F(incumbent), when measured
    incumbent_us: float | None = None  # F(incumbent) in that comparison
    candidate_us: float | None = None  # F(candidate)
    noise_us: float | None = None  # the paired test's standard error (or a screening's spread)

    def to_dict(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=False)
        d["change"] = change_text(self.change)
        d["pipeline"] = pipeline_specs(self.pipeline)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        data = dict(data)
        change = str(data["change"])
        policy = change.removeprefix("sharding=")
        data["change"] = PlacementChoice(policy) if policy != change else parse_pipeline(change)[0]
        data["pipeline"] = parse_pipeline(data.get("pipeline", ()))
        return cls(**data)


def decision(candidate: Candidate, accepted: bool, reason: str, predicted: float | None = None, **kw) -> Decision:
    return Decision(
        candidate.family,
        candidate.label,
        candidate.change,
        candidate.pipeline,
        accepted,
        reason,
        None if predicted is None else round(predicted, 3),
        **kw,
    )


def with_change(incumbent: Pipeline, change: ModulePass) -> Pipeline:
    """The incumbent with `change` replacing the pass of the same name, or inserted in the paper's order."""
    passes = [p for p in incumbent if p.name != change.name] + [change]
    rank = {n: i for i, n in enumerate(PASS_ORDER)}
    return tuple(sorted(passes, key=lambda p: rank.get(p.name, len(rank))))


def start_plan(options: PlanOptions) -> Pipeline:
    """T0, the plan the measured search starts from: the compiler's default lowering (what
    `plan="none"` compiles), generated kernels when the planner may use them, else the lifted
    plan alone. So planning never returns a plan slower than not planning: every candidate is
    tested against the default, and the reference kernels (often several times slower at real
    size) are not spent budget on."""
    return (GenerateKernels(),) if options.allow_generated and "codegen" in options.families else ()


def registered_passes() -> dict:
    """The passes a plan may name: every pass but `plan-sparse` (a plan never plans again)."""
    return plan_passes()


# --------------------------------------------------------------------------------------
# Candidates, family by family
# --------------------------------------------------------------------------------------

_Add = Callable[..., None]


def _capped(p: ModulePass, field: str, options: PlanOptions) -> ModulePass:
    """`p` with the memory cap handed to it as its own byte limit (so it refuses with its own
    remark rather than the planner's "memory cap" reason), when there is a cap."""
    return replace(p, **{field: options.memory_cap_bytes}) if options.memory_cap_bytes > 0 else p


# A direction's pooled vectors and unpooled rows: merged into one exchange only when both roles
# are allowed, and a model with one group of each gains nothing from either role alone.
_DIRECTION_PAIRS = (("output_pooled", "output_rows"), ("grad_pooled", "grad_rows"))


def _exchanged_roles(module) -> set[str]:
    """The roles of the lifted step's exchanges (an aggregated one counts for each of its roles)."""
    return {r for op in module.walk() if isinstance(op, AllToAllOp) for r in op.role.role_list}


def _aggregation(current: ModulePass | None, options: PlanOptions, add: _Add, present: set[str]) -> None:
    have = current.roles if isinstance(current, AggregateComm) else ()

    def propose(label: str, added: Sequence[str]) -> None:
        roles = tuple(r for r in MERGEABLE_ROLES if r in have or r in added)
        if isinstance(current, AggregateComm):
            add(label, replace(current, roles=roles))
        else:
            add(label, _capped(AggregateComm(roles), "max_bytes", options))

    for role in MERGEABLE_ROLES:
        if role not in have:
            propose(f"aggregate {role}", (role,))
    for pair in _DIRECTION_PAIRS:
        if present.issuperset(pair) and not any(r in have for r in pair):
            propose(f"aggregate {'+'.join(pair)}", pair)


def _parallelism(n: int, options: PlanOptions, add: _Add) -> None:
    groups = sorted({g for g in (2, 4, 8, 16, 32, 64) if g <= n} | ({n} if 2 <= n <= 64 else set()))
    for g in groups:
        change = _capped(ParallelizeTables(groups=g), "max_workspace_bytes", options)
        if g > options.max_lanes:
            add(
                f"G={g}",
                change,
                available=False,
                lanes=g,
                reason=f"lane limit: {g} lanes > max-lanes {options.max_lanes}",
            )
        else:
            add(f"G={g}", change, lanes=g)


def _codegen(options: PlanOptions, add: _Add) -> None:
    if not options.allow_generated:
        add(
            "generated kernels",
            GenerateKernels(),
            available=False,
            reason="disabled: reference kernels requested (kernels='reference')",
        )
    else:
        add("generated kernels", GenerateKernels())


def _latency_hiding(options: PlanOptions, add: _Add) -> None:
    # The last schedule hides both directions' sparse exchanges but keeps the dense gradients to
    # one all-reduce after backward: whether overlapping that all-reduce with backward pays
    # depends on spare cores the model does not see, so it is measured.
    for fwd, bwd, dense, label in (
        (True, False, True, "forward"),
        (False, True, True, "backward"),
        (True, True, True, "forward+backward"),
        (True, True, False, "forward+backward, dense grads after backward"),
    ):
        hide = HideLatency(forward=fwd, backward=bwd, dense_grads=dense)
        add(f"hide {label}", _capped(hide, "max_inflight_bytes", options))


def enumerate_candidates(module, options: PlanOptions | None = None, incumbent: Pipeline = ()) -> list[Candidate]:
    """Every candidate change to `incumbent` (the passes after lift-sparse), family by family.

    `module` is the lifted step (it only sizes the enumeration: its number of tables bounds G, and
    its exchanges' roles say which of a direction's roles to propose together).
    Candidates that cannot be tried come back with `available=False` and a reason, so the plan
    can say why an optimization was not taken.
    """
    options = options or PlanOptions()
    registry = registered_passes()
    out: list[Candidate] = []
    for family in options.families:
        if family not in PASS_OF:
            raise ValueError(f"unknown optimization family '{family}'; known: {', '.join(FAMILIES)}")
        name = PASS_OF[family].name

        def add(label: str, change: ModulePass, family: str = family, **kw: Any) -> None:
            out.append(Candidate(family, label, change, with_change(incumbent, change), **kw))

        current = find_pass(incumbent, name)
        if name not in registry:
            reason = f"unavailable: pass '{name}' is not registered"
            out.append(Candidate(family, name, PASS_OF[family](), incumbent, available=False, reason=reason))
        elif family == "aggregation":
            _aggregation(current, options, add, _exchanged_roles(module))
        elif current is not None:  # the other families are decided once
            continue
        elif family == "parallelism":
            _parallelism(len(table_names(module.walk())), options, add)
        elif family == "codegen":
            _codegen(options, add)
        elif family == "deduplication":
            add("distinct ids", DedupIds())
        else:
            _latency_hiding(options, add)
    return out


__all__ = [
    "FAMILIES",
    "PASS_OF",
    "PASS_ORDER",
    "PlacementChoice",
    "Change",
    "change_text",
    "PlanOptions",
    "Candidate",
    "Decision",
    "decision",
    "with_change",
    "start_plan",
    "registered_passes",
    "enumerate_candidates",
]
