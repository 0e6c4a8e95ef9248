"""torch.export without the noise: what torch and torchrec print that a user cannot act on.

Inside SparseLift's own export only (scoped, never global): warnings and log records that are
about torch's or torchrec's internals are dropped, and what torch prints to stderr while an
export attempt fails (the partial graph, ~150 lines) is dropped with the attempt, since
`export_failure` says what went wrong and where in the user's code. `SPARSELIFT_DEBUG=1` turns
all of this off: everything torch prints, and its whole error message, comes through.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import sysconfig
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

DEBUG_ENV = "SPARSELIFT_DEBUG"
T = TypeVar("T")

# Python warnings (message regexes) raised by torch or torchrec during a non-strict export.
_WARNINGS = (
    r"is_fx_tracing will return true",
    r".*non-strict torch\.export KJT",
)
# Log records (logger name -> message regexes). torchrec logs through the root logger.
_RECORDS = {
    "torch.fx._symbolic_trace": (r"is_fx_tracing will return true for both fx\.symbolic_trace and torch\.export",),
    "torch.fx.experimental.symbolic_shapes": (r"Unable to find user code corresponding to",),
    # A shape error in the model, logged with torch's internal traceback before it is raised.
    "torch._subclasses.fake_tensor": (r"failed while attempting to run meta for",),
    "": (r"Trying to non-strict torch\.export KJT",),
    "torchrec.sparse.jagged_tensor": (r"Trying to non-strict torch\.export KJT",),
}


def debug() -> bool:
    """SPARSELIFT_DEBUG set (and not 0): show torch's full output and error reports."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


class _DropRecords(logging.Filter):
    def __init__(self, patterns: tuple[str, ...]):
        super().__init__()
        self.patterns = [re.compile(p) for p in patterns]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(p.search(message) for p in self.patterns)


@contextlib.contextmanager
def silenced(warning_messages: Sequence[str], records: Mapping[str, Sequence[str]]) -> Iterator[None]:
    """Inside the block only: drop the warnings whose message matches one of `warning_messages`
    and the log records of logger `name` whose message matches one of `records[name]`."""
    installed = [(logging.getLogger(name), _DropRecords(tuple(patterns))) for name, patterns in records.items()]
    with warnings.catch_warnings():
        for pattern in warning_messages:
            warnings.filterwarnings("ignore", message=pattern)
        for logger, drop in installed:
            logger.addFilter(drop)
        try:
            yield
        finally:
            for logger, drop in installed:
                logger.removeFilter(drop)


@contextlib.contextmanager
def quiet_torch_export() -> Iterator[None]:
    """Drop torch's and torchrec's unactionable warnings and log records inside the block; what
    it prints to stderr comes through if the block succeeds and is dropped if it raises."""
    if debug():
        yield
        return
    captured = io.StringIO()
    with silenced(_WARNINGS, _RECORDS), contextlib.redirect_stderr(captured):
        yield
    sys.stderr.write(captured.getvalue())  # the block succeeded: nothing of it was torch's failure report


def quietly(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` inside `quiet_torch_export()` (one export attempt)."""
    with quiet_torch_export():
        return fn(*args, **kwargs)


def _library_dirs() -> tuple[str, ...]:
    """Where code that is not the user's lives: the standard library, site-packages, SparseLift."""
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.add(str(Path(__file__).resolve().parents[1]))
    return tuple(str(Path(p).resolve()) + os.sep for p in paths)


_CALL_SITE = re.compile(
    r'The following call raised this error:\s*\n\s*(File "[^"]+", line \d+, in \S+)(?:\n[ \t]+(\S.*))?'
)


def user_frame(error: BaseException) -> str | None:
    """`File "...", line N, in f` (and its source line) of the user's code where torch.export
    failed: the call site torch names in its message, else the deepest frame of the traceback
    outside the libraries."""
    match = _CALL_SITE.search(str(error))
    if match:
        return match.group(1) + (f"\n    {match.group(2).strip()}" if match.group(2) else "")
    libraries = _library_dirs()
    frames = [
        f
        for f in traceback.extract_tb(error.__traceback__)
        if not f.filename.startswith("<") and not str(Path(f.filename).resolve()).startswith(libraries)
    ]
    if not frames:
        return None
    f = frames[-1]
    return f'File "{f.filename}", line {f.lineno}, in {f.name}' + (f"\n    {f.line.strip()}" if f.line else "")


def export_failure(model_name: str, error: BaseException) -> str:
    """The message for a failed torch.export: its first meaningful line and the user's source
    line (everything, unabridged, under SPARSELIFT_DEBUG=1)."""
    text = str(error)
    if debug():
        return f"torch.export failed for model '{model_name}': {text}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(error).__name__)
    lines = [f"torch.export failed for model '{model_name}': {first}"]
    where = user_frame(error)
    if where:
        lines.append(f"  {where}")
    lines.append(f"(set {DEBUG_ENV}=1 for torch.export's full report)")
    return "\n".join(lines)


__all__ = ["DEBUG_ENV", "debug", "export_failure", "quiet_torch_export", "quietly", "silenced", "user_frame"]
