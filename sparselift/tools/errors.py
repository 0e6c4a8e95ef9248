"""How SparseLift's command-line tools report a failure: one message, a non-zero exit.

`sparselift-opt` and `sparselift` print `PROG: error: MESSAGE` (or `FILE:LINE:COL: error:
MESSAGE` when the error has a location in the input) and exit 1, without a Python traceback:
the traceback of a user error says nothing its message does not, and buries it. Any other
exception (a bug, or a failure inside the user's model code) is an `unexpected error`, printed
with its type and a hint to rerun with the traceback.
`--traceback` on the command line, or `SPARSELIFT_TRACEBACK=1` in the environment, prints the
traceback too, for developers.

Imports nothing heavy: `sparselift-opt` must start without torch.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence

TRACEBACK_FLAG = "--traceback"
TRACEBACK_ENV = "SPARSELIFT_TRACEBACK"
TRACEBACK_HELP = f"on an error, also print the Python traceback (or set {TRACEBACK_ENV}=1)"


class ToolError(Exception):
    """A user error whose message is complete: it is printed as is (it may carry a location)."""


def traceback_requested(argv: Sequence[str]) -> bool:
    """`--traceback` among the arguments, or SPARSELIFT_TRACEBACK set to anything but 0/false/no."""
    env = os.environ.get(TRACEBACK_ENV, "").strip().lower()
    return TRACEBACK_FLAG in argv or env not in ("", "0", "false", "no", "off")


def is_user_error(exc: BaseException) -> bool:
    """Errors a user causes and can fix from the message: bad input, options, files, IR."""
    from xdsl.utils.exceptions import DiagnosticException, ParseError

    return isinstance(exc, ToolError | DiagnosticException | ParseError | ValueError | OSError)


def message_of(exc: BaseException) -> str:
    text = str(exc).strip()
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return text or type(exc).__name__


def report(prog: str, exc: BaseException, show_traceback: bool, stream=None) -> int:
    """Print `exc` the way the tools do (see the module docstring); the exit status to use."""
    stream = sys.stderr if stream is None else stream
    if show_traceback:
        traceback.print_exception(exc, file=stream)
    if isinstance(exc, ToolError):
        print(str(exc).rstrip("\n"), file=stream)
    elif is_user_error(exc):
        print(f"{prog}: error: {message_of(exc)}", file=stream)
    else:
        hint = "" if show_traceback else f" (rerun with {TRACEBACK_FLAG} or {TRACEBACK_ENV}=1 for the traceback)"
        print(f"{prog}: unexpected error: {type(exc).__name__}: {message_of(exc)}{hint}", file=stream)
    return 1
