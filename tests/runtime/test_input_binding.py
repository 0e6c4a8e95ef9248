"""Every argument position is bound, even when the example inputs share one tensor object.

One-hot features make it common: one `arange` offsets tensor serves every feature of the
example batch. Later calls pass different tensors at those positions, and the compiled model
must read each one (torch.export alone would trace a single placeholder for both).
"""

from __future__ import annotations

import pytest
import torch
from parity_models import SmallModel

import sparselift
from sparselift.frontend.export import distinct_input_tensors
from sparselift.runtime.distributed import launch

BATCH = 6


def _model() -> SmallModel:
    torch.manual_seed(0)
    return SmallModel()


def _aliased_example(model: SmallModel) -> tuple:
    """One-hot features: one id per bag, and one offsets tensor object for all three."""
    g = torch.Generator().manual_seed(1)
    offsets = torch.arange(BATCH)
    ids = [torch.randint(0, e.num_embeddings, (BATCH,), generator=g) for e in model.emb]
    return torch.randn(BATCH, 3, generator=g), ids, [offsets, offsets, offsets]


def _distinct_batch(model: SmallModel, seed: int) -> tuple:
    """Multi-hot features, each with its own offsets."""
    g = torch.Generator().manual_seed(seed)
    ids, offsets = [], []
    for e in model.emb:
        lengths = torch.randint(1, 4, (BATCH,), generator=g)
        ids.append(torch.randint(0, e.num_embeddings, (int(lengths.sum()),), generator=g))
        offsets.append(lengths.cumsum(0) - lengths)
    return torch.randn(BATCH, 3, generator=g), ids, offsets


def _compile(model, example, kernels: str):
    return sparselift.compile(
        model, example, sharding="table_wise", options=sparselift.CompileOptions(plan="none", kernels=kernels)
    )


def test_repeated_example_tensors_are_copied_and_others_kept():
    model = _model()
    example = _aliased_example(model)
    distinct = distinct_input_tensors(example)
    leaves = [distinct[0], *distinct[1], *distinct[2]]
    assert len({id(t) for t in leaves}) == len(leaves)
    assert distinct[2][0] is example[2][0] and all(torch.equal(o, example[2][0]) for o in distinct[2])
    unaliased = _distinct_batch(model, 2)
    assert distinct_input_tensors(unaliased) is unaliased


@pytest.mark.parametrize("kernels", ["generated", "reference"])
def test_aliased_example_inputs_bind_every_position(kernels):
    model = _model()
    compiled = _compile(model, _aliased_example(model), kernels)
    for seed in (2, 3):
        batch = _distinct_batch(model, seed)
        got, want = compiled(*batch), model(*batch)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
        got.sum().backward()
        want.sum().backward()
        for name, p in compiled.dense_named_parameters():
            torch.testing.assert_close(p.grad, model.get_parameter(name).grad, atol=1e-6, rtol=1e-5)
            p.grad = None
        model.zero_grad()


def _binding_worker(rank: int, world: int) -> list[torch.Tensor]:
    model = _model()
    compiled = _compile(model, _aliased_example(model), "generated")
    with torch.no_grad():
        return [compiled(*_distinct_batch(model, 10 * step + rank)) for step in range(2)]


def test_aliased_example_inputs_bind_every_position_on_two_ranks():
    results = launch(_binding_worker, 2, timeout_s=120)
    model = _model()
    with torch.no_grad():
        for rank, outputs in enumerate(results):
            for step, got in enumerate(outputs):
                torch.testing.assert_close(
                    got,
                    model(*_distinct_batch(model, 10 * step + rank)),
                    atol=1e-6,
                    rtol=1e-5,
                    msg=lambda m, s=step, r=rank: f"step {s}, rank {r}: {m}",
                )
