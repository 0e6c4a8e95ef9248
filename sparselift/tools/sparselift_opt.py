"""`sparselift-opt`: parse SparseLift IR, run a pass pipeline, print IR or emit a target.

A thin `xDSLOptMain` subclass: it registers only builtin/func plus our dialects, passes and
targets (all lazily), so start-up never imports torch. Errors are one message, located in the
input where they can be, and exit 1 (`sparselift/tools/errors.py`, `opt_diagnostics.py`).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence

from xdsl.utils.exceptions import ArgSpecParseError, ParseError, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from sparselift import __version__
from sparselift.tools import opt_diagnostics
from sparselift.tools.errors import TRACEBACK_FLAG, TRACEBACK_HELP, ToolError, report, traceback_requested


class SparseLiftOptMain(xDSLOptMain):
    version_format = "sparselift-opt " + __version__ + " (xdsl {xdsl_version})"

    def register_all_dialects(self):
        from xdsl.dialects.builtin import Builtin
        from xdsl.dialects.func import Func

        from sparselift.ir import get_all_dialects

        self.ctx.load_dialect(Builtin)
        self.ctx.load_dialect(Func)
        for name, factory in get_all_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self):
        from sparselift.passes import get_all_passes

        for name, factory in get_all_passes().items():
            self.register_pass(name, factory)

    def register_all_targets(self):
        from xdsl.printer import Printer

        from sparselift.codegen import get_all_targets

        def emit_mlir(module, output):
            Printer(stream=output, print_generic_format=self.args.print_op_generic).print_op(module)
            output.write("\n")

        self.available_targets["mlir"] = emit_mlir
        self.available_targets.update(get_all_targets())

    def register_all_arguments(self, arg_parser):
        super().register_all_arguments(arg_parser)
        arg_parser.add_argument(TRACEBACK_FLAG, action="store_true", help=TRACEBACK_HELP)

    def register_all_frontends(self):
        # Ops remember where they start in the input, for the location of a verifier error.
        self.locations = {}
        self.source_lines: dict[int, str] = {}  # line number in the input -> its text
        self._line_offset = 0

        def parse_mlir(io):
            text = io.read()
            lines = text.decode("utf-8", "replace").split("\n") if isinstance(text, bytes) else text.split("\n")
            self.source_lines.update((self._line_offset + i + 1, line) for i, line in enumerate(lines))
            parser = opt_diagnostics.LocatingParser(
                self.ctx, text, self.get_input_name(), self.locations, self._line_offset
            )
            return parser.parse_module(not self.args.no_implicit_module)

        self.available_frontends["mlir"] = parse_mlir

    def parse_chunk(self, chunk, file_extension, start_offset=0):
        self._line_offset = start_offset  # --split-input-file: the chunk's first line in the file
        return super().parse_chunk(chunk, file_extension, start_offset)

    def get_input_stream(self):
        path = self.args.input_file
        if path is not None and not os.path.exists(path):
            raise ToolError(f"{opt_diagnostics.PROG}: error: no such file: {path}")
        return super().get_input_stream()

    def setup_pipeline(self):
        opt_diagnostics.check_pipeline(self.args.passes, self.available_passes)
        super().setup_pipeline()
        verify = self.pipeline.callback

        def callback(previous_pass, module, next_pass):
            # Which pass produced the IR being verified, should it not verify; which one runs next.
            self._verifying_after = previous_pass.name if previous_pass is not None else ""
            verify(previous_pass, module, next_pass)
            self._verifying_after = None
            self._running = next_pass.name if next_pass is not None else None

        self.pipeline = dataclasses.replace(self.pipeline, callback=callback)

    def apply_passes(self, prog):
        self._verifying_after = self._running = None
        try:
            super().apply_passes(prog)
        except VerifyException as e:
            if isinstance(e, ToolError):
                raise
            if self._verifying_after is None:  # raised by the pass itself (e.g. a bad option value)
                raise opt_diagnostics.LocatedVerifyError(
                    f"{opt_diagnostics.PROG}: error: pass '{self._running}': {e}"
                ) from e
            raise opt_diagnostics.verify_error(
                e, prog, self.locations, self.source_lines, self._verifying_after or None
            ) from e


def _description() -> str:
    from sparselift.ir import get_all_dialects
    from sparselift.passes import get_all_passes

    return (
        "SparseLift modular optimizer driver. "
        f"Dialects: {', '.join(get_all_dialects())}. "
        f"Passes: {', '.join(get_all_passes())}."
    )


def main(args: Sequence[str] | None = None) -> int:
    """Run the tool; on an error print one message (see errors.py) and return 1."""
    argv = sys.argv[1:] if args is None else list(args)
    try:
        SparseLiftOptMain(description=_description(), args=argv).run()
    except ParseError as e:
        error = opt_diagnostics.parse_error(e)
        error.__cause__ = e  # what --traceback shows
        return report(opt_diagnostics.PROG, error, traceback_requested(argv))
    except (Exception, ArgSpecParseError) as e:  # noqa: BLE001 - every error is one message (a traceback on request)
        return report(opt_diagnostics.PROG, e, traceback_requested(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
