"""All-to-alls and sums between the ranks of one host through shared memory, instead of gloo's loopback TCP.

Why: on a CPU host gloo moves every all-to-all through the kernel's TCP stack and its own
threads, which share the cores with the model's compute. Measured on this 2-core VM (gloo, 2
ranks, bench/RESULTS.md): 8 MB one way costs 3.5 ms, and a 16-byte all-to-all 0.31 ms. Here a
message costs one copy into the sender's shared arena and one copy out by the receiver, and a
wait is a futex: no thread of its own, no socket.

Layout. Every rank owns one file of shared memory: created, mapped by every rank, then unlinked,
so nothing outlives the processes. The file holds:
- a header of int32 words, one 64-byte line each: the owner's pid; `sent[p]`, the messages it has
  published to peer `p` (the futex word `p` waits on); `acked[s]`, the messages from source `s`
  it has copied out, which it does in order (the futex word `s` waits on when its arena or ring
  is full);
- `ring[p][RING]`: (offset, bytes) of message `seq % RING` to peer `p`;
- the arena: the messages' bytes, placed first-fit and reused once acked, so the memory it
  touches is the peak of the bytes in flight, not their total. Pages are reserved with
  `posix_fallocate` before they are written: a full /dev/shm is an error, not a SIGBUS.

Order. A plan runs the same program on every rank, so the ranks start their exchanges in the
same order and the k-th message between two ranks is the same exchange on both: its sequence
number. Every exchange sends every peer a message, empty ones included, so a size that disagrees
(a bug) is an error naming both ranks, never a silent shift of the sequence.

Waits. A wait is a futex wait in slices; between slices it checks that the sender's process is
alive and that the deadline (the process group's timeout) has not passed, and raises on either.
A lost rank is an error on its peers, not a hang.

A sum (`all_reduce_sum`, the dense gradients') sends every peer the rank's buffer and adds the
ranks' buffers in rank order, so every rank gets the same bits.

One thread per rank issues the exchanges, in program order (a plan's lanes hold no collectives).
Memory order: the data is written before `sent` is stored and read after it is loaded. x86-64's
total store order keeps these in order; other machines keep gloo (`supported`).
"""

from __future__ import annotations

import collections
import ctypes
import errno
import math
import mmap
import os
import platform
import time
import uuid
import weakref
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from sparselift.runtime.agree import register_error_type, same_outcome

LINE = 64  # one header word per cache line: no false sharing between writers
RING = 256  # descriptors per peer: messages that may be in flight to one peer
ARENA_MAX_BYTES = 8 << 30  # the arena's ceiling per rank (virtual: pages are reserved as used)
# The least room in /dev/shm per rank for the transport to be used: a container's default 64 MiB
# /dev/shm would fail a big step's exchanges mid-training; with less room the plan keeps gloo.
ARENA_MIN_BYTES = 256 << 20
SHM_DIR = "/dev/shm"
WAIT_SLICE_S = 0.2  # futex waits in slices: between them, check the peer is alive and the deadline
_SYS_FUTEX = 202  # x86-64
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1  # shared (not private) futexes: the words live in shared files
_ALIGN = 64

TRANSPORTS = ("auto", "gloo", "shm")


def supported() -> str | None:
    """Why this machine cannot use the shared-memory transport (None: it can). Setting
    `SPARSELIFT_SHM_DISABLE=1` turns it off where `CompileOptions` cannot be reached (as
    `NCCL_SHM_DISABLE` does NCCL's)."""
    if os.environ.get("SPARSELIFT_SHM_DISABLE", "0") not in ("", "0"):
        return "SPARSELIFT_SHM_DISABLE is set"
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return f"shared-memory exchanges need Linux on x86-64 (this is {platform.system()} {platform.machine()})"
    if not os.path.isdir(SHM_DIR):
        return f"{SHM_DIR} does not exist"
    return None


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _futex_wait(addr: int, expected: int, timeout_s: float) -> None:
    ts = _Timespec(int(timeout_s), int((timeout_s % 1.0) * 1e9))
    _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAIT, ctypes.c_int(expected), ctypes.byref(ts), None, 0)


def _futex_wake(addr: int) -> None:
    _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(addr), _FUTEX_WAKE, ctypes.c_int(2**31 - 1), None, None, 0)


class _RankFile:
    """One rank's shared file, mapped: its header words, descriptor rings and arena."""

    def __init__(self, fd: int, world: int, size: int):
        self.world = world
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        self.arena_offset = arena_offset(world)
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)

    def word(self, line: int) -> ctypes.c_int32:
        return ctypes.c_int32.from_address(self.base + line * LINE)

    def pid(self) -> ctypes.c_int32:
        return self.word(0)

    def sent(self, peer: int) -> ctypes.c_int32:
        return self.word(1 + peer)

    def acked(self, source: int) -> ctypes.c_int32:
        return self.word(1 + self.world + source)

    def descriptor(self, peer: int, seq: int) -> Any:
        at = self.base + header_bytes(self.world) + (peer * RING + seq % RING) * 16
        return (ctypes.c_int64 * 2).from_address(at)

    def arena(self, offset: int, nbytes: int) -> torch.Tensor:
        start = self.arena_offset + offset
        return self.bytes[start : start + nbytes]


def header_bytes(world: int) -> int:
    return LINE * (1 + 2 * world)


def arena_offset(world: int) -> int:
    used = header_bytes(world) + world * RING * 16
    return (used + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


class ShmError(RuntimeError):
    """A shared-memory exchange that cannot complete: a peer gone, a timeout, sizes that disagree."""


class ShmTransport:
    """The all-to-all of one process group's ranks, all on this host, through shared memory."""

    def __init__(self, rank: int, world: int, fd: int, files: list[_RankFile], timeout_s: float, token: str):
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        self.fd, self.files, self.token = fd, files, token  # token: the name its group's files had
        self.own = files[rank]
        self.capacity = self.own.map.size() - self.own.arena_offset
        self.reserved = 0  # arena bytes reserved with posix_fallocate
        self.next_send = [0] * world  # the sequence number of this rank's next message to each peer
        self.next_recv = [0] * world  # ... and of the next message it expects from each source
        self.in_flight: dict[int, dict[int, tuple[int, int]]] = {p: {} for p in range(world)}  # peer: seq -> span
        # Per source, the messages started and not yet copied out, in order: (seq, where it goes).
        self.unread: list[collections.deque[tuple[int, torch.Tensor]]] = [collections.deque() for _ in range(world)]

    # ---- sending ------------------------------------------------------------------------

    def _reap(self, peer: int) -> None:
        """Forget this rank's messages to `peer` that `peer` has consumed (their bytes are free)."""
        acked = self.files[peer].acked(self.rank).value
        pending = self.in_flight[peer]
        for seq in [s for s in pending if s <= acked]:
            del pending[seq]

    def _place(self, nbytes: int, peer: int, seq: int) -> int:
        """An arena offset for `nbytes`, first fit among the spans still in flight; waits (up to
        the deadline) for acks when the arena or `peer`'s descriptor ring is full."""
        while True:
            for p in range(self.world):
                self._reap(p)
            if seq - self.files[peer].acked(self.rank).value > RING:  # the ring slot is still unread
                self._wait_word(self.files[peer].acked(self.rank), seq - RING, peer, "to consume earlier messages")
                continue
            offset = self._first_fit(nbytes)
            if offset is not None:
                return offset
            oldest = min(((min(pending), p) for p, pending in self.in_flight.items() if pending), default=None)
            if oldest is None:
                raise ShmError(
                    f"rank {self.rank}: a message of {nbytes} bytes to rank {peer} does not fit in the "
                    f"shared-memory arena ({self.capacity} bytes); use CompileOptions(transport='gloo')"
                )
            seq_oldest, p = oldest
            self._wait_word(self.files[p].acked(self.rank), seq_oldest, p, "to consume earlier messages")

    def _first_fit(self, nbytes: int) -> int | None:
        spans = sorted(span for pending in self.in_flight.values() for span in pending.values())
        at = 0
        for start, end in spans:
            if start - at >= nbytes:
                break
            at = max(at, end)
        end = at + nbytes
        if end > self.capacity:
            return None
        if end > self.reserved:
            self._reserve(end)
        return at

    def _reserve(self, end: int) -> None:
        target = min(self.capacity, max(end, 2 * self.reserved, 1 << 20))
        try:
            os.posix_fallocate(self.fd, 0, self.own.arena_offset + target)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EFBIG):
                raise ShmError(
                    f"rank {self.rank}: {SHM_DIR} has no room for {target} bytes of exchange buffers "
                    f"(os.statvfs says {_free_bytes()} free); enlarge it or use CompileOptions(transport='gloo')"
                ) from None
            raise
        self.reserved = target

    def _send(self, peer: int, data: torch.Tensor) -> None:
        seq = self.next_send[peer] = self.next_send[peer] + 1
        nbytes = data.numel()
        offset = self._place(_aligned(nbytes), peer, seq) if nbytes else 0
        if nbytes:
            self.own.arena(offset, nbytes).copy_(data)
            self.in_flight[peer][seq] = (offset, offset + _aligned(nbytes))
        desc = self.own.descriptor(peer, seq)
        desc[0], desc[1] = offset, nbytes
        self.own.sent(peer).value = seq  # after the data and its descriptor (x86-64: stores in order)
        _futex_wake(ctypes.addressof(self.own.sent(peer)))

    # ---- receiving ----------------------------------------------------------------------

    def receive_upto(self, source: int, seq: int) -> None:
        """Copy out every message from `source` up to `seq`, oldest first, acking each.

        Earlier messages go first even when their own exchange has not been waited for (it was
        started ahead, or dropped by a step that failed): their data is final once sent, so acks
        always advance in order and an exchange never waited for holds nothing back."""
        unread = self.unread[source]
        while unread and unread[0][0] <= seq:
            got, out = unread[0]
            self._copy_out(source, got, out)
            unread.popleft()
            word = self.own.acked(source)
            word.value = got
            _futex_wake(ctypes.addressof(word))

    def _copy_out(self, source: int, seq: int, out: torch.Tensor) -> None:
        theirs = self.files[source]
        self._wait_word(theirs.sent(self.rank), seq, source, "to send")
        offset, nbytes = theirs.descriptor(self.rank, seq)
        if nbytes != out.numel():
            raise ShmError(
                f"rank {self.rank}: exchange {seq} from rank {source} holds {nbytes} bytes, but this rank "
                f"expects {out.numel()} (the ranks disagree on the exchange's sizes)"
            )
        if nbytes:
            out.copy_(theirs.arena(offset, nbytes))

    def _wait_word(self, word: ctypes.c_int32, target: int, peer: int, what: str) -> None:
        """Until `word` reaches `target`; raises when rank `peer`'s process is gone or at the deadline."""
        if word.value >= target:
            return
        deadline = time.monotonic() + self.timeout_s
        addr = ctypes.addressof(word)
        pid = self.files[peer].pid().value
        while (seen := word.value) < target:
            _futex_wait(addr, seen, WAIT_SLICE_S)
            if word.value >= target:
                return
            if not _alive(pid):
                raise ShmError(f"rank {self.rank}: rank {peer} (pid {pid}) exited while this rank waited for it {what}")
            if time.monotonic() > deadline:
                raise ShmError(
                    f"rank {self.rank}: rank {peer} did not {what.removeprefix('to ')} within {self.timeout_s:.0f} s "
                    "(the process group's timeout)"
                )

    # ---- the collectives ----------------------------------------------------------------

    def all_reduce_sum(self, flat: torch.Tensor) -> _ShmSum:
        """`dist.all_reduce(flat, SUM, async_op=True)` for a contiguous tensor: every peer gets this
        rank's buffer now; the work's `wait` adds them all in rank order into `flat`."""
        if not flat.is_contiguous():
            raise ShmError(f"rank {self.rank}: all_reduce_sum of a non-contiguous {tuple(flat.shape)} tensor")
        flat = flat.view(-1)
        n, me = flat.numel(), self.rank
        received = iter(flat.new_empty((self.world - 1) * n).split(n))  # the peers' buffers
        parts = [flat if s == me else next(received) for s in range(self.world)]
        mine = flat.view(torch.uint8)
        work = self._exchange([mine] * self.world, [p.view(torch.uint8) for p in parts])
        return _ShmSum(flat, parts, me, work)

    def all_to_all_single(
        self, out: torch.Tensor, x: torch.Tensor, recv: Sequence[int] | None, send: Sequence[int] | None
    ):
        """`dist.all_to_all_single(out, x, recv, send, async_op=True)`: splits in rows of dim 0
        (None: dim 0 split evenly). The sends happen now; the returned work's `wait` receives."""
        send = [x.shape[0] // self.world] * self.world if send is None else send
        recv = [out.shape[0] // self.world] * self.world if recv is None else recv
        if len(send) != self.world or len(recv) != self.world:
            raise ShmError(f"rank {self.rank}: all_to_all splits {list(send)} / {list(recv)} for {self.world} ranks")
        if not out.is_contiguous():
            raise ShmError(f"rank {self.rank}: all_to_all into a non-contiguous tensor")
        row = math.prod(x.shape[1:]) * x.element_size()
        src = x.contiguous().reshape(-1).view(torch.uint8)
        dst = out.reshape(-1).view(torch.uint8)
        if src.numel() != sum(send) * row or dst.numel() != sum(recv) * row:
            raise ShmError(
                f"rank {self.rank}: all_to_all of {src.numel()} bytes to send and {dst.numel()} to receive, "
                f"but the splits {list(send)} / {list(recv)} of {row}-byte rows say otherwise"
            )
        if send[self.rank] != recv[self.rank]:
            raise ShmError(
                f"rank {self.rank}: all_to_all sends itself {send[self.rank]} rows but expects {recv[self.rank]}"
            )
        send_at = _offsets([n * row for n in send])
        recv_at = _offsets([n * row for n in recv])
        me = self.rank
        dst[recv_at[me] : recv_at[me + 1]].copy_(src[send_at[me] : send_at[me + 1]])
        sends = [src[send_at[p] : send_at[p + 1]] for p in range(self.world)]
        return self._exchange(sends, [dst[recv_at[s] : recv_at[s + 1]] for s in range(self.world)])

    def _exchange(self, sends: Sequence[torch.Tensor], receives: Sequence[torch.Tensor]) -> _ShmWork:
        """Send `sends[p]` (bytes) to every peer `p` now; the work's `wait` copies each source's
        message into `receives[s]` (bytes). This rank's own entries are left alone."""
        expect = {}
        for p in range(self.world):
            if p != self.rank:
                self._send(p, sends[p])
        for s in range(self.world):
            if s != self.rank:
                self.next_recv[s] += 1
                expect[s] = self.next_recv[s]
                self.unread[s].append((expect[s], receives[s]))
        return _ShmWork(self, expect)


class _ShmSum:
    """The receiving half of `all_reduce_sum`: every rank adds the ranks' buffers in rank order,
    so every rank gets the same bits."""

    def __init__(self, flat: torch.Tensor, parts: list[torch.Tensor], rank: int, work: _ShmWork):
        self.flat, self.parts, self.rank, self.work = flat, parts, rank, work

    def wait(self) -> bool:
        self.work.wait()
        if len(self.parts) == 2:  # x0 + x1 and x1 + x0 are the same bits: add in place, no copy
            self.flat.add_(self.parts[1 - self.rank])
            return True
        total = self.parts[0] + self.parts[1]
        for part in self.parts[2:]:
            total.add_(part)
        self.flat.copy_(total)
        return True


class _ShmWork:
    """The receiving half of an exchange (`dist.Work`'s `wait`)."""

    def __init__(self, transport: ShmTransport, expect: dict[int, int]):
        self.transport, self.expect = transport, expect

    def wait(self) -> bool:
        for source, seq in self.expect.items():
            self.transport.receive_upto(source, seq)
        return True


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _offsets(sizes: Sequence[int]) -> list[int]:
    at = [0]
    for n in sizes:
        at.append(at[-1] + n)
    return at


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs: an exited rank stays a zombie until its parent reaps it,
    so its /proc state is read, not just its existence."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


def _free_bytes() -> int:
    st = os.statvfs(SHM_DIR)
    return st.f_bavail * st.f_frsize


# ---- setup: one transport per process group --------------------------------------------

_BY_GROUP: weakref.WeakKeyDictionary[Any, ShmTransport] = weakref.WeakKeyDictionary()


def attached(pg: Any) -> ShmTransport | None:
    """The transport set up for `pg` (None: the default group), if any."""
    if not dist.is_initialized():
        return None
    return _BY_GROUP.get(pg if pg is not None else dist.group.WORLD)


class ShmUnavailable(RuntimeError):
    """Why the group's ranks cannot share memory (every rank raises it alike: `same_outcome`)."""


register_error_type(ShmUnavailable)


def setup(pg: Any, rank: int, world: int) -> tuple[ShmTransport | None, str]:
    """Set up the shared-memory transport for `pg`'s ranks, once per group. Collective: every
    rank calls it at the same point. Returns it, or None and why not (the plan then exchanges over
    gloo); every rank reaches the same answer."""
    existing = attached(pg)
    if existing is not None:
        return existing, ""
    if world < 2:
        return None, "one rank: nothing to exchange"
    if dist.get_backend(pg) != "gloo":  # the same on every rank
        return None, f"the process group's backend is {dist.get_backend(pg)}, not gloo"
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, (_host_id(), uuid.uuid4().hex), group=pg)
    token = hosts[0][1]  # rank 0's: one name for this group's files
    fd, files = -1, []
    try:
        with same_outcome(pg, world):
            several_hosts = len({h for h, _ in hosts}) > 1
            why = supported() or ("the ranks are on more than one host" if several_hosts else None)
            why = why or _too_little_room(world)
            if why:
                raise ShmUnavailable(why)
            fd, own = _create_own(token, rank, world)
        with same_outcome(pg, world):
            files = [own if r == rank else _open_peer(_path(token, r), world) for r in range(world)]
    except ShmUnavailable as e:
        if fd >= 0:
            os.close(fd)
        return None, str(e)
    finally:
        if fd >= 0:
            os.unlink(_path(token, rank))  # every rank has mapped it, or gives up: nothing outlives the processes
        dist.barrier(group=pg)  # every rank's file is unlinked before any rank goes on
    transport = ShmTransport(rank, world, fd, files, _timeout_s(pg), token)
    _BY_GROUP[pg if pg is not None else dist.group.WORLD] = transport
    return transport, ""


def _path(token: str, rank: int) -> str:
    return os.path.join(SHM_DIR, f"sparselift-{token}-{rank}")


def _create_own(token: str, rank: int, world: int) -> tuple[int, _RankFile]:
    """This rank's file (sparse: the arena's pages are reserved as they are used), mapped."""
    path, fd = _path(token, rank), -1
    try:
        capacity = min(ARENA_MAX_BYTES, _free_bytes() // world) // mmap.PAGESIZE * mmap.PAGESIZE
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, arena_offset(world) + capacity)
        os.posix_fallocate(fd, 0, arena_offset(world))
        own = _RankFile(fd, world, arena_offset(world) + capacity)
    except OSError as e:
        if fd >= 0:
            os.close(fd)
            os.unlink(path)
        raise ShmUnavailable(f"cannot create {path}: {e}") from None
    own.pid().value = os.getpid()
    return fd, own


def _open_peer(path: str, world: int) -> _RankFile:
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as e:
        raise ShmUnavailable(f"cannot map a peer's exchange buffers: {e}") from None
    try:
        return _RankFile(fd, world, os.fstat(fd).st_size)
    finally:
        os.close(fd)  # the mapping stays


def _timeout_s(pg: Any) -> float:
    """The process group's timeout (a shared-memory wait gives up after as long as gloo would)."""
    group: Any = pg if pg is not None else dist.group.WORLD  # None (not initialized): AttributeError below
    try:
        return float(group._get_backend(torch.device("cpu")).options._timeout.total_seconds())
    except (AttributeError, RuntimeError):
        return 1800.0  # torch's default


def _too_little_room(world: int) -> str | None:
    free = _free_bytes()
    if free // world < ARENA_MIN_BYTES:
        return f"{SHM_DIR} has {free / 2**20:.0f} MiB free, under {ARENA_MIN_BYTES >> 20} MiB for each of {world} ranks"
    return None


def _host_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{platform.node()}:{boot}"
