"""The shared-memory all-to-all (`runtime/shm_transport.py`): gloo's results, its arena reused,
and a clear error, not a hang, when the ranks disagree or one is lost."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from sparselift.runtime import shm_transport
from sparselift.runtime.distributed import free_port, launch

pytestmark = pytest.mark.skipif(shm_transport.supported() is not None, reason=str(shm_transport.supported()))

DTYPES = (torch.float32, torch.int64, torch.int32, torch.uint8)


def _exchanges(world: int, seed: int) -> list[tuple[torch.dtype, int, list[list[int]]]]:
    """(dtype, row width, counts[s][p] rows from s to p) per exchange; zeros included."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(12):
        counts = torch.randint(0, 300, (world, world), generator=g)
        counts[torch.rand(world, world, generator=g) < 0.25] = 0
        out.append((DTYPES[i % len(DTYPES)], (1, 3, 64)[i % 3], counts.tolist()))
    return out


def _send_buffer(rank: int, dtype: torch.dtype, width: int, counts: list[int], salt: int) -> torch.Tensor:
    n = sum(counts)
    values = torch.arange(n * width, dtype=torch.int64).reshape(n, width) * 7 + rank * 1000 + salt
    return (values % 251).to(dtype) if dtype == torch.uint8 else values.to(dtype)


def _both_transports(rank: int, world: int) -> tuple[list[torch.Tensor], list[torch.Tensor], list[str]]:
    shm, why = shm_transport.setup(None, rank, world)
    assert shm is not None, why
    left = [f for f in os.listdir(shm_transport.SHM_DIR) if shm.token in f]
    got_shm, got_gloo, pending = [], [], []
    for i, (dtype, width, counts) in enumerate(_exchanges(world, seed=5)):
        x = _send_buffer(rank, dtype, width, counts[rank], i)
        recv = [counts[s][rank] for s in range(world)]
        out_gloo = x.new_empty(sum(recv), width)
        dist.all_to_all_single(out_gloo, x, recv, counts[rank])
        got_gloo.append(out_gloo)
        out_shm = x.new_empty(sum(recv), width)
        pending.append(shm.all_to_all_single(out_shm, x, recv, counts[rank]))
        got_shm.append(out_shm)
        if i % 3 == 2:  # three in flight, waited for newest first: acks arrive out of order
            for work in reversed(pending):
                work.wait()
            pending = []
    for work in pending:
        work.wait()
    return got_shm, got_gloo, left


@pytest.mark.parametrize("world", [2, 3])
def test_shared_memory_all_to_all_equals_gloo(world):
    for got_shm, got_gloo, left in launch(_both_transports, world, timeout_s=60):
        assert all(torch.equal(a, b) for a, b in zip(got_shm, got_gloo, strict=True))
        assert left == []  # the files are unlinked once mapped: nothing outlives the ranks


def _arena_after_many(rank: int, world: int) -> tuple[int, int]:
    shm, _ = shm_transport.setup(None, rank, world)
    x = torch.full((world * (1 << 18),), float(rank))  # 1 MiB to every peer
    out = torch.empty_like(x)
    for _ in range(50):
        shm.all_to_all_single(out, x, None, None).wait()
    assert out.reshape(world, -1)[:, 0].tolist() == [float(r) for r in range(world)]
    return shm.reserved, shm.capacity


def test_the_arena_reuses_consumed_bytes():
    # 50 MiB sent to the peer in 1 MiB messages, each consumed before the next: the arena's
    # reserved pages stay at its first reservation, not the bytes sent.
    for reserved, capacity in launch(_arena_after_many, 2, timeout_s=60):
        assert reserved <= 2 << 20 < capacity


def _disagree(rank: int, world: int) -> str:
    shm, _ = shm_transport.setup(None, rank, world)
    x = torch.zeros(8)
    recv = [4, 4] if rank == 0 else [5, 4]  # rank 1 expects one more element than rank 0 sends
    out = torch.empty(sum(recv))
    try:
        shm.all_to_all_single(out, x, recv, [4, 4]).wait()
    except shm_transport.ShmError as e:
        return str(e)
    return ""


def test_sizes_that_disagree_are_an_error_naming_the_ranks():
    results = launch(_disagree, 2, timeout_s=60)
    assert results[0] == ""
    assert "exchange 1 from rank 0 holds 16 bytes, but this rank expects 20" in results[1]


def _lose_rank_one(rank: int, world: int) -> tuple[str, float]:
    shm, _ = shm_transport.setup(None, rank, world)
    if rank == 1:
        os._exit(0)  # gone without sending: rank 0 must not wait for the timeout (120 s)
    start = time.monotonic()
    try:
        shm.all_to_all_single(torch.empty(2), torch.zeros(2), [1, 1], [1, 1]).wait()
    except shm_transport.ShmError as e:
        return str(e), time.monotonic() - start
    return "", 0.0


def test_a_lost_rank_is_an_error_on_its_peer_not_a_hang():
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=_rank_entry, args=(r, port, results)) for r in range(2)]
    for p in procs:
        p.start()
    procs[0].join(timeout=90)  # rank 1, exited, stays a zombie meanwhile: still found gone
    procs[1].join(timeout=10)
    message, waited = results.get()
    assert "rank 1 (pid" in message and "exited while this rank waited for it to send" in message
    assert waited < 5


def _rank_entry(rank: int, port: int, results) -> None:
    import datetime

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    results.put(_lose_rank_one(rank, 2))
    os._exit(0)  # rank 1 has gone: no barrier at exit


def _drop_one_then_go_on(rank: int, world: int) -> tuple[float, int]:
    shm, _ = shm_transport.setup(None, rank, world)
    x = torch.full((world * 1024,), float(rank))
    shm.all_to_all_single(torch.empty_like(x), x, None, None)  # dropped: never waited for
    out = torch.empty_like(x)
    for _ in range(shm_transport.RING + 10):  # past the descriptor ring: acks must not be held back
        shm.all_to_all_single(out, x, None, None).wait()
    return float(out[-1]), sum(len(p) for p in shm.in_flight.values())


def test_an_exchange_dropped_without_its_wait_holds_nothing_back():
    # A step that fails between an exchange's start and its wait, or a plan that started the next
    # batch's exchange and is not run again (the planner's candidates): the next wait copies the
    # dropped message out first, so the sender's ring and arena never wait for it.
    for last, in_flight in launch(_drop_one_then_go_on, 2, timeout_s=60):
        # In flight at the end: this rank's last message or two, the peer not having copied them
        # out yet (without the drain: every message since the dropped one, or a timeout).
        assert last == 1.0 and in_flight <= 2


def _sums(rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    shm, _ = shm_transport.setup(None, rank, world)
    g = torch.Generator().manual_seed(rank)
    mine = torch.randn(10_000, generator=g) * 10 ** torch.randint(-3, 4, (10_000,), generator=g)
    through_shm, over_gloo = mine.clone(), mine.clone()
    work = shm.all_reduce_sum(through_shm)
    dist.all_reduce(over_gloo)
    work.wait()
    everyone = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(everyone, mine)
    in_rank_order = everyone[0] + everyone[1]
    for part in everyone[2:]:
        in_rank_order += part
    return through_shm, over_gloo, in_rank_order


@pytest.mark.parametrize("world", [2, 3])
def test_shared_memory_sum_adds_in_rank_order_the_same_bits_on_every_rank(world):
    results = launch(_sums, world, timeout_s=60)
    for through_shm, over_gloo, in_rank_order in results:
        assert torch.equal(through_shm, in_rank_order)
        assert torch.equal(through_shm, results[0][0])  # every rank: the same bits
        torch.testing.assert_close(through_shm, over_gloo)  # gloo may add in another order


def _compile_small(rank: int, world: int, cache: str, transport: str) -> str:
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from parity_models import small_kaggle

    try:
        compiled = small_kaggle("", cache, transport=transport)
    except RuntimeError as e:
        return f"error: {e}"
    return compiled.plan.explain().split("all-to-alls: ", 1)[1].split("\n", 1)[0]


def test_compile_picks_shared_memory_on_one_host_and_gloo_when_it_cannot(tmp_path, monkeypatch):
    shared = launch(_compile_small, 2, str(tmp_path), "auto", timeout_s=120)
    assert all(line.startswith("shared memory (every rank on this host)") for line in shared), shared
    monkeypatch.setenv("SPARSELIFT_SHM_DISABLE", "1")
    assert launch(_compile_small, 2, str(tmp_path), "auto", timeout_s=120) == ["the process group's backend"] * 2
    # Asked for by name where the ranks cannot share memory: the same clear error on every rank.
    forced = launch(_compile_small, 2, str(tmp_path), "shm", timeout_s=120)
    why = "rank 0: SPARSELIFT_SHM_DISABLE is set"
    assert forced == [f"error: CompileOptions(transport='shm'): the ranks cannot share memory: {why}"] * 2


def _on_two_hosts(rank: int, world: int) -> tuple[bool, str]:
    shm_transport._host_id = lambda: f"host-{rank}"  # this rank's process only
    transport, why_not = shm_transport.setup(None, rank, world)
    return transport is None, why_not


def test_ranks_on_more_than_one_host_keep_gloo():
    assert launch(_on_two_hosts, 2, timeout_s=60) == [(True, "rank 0: the ranks are on more than one host")] * 2


def _little_room(rank: int, world: int) -> tuple[bool, str]:
    shm_transport._free_bytes = lambda: 64 << 20  # a container's default /dev/shm
    transport, why_not = shm_transport.setup(None, rank, world)
    return transport is None, why_not


def test_too_little_room_in_dev_shm_keeps_gloo():
    expected = (True, "rank 0: /dev/shm has 64 MiB free, under 256 MiB for each of 2 ranks")
    assert launch(_little_room, 2, timeout_s=60) == [expected] * 2
