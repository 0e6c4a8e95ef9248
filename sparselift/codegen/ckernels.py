"""C source generator for the CPU sparse kernels: `TableSpec`s in, one C translation unit out.

Pure Python (no torch here). The C lives in Jinja2 templates under `sparselift/codegen/c/`
(`prelude.h`: types, loads/stores, checks, the radix sort; `forward.c.j2`, `grad.c.j2`,
`update_sgd.c.j2`, `update_sorted.c.j2`: one kernel per spec; `entry.c.j2`: the entry points;
`library.c.j2`: the whole unit); the helpers here compute each kernel's template variables.
`generate_source(specs)` emits, for every `TableSpec`:

- a pooled-lookup forward specialized to the table's `dim`, storage dtype (`f32`, `f16`,
  `bf16`; accumulation is always f32), index dtype (`i32` / `i64`), pooling (`sum` / `mean`)
  and weightedness, and the matching whole-table gradient (for replicated tables);
- when the spec names an optimizer (any `sparselift.optim_rules.OptimizerKind`), a fused
  backward + optimizer update that never builds a dense or COO gradient, its optimizer's
  statements rendered from its rule (`_rule_code`). With SGD on f32 tables: one
  fused `w + (-lr) * g` per occurrence in the reference's order (what `torch.optim.SGD` does
  with a sparse gradient; no sort needed). Otherwise the ids are sorted by row with a stable
  LSD radix sort on `(row << 32 | position)` keys and each unique row is loaded once, takes its
  occurrences in the reference's order (SGD on 16-bit storage: the same fused steps in f32;
  any other optimizer: their sum, then its rule) and is stored once;

plus the entry points shared by all specs, their prototypes rendered from
`sparselift.codegen.c_abi.ENTRY_POINTS` (the one description of the interface):

- `sl_forward(...)`: a multi-table forward (one call over every table of a rank; per-table
  pointers, row counts, slots and kernel numbers passed as arrays);
- `sl_update(...)`: the multi-table backward + update;
- `sl_grad(...)`: replicated tables' whole-table gradients, every occurrence added in the
  reference's order straight into a zeroed f32 buffer (no sort, no COO gradient);
- `sl_concat_ids(...)`: route's concatenation of several features' ids, each checked against
  its table's rows in the same pass;
- `sl_route_row_wise(...)`: route's bucketing of row-wise features' ids by row range (a
  counting sort, each id checked in the same pass);
- `sl_copy_blocks(...)`: strided 2-D block copies, the body of `pack` / `unpack`;
- `sl_expand_rows(...)`: an unpooled table's received rows spread to their one-id bags, zeros
  for the empty ones, each bag's row from the segment that holds it (the body of `expand_rows`);
- `sl_compact_rows(...)`: the reverse for the gradients, the non-empty bags' rows of strided
  blocks packed back to back (the body of `compact_rows`);
- `sl_abi_version()` (`c_abi.ABI_VERSION`, checked at load) and `sl_have_openmp()`.

Pooled outputs and pooled gradients may have rows further apart than their width (`ldo` /
`ldg`): a table's column block of an exchange buffer is written or read in place.

The multi-table entry points, `sl_concat_ids` and `sl_route_row_wise` validate what they read (non-negative bag
lengths summing to the number of ids, every id of a table's slots inside `[0, rows)`; the
callers check `sl_copy_blocks`' descriptors) before they write anything, and report the
first problem through `err[0..3]` = (code, position, value, table) instead of touching memory
out of bounds. The geometry is the reference's (`sparselift/runtime/reference.py`): `lengths`
lists `S` segments of `F` features x `B` samples; slot `k` of a table reads feature
`slots[k]`; output row `s * B + b`, columns `[k * dim, (k + 1) * dim)`.

Floating-point contraction is disabled at build time (`-ffp-contract=off`; the SGD step's fused
multiply-add is explicit) and sums run in the reference's order, so f32 results match the
reference, and SGD tables `torch.optim.SGD`, to the last bit except for the row-wise Adagrad
mean of squares (a different reduction order).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import jinja2

from sparselift.codegen.c_abi import ABI_VERSION, ENTRY_POINTS, STRUCTS
from sparselift.optim_rules import (
    ARGUMENTS,
    OptimizerKind,
    OptimizerRule,
    StateScope,
    c_float,
    render_expression,
    rule_for,
)

__all__ = [
    "ABI_VERSION",
    "TableSpec",
    "ERROR_CODES",
    "STORAGE_DTYPES",
    "INDEX_DTYPES",
    "POOLINGS",
    "OPTIMIZERS",
    "generate_source",
    "source_hash",
]

STORAGE_DTYPES = ("f32", "f16", "bf16")
INDEX_DTYPES = ("i32", "i64")
POOLINGS = ("sum", "mean")
OPTIMIZERS = tuple(str(k) for k in OptimizerKind)

# err[0] values written by the C entry points.
ERROR_CODES = {
    1: "negative bag length",
    2: "bag lengths do not sum to the number of ids",
    3: "id out of range",
    4: "out of memory",
    5: "unknown kernel number",
    6: "too many ids for one table (positions must fit in 32 bits)",
    7: "slot outside the features of a segment",
}

# Ids looked ahead for software prefetching of table rows (forward) and of rows to update.
FORWARD_PREFETCH = 24
UPDATE_PREFETCH = 16
# ... and how far ahead they are first prefetched into L2 (hides the page walk and DRAM latency).
FORWARD_PREFETCH_L2 = 128
UPDATE_PREFETCH_L2 = 48
# Widest radix digit of the update's sort (a 2^bits-entry histogram of uint32).
RADIX_BITS = 18


@dataclass(frozen=True)
class TableSpec:
    """What one table's kernels are specialized to."""

    dim: int
    dtype: str = "f32"  # storage: f32 | f16 | bf16 (accumulation in f32)
    index_dtype: str = "i64"  # i32 | i64
    pooling: str = "sum"  # sum | mean
    weighted: bool = False
    optimizer: str | None = None  # None (forward only) | an `OptimizerKind`

    def __post_init__(self) -> None:
        if not isinstance(self.dim, int) or self.dim <= 0 or self.dim > 4096:
            raise ValueError(f"dim must be an int in [1, 4096], got {self.dim!r}")
        if self.dtype not in STORAGE_DTYPES:
            raise ValueError(f"dtype must be one of {STORAGE_DTYPES}, got {self.dtype!r}")
        if self.index_dtype not in INDEX_DTYPES:
            raise ValueError(f"index_dtype must be one of {INDEX_DTYPES}, got {self.index_dtype!r}")
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {self.pooling!r}")
        if self.optimizer is not None and self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be None or one of {OPTIMIZERS}, got {self.optimizer!r}")

    @property
    def forward_key(self) -> TableSpec:
        """The spec of the forward kernel alone (the optimizer does not change it)."""
        return TableSpec(self.dim, self.dtype, self.index_dtype, self.pooling, self.weighted, None)

    @property
    def tag(self) -> str:
        w = "w" if self.weighted else "u"
        base = f"d{self.dim}_{self.dtype}_{self.index_dtype}_{self.pooling}_{w}"
        return base if self.optimizer is None else f"{base}_{self.optimizer}"


# ---- rendering ------------------------------------------------------------------------------

# The C sources live in sparselift/codegen/c/ (package data). Block tags on their own lines
# leave no trace (trim/lstrip), so a template reads like the C it emits.
_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("sparselift.codegen", "c"),
    undefined=jinja2.StrictUndefined,
    autoescape=False,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
)

_TYPES = {"f32": "float", "f16": "f16_t", "bf16": "bf16_t"}
_ITYPES = {"i32": "int32_t", "i64": "int64_t"}


def _chunks(dim: int, widest: int = 16) -> list[tuple[int, int]]:
    """(offset, width) pieces of a row: 16-wide vectors (two 8-wide ones without AVX-512), then
    an 8-wide one, a 4-wide one, then scalars."""
    out, off = [], 0
    while widest >= 16 and dim - off >= 16:
        out.append((off, 16))
        off += 16
    while dim - off >= 8:
        out.append((off, 8))
        off += 8
    if dim - off >= 4:
        out.append((off, 4))
        off += 4
    while off < dim:
        out.append((off, 1))
        off += 1
    return out


def _vt(width: int) -> str:
    return {16: "v16f", 8: "v8f", 4: "v4f", 1: "float"}[width]


def _zero(width: int) -> str:
    return "0.0f" if width == 1 else f"({_vt(width)}){{0}}"


_TEMPLATES.globals.update(vt=_vt, zero=_zero)


def _render(template: str, **context) -> str:
    """One kernel template rendered, without its file's final newline."""
    text = _TEMPLATES.get_template(template).render(**context)
    return text[:-1] if text.endswith("\n") else text


def _cache_lines(nbytes: int) -> int:
    """64-byte cache lines a row of `nbytes` spans (what the prefetches touch)."""
    return max(1, (nbytes + 63) // 64)


def _kernel_context(spec: TableSpec, widest: int) -> dict:
    """What every kernel template of `spec` reads: its tag, row width `d`, storage dtype `dt`
    and C types, the row's vector pieces and cache lines."""
    return {
        "tag": spec.tag,
        "d": spec.dim,
        "dt": spec.dtype,
        "wtype": _TYPES[spec.dtype],
        "itype": _ITYPES[spec.index_dtype],
        "chunks": _chunks(spec.dim, widest),
        "lines": _cache_lines(spec.dim * (4 if spec.dtype == "f32" else 2)),
    }


def _forward_fn(spec: TableSpec, prefetch: int = FORWARD_PREFETCH, widest: int = 16, prefetch_l2: int = 0) -> str:
    """The pooled lookup of one spec (`sl_fwd_fn`): bags split evenly among OpenMP threads,
    rows prefetched `prefetch` ids ahead (and into L2 `prefetch_l2` ids ahead)."""
    if spec.weighted and spec.pooling == "mean":
        scale_decl, scale_id = "const float inv = (float)(n > 0 ? n : 1);", "const float sc = wts[p] / inv;"
    elif spec.weighted:
        scale_decl, scale_id = "", "const float sc = wts[p];"
    elif spec.pooling == "mean":
        scale_decl, scale_id = "const float sc = 1.0f / (float)(n > 0 ? n : 1);", ""
    else:
        scale_decl, scale_id = "", ""
    mul = " * sc" if (spec.weighted or spec.pooling == "mean") else ""
    return _render(
        "forward.c.j2",
        **_kernel_context(spec, widest),
        prefetch=prefetch,
        prefetch_l2=prefetch_l2,
        scale_decl=scale_decl,
        scale_id=scale_id,
        mul=mul,
    )


def _update_fn(spec: TableSpec, prefetch: int = UPDATE_PREFETCH, widest: int = 16, prefetch_l2: int = 0) -> str:
    """The fused backward + optimizer update of one spec (`sl_upd_fn`). SGD on f32 tables needs
    no sort (`update_sgd.c.j2`); 16-bit SGD and every other optimizer sort the ids by row
    (`update_sorted.c.j2`), the latter running their rule's statements on each row's summed
    gradient. Rows to update are prefetched `prefetch` ids ahead."""
    scale, mul_s = _occurrence_scale(spec)
    context = {**_kernel_context(spec, widest), "prefetch": prefetch, "scale": scale, "mul_s": mul_s}
    rule = rule_for(spec.optimizer or "sgd")
    if not rule.summed and spec.dtype == "f32":
        return _render("update_sgd.c.j2", **context)
    row_code, element_code = _rule_code(rule, spec.dim) if rule.summed else ("", "")
    return _render(
        "update_sorted.c.j2",
        **context,
        prefetch_l2=prefetch_l2,
        per_id=spec.weighted,
        summed=rule.summed,
        mean_g2="mean_g2" in rule.names_read(),
        row_code=row_code,
        element_code=element_code,
        grad_lines=_cache_lines(spec.dim * 4),
    )


def _rounded(double_source: str) -> str:
    """A run-time value computed in double precision, then rounded to f32 once (as the reference)."""
    return f"((float){double_source})"


def _rule_code(rule: OptimizerRule, dim: int) -> tuple[str, str]:
    """C of a rule's row statements (state loads, statements, state stores; after `row` and
    `mean_g2`) and of its element statements (inside the loop over `c`, after `g` and `w`)."""
    hyper = {name: f"hp->{name}" for name in ARGUMENTS}

    def block(statements, scope: StateScope, indent: str, declared: set[str]) -> str:
        # Each state whole, one after the other (`OptimizerRule.state_offset`).
        where = {
            s.name: f"state[(int64_t){rule.state_offset(s.name, dim)} * rows + row * {s.width(dim)}"
            f"{' + c' if scope == StateScope.ELEMENT else ''}]"
            for s in rule.states
            if s.scope == scope
        }
        lines = [f"{indent}float {name} = {ref};" for name, ref in where.items()]
        declared |= set(where)
        for target, expr in statements:
            c_expr = render_expression(expr, lambda n: hyper.get(n, n), "sqrtf", c_float, fold=_rounded)
            lines.append(f"{indent}{'' if target in declared else 'float '}{target} = {c_expr};")
            declared.add(target)
        assigned = {t for t, _ in statements}
        lines += [f"{indent}{ref} = {name};" for name, ref in where.items() if name in assigned]
        return "\n".join(lines)

    declared = {"g", "w", "mean_g2"}
    row = block(rule.row, StateScope.ROW, "    ", declared)
    element = block(rule.element, StateScope.ELEMENT, "      ", set(declared))
    return row, element


def _occurrence_scale(spec: TableSpec) -> tuple[str, str]:
    """(C expression of an occurrence's gradient scale `s`, the `* s` to apply it or "" when it is
    1): its weight, over its bag's length for mean pooling. Needs `p` (the id) and `n` (bag length)."""
    if spec.weighted and spec.pooling == "mean":
        scale = "wts[p] / (float)(n > 0 ? n : 1)"
    elif spec.weighted:
        scale = "wts[p]"
    elif spec.pooling == "mean":
        scale = "1.0f / (float)(n > 0 ? n : 1)"
    else:
        scale = "1.0f"
    return scale, "" if (not spec.weighted and spec.pooling == "sum") else " * s"  # x * 1.0f == x


def _grad_fn(spec: TableSpec, widest: int = 16) -> str:
    """Whole-table gradient of a (replicated) table: every occurrence's pooled-gradient row added
    straight into a zeroed f32 buffer, in the reference's order. Each row thus sums its
    occurrences in the same order as the sorted update kernel, without the sort."""
    scale, mul_s = _occurrence_scale(spec)
    return _render("grad.c.j2", **_kernel_context(spec, widest), scale=scale, mul_s=mul_s)


def _dedupe(specs: Iterable[TableSpec]) -> tuple[list[TableSpec], list[TableSpec]]:
    """(forward specs, update specs), sorted and unique."""
    specs = list(specs)
    fwd = sorted({s.forward_key for s in specs}, key=lambda s: s.tag)
    upd = sorted({s for s in specs if s.optimizer is not None}, key=lambda s: s.tag)
    return fwd, upd


def kernel_numbers(specs: Iterable[TableSpec]) -> tuple[dict[TableSpec, int], dict[TableSpec, int]]:
    """The index of each forward / update kernel in the library's `SL_FWD` / `SL_UPD` tables."""
    fwd, upd = _dedupe(specs)
    return {s: i for i, s in enumerate(fwd)}, {s: i for i, s in enumerate(upd)}


def generate_source(
    specs: Iterable[TableSpec],
    *,
    have_f16: bool = True,
    forward_prefetch: int = FORWARD_PREFETCH,
    update_prefetch: int = UPDATE_PREFETCH,
    radix_bits: int = RADIX_BITS,
    vector_width: int = 16,
    forward_prefetch_l2: int = FORWARD_PREFETCH_L2,
    update_prefetch_l2: int = UPDATE_PREFETCH_L2,
) -> str:
    """One C translation unit with the kernels of `specs` and the generic entry points.

    `forward_prefetch` / `update_prefetch`: how many ids ahead rows are prefetched (0: none);
    `radix_bits`: the widest digit of the update's radix sort; `vector_width`: the widest
    accumulator vector in floats (16 or 8).
    """
    fwd, upd = _dedupe(specs)
    if not have_f16 and any(s.dtype == "f16" for s in fwd):
        raise ValueError("f16 storage needs a compiler with _Float16 support")
    kernels = [
        f"/* forward: {s.tag} */\n" + _forward_fn(s, forward_prefetch, vector_width, forward_prefetch_l2) for s in fwd
    ]
    kernels += [f"/* whole-table gradient: {s.tag} */\n" + _grad_fn(s, vector_width) for s in fwd]
    kernels += [
        f"/* backward + {s.optimizer}: {s.tag} */\n" + _update_fn(s, update_prefetch, vector_width, update_prefetch_l2)
        for s in upd
    ]
    return _TEMPLATES.get_template("library.c.j2").render(
        abi_version=ABI_VERSION,
        radix_bits=int(radix_bits),
        have_f16=have_f16,
        kernels=kernels,
        forward_names=[f"fwd_{s.tag}" for s in fwd],
        grad_names=[f"grd_{s.tag}" for s in fwd],
        update_names=[f"upd_{s.tag}" for s in upd],
        prototypes={e.name: e.prototype() for e in ENTRY_POINTS},
        structs=[t.definition() for t in STRUCTS],
    )


def source_hash(source: str, extra: Sequence[str] = ()) -> str:
    h = hashlib.sha256(source.encode())
    for e in extra:
        h.update(b"\0" + e.encode())
    return h.hexdigest()[:24]
