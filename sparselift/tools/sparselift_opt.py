"""`sparselift-opt`: parse SparseLift IR, run a pass pipeline, print IR or emit a target.

A thin `xDSLOptMain` subclass: it registers only builtin/func plus our dialects, passes and
targets (all lazily), so start-up never imports torch.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from xdsl.xdsl_opt_main import xDSLOptMain

from sparselift import __version__


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


def _description() -> str:
    from sparselift.ir import get_all_dialects
    from sparselift.passes import get_all_passes

    return (
        "SparseLift modular optimizer driver. "
        f"Dialects: {', '.join(get_all_dialects())}. "
        f"Passes: {', '.join(get_all_passes())}."
    )


def main(args: Sequence[str] | None = None) -> None:
    SparseLiftOptMain(description=_description(), args=args).run()


if __name__ == "__main__":
    main(sys.argv[1:])
