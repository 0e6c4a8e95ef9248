"""The buffers of a merged dynamic exchange (`rt.static_sizes`, `rt.join_segments`,
`rt.split_segments`): per peer one side's segment then the other's, taken apart again exactly;
no copy where a rank sends (or receives) one side only, and a clear error on wrong sizes."""

from __future__ import annotations

import types

import pytest
import torch

from sparselift.runtime import collectives as rt


def _plan(rank: int, world: int = 2):
    return types.SimpleNamespace(rank=rank, world=world, pg=None)


def _sizes(*counts: int) -> torch.Tensor:
    return torch.tensor(counts, dtype=torch.int64)


def test_join_puts_each_peers_segments_side_by_side_and_split_takes_them_apart():
    rows, pooled = torch.arange(5.0), torch.arange(100.0, 103.0)
    buf, send, recv = rt.join_segments(
        _plan(0), [rows], [pooled], _sizes(2, 3), _sizes(1, 2), _sizes(4, 1), _sizes(0, 6)
    )
    assert buf.tolist() == [0.0, 1.0, 100.0, 2.0, 3.0, 4.0, 101.0, 102.0]
    assert send.tolist() == [3, 5] and recv.tolist() == [4, 7]
    # What this rank receives: 4 rows and nothing pooled from rank 0, 1 row and 6 pooled from rank 1.
    got = torch.arange(11.0)
    first, second = rt.split_segments(_plan(0), got, _sizes(4, 1), _sizes(0, 6))
    assert first.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] and second.tolist() == [5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    # The rows' segments lie back to back (nothing pooled from rank 0 between them): views.
    assert first.data_ptr() == got.data_ptr() and second.data_ptr() == got[5:].data_ptr()


def test_a_rank_sending_one_side_only_sends_that_side_as_it_is():
    rows = torch.arange(6.0)
    empty = torch.empty(0)
    buf, send, _ = rt.join_segments(
        _plan(1), [rows], [empty, empty], _sizes(2, 4), _sizes(0, 0), _sizes(0, 0), _sizes(0, 0)
    )
    assert buf is rows and send.tolist() == [2, 4]


def test_split_concatenates_a_side_interleaved_with_the_other():
    got = torch.tensor([1.0, 2.0, 10.0, 3.0, 11.0, 12.0])  # source 0: 2 first, 1 second; source 1: 1 and 2
    first, second = rt.split_segments(_plan(0), got, _sizes(2, 1), _sizes(1, 2))
    assert first.tolist() == [1.0, 2.0, 3.0] and second.tolist() == [10.0, 11.0, 12.0]
    first[0] = -1.0  # a copy: the received buffer is untouched
    assert got[0] == 1.0


def test_per_rank_members_and_static_sizes_follow_each_ranks_batch():
    plan = _plan(1)
    send, recv = rt.static_sizes(plan, splits=((0, 0), (4, 4)), role="output_pooled", batches=(3, 5))
    # Outputs go back to the samples' ranks: rank 1 sends 4 per sample of each receiver's batch.
    assert send.tolist() == [12, 20] and recv.tolist() == [0, 20]
    mine = torch.arange(32.0)  # rank 1's pack: one per rank (rank 0's is empty), this rank's used
    buf, _, _ = rt.join_segments(plan, [torch.empty(0)], [None, mine], _sizes(0, 0), send, _sizes(0, 0), recv)
    assert buf is mine
    # Gradients go to the tables' ranks: counted by the senders' batches.
    send, recv = rt.static_sizes(plan, splits=((0, 4), (0, 4)), role="grad_pooled", batches=(3, 5))
    assert send.tolist() == [0, 20] and recv.tolist() == [12, 20]


def test_sizes_that_do_not_match_the_buffers_are_an_error_naming_the_rank():
    with pytest.raises(
        RuntimeError,
        match=r"join_segments on rank 0: the second member holds 3 elements, but its sizes \[1, 1\] add up to 2",
    ):
        rt.join_segments(
            _plan(0), [torch.arange(2.0)], [torch.arange(3.0)], _sizes(1, 1), _sizes(1, 1), _sizes(1, 1), _sizes(1, 1)
        )
    with pytest.raises(
        RuntimeError,
        match=r"split_segments on rank 1: 5 elements received, but the sizes \[1, 1\] and \[1, 1\] add up to 4",
    ):
        rt.split_segments(_plan(1), torch.arange(5.0), _sizes(1, 1), _sizes(1, 1))
