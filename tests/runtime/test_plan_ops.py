"""Plan ops for replicated tables: fused table gradients, the copy-free all-reduce buffer, and
the SGD whole-table update, each against the reference lowering."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sparselift.runtime import plan_ops as rt
from sparselift.runtime import reference as ref
from sparselift.runtime.kernels import default_kernels

ROWS, DIMS, BATCH, FEATURES = (7, 3, 11), (4, 8, 4), 5, 3


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    tables = {f"t{k}": torch.randn(r, d, generator=g) for k, (r, d) in enumerate(zip(ROWS, DIMS))}
    lengths = torch.randint(0, 4, (FEATURES * BATCH,), generator=g, dtype=torch.int32)
    segments = [(int(lengths[k * BATCH:(k + 1) * BATCH].sum()), ROWS[k]) for k in range(FEATURES)]
    indices = torch.cat([torch.randint(0, r, (n,), generator=g) for n, r in segments])
    grads = [torch.randn(BATCH, d, generator=g) for d in DIMS]
    return tables, lengths, indices, grads


@pytest.mark.parametrize("generated", [True, False])
def test_fused_table_gradients_match_the_reference_in_one_buffer(generated):
    tables, lengths, indices, grads = _inputs()
    plan = SimpleNamespace(tables=tables, kernels=default_kernels() if generated else None, batch=BATCH)
    names = list(tables)
    views = rt.fused_lookup_grad(plan, names, lengths, indices, None, slots=[[0], [1], [2]],
                                 features_per_segment=FEATURES, poolings=["sum", "mean", "sum"], grads=grads)
    for k, (v, name) in enumerate(zip(views, names)):
        want = ref.lookup_grad(tables[name], lengths, indices, None, grads[k], [k], FEATURES, BATCH,
                               ["sum", "mean", "sum"][k])
        torch.testing.assert_close(v, want, atol=1e-6, rtol=1e-6)
    assert rt._back_to_back(views) is views[0]._base  # the all-reduce reads it without a copy
    assert rt._back_to_back(views[::-1]) is None and rt._back_to_back(views[:2]) is None


def test_all_reduce_copies_operands_that_are_not_a_gradient_buffer():
    flat = torch.zeros(12)
    views = [flat[:6].view(2, 3), flat[6:].view(3, 2)]
    assert rt._back_to_back(views) is None  # an arbitrary buffer may be read again: no in-place reduce


def test_sgd_whole_table_update_is_the_touched_rows_update():
    g = torch.Generator().manual_seed(3)
    table = torch.randn(9, 4, generator=g)
    grad = torch.randn(9, 4, generator=g)
    grad[[1, 4, 5]] = 0.0  # untouched rows
    plan = SimpleNamespace(tables={"t": table.clone()}, states={}, grad_scale=0.5)
    rt.dense_update(plan, "t", grad, optimizer="sgd", lr=0.1, eps=0.0)
    want = table.clone()  # the touched rows only, as the sparse lowerings update them
    touched = torch.tensor([r for r in range(9) if r not in (1, 4, 5)])
    ref.apply_optimizer(want, None, touched, grad[touched] * 0.5, "sgd", 0.1, 0.0)
    assert torch.equal(plan.tables["t"], want)
