"""Process groups for plans: `launch` (local ranks on free localhost ports) and torchrun (env://).

Every process group gets a timeout, so a dead peer turns into an error, never a hang.
"""

from __future__ import annotations

import atexit
import datetime
import io
import multiprocessing as mp
import os
import socket
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT_S = 120.0

# What a rank forked by the fork server finds already imported. A spawned rank imports torch and
# the compiler afresh, about 2 s a rank on two cores; a fork of the server that imported them
# once starts in about 0.05 s, and the server serves every later `launch` of this process.
# torch.export loads dynamo, sympy and triton lazily on its first call: another 3-5 s a rank,
# which the server pays once instead of every rank of every launch.
FORKSERVER_PRELOAD = (
    "torch",
    "torch.distributed",
    "sparselift.compiler",
    "torch.export._trace",
    "torch._dynamo",
    "sympy",
    "triton",
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_from_env(backend: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[int, int]:
    """Join the process group described by torchrun's environment (env://); returns (rank, world)."""
    if not dist.is_initialized():
        backend = backend or ("nccl" if _cuda() else "gloo")
        dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=timeout_s))
        atexit.register(_leave_process_group)
    return dist.get_rank(), dist.get_world_size()


def _leave_process_group() -> None:
    """Tear the group down together at exit.

    A rank that exits while its peers still hold connections to it can make their gloo threads
    abort the process ("terminate called without an active exception"), so ranks meet at a
    barrier first; the group's timeout bounds the wait when a peer is already gone.
    """
    if not dist.is_initialized():
        return
    try:
        dist.barrier()
    except Exception:  # a dead peer: nothing left to synchronise with
        pass
    dist.destroy_process_group()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _context() -> Any:
    """The fork server (torch and the compiler preloaded) where the platform has one, else spawn.

    Never plain fork: the caller may hold threads (gloo's, autograd's) that a fork would copy
    in an unknown state. The server is a fresh interpreter that has only imported modules."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(FORKSERVER_PRELOAD))  # no effect once the server runs
    return ctx


def _worker(rank, world_size, port, backend, timeout_s, fn, args, results, environ):
    # The fork server's environment is the one of its start: give the rank the caller's, as spawn would.
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size))
    try:
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s)
        )
        out = fn(rank, world_size, *args)
        # Bytes, not tensors: shared-memory tensors vanish when this process exits.
        buffer = io.BytesIO()
        torch.save(out, buffer)
        results.put((rank, "ok", buffer.getvalue()))
        _leave_process_group()
    except BaseException as e:  # report, then exit non-zero so the parent stops the others
        results.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        raise SystemExit(1) from None
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` on `world_size` new processes; return their results.

    `fn` must be importable (a module-level function). If any rank fails, the others are stopped
    and a RuntimeError carries the failing rank's traceback. The whole run is bounded by
    `timeout_s` (collectives time out after the same delay).
    """
    ctx = _context()
    results = ctx.SimpleQueue()
    port = free_port()
    environ = dict(os.environ)
    procs = [
        ctx.Process(
            target=_worker, args=(r, world_size, port, backend, timeout_s, fn, args, results, environ), daemon=True
        )
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=timeout_s * 2)
    outputs: dict[int, Any] = {}
    errors: list[str] = []
    try:
        while len(outputs) + len(errors) < world_size:
            if datetime.datetime.now() > deadline:
                raise TimeoutError(f"launch: ranks did not finish within {timeout_s * 2:.0f} s")
            if not results.empty():
                rank, status, payload = results.get()
                if status == "ok":
                    outputs[rank] = torch.load(io.BytesIO(payload), weights_only=False)
                else:
                    errors.append(f"rank {rank} failed: {payload}")
                    break
                continue
            dead = [p for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in outputs]
            if dead and results.empty():
                errors.append(f"rank {procs.index(dead[0])} exited with code {dead[0].exitcode}")
                break
            import time

            time.sleep(0.02)
    finally:
        if errors or len(outputs) < world_size:
            for p in procs:
                if p.is_alive():
                    p.terminate()
        for p in procs:
            p.join(timeout=10)
    if errors:
        raise RuntimeError(errors[0])
    return [outputs[r] for r in range(world_size)]
