"""Errors that reach every rank: one rank's failure raised on all of them, promptly.

Ranks meet in collectives; a rank that raises between two of them leaves the others waiting in
the next one until the process group's timeout (or, once it exits, failing with a bare
"Connection closed by peer" that hides the reason). `same_outcome` closes that gap for a block
of local work (no collectives inside, except other `same_outcome` blocks): at its end the ranks
agree on a status flag (one small all-reduce); if any rank failed, the lowest failing rank
broadcasts its error's type and message and every rank raises the same type with the same
message, "rank R: <message>".

The type is the failing error's own class when it is registered here (the standard ones, and
what `register_error_type` adds, e.g. the compiler's ExportError), else its nearest registered
base class with the original class name in the message; the failing rank raises that error
with its own traceback, so `except ValueError` (and pytest.raises) sees the same on every rank.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Iterator
from typing import cast

import torch
import torch.distributed as dist

_AGREED = "_sparselift_agreed"  # set on an error every rank raises already: no second agreement
_STANDARD = (
    "ValueError",
    "RuntimeError",
    "KeyError",
    "TypeError",
    "IndexError",
    "LookupError",
    "NotImplementedError",
    "AssertionError",
    "AttributeError",
    "ArithmeticError",
    "ZeroDivisionError",
    "OverflowError",
    "FileNotFoundError",
    "FileExistsError",
    "PermissionError",
    "IsADirectoryError",
    "NotADirectoryError",
    "TimeoutError",
    "ConnectionError",
    "OSError",
    "MemoryError",
    "ImportError",
    "ModuleNotFoundError",
)
_KNOWN: dict[str, type[Exception]] = {f"builtins.{name}": getattr(builtins, name) for name in _STANDARD}


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_error_type(cls: type[Exception]) -> type[Exception]:
    """Let other ranks re-raise `cls` as itself (it must take one message argument)."""
    _KNOWN[_qualified(cls)] = cls
    return cls


def _message(error: BaseException) -> str:
    # str(KeyError("x")) is "'x'": a re-raised KeyError would quote it twice.
    if isinstance(error, KeyError) and len(error.args) == 1 and isinstance(error.args[0], str):
        return error.args[0]
    return str(error)


def _describe(error: BaseException) -> tuple[list[str], str]:
    """What the other ranks need to raise the same error: the class hierarchy and the message."""
    return [_qualified(c) for c in type(error).__mro__], _message(error)


def _rebuild(mro: list[str], message: str, rank: int) -> Exception:
    cls = next((_KNOWN[name] for name in mro if name in _KNOWN), RuntimeError)
    own = mro[0].rsplit(".", 1)[-1]
    text = f"rank {rank}: {message}" if _qualified(cls) == mro[0] else f"rank {rank}: {own}: {message}"
    try:
        error = cls(text)
    except Exception:  # a registered class whose constructor wants more than a message
        error = RuntimeError(text)
    setattr(error, _AGREED, True)
    return error


def _active(world: int) -> bool:
    return world > 1 and dist.is_available() and dist.is_initialized()


def _flag_device(group) -> torch.device:
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def raise_if_any_failed(error: Exception | None, group, world: int) -> None:
    """Collective: every rank passes its own error (or None); if any rank has one, every rank
    raises the lowest failing rank's, as described above. Returns when no rank failed."""
    if error is not None and (getattr(error, _AGREED, False) or not _active(world)):
        raise error  # already raised on every rank, or there is no other rank to tell
    if not _active(world):
        return
    rank = dist.get_rank(group)
    flag = torch.tensor([rank if error is not None else world], dtype=torch.int64, device=_flag_device(group))
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    first = int(flag.item())
    if first == world:
        return
    # Only a failing rank puts its own rank into the minimum: rank `first` has an error.
    failed = error if rank == first else None
    payload: list[tuple[list[str], str] | None] = [_describe(failed) if failed is not None else None]
    dist.broadcast_object_list(
        payload, src=dist.get_global_rank(group, first) if group is not None else first, group=group
    )
    mro, message = cast("tuple[list[str], str]", payload[0])  # rank `first`'s description
    agreed = _rebuild(mro, message, first)
    if failed is not None:  # the same error as the others raise, with this rank's traceback
        raise agreed.with_traceback(failed.__traceback__) from failed.__cause__
    raise agreed


@contextlib.contextmanager
def same_outcome(group, world: int) -> Iterator[None]:
    """Run a block of local work on every rank of `group`; leave it together: all normally, or
    all raising the same error (see `raise_if_any_failed`). One process: nothing changes."""
    try:
        yield
    except Exception as error:  # noqa: BLE001 - any failure must reach the other ranks
        if getattr(error, _AGREED, False) or not _active(world):
            raise
        raise_if_any_failed(error, group, world)
        raise  # not reached: raise_if_any_failed raised
    raise_if_any_failed(None, group, world)


__all__ = ["raise_if_any_failed", "register_error_type", "same_outcome"]
