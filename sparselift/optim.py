"""Sparse (embedding) optimizers fused into the backward pass: plain value records."""

from __future__ import annotations

import attrs


@attrs.frozen
class SGD:
    lr: float = 0.01

    kind = "sgd"
    eps = 0.0


@attrs.frozen
class RowWiseAdagrad:
    """FBGEMM's EXACT_ROWWISE_ADAGRAD: one accumulator per row, `acc += mean(g^2)`,
    `w -= lr * g / (sqrt(acc) + eps)`."""

    lr: float = 0.01
    eps: float = 1e-8

    kind = "rowwise_adagrad"
