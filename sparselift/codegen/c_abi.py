"""The C kernels' interface, stated once: every entry point's name, return type and arguments, and its records.

`sparselift.codegen.ckernels` renders the C definitions' prototypes from `ENTRY_POINTS` and the
record types (`STRUCTS`: `sl_tables`, a call's tables; `sl_bags`, its routed bags, the C side
of `kernel_args.RoutedBags`) from their fields; `sparselift.runtime.kernel_library` derives
the ctypes `argtypes` / `restype` and `ctypes.Structure`s from the same records;
`ABI_VERSION` is a hash of their canonical text, compiled into `sl_abi_version()` and checked
when a library is loaded, so a cached `.so` built against another interface is never called.
Torch-free (no ctypes either: the C type names are the description).
"""

from __future__ import annotations

import hashlib

import attrs

__all__ = ["Arg", "EntryPoint", "ENTRY_POINTS", "Struct", "STRUCTS", "ABI_VERSION", "abi_text", "entry_point"]


@attrs.frozen
class Arg:
    """One parameter: its name and its C type as the prototype spells it (`const int32_t*`)."""

    name: str
    ctype: str


@attrs.frozen
class EntryPoint:
    """One exported C function."""

    name: str
    restype: str  # "int" | "void"
    args: tuple[Arg, ...] = ()

    def signature(self) -> str:
        """The canonical one-line prototype (what `ABI_VERSION` hashes)."""
        params = ", ".join(f"{a.ctype} {a.name}" for a in self.args) or "void"
        return f"{self.restype} {self.name}({params})"

    def prototype(self, width: int = 118) -> str:
        """The prototype wrapped at `width` columns, continuation lines aligned after `(`."""
        head = f"{self.restype} {self.name}("
        params = [f"{a.ctype} {a.name}" for a in self.args] or ["void"]
        lines, line = [], head
        for i, p in enumerate(params):
            piece = p + ("," if i + 1 < len(params) else ")")
            if line != head and len(line) + 1 + len(piece) > width:
                lines.append(line)
                line = " " * len(head) + piece
            else:
                line = line + ("" if line == head else " ") + piece
        lines.append(line)
        return "\n".join(lines)


def _args(text: str) -> tuple[Arg, ...]:
    """`"int ntab, const int32_t* fn"` -> (Arg("ntab", "int"), Arg("fn", "const int32_t*"))."""
    out = []
    for part in text.split(","):
        ctype, _, name = part.strip().rpartition(" ")
        out.append(Arg(name, ctype))
    return tuple(out)


@attrs.frozen
class Struct:
    """A record the entry points take by pointer: its C name and fields, in order."""

    name: str
    fields: tuple[Arg, ...]

    def definition(self) -> str:
        body = "".join(f"  {f.ctype} {f.name};\n" for f in self.fields)
        return f"typedef struct {self.name} {{\n{body}}} {self.name};"


STRUCTS: tuple[Struct, ...] = (
    # A multi-table call's tables: per table t, its kernel number fn[t], storage W[t] (rows[t]
    # rows) and slots slots[slot_off[t] .. slot_off[t + 1]).
    Struct(
        "sl_tables",
        _args(
            "int64_t ntab, const int32_t* fn, void* const* W, const int64_t* rows, const int32_t* slot_off, "
            "const int32_t* slots"
        ),
    ),
    # The routed bags: lengths (nbags: S segments of F features x B samples), the ids (i64 when
    # idx64, else i32) and the optional per-id weights.
    Struct(
        "sl_bags",
        _args(
            "const int32_t* lengths, int64_t nbags, const void* idx, int64_t idx64, int64_t nidx, const float* wts, "
            "int64_t F, int64_t B"
        ),
    ),
)


ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint(
        "sl_forward",
        "int",
        _args(
            "const sl_tables* tables, void* const* out, const int64_t* ldo, const sl_bags* bags, int nthreads, "
            "int64_t* err"
        ),
    ),
    EntryPoint(
        "sl_update",
        "int",
        _args(
            "const sl_tables* tables, float* const* state, const float* const* grad, const int64_t* ldg, "
            "const sl_bags* bags, const sl_hyper* hp, float gscale, int nthreads, int64_t* err"
        ),
    ),
    EntryPoint(
        "sl_grad",
        "int",
        _args(
            "const sl_tables* tables, const float* const* slot_grad, const int64_t* slot_ldg, const sl_bags* bags, "
            "float gscale, int64_t* err"
        ),
    ),
    EntryPoint(
        "sl_concat_ids",
        "int",
        _args(
            "int n, const void* const* src, const int32_t* src64, const int64_t* counts, const int64_t* rows, "
            "void* dst, int dst64, int64_t* err"
        ),
    ),
    EntryPoint(
        "sl_route_row_wise",
        "int",
        _args(
            "int64_t nfeat, const void* const* src, const int32_t* src64, const int64_t* counts, "
            "const int32_t* lengths, int64_t batch, int64_t world, const int64_t* bounds, const int64_t* owners, "
            "int32_t* out_lengths, void* out, int dst64, int64_t* splits, int64_t* err"
        ),
    ),
    EntryPoint("sl_copy_blocks", "void", _args("int64_t n, const int64_t* desc")),
    EntryPoint(
        "sl_compact_rows",
        "int",
        _args(
            "int64_t nblocks, const int64_t* blocks, int64_t batch, const int32_t* lengths, int64_t row_bytes, "
            "void* out, int64_t nrows, int64_t* err"
        ),
    ),
    EntryPoint(
        "sl_expand_rows",
        "int",
        _args(
            "int64_t nseg, int64_t nbags, const int32_t* lengths, const void* rows, int64_t nrows, "
            "int64_t row_bytes, void* out, int64_t* err"
        ),
    ),
    EntryPoint(
        "sl_unique_ids",
        "int",
        _args(
            "int64_t n, const void* ids, int idx64, int64_t nseg, const int64_t* splits, void* distinct, "
            "int64_t* counts, int64_t* inverse, int64_t* ndistinct, int64_t* err"
        ),
    ),
    EntryPoint(
        "sl_sum_rows",
        "int",
        _args("int64_t n, const float* rows, const int64_t* inverse, int64_t m, int64_t dim, float* out, int64_t* err"),
    ),
    EntryPoint("sl_abi_version", "int"),
    EntryPoint("sl_have_openmp", "int"),
)


def entry_point(name: str) -> EntryPoint:
    return next(e for e in ENTRY_POINTS if e.name == name)


def abi_text() -> str:
    """The canonical text of the interface: the records' definitions, then one signature per
    line, in `ENTRY_POINTS` order."""
    return "\n".join([*(t.definition() for t in STRUCTS), *(e.signature() for e in ENTRY_POINTS)]) + "\n"


# A positive C int, stable across runs and machines (sha256, not `hash()`).
ABI_VERSION = int.from_bytes(hashlib.sha256(abi_text().encode()).digest()[:4], "big") & 0x7FFFFFFF
