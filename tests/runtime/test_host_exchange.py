"""The rows exchanges through shared memory (`runtime.host_exchange`) give what gloo's
all-to-all gives, grow, and fall back to gloo on every rank alike."""

from __future__ import annotations

import os

import pytest
import torch

from sparselift.runtime.distributed import launch
from sparselift.runtime.host_exchange import HostExchange, uses_host_exchange

pytestmark = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create (Linux)")


def _exchange_worker(rank: int, world: int, broken_rank: int | None, slow_rank: int | None = None) -> dict:
    import time

    import torch.distributed as dist

    host = HostExchange(None, rank, world)
    if rank == broken_rank:  # this rank cannot create its segment: the whole transport stays off

        def no_room(need):
            raise OSError(28, "No space left on device")

        host._grow = no_room
    if rank == slow_rank:  # reads late: the others write their next call meanwhile (the other buffer)
        read = host._read
        host._read = lambda *a: (time.sleep(0.05), read(*a))[1]
    gen = torch.Generator().manual_seed(100 + rank)
    # Growing sizes (the segments grow), empty chunks, float32 and bfloat16, many calls (both
    # buffers). gloo's results first; then the calls back to back, with no other collective
    # between them to hold a fast rank back from writing its next call while a slow one reads.
    calls = []
    for call in range(12):
        send = [int(torch.randint(0, 1 + call * 3000, (1,), generator=gen)) for _ in range(world)]
        if call % 4 == 1:
            send[0] = 0  # nothing to rank 0 this call
        recv_t = torch.empty(world, dtype=torch.int64)
        dist.all_to_all_single(recv_t, torch.tensor(send, dtype=torch.int64))
        recv = recv_t.tolist()
        x = torch.randn(sum(send), generator=gen).to(torch.bfloat16 if call % 3 == 2 else torch.float32)
        expected = x.new_empty(sum(recv))
        dist.all_to_all_single(expected, x, recv, send)
        calls.append((x, send, recv, expected))
    done = 0
    for call, (x, send, recv, expected) in enumerate(calls):
        out = x.new_empty(sum(recv))
        if not host.exchange(out, x, send, recv):
            dist.all_to_all_single(out, x, recv, send)
        else:
            done += 1
        assert torch.equal(out, expected), f"call {call} on rank {rank}"
    open_fds = len(host._fds)
    host.close()
    dist.barrier()
    return {"enabled": host.enabled, "done": done, "generation": host.generation, "fds": open_fds, "left": host._fds}


@pytest.mark.parametrize("world, slow_rank", [(2, None), (3, None), (2, 1)])
def test_shared_memory_exchange_matches_gloo_and_grows(world, slow_rank):
    results = launch(_exchange_worker, world, None, slow_rank, timeout_s=120)
    for r in results:
        assert r["enabled"] and r["done"] == 12
        assert r["generation"] >= 2  # the segment grew with the sizes
        assert r["fds"] <= 2  # each older generation's descriptor closed once every peer mapped it
        assert r["left"] == []


def test_a_rank_that_cannot_create_its_segment_turns_it_off_on_every_rank():
    results = launch(_exchange_worker, 2, 1, timeout_s=120)
    assert [r["enabled"] for r in results] == [False, False]
    assert [r["done"] for r in results] == [0, 0]


def test_only_synchronous_rows_exchanges_use_it():
    assert uses_host_exchange("output_rows", False) and uses_host_exchange("grad_rows+grad_pooled", False)
    assert not uses_host_exchange("output_rows", True)
    assert not uses_host_exchange("input_indices", False) and not uses_host_exchange("output_pooled", False)


def test_no_room_for_a_segment_is_an_error_at_creation_not_a_crash_later(monkeypatch):
    from sparselift.runtime import host_exchange

    def no_room(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(host_exchange.os, "posix_fallocate", no_room)
    with pytest.raises(OSError, match="shared segment of 1048576 bytes"):
        host_exchange._create(1 << 20)
