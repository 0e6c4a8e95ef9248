"""Transparent huge pages for big CPU table shards.

A lookup or an update touches rows spread over the whole table. On 4 KiB pages, a table of
hundreds of MB spans far more pages than the TLB holds, so almost every row access also walks
the page table. On 2 MiB pages a 1 GiB shard needs 512 TLB entries.

Measured on this VM (bench/RESULTS.md, "Huge pages for big tables"): 4 tables of 1M x 64 f32,
Zipf ids, a 28.9 -> 22.1 ms gather, and uniform ids 76.9 -> 52.4 ms.

Linux only backs memory with transparent huge pages (THP) where the system allows it:
`/sys/kernel/mm/transparent_hugepage/enabled` is `always`, or `madvise` with the range advised
`MADV_HUGEPAGE`. This VM is in `madvise` mode, so nothing gets huge pages unless asked.

- `empty_shard(shape, dtype)`: a new CPU tensor on an anonymous mapping advised `MADV_HUGEPAGE`
  before its first touch, so its pages fault in as huge pages. The tensor keeps the mapping
  alive (`torch.frombuffer` holds a reference); no copy, no second allocation.
- `advise_existing(tensor)`: memory that exists already (the model's own table, which a plan
  shares instead of copying) is advised and collapsed in place (`MADV_COLLAPSE`, Linux 6.1+).
  The contents stay as they are; only the physical backing changes.
- `huge_page_bytes(tensor)`: how much of a tensor's range is backed by huge pages now, read
  from `/proc/self/smaps`, for `explain()` and the tests.

Everything degrades to plain pages: another OS, THP `never`, a kernel without `MADV_COLLAPSE`,
or memory the kernel cannot compact. None of these is an error; the advice is a hint.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys
from pathlib import Path

import torch

# A table below this size sits mostly in the TLB's reach (and in cache) already.
DEFAULT_MIN_BYTES = 32 << 20
HUGE_PAGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def thp_mode() -> str:
    """The system's THP policy: `always`, `madvise`, `never`, or `unavailable` (not Linux, or no THP)."""
    if not sys.platform.startswith("linux"):
        return "unavailable"
    try:
        text = THP_ENABLED.read_text()
    except OSError:
        return "unavailable"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "unavailable"


def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


_LIBC = _libc() if sys.platform.startswith("linux") else None


def _madvise(address: int, length: int, advice: int) -> bool:
    if _LIBC is None or length <= 0:
        return False
    return _LIBC.madvise(ctypes.c_void_p(address), ctypes.c_size_t(length), ctypes.c_int(advice)) == 0


def _aligned_interior(address: int, nbytes: int) -> tuple[int, int]:
    """The whole huge pages inside `[address, address + nbytes)`: (start, length)."""
    start = -(-address // HUGE_PAGE) * HUGE_PAGE
    end = (address + nbytes) // HUGE_PAGE * HUGE_PAGE
    return start, max(0, end - start)


def wanted(nbytes: int, min_bytes: int | None, device: torch.device | str = "cpu") -> bool:
    """Whether a shard of `nbytes` on `device` should get huge pages under `min_bytes`
    (`CompileOptions.huge_page_min_bytes`; None: never)."""
    return (
        min_bytes is not None
        and nbytes >= min_bytes
        and torch.device(device).type == "cpu"
        and thp_mode()
        in (
            "always",
            "madvise",
        )
    )


def empty_shard(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized CPU tensor whose pages will fault in as huge pages.

    The mapping is one huge page longer than the tensor, and the tensor starts at the first huge
    page boundary inside it, so every page of the tensor can be a huge one."""
    nbytes = dtype.itemsize
    for n in shape:
        nbytes *= n
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    skip = -address % HUGE_PAGE
    _madvise(address + skip, nbytes, MADV_HUGEPAGE)  # before the first touch: faults take huge pages
    flat = torch.frombuffer(region, dtype=torch.uint8, count=nbytes, offset=skip)
    return flat.view(dtype).view(shape)


def advise_existing(tensor: torch.Tensor) -> bool:
    """Advise the whole huge pages inside `tensor`'s memory and collapse them now.

    Returns whether the kernel accepted the collapse; False leaves the memory as it was."""
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        return False
    start, length = _aligned_interior(tensor.data_ptr(), tensor.numel() * tensor.element_size())
    if not length or not _madvise(start, length, MADV_HUGEPAGE):
        return False
    return _madvise(start, length, MADV_COLLAPSE)


def huge_page_bytes(tensor: torch.Tensor) -> int:
    """Bytes of `tensor`'s range backed by huge pages (from `/proc/self/smaps`; 0 off Linux).

    smaps counts per mapping, so a mapping that `tensor` shares with other data is counted in
    proportion to the part of it that `tensor` covers."""
    if tensor.device.type != "cpu" or tensor.numel() == 0 or not sys.platform.startswith("linux"):
        return 0
    lo = tensor.data_ptr()
    hi = lo + tensor.numel() * tensor.element_size()
    total = 0
    try:
        lines = Path("/proc/self/smaps").read_text().splitlines()
    except OSError:
        return 0
    span = None
    for line in lines:
        head = line.split(maxsplit=1)[0] if line else ""
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
            span = (start, end) if start < hi and end > lo else None
        elif span is not None and head == "AnonHugePages:":
            start, end = span
            overlap = min(end, hi) - max(start, lo)
            total += int(line.split()[1]) * 1024 * overlap // (end - start)
    return min(total, hi - lo)


__all__ = [
    "DEFAULT_MIN_BYTES",
    "advise_existing",
    "empty_shard",
    "huge_page_bytes",
    "thp_mode",
    "wanted",
]
