"""Bad ids fail clearly before any kernel runs and leave tables unchanged; a dead rank is an error, not a hang."""

from __future__ import annotations

import os
import time

import pytest
import torch

import sparselift
from sparselift.models import build


@pytest.fixture(scope="module")
def compiled_two_tower():
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    return sparselift.compile(model, inputs), inputs


def _with(inputs, position, feature, value):
    inputs = list(inputs)
    tensors = list(inputs[position])
    tensors[feature] = value
    inputs[position] = tensors
    return tuple(inputs)


@pytest.mark.parametrize(
    "position, feature, make, message",
    [
        (
            0,
            0,
            lambda t: torch.full_like(t, 100),
            "feature 'user_indices_0' (table 'user.emb.0'): id 100 is out of range for a table of 100 rows",
        ),
        (0, 1, lambda t: torch.full_like(t, -3), "feature 'user_indices_1' (table 'user.emb.1'): negative id -3"),
        (1, 0, lambda t: t.flip(0), "feature 'user_indices_0' (table 'user.emb.0'): offsets"),
        (
            1,
            1,
            lambda t: t[:-1],
            "feature 'user_indices_1' (table 'user.emb.1'): expected 5 offsets for a batch of 4, got 4",
        ),
    ],
)
def test_bad_ids_raise_value_error_naming_feature_and_table(compiled_two_tower, position, feature, make, message):
    compiled, inputs = compiled_two_tower
    before = {k: v.clone() for k, v in compiled.tables.items()}
    bad = _with(inputs, position, feature, make(inputs[position][feature]))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        out = compiled(*bad)
        out.sum().backward()
    for name, table in compiled.tables.items():
        assert torch.equal(table, before[name]), f"table {name} changed after a rejected batch"
    # The compiled model still works on good input afterwards.
    compiled(*inputs).sum().backward()


def _die_mid_training(rank, world):
    model, inputs = build("two-tower", rows_cap=100, batch_size=4)
    compiled = sparselift.compile(model, inputs, sharding="table_wise")
    compiled(*inputs).sum().backward()
    if rank == 1:
        os._exit(3)  # a crashed peer: no clean shutdown
    for _ in range(5):
        compiled(*inputs).sum().backward()
    return "finished"


def test_a_killed_rank_makes_the_others_fail_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="rank"):
        sparselift.launch(_die_mid_training, 2, timeout_s=20)
    assert time.monotonic() - start < 60
