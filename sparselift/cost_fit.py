"""Fitting the cost model's scales to measured plans: bounded least squares per cost category.

The planner (`sparselift.planner`) measures plans by lookahead; after each accepted candidate
it re-fits one scale per cost category (collective alpha and beta, gathers, updates, copies,
fixed overheads, dense FLOP/s) plus an intercept to every plan measured so far, and predicts the
next family with the fitted profile. Categories whose amount is the same in every plan measured
(the dense compute, and on most models the gathers: no sparse-path plan changes them) cannot be
told apart from each other, so they share one scale; that shared scale is what corrects a
profile that is off about the part every plan has in common (a dense FLOP rate 2x too low made
every prediction 40-180% high while the plans' differences were right).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sparselift.passes.cost_model import CATEGORIES
from sparselift.passes.profiles import HardwareProfile

SCALE_MIN, SCALE_MAX = 0.1, 10.0
"""Physical bounds of a fitted scale: a bandwidth, latency or FLOP rate between 0.1x and 10x the
profile's. A fit that wants more is telling that the model misses a term, not that the machine
is 100x off its profile; the residual says so instead."""
MIN_POINTS = 3
"""Plans that must exercise a category before its scale is fitted; otherwise it keeps the
profile's value (scale 1)."""
SAME_AMOUNT = 0.01
"""A category whose amount varies by at most this share across the plans measured is "the same in
every plan": such categories share one scale."""


def bounded_lstsq(a: np.ndarray, y: np.ndarray, lower: Sequence[float], upper: Sequence[float]) -> np.ndarray:
    """min |a x - y| with lower <= x <= upper, by an active set: solve for the free unknowns,
    pin the most violated one at its bound, solve again. (Clamping an unconstrained solution
    afterwards leaves the other unknowns fitted to values the clamped ones no longer have: with
    six plans and seven collinear categories that gave residuals of 50 ms and more.)"""
    n = a.shape[1]
    x = np.zeros(n)
    pinned: dict[int, float] = {}
    for _ in range(n + 1):
        free = [j for j in range(n) if j not in pinned]
        rhs = y - (a[:, list(pinned)] @ np.array(list(pinned.values())) if pinned else 0.0)
        sol = np.linalg.lstsq(a[:, free], rhs, rcond=None)[0] if free else np.zeros(0)
        x = np.zeros(n)
        for j, v in pinned.items():
            x[j] = v
        for j, v in zip(free, sol):
            x[j] = v
        worst, excess = None, 0.0
        for j in free:
            over = max(lower[j] - x[j], x[j] - upper[j])
            if over > excess:
                worst, excess = j, over
        if worst is None:
            return x
        pinned[worst] = min(max(x[worst], lower[worst]), upper[worst])
    return np.clip(x, lower, upper)


Points = Sequence[tuple[Mapping[str, float], float]]


def _columns(points: Points) -> list[tuple[str, ...]]:
    """The fit's unknowns: one per category enough plans (`MIN_POINTS`) exercise in different
    amounts, plus one shared by the categories every plan has in the same amount: that is the
    level all plans share, and two plans (T0 and one candidate, when the budget allows no more)
    already tell it. The same amount in some plans and none in others counts as different (the
    reference lowering's work is the same in every plan without generated kernels and absent
    from the others)."""
    varying: list[tuple[str, ...]] = []
    same: list[str] = []
    for category in CATEGORIES:
        every = [b.get(category, 0.0) for b, _ in points]
        exercised = [a for a in every if abs(a) > 1e-9]
        if not exercised:
            continue
        if max(every) - min(every) > SAME_AMOUNT * max(abs(a) for a in exercised):
            if len(exercised) >= MIN_POINTS:
                varying.append((category,))
        elif len(exercised) == len(every) >= 2:
            same.append(category)
    return varying + ([tuple(same)] if same else [])


def fit_profile(base: HardwareProfile, points: Points, prior: float = 0.3) -> tuple[HardwareProfile, dict[str, Any]]:
    """Least-squares scales per cost category: F ~ intercept + sum_k scale_k x breakdown_k, in
    relative error (each plan weighted by 1 / its F).

    `points` are (the plan's predicted breakdown under `base`, its measured F) in microseconds.
    Each scale has a prior at 1 weighted `prior` x the column's RMS, so categories the plans do
    not tell apart keep the profile's value, and categories too few plans exercise are not fitted
    (`MIN_POINTS`); categories every plan has in the same amount share one scale (`_columns`),
    which with the prior also settles how much of a common offset is theirs and how much the
    intercept's. Scales are bounded to [SCALE_MIN, SCALE_MAX] (physical bounds) and the
    intercept is never negative, both inside the least squares
    (`bounded_lstsq`), so the other scales are fitted to the bounded ones.
    """
    columns = _columns(points)
    cats = [c for col in columns for c in col]
    # Relative errors: each plan's row is divided by its measured F, so one slow plan (the
    # reference lowering's T0 can take 8x the others) does not decide every scale.
    weight = [1.0 / max(f, 1.0) for _, f in points]
    rows = [[w, *(w * sum(b.get(c, 0.0) for c in col) for col in columns)] for w, (b, _) in zip(weight, points)]
    # Categories not fitted still cost what the profile says: they leave the right-hand side.
    unfitted = [c for c in CATEGORIES if c not in cats]
    rhs = [w * (f - sum(b.get(c, 0.0) for c in unfitted)) for w, (b, f) in zip(weight, points)]
    data = list(rows)
    for j in range(len(columns)):
        col = [r[j + 1] for r in data]
        w = prior * math.sqrt(sum(v * v for v in col) / len(col))
        row = [0.0] * (len(columns) + 1)
        row[j + 1] = w
        rows.append(row)
        rhs.append(w)
    a = np.array(rows, dtype=np.float64)
    y = np.array(rhs, dtype=np.float64)
    k = len(columns)
    x = bounded_lstsq(a, y, lower=[0.0] + [SCALE_MIN] * k, upper=[math.inf] + [SCALE_MAX] * k)
    scales = {c: float(x[j + 1]) for j, col in enumerate(columns) for c in col}
    n = len(points)
    pred = (a[:n] @ x) / np.array(weight)
    residual = float(np.sqrt(np.mean((pred - y[:n] / np.array(weight)) ** 2))) if n else 0.0
    s = {c: scales.get(c, 1.0) for c in CATEGORIES}
    fitted = attrs.evolve(
        base,
        name=f"{base.name}+fit",
        coll_alpha_us=base.coll_alpha_us * s["coll_alpha"],
        coll_peer_alpha_us=base.coll_peer_alpha_us * s["coll_alpha"],
        net_bw_gbps=base.net_bw_gbps / s["coll_beta"],
        inter_node_bw_gbps=base.inter_node_bw_gbps / s["coll_beta"],
        mem_bw_gbps=base.mem_bw_gbps / s["gather"],
        update_factor=base.update_factor * s["update"] / s["gather"],
        copy_bw_gbps=base.copy_bw_gbps / s["copy"],
        kernel_launch_us=base.kernel_launch_us * s["fixed"],
        lookup_overhead_us=base.lookup_overhead_us * s["fixed"],
        flops_per_s=base.flops_per_s / s["dense"],
        reference_op_us=base.reference_op_us * s["reference"],
        reference_lookup_ns=base.reference_lookup_ns * s["reference"],
        reference_update_ns=base.reference_update_ns * s["reference"],
        reference_byte_ns=base.reference_byte_ns * s["reference"],
    )
    report = {
        "points": n,
        "fitted_categories": cats,
        "shared_scale": [list(col) for col in columns if len(col) > 1],  # the same amount in every plan
        "bounds": [SCALE_MIN, SCALE_MAX],
        "scales": {c: round(scales.get(c, 1.0), 4) for c in CATEGORIES},  # 1: not fitted
        "intercept_us": round(float(x[0]), 3),
        "residual_us": round(residual, 3),
        # What the fit says about the machine: per-collective alpha/beta, bytes/s per kernel kind.
        "fitted": {
            "coll_alpha_us": round(fitted.coll_alpha_us, 3),
            "coll_beta_GBps": round(fitted.net_bw_gbps, 4),
            "gather_GBps": round(fitted.mem_bw_gbps, 4),
            "update_GBps": round(fitted.mem_bw_gbps / fitted.update_factor, 4),
            "copy_GBps": round(fitted.copy_bw_gbps, 4),
            "launch_us": round(fitted.kernel_launch_us, 3),
            "reference_op_us": round(fitted.reference_op_us, 3),
        },
        "profile": fitted.to_dict(),
    }
    return fitted, report


__all__ = ["MIN_POINTS", "SAME_AMOUNT", "SCALE_MAX", "SCALE_MIN", "bounded_lstsq", "fit_profile"]
