"""The unpooled rows exchanges through shared memory, for ranks on one host.

gloo moves an all-to-all over loopback TCP. On DIN at real size, the item rows sent one per id
are 8 MB a step each way, and gloo takes 3.6 ms for each. The same bytes copied into a shared
segment and out of it take 1.7 ms, one small all-gather included (bench/RESULTS.md, 2026-12-05
evening session). `HostExchange` does that for the `output_rows` / `grad_rows` exchanges
(`HOST_ROLES`) that run synchronously. Everything else stays on gloo: below about 1 MB gloo is
as fast, and an exchange in flight behind other work (`async_op`) would need its segment for
longer than the two-buffer protocol below allows.

Each rank owns one anonymous shared segment (`memfd_create`), which the peers map through
`/proc/<pid>/fd/<fd>`. It holds two buffers, used by alternate calls, each large enough for the
rank's whole send buffer. One call:

1. The sender copies its send buffer (the peers' chunks back to back, as
   `all_to_all_single` takes it) into buffer `calls % 2`, after growing the segment (a new
   generation) if it is too small.
2. An all-gather of one row per rank `[ok, generation, fd, elements to each peer...]`. It is
   the barrier (every chunk is written), and it tells every rank the others' chunk sizes.
3. Every receiver copies its chunk out of each peer's buffer; its own comes from its input.

A buffer is written again two calls later. By then the next call's all-gather has gathered every
rank, and every rank finished reading this one before it got there (the reads are synchronous).
If any rank could not write (no room in `/dev/shm`, its segment could not grow), every rank sees
it in the all-gather and the call goes over gloo instead, on every rank alike.

The first call agrees whether the transport works at all. Every rank creates its segment and
all-gathers its process id and descriptor, then maps every peer's and all-gathers whether it
could. Ranks on different hosts, or in containers that cannot see each other's processes, fail
here, and from then on every call goes over gloo. A segment has no name: the kernel frees it
when the last process holding it ends, however it ends, so nothing is left behind. An older
generation's descriptor is closed at the call after it was announced (every peer mapped it
then). Space is reserved with `posix_fallocate`, so a lack of shared memory is an error at
creation, never a SIGBUS on a later write.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

HOST_ROLES = frozenset({"output_rows", "grad_rows"})
_ALIGN = 64


def _create(nbytes: int) -> tuple[int, torch.Tensor]:
    """A new anonymous shared segment of `nbytes`: its descriptor and this process's mapping
    (OSError when the space cannot be reserved)."""
    fd = os.memfd_create("sparselift-rows", os.MFD_CLOEXEC)
    try:
        os.posix_fallocate(fd, 0, nbytes)
        return fd, _map(f"/proc/self/fd/{fd}", nbytes)
    except (OSError, RuntimeError) as e:
        os.close(fd)
        raise OSError(f"shared segment of {nbytes} bytes: {e}") from None


def _map(path: str, nbytes: int = 0) -> torch.Tensor:
    """A segment mapped whole (OSError when it cannot be opened or is smaller than `nbytes`)."""
    try:
        size = os.stat(path).st_size
        if size < nbytes:
            raise OSError(f"{path}: {size} bytes, {nbytes} expected")
        return torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
    except RuntimeError as e:  # torch's mapping error
        raise OSError(f"{path}: {e}") from None


class HostExchange:
    """One rank's end of the shared-memory transport (see the module docstring)."""

    def __init__(self, process_group: Any, rank: int, world: int):
        self.pg, self.rank, self.world = process_group, rank, world
        self.enabled: bool | None = None  # decided by the first call, the same on every rank
        self.calls = 0
        self.fallbacks = 0  # calls that went over gloo after all (a rank could not write)
        self.generation = -1
        self._capacity = 0  # bytes per buffer
        self._segment: torch.Tensor | None = None
        self._fds: list[int] = []  # own descriptors, the current generation's last
        self._peer_pids: list[int] = []
        self._peers: dict[int, tuple[int, torch.Tensor]] = {}  # source -> (generation, mapping)
        self._finalizer = weakref.finalize(self, _close_fds, self._fds)

    def close(self) -> None:
        """Close this rank's descriptors (the mappings stay valid until dropped)."""
        _close_fds(self._fds)

    # -- one exchange -------------------------------------------------------------------------
    def exchange(self, out: torch.Tensor, x: torch.Tensor, send: Sequence[int], recv: Sequence[int]) -> bool:
        """`dist.all_to_all_single(out, x, recv, send)` through shared memory; False (on every
        rank alike) when it went over gloo instead, which the caller then runs."""
        if self.enabled is None:
            self.enabled = self._agree()
        if not self.enabled:
            return False
        parity = self.calls % 2
        self.calls += 1
        esz = x.element_size()
        older = len(self._fds) - 1  # generations announced by an earlier call: every peer mapped them
        ok = self._write(x, parity, esz)
        rows = self._all_gather([int(ok), self.generation, self._fds[-1], *send])
        _close_fds(self._fds, older)
        for s, row in enumerate(rows):  # every announced generation, read from or not, so that its
            if s != self.rank:  # descriptor can be closed at the next call
                self._peer_mapping(s, row[1], row[2])
        if not all(r[0] for r in rows):
            self.fallbacks += 1
            return False
        self._read(out, x, rows, recv, parity, esz)
        return True

    def _write(self, x: torch.Tensor, parity: int, esz: int) -> bool:
        need = x.numel() * esz
        if need > self._capacity:
            try:
                self._grow(need)
            except OSError:
                return False
        if need:
            assert self._segment is not None
            start = parity * self._capacity
            self._segment[start : start + need].view(x.dtype).copy_(x.reshape(-1))
        return True

    def _grow(self, need: int) -> None:
        capacity = -(-max(need + need // 4, 2 * self._capacity) // _ALIGN) * _ALIGN
        fd, segment = _create(2 * capacity)
        self._fds.append(fd)
        self._segment, self._capacity = segment, capacity
        self.generation += 1

    def _read(self, out, x, rows, recv: Sequence[int], parity: int, esz: int) -> None:
        out_at = 0
        for s, row in enumerate(rows):
            sizes = row[3:]
            n = sizes[self.rank]
            if n != recv[s]:
                raise RuntimeError(
                    f"rows exchange on rank {self.rank}: rank {s} sends {n} elements, {recv[s]} expected"
                )
            if s == self.rank:
                start = sum(sizes[: self.rank])
                out[out_at : out_at + n].copy_(x.reshape(-1)[start : start + n])
            elif n:
                segment = self._peers[s][1]
                start = parity * (segment.numel() // 2) + sum(sizes[: self.rank]) * esz
                out[out_at : out_at + n].copy_(segment[start : start + n * esz].view(out.dtype))
            out_at += n

    def _peer_mapping(self, source: int, generation: int, fd: int) -> None:
        held = self._peers.get(source)
        if held is None or held[0] != generation:
            self._peers[source] = (generation, _map(f"/proc/{self._peer_pids[source]}/fd/{fd}"))

    # -- whether it works at all --------------------------------------------------------------
    def _agree(self) -> bool:
        """Every rank creates a small segment and maps every peer's: enabled only when all could."""
        try:
            self._grow(_ALIGN)
        except OSError:
            pass
        created = self._all_gather([int(bool(self._fds)), os.getpid(), self._fds[-1] if self._fds else -1])
        self._peer_pids = [pid for _, pid, _ in created]
        mapped = int(all(c for c, _, _ in created))
        if mapped:
            try:
                for s, (_, pid, fd) in enumerate(created):
                    if s != self.rank:
                        self._peers[s] = (0, _map(f"/proc/{pid}/fd/{fd}", 2 * _ALIGN))
            except OSError:
                mapped = 0
        agreed = all(m for (m,) in self._all_gather([mapped]))
        if not agreed:
            self.close()
            self._peers.clear()
            self._segment, self._capacity = None, 0
        return agreed

    def _all_gather(self, values: list[int]) -> list[list[int]]:
        row = torch.tensor(values, dtype=torch.int64)
        table = torch.empty(self.world * row.numel(), dtype=torch.int64)
        dist.all_gather_single(table, row, group=self.pg)
        return table.view(self.world, -1).tolist()


def _close_fds(fds: list[int], first: int | None = None) -> None:
    """Close `fds[:first]` (all by default) and forget them."""
    done = fds[:first]
    for fd in done:
        try:
            os.close(fd)
        except OSError:
            pass
    del fds[: len(done)]


def uses_host_exchange(role: str, async_op: bool) -> bool:
    """Whether an exchange of `role` goes through `HostExchange`: the rows roles, run synchronously
    (the same answer on every rank: both are the plan's, not the data's)."""
    return not async_op and bool(HOST_ROLES & set(role.split("+")))


__all__ = ["HOST_ROLES", "HostExchange", "uses_host_exchange"]
