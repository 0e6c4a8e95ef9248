"""SparseLift's IR: the `sparse`, `coll` and `sched` dialects.

Dialects are registered lazily (name -> factory) so that tools only import what a module uses.
Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.ir import Dialect


def get_all_dialects() -> dict[str, Callable[[], Dialect]]:
    """Factories for every SparseLift dialect, keyed by dialect name."""

    def get_sparse() -> Dialect:
        from sparselift.ir.sparse import Sparse

        return Sparse

    def get_coll() -> Dialect:
        from sparselift.ir.coll import Coll

        return Coll

    def get_sched() -> Dialect:
        from sparselift.ir.sched import Sched

        return Sched

    return {"sparse": get_sparse, "coll": get_coll, "sched": get_sched}


def make_context(allow_unregistered: bool = False):
    """An xDSL Context with the builtin, func and SparseLift dialects registered."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    ctx = Context(allow_unregistered=allow_unregistered)
    ctx.load_dialect(Builtin)
    ctx.load_dialect(Func)
    for name, factory in get_all_dialects().items():
        ctx.register_dialect(name, factory)
    return ctx
