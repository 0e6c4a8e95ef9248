"""`sparselift.strided_rows`: blocks of one storage at a regular stride stacked as a view, equal
to `torch.stack` (values and gradients), and anything else copied, never misread."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from sparselift.strided_rows import block_run, block_runs, stack_blocks, take_run_rows

B, D, P = 5, 3, 4


def _position_major() -> list[torch.Tensor]:
    # What `expand_rows` leaves: each position's `[B, D]` rows, position after position.
    return list(torch.randn(P * B, D).split(B))


def _column_slices() -> list[torch.Tensor]:
    # What a pooled buffer's per-feature columns are: `[B, D]` slices of `[B, P * D]`.
    wide = torch.randn(B, P * D + 2)
    return [wide[:, p * D : (p + 1) * D] for p in range(P)]


def _gradient_slices() -> list[torch.Tensor]:
    # What a stacked history's gradient gives back: the `unbind` of a slice of a wider tensor.
    return list(torch.randn(B, P, D + 5)[..., :D].unbind(1))


@pytest.mark.parametrize("make", [_position_major, _column_slices, _gradient_slices])
def test_a_regular_run_is_stacked_as_a_view_of_the_same_memory(make):
    blocks = make()
    run = block_run(blocks)
    assert run is not None
    assert torch.equal(run, torch.stack(blocks))
    assert run.untyped_storage().data_ptr() == blocks[0].untyped_storage().data_ptr()
    stacked = stack_blocks(blocks, 1)
    assert torch.equal(stacked, torch.stack(blocks, 1))
    assert stacked.untyped_storage().data_ptr() == blocks[0].untyped_storage().data_ptr()


def test_blocks_off_the_stride_or_of_other_tensors_are_copied():
    blocks = _position_major()
    irregular = [blocks[0], blocks[2], blocks[3]]  # offsets 0, 2B*D, 3B*D
    others = [*blocks[:2], torch.randn(B, D)]
    reversed_ = blocks[::-1]  # a negative step: no strided view has it
    other_dtype = [blocks[0], blocks[1].double()]
    for case in (irregular, others, reversed_, other_dtype):
        assert block_run(case) is None
        assert torch.equal(stack_blocks(case, 1), torch.stack(case, 1))
    assert [(first, run.shape[0]) for first, run in block_runs(others)] == [(0, 2), (2, 1)]
    # From block 0 the step is two blocks: block 2 follows it, block 3 does not.
    assert [(first, run.shape[0]) for first, run in block_runs(irregular)] == [(0, 2), (2, 1)]


def test_fake_tensors_take_the_copying_path():
    with FakeTensorMode():
        blocks = list(torch.empty(P * B, D).split(B))
        assert block_run(blocks) is None
        assert stack_blocks(blocks, 1).shape == (B, P, D)


@pytest.mark.parametrize("make", [_position_major, _column_slices, _gradient_slices])
def test_the_view_stack_has_the_copy_stacks_gradients(make):
    torch.manual_seed(0)
    blocks = make()
    source = blocks[0]._base.detach().requires_grad_()  # the one tensor the blocks are views of
    weight = torch.randn(B, P, D)
    grads = []
    for stack in (stack_blocks, torch.stack):
        views = [source.as_strided(b.shape, b.stride(), b.storage_offset()) for b in blocks]
        (stack(views, 1) * weight).sum().backward()
        grads.append(source.grad)
        source.grad = None
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("make", [_position_major, _column_slices, _gradient_slices])
def test_take_run_rows_reads_the_picked_rows(make):
    blocks = make()
    run = block_run(blocks)
    picks = torch.tensor([0, 3, B, 2 * B + 1, P * B - 1, 1])
    out = torch.empty(picks.numel(), D)
    take_run_rows(run, picks, out)
    assert torch.equal(out, torch.cat(blocks)[picks])


def test_take_run_rows_of_a_broadcast_block_and_of_spaced_columns():
    picks = torch.tensor([0, 2, 4])
    broadcast = torch.randn(1, D).expand(B, D).unsqueeze(0)  # a zero row stride
    out = torch.empty(3, D)
    take_run_rows(broadcast, picks, out)
    assert torch.equal(out, broadcast[0][picks])
    spaced = torch.randn(B, 2 * D)[:, ::2].unsqueeze(0)  # elements within a row not contiguous
    take_run_rows(spaced, picks, out)
    assert torch.equal(out, spaced[0][picks])
