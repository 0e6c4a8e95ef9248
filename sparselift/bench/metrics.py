"""Held-out metrics of a binary classifier's scores (logits): ROC-AUC, average precision, log loss.

Plain Python over lists, so every quality benchmark computes them the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["average_precision", "log_loss", "roc_auc"]


def roc_auc(scores: Sequence[float], labels: Sequence[float]) -> float:
    """Rank-based ROC-AUC (Mann-Whitney U), ties get their average rank."""
    pairs = sorted(zip(scores, labels))
    ranks = [0.0] * len(pairs)
    i = 0
    while i < len(pairs):
        j = i
        while j + 1 < len(pairs) and pairs[j + 1][0] == pairs[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        i = j + 1
    pos = sum(1 for _, y in pairs if y > 0.5)
    neg = len(pairs) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    rank_sum = sum(r for r, (_, y) in zip(ranks, pairs) if y > 0.5)
    return (rank_sum - pos * (pos + 1) / 2) / (pos * neg)


def average_precision(scores: Sequence[float], labels: Sequence[float]) -> float:
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    hits, total, ap = 0, sum(1 for y in labels if y > 0.5), 0.0
    for k, i in enumerate(order, start=1):
        if labels[i] > 0.5:
            hits += 1
            ap += hits / k
    return ap / total if total else float("nan")


def log_loss(scores: Sequence[float], labels: Sequence[float]) -> float:
    eps = 1e-7
    total = 0.0
    for s, y in zip(scores, labels):
        p = min(max(1.0 / (1.0 + math.exp(-s)), eps), 1 - eps)
        total -= y * math.log(p) + (1 - y) * math.log(1 - p)
    return total / len(scores)
