"""C source generator for the CPU sparse kernels (pure Python: no torch here).

`generate_source(specs)` emits one C translation unit holding, for every `TableSpec`:

- a pooled-lookup forward specialized to the table's `dim`, storage dtype (`f32`, `f16`,
  `bf16`; accumulation is always f32), index dtype (`i32` / `i64`), pooling (`sum` / `mean`)
  and weightedness;
- when the spec names an optimizer, a fused backward + optimizer update (`sgd` or
  `rowwise_adagrad`) that never builds a dense or COO gradient: the table's ids are sorted by
  with SGD on f32 tables, one fused `w + (-lr) * g` per occurrence in the reference's order
  (what `torch.optim.SGD` does with a sparse gradient; no sort needed); otherwise the ids are
  sorted by row with a stable LSD radix sort on `(row << 32 | position)` keys and each unique
  row is loaded once, takes its occurrences in the reference's order (SGD on 16-bit storage:
  the same fused steps in f32; row-wise Adagrad: their sum) and is stored once.

plus three generic entry points shared by all specs:

- `sl_forward(...)`: a multi-table forward (one call over every table of a rank; per-table
  pointers, row counts, slots and kernel numbers passed as arrays);
- `sl_update(...)`: the multi-table backward + update;
- `sl_grad(...)`: replicated tables' whole-table gradients, every occurrence added in the
  reference's order straight into a zeroed f32 buffer (no sort, no COO gradient);
- `sl_concat_ids(...)`: route's concatenation of several features' ids, each checked against
  its table's rows in the same pass;
- `sl_copy_blocks(...)`: strided 2-D block copies, the body of `pack` / `unpack`.

Pooled outputs and pooled gradients may have rows further apart than their width (`ldo` /
`ldg`): a table's column block of an exchange buffer is written or read in place.

Every entry point validates what it reads (non-negative bag lengths summing to the number of
ids, every id of a table's slots inside `[0, rows)`) before it writes anything, and reports the
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

__all__ = [
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
OPTIMIZERS = ("sgd", "rowwise_adagrad")

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
    optimizer: str | None = None  # None (forward only) | sgd | rowwise_adagrad

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


# ---- C building blocks --------------------------------------------------------------------

_PRELUDE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef int32_t v4i __attribute__((vector_size(16)));
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint16_t v4h __attribute__((vector_size(8)));
typedef uint16_t bf16_t;
#define SL_HAVE_F16 HAVE_F16_FLAG
#if SL_HAVE_F16
typedef _Float16 f16_t;
typedef _Float16 v16hf __attribute__((vector_size(32)));
typedef _Float16 v8hf __attribute__((vector_size(16)));
typedef _Float16 v4hf __attribute__((vector_size(8)));
#else
typedef uint16_t f16_t;
#endif

#define PF(p) __builtin_prefetch((const void*)(p), 0, 3)
#define PFW(p) __builtin_prefetch((const void*)(p), 1, 3)

/* a * b + c with one rounding per lane: the SGD step torch applies per occurrence (`index_add_`
   with alpha is a fused multiply-add). Vector intrinsics where the target has FMA: GCC does not
   vectorize lane-wise fmaf, it emits one scalar FMA per lane. */
static inline float sl_fma1(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
#if defined(__FMA__) || defined(__AVX512F__)
#include <immintrin.h>
static inline v4f sl_fma4(v4f a, float b, v4f c) { return (v4f)_mm_fmadd_ps((__m128)a, _mm_set1_ps(b), (__m128)c); }
static inline v8f sl_fma8(v8f a, float b, v8f c) { return (v8f)_mm256_fmadd_ps((__m256)a, _mm256_set1_ps(b), (__m256)c); }
#else
static inline v4f sl_fma4(v4f a, float b, v4f c) { for (int i = 0; i < 4; i++) c[i] = __builtin_fmaf(a[i], b, c[i]); return c; }
static inline v8f sl_fma8(v8f a, float b, v8f c) { for (int i = 0; i < 8; i++) c[i] = __builtin_fmaf(a[i], b, c[i]); return c; }
#endif
#if defined(__AVX512F__)
static inline v16f sl_fma16(v16f a, float b, v16f c) { return (v16f)_mm512_fmadd_ps((__m512)a, _mm512_set1_ps(b), (__m512)c); }
#else
static inline v16f sl_fma16(v16f a, float b, v16f c) {
  v8f lo = sl_fma8(__builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7), b, __builtin_shufflevector(c, c, 0, 1, 2, 3, 4, 5, 6, 7));
  v8f hi = sl_fma8(__builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15), b, __builtin_shufflevector(c, c, 8, 9, 10, 11, 12, 13, 14, 15));
  return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
#endif

/* ---- f32 ---- */
static inline v16f ld16_f32(const float* p) { v16f v; memcpy(&v, p, 64); return v; }
static inline void st16_f32(float* p, v16f v) { memcpy(p, &v, 64); }
static inline v8f ld8_f32(const float* p) { v8f v; memcpy(&v, p, 32); return v; }
static inline v4f ld4_f32(const float* p) { v4f v; memcpy(&v, p, 16); return v; }
static inline float ld1_f32(const float* p) { return *p; }
static inline void st8_f32(float* p, v8f v) { memcpy(p, &v, 32); }
static inline void st4_f32(float* p, v4f v) { memcpy(p, &v, 16); }
static inline void st1_f32(float* p, float v) { *p = v; }

/* ---- bf16 (round to nearest even, NaN -> quiet NaN, like torch) ---- */
static inline v16f ld16_bf16(const bf16_t* p) {
  v16h h; memcpy(&h, p, 32); v16u u = __builtin_convertvector(h, v16u) << 16; v16f f; memcpy(&f, &u, 64); return f;
}
static inline void st16_bf16(bf16_t* p, v16f f) {
  v16u u; memcpy(&u, &f, 64);
  v16u r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  v16u nan = (v16u)(f != f);
  r = (r & ~nan) | (0x7fc0u & nan);
  v16h h = __builtin_convertvector(r, v16h); memcpy(p, &h, 32);
}
static inline v8f ld8_bf16(const bf16_t* p) {
  v8h h; memcpy(&h, p, 16); v8u u = __builtin_convertvector(h, v8u) << 16; v8f f; memcpy(&f, &u, 32); return f;
}
static inline v4f ld4_bf16(const bf16_t* p) {
  v4h h; memcpy(&h, p, 8); v4u u = __builtin_convertvector(h, v4u) << 16; v4f f; memcpy(&f, &u, 16); return f;
}
static inline float ld1_bf16(const bf16_t* p) { uint32_t u = (uint32_t)(*p) << 16; float f; memcpy(&f, &u, 4); return f; }
static inline void st8_bf16(bf16_t* p, v8f f) {
  v8u u; memcpy(&u, &f, 32);
  v8u r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  v8u nan = (v8u)(f != f);
  r = (r & ~nan) | (0x7fc0u & nan);
  v8h h = __builtin_convertvector(r, v8h); memcpy(p, &h, 16);
}
static inline void st4_bf16(bf16_t* p, v4f f) {
  v4u u; memcpy(&u, &f, 16);
  v4u r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  v4u nan = (v4u)(f != f);
  r = (r & ~nan) | (0x7fc0u & nan);
  v4h h = __builtin_convertvector(r, v4h); memcpy(p, &h, 8);
}
static inline void st1_bf16(bf16_t* p, float f) {
  uint32_t u; memcpy(&u, &f, 4);
  *p = (f != f) ? (bf16_t)0x7fc0u : (bf16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#if SL_HAVE_F16
/* ---- f16 (IEEE half, round to nearest even) ---- */
static inline v16f ld16_f16(const f16_t* p) { v16hf h; memcpy(&h, p, 32); return __builtin_convertvector(h, v16f); }
static inline void st16_f16(f16_t* p, v16f f) { v16hf h = __builtin_convertvector(f, v16hf); memcpy(p, &h, 32); }
static inline v8f ld8_f16(const f16_t* p) { v8hf h; memcpy(&h, p, 16); return __builtin_convertvector(h, v8f); }
static inline v4f ld4_f16(const f16_t* p) { v4hf h; memcpy(&h, p, 8); return __builtin_convertvector(h, v4f); }
static inline float ld1_f16(const f16_t* p) { return (float)*p; }
static inline void st8_f16(f16_t* p, v8f f) { v8hf h = __builtin_convertvector(f, v8hf); memcpy(p, &h, 16); }
static inline void st4_f16(f16_t* p, v4f f) { v4hf h = __builtin_convertvector(f, v4hf); memcpy(p, &h, 8); }
static inline void st1_f16(f16_t* p, float f) { *p = (f16_t)f; }
#endif

/* Bag start offsets (nbags + 1 entries) from the lengths; checks them first. */
static int sl_offsets(const int32_t* lengths, int64_t nbags, int64_t nidx, int64_t* offs, int64_t* err) {
  int64_t acc = 0;
  offs[0] = 0;
  for (int64_t i = 0; i < nbags; i++) {
    int32_t l = lengths[i];
    if (l < 0) { err[0] = 1; err[1] = i; err[2] = l; return 1; }
    acc += l;
    offs[i + 1] = acc;
  }
  if (acc != nidx) { err[0] = 2; err[1] = nbags; err[2] = acc; return 2; }
  return 0;
}

/* Every id a table's slots read must lie in [0, rows). */
#define SL_CHECK_IDS(NAME, IT)                                                                 \
static int NAME(const IT* idx, const int64_t* offs, int64_t rows, const int32_t* slots,         \
                int nslots, int64_t F, int64_t B, int64_t S, int64_t* err) {                    \
  for (int k = 0; k < nslots; k++)                                                              \
    if (slots[k] < 0 || slots[k] >= F) { err[0] = 7; err[1] = k; err[2] = slots[k]; return 7; }  \
  for (int64_t s = 0; s < S; s++)                                                               \
    for (int k = 0; k < nslots; k++) {                                                          \
      int64_t bag0 = (s * F + slots[k]) * B;                                                    \
      int64_t a = offs[bag0], e = offs[bag0 + B];                                               \
      uint64_t bad = 0;                                                                         \
      for (int64_t p = a; p < e; p++) bad |= (uint64_t)((uint64_t)(int64_t)idx[p] >= (uint64_t)rows); \
      if (bad) {                                                                                \
        for (int64_t p = a; p < e; p++)                                                         \
          if ((uint64_t)(int64_t)idx[p] >= (uint64_t)rows) {                                    \
            err[0] = 3; err[1] = p; err[2] = (int64_t)idx[p]; return 3;                         \
          }                                                                                     \
      }                                                                                         \
    }                                                                                           \
  return 0;                                                                                     \
}
SL_CHECK_IDS(sl_check_ids_i32, int32_t)
SL_CHECK_IDS(sl_check_ids_i64, int64_t)

/* Stable LSD radix sort of (row << 32 | payload) keys on the row bits. Digits of up to
   log2(n) + 1 bits (at most SL_RADIX_MAXBITS), so a table with about as many rows as ids sorts in one pass. */
static void sl_radix_sort(uint64_t* keys, uint64_t* tmp, int64_t n, int nbits) {
  if (nbits <= 0 || n <= 1) return;
  int maxbits = 8;
  while (maxbits < SL_RADIX_MAXBITS && ((int64_t)1 << maxbits) < 2 * n) maxbits++;
  int passes = (nbits + maxbits - 1) / maxbits;
  int db = (nbits + passes - 1) / passes;
  int64_t nb = (int64_t)1 << db;
  uint32_t* hist = (uint32_t*)malloc(sizeof(uint32_t) * nb);
  uint64_t* src = keys; uint64_t* dst = tmp;
  int shift = 32;
  int flips = 0;
  for (int pass = 0; pass < passes; pass++, shift += db) {
    memset(hist, 0, sizeof(uint32_t) * nb);
    uint64_t mask = (uint64_t)(nb - 1);
    for (int64_t i = 0; i < n; i++) hist[(src[i] >> shift) & mask]++;
    uint32_t sum = 0; int64_t nonempty = 0;
    for (int64_t b = 0; b < nb; b++) { uint32_t c = hist[b]; nonempty += c != 0; hist[b] = sum; sum += c; }
    if (nonempty <= 1) continue; /* every key has this digit: the pass is the identity */
    for (int64_t i = 0; i < n; i++) { uint64_t k = src[i]; dst[hist[(k >> shift) & mask]++] = k; }
    uint64_t* t = src; src = dst; dst = t; flips ^= 1;
  }
  if (flips) memcpy(keys, src, sizeof(uint64_t) * n);
  free(hist);
}

static int sl_bits(int64_t rows) { int b = 0; while (b < 63 && ((int64_t)1 << b) < rows) b++; return b; }

typedef int (*sl_fwd_fn)(const void*, int64_t, const int32_t*, const int64_t*, const void*, int64_t,
                         const float*, const int32_t*, int, int64_t, int64_t, int64_t, void*, int64_t, int);
typedef int (*sl_upd_fn)(void*, float*, int64_t, const int32_t*, const int64_t*, const void*, int64_t,
                         const float*, const float*, int64_t, const int32_t*, int, int64_t, int64_t, int64_t,
                         float, float, float, int64_t*);
typedef void (*sl_grd_fn)(float*, const int64_t*, const void*, const float*, const float*, int64_t, const int32_t*,
                          int, int64_t, int64_t, int64_t, float);
"""

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


def _lines(*parts: Iterable[str] | str) -> str:
    out: list[str] = []
    for p in parts:
        if isinstance(p, str):
            out.append(p)
        else:
            out.extend(p)
    return "\n".join(out)


def _forward_fn(spec: TableSpec, prefetch: int = FORWARD_PREFETCH, widest: int = 16, prefetch_l2: int = 0) -> str:
    d, tt, it, st = spec.dim, _TYPES[spec.dtype], _ITYPES[spec.index_dtype], spec.dtype
    ch = _chunks(d, widest)
    row_bytes = d * (4 if st == "f32" else 2)
    lines = max(1, (row_bytes + 63) // 64)
    pf = " ".join(f"PF((const char*)pr + {64 * i});" for i in range(lines))
    if spec.weighted and spec.pooling == "mean":
        scale_decl, scale_id = "const float inv = (float)(n > 0 ? n : 1);", "const float sc = wts[p] / inv;"
    elif spec.weighted:
        scale_decl, scale_id = "", "const float sc = wts[p];"
    elif spec.pooling == "mean":
        scale_decl, scale_id = "const float sc = 1.0f / (float)(n > 0 ? n : 1);", ""
    else:
        scale_decl, scale_id = "", ""
    mul = " * sc" if (spec.weighted or spec.pooling == "mean") else ""
    acc_decl = [f"    {_vt(w)} a{o} = {_zero(w)};" for o, w in ch]
    acc_add = [f"      a{o} += ld{w}_{st}(r + {o}){mul};" for o, w in ch]
    acc_st = [f"    st{w}_{st}(o + {o}, a{o});" for o, w in ch]
    return _lines(
        f"static int fwd_{spec.tag}(const void* W_, int64_t rows, const int32_t* restrict lengths,",
        "    const int64_t* restrict offs, const void* idx_, int64_t nidx, const float* restrict wts,",
        "    const int32_t* restrict slots, int nslots, int64_t F, int64_t B, int64_t S, void* out_, int64_t ldo,",
        "    int nthreads) {",
        f"  const {tt}* restrict W = (const {tt}*)W_;",
        f"  const {it}* restrict idx = (const {it}*)idx_;",
        f"  {tt}* restrict out = ({tt}*)out_;",
        "  (void)rows; (void)nthreads;",
        f"  if (ldo <= 0) ldo = (int64_t){d} * nslots;  /* output rows ldo elements apart */",
        "  const int64_t nwork = S * nslots * B;",
        "  if (nwork <= 0) return 0;",
        "  /* Each thread takes a contiguous range of (segment, slot, sample) bags and walks it",
        "     without divisions. */",
        "  #pragma omp parallel num_threads(nthreads) if(nthreads > 1)",
        "  {",
        "  int64_t nt = 1, tid = 0;",
        "#ifdef _OPENMP",
        "  nt = omp_get_num_threads(); tid = omp_get_thread_num();",
        "#endif",
        "  const int64_t q0 = nwork * tid / nt, q1 = nwork * (tid + 1) / nt;",
        "  int64_t b = q0 % B, k = (q0 / B) % nslots, s = (q0 / B) / nslots;",
        "  const int64_t* ob = offs + (s * F + slots[k]) * B;",
        "  for (int64_t q = q0; q < q1; q++) {",
        "    const int64_t p0 = ob[b], p1 = ob[b + 1];",
        "    const int64_t n = p1 - p0;",
        "    (void)n;",
        f"    {scale_decl}",
        *acc_decl,
        "    for (int64_t p = p0; p < p1; p++) {",
        *([
            *([f"      if (p + {prefetch_l2} < nidx) {{",
               f"        const {tt}* pr = W + (uint64_t)(int64_t)idx[p + {prefetch_l2}] * {d}u; "
               + " ".join(f"__builtin_prefetch((const char*)pr + {64 * i}, 0, 1);" for i in range(lines)),
               "      }"] if prefetch_l2 > 0 else []),
            f"      if (p + {prefetch} < nidx) {{",
            f"        const {tt}* pr = W + (uint64_t)(int64_t)idx[p + {prefetch}] * {d}u; {pf}",
            "      }",
        ] if prefetch > 0 else []),
        f"      const {tt}* r = W + (int64_t)idx[p] * {d};",
        f"      {scale_id}",
        *acc_add,
        "    }",
        f"    {tt}* o = out + (s * B + b) * ldo + k * {d};",
        *acc_st,
        "    if (++b == B) {",
        "      b = 0;",
        "      if (++k == nslots) { k = 0; s++; }",
        "      if (q + 1 < q1) ob = offs + (s * F + slots[k]) * B;",
        "    }",
        "  }",
        "  }",
        "  return 0;",
        "}",
    )


def _update_prologue(spec: TableSpec) -> list[str]:
    """The `upd_*` signature (`sl_upd_fn`) and the casts and defaults every update kernel starts with."""
    tt, it = _TYPES[spec.dtype], _ITYPES[spec.index_dtype]
    return [
        f"static int upd_{spec.tag}(void* W_, float* restrict state, int64_t rows, const int32_t* restrict lengths,",
        "    const int64_t* restrict offs, const void* idx_, int64_t nidx, const float* restrict wts,",
        "    const float* restrict grad, int64_t ldg, const int32_t* restrict slots, int nslots, int64_t F, int64_t B,",
        "    int64_t S, float lr, float eps, float gs, int64_t* err) {",
        f"  {tt}* restrict W = ({tt}*)W_;",
        f"  const {it}* restrict idx = (const {it}*)idx_;",
        "  (void)nidx; (void)eps; (void)state; (void)lengths; (void)wts;",
        f"  if (ldg <= 0) ldg = (int64_t){spec.dim} * nslots;  /* gradient rows ldg floats apart */",
    ]


def _sgd_update_fn(spec: TableSpec, prefetch: int = UPDATE_PREFETCH, widest: int = 16) -> str:
    """SGD backward + update without a sort: `torch.optim.SGD` on a sparse gradient applies one
    fused `w + (-lr) * g` per occurrence in the reference's order, and so does this loop, so a
    row's steps round exactly as the reference's (duplicates are not summed first)."""
    d, tt, st = spec.dim, _TYPES[spec.dtype], spec.dtype
    ch = _chunks(d, widest)
    lines = max(1, (d * (4 if st == "f32" else 2) + 63) // 64)
    scale, mul_s = _occurrence_scale(spec)
    pf = ([
        f"          if (p + {prefetch} < q1) {{",
        f"            const {tt}* pw = W + (int64_t)idx[p + {prefetch}] * {d};",
        *[f"            PFW((const char*)pw + {64 * q});" for q in range(lines)],
        "          }",
    ] if prefetch > 0 else [])
    return _lines(
        *_update_prologue(spec),
        "  (void)rows; (void)err;",
        "  const float nlr = -lr;",
        "  /* The reference's order: slot-major, then segment, sample, position. */",
        "  for (int k = 0; k < nslots; k++)",
        "    for (int64_t s = 0; s < S; s++) {",
        "      const int64_t bag0 = (s * F + slots[k]) * B, q1 = offs[bag0 + B];",
        "      for (int64_t b = 0; b < B; b++) {",
        "        const int64_t p0 = offs[bag0 + b], p1 = offs[bag0 + b + 1], n = p1 - p0;",
        "        if (p0 == p1) continue;",
        "        (void)n;",
        f"        const float* gr = grad + (s * B + b) * ldg + (int64_t)k * {d};",
        *[f"        const {_vt(w)} g{o} = ld{w}_f32(gr + {o});" for o, w in ch],
        "        for (int64_t p = p0; p < p1; p++) {",
        *pf,
        f"          const float s = {scale}; (void)s;",
        f"          {tt}* wr = W + (int64_t)idx[p] * {d};",
        *[f"          st{w}_{st}(wr + {o}, sl_fma{w}((g{o}{mul_s}) * gs, nlr, ld{w}_{st}(wr + {o})));" for o, w in ch],
        "        }",
        "      }",
        "    }",
        "  return 0;",
        "}",
    )


def _update_fn(spec: TableSpec, prefetch: int = UPDATE_PREFETCH, widest: int = 16, prefetch_l2: int = 0) -> str:
    if spec.optimizer == "sgd" and spec.dtype == "f32":
        return _sgd_update_fn(spec, prefetch, widest)
    d, tt, st = spec.dim, _TYPES[spec.dtype], spec.dtype
    ch = _chunks(d, widest)
    row_bytes = d * (4 if st == "f32" else 2)
    lines = max(1, (row_bytes + 63) // 64)
    glines = max(1, (d * 4 + 63) // 64)
    # The sort payload: unweighted specs need only the bag (its gradient row and 1/len), weighted
    # ones the id position (its weight).
    per_id = spec.weighted
    scale, mul_s = _occurrence_scale(spec)
    row_ptr = f"    {tt}* wr = W + row * {d};"
    if spec.optimizer == "sgd":
        # 16-bit storage: the row is loaded once, takes its fused SGD steps in f32 in the
        # reference's order, and is rounded once (f32 tables need no sort: `_sgd_update_fn`).
        g_decl = [row_ptr, *(f"    {_vt(w)} a{o} = ld{w}_{st}(wr + {o});" for o, w in ch)]
        g_add = [f"      a{o} = sl_fma{w}((ld{w}_f32(gr + {o}){mul_s}) * gs, nlr, a{o});" for o, w in ch]
        pre, apply = [], [f"    st{w}_{st}(wr + {o}, a{o});" for o, w in ch]
    else:
        # Row-wise Adagrad: state += mean(g^2); w -= lr * g / (sqrt(state) + eps). The state
        # needs a row's summed gradient, hence the sort. Squares are summed lane-wise in
        # vectors, then in one horizontal sum.
        g_decl = [f"    {_vt(w)} g{o} = {_zero(w)};" for o, w in ch]
        g_add = [f"      g{o} += (ld{w}_f32(gr + {o}){mul_s}) * gs;" for o, w in ch]
        sq = ["    v16f q16 = (v16f){0};", "    v8f q8 = (v8f){0};", "    v4f q4 = (v4f){0};", "    float ss = 0.0f;"]
        for o, w in ch:
            sq.append(f"    q{w} += g{o} * g{o};" if w > 1 else f"    ss += g{o} * g{o};")
        sq.append("    q8 += __builtin_shufflevector(q16, q16, 0, 1, 2, 3, 4, 5, 6, 7)"
                  " + __builtin_shufflevector(q16, q16, 8, 9, 10, 11, 12, 13, 14, 15);")
        sq.append("    q4 += __builtin_shufflevector(q8, q8, 0, 1, 2, 3) + __builtin_shufflevector(q8, q8, 4, 5, 6, 7);")
        sq.append("    ss += (q4[0] + q4[2]) + (q4[1] + q4[3]);")
        pre = [
            *sq,
            f"    const float st = state[row] + ss / (float){d};",
            "    state[row] = st;",
            "    const float den = sqrtf(st) + eps;",
        ]
        apply = [f"    st{w}_{st}(wr + {o}, ld{w}_{st}(wr + {o}) + nlr * (g{o} / den));" for o, w in ch]
    pf_lines: list[str] = []
    if prefetch_l2 > 0:
        pf_lines += [
            f"      if (e + {prefetch_l2} < n_ids) {{",
            f"        const uint64_t kf = keys[e + {prefetch_l2}];",
            f"        const {tt}* pw = W + (kf >> 32) * {d}u;",
            *[f"        __builtin_prefetch((const char*)pw + {64 * q}, 1, 1);" for q in range(lines)],
            "        const float* pg = grad + gof[(uint32_t)kf];",
            *[f"        __builtin_prefetch((const char*)pg + {64 * q}, 0, 1);" for q in range(glines)],
            "      }",
        ]
    if prefetch > 0:
        pf_lines += [
            f"      if (e + {prefetch} < n_ids) {{",
            f"        const uint64_t kp = keys[e + {prefetch}];",
            f"        const {tt}* pw = W + (kp >> 32) * {d}u;",
            *[f"        PFW((const char*)pw + {64 * q});" for q in range(lines)],
            "        const float* pg = grad + gof[(uint32_t)kp];",
            *[f"        PF((const char*)pg + {64 * q});" for q in range(glines)],
            "      }",
        ]
    return _lines(
        *_update_prologue(spec),
        "  int64_t n_ids = 0;",
        "  for (int k = 0; k < nslots; k++)",
        "    for (int64_t s = 0; s < S; s++) { int64_t bag0 = (s * F + slots[k]) * B; n_ids += offs[bag0 + B] - offs[bag0]; }",
        "  if (n_ids == 0) return 0;",
        f"  const int64_t n_pay = {'n_ids' if per_id else '(int64_t)nslots * S * B'};",
        "  if (n_ids >= ((int64_t)1 << 32) || n_pay >= ((int64_t)1 << 32) || rows > ((int64_t)1 << 32)) {",
        "    err[0] = 6; err[1] = n_ids; return 6;",
        "  }",
        "  char* mem = (char*)malloc((size_t)n_ids * 2 * sizeof(uint64_t) + (size_t)n_pay * (sizeof(int64_t) + sizeof(float)));",
        "  if (!mem) { err[0] = 4; return 4; }",
        "  uint64_t* keys = (uint64_t*)mem;",
        "  uint64_t* tmp = keys + n_ids;",
        "  int64_t* gof = (int64_t*)(tmp + n_ids);",
        "  float* scl = (float*)(gof + n_pay);",
        "  /* Ids in the reference's order: slot-major, then segment, sample, position; the stable",
        "     sort keeps that order among the ids of one row. */",
        "  int64_t j = 0, q = 0;",
        "  for (int k = 0; k < nslots; k++)",
        "    for (int64_t s = 0; s < S; s++)",
        "      for (int64_t b = 0; b < B; b++, q++) {",
        "        const int64_t bag = (s * F + slots[k]) * B + b;",
        "        const int64_t p0 = offs[bag], p1 = offs[bag + 1], n = p1 - p0;",
        "        (void)n;",
        f"        const int64_t go = (s * B + b) * ldg + (int64_t)k * {d};",
        *([
            "        for (int64_t p = p0; p < p1; p++, j++) {",
            "          keys[j] = ((uint64_t)(int64_t)idx[p] << 32) | (uint64_t)j;",
            "          gof[j] = go;",
            f"          scl[j] = {scale};",
            "        }",
        ] if per_id else [
            "        gof[q] = go;",
            f"        scl[q] = {scale};",
            "        for (int64_t p = p0; p < p1; p++, j++) keys[j] = ((uint64_t)(int64_t)idx[p] << 32) | (uint64_t)q;",
        ]),
        "      }",
        "  sl_radix_sort(keys, tmp, n_ids, sl_bits(rows));",
        "  const float nlr = -lr;",
        "  int64_t e = 0;",
        "  while (e < n_ids) {",
        "    const int64_t row = (int64_t)(keys[e] >> 32);",
        *g_decl,
        "    do {",
        *pf_lines,
        "      const uint32_t u = (uint32_t)keys[e];",
        "      const float* gr = grad + gof[u];",
        "      const float s = scl[u]; (void)s;",
        *g_add,
        "      e++;",
        "    } while (e < n_ids && (int64_t)(keys[e] >> 32) == row);",
        *([] if spec.optimizer == "sgd" else [row_ptr]),
        *pre,
        *apply,
        "  }",
        "  free(mem);",
        "  return 0;",
        "}",
    )


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
    d, it = spec.dim, _ITYPES[spec.index_dtype]
    ch = _chunks(d, widest)
    scale, mul_s = _occurrence_scale(spec)
    return _lines(
        f"static void grd_{spec.tag}(float* restrict G, const int64_t* restrict offs, const void* idx_,",
        "    const float* restrict wts, const float* restrict grad, int64_t ldg, const int32_t* restrict slots,",
        "    int nslots, int64_t F, int64_t B, int64_t S, float gs) {",
        f"  const {it}* restrict idx = (const {it}*)idx_;",
        "  (void)wts;",
        "  for (int k = 0; k < nslots; k++)",
        "    for (int64_t s = 0; s < S; s++)",
        "      for (int64_t b = 0; b < B; b++) {",
        "        const int64_t bag = (s * F + slots[k]) * B + b;",
        "        const int64_t p0 = offs[bag], p1 = offs[bag + 1], n = p1 - p0;",
        "        (void)n;",
        f"        const float* gr = grad + (s * B + b) * ldg + (int64_t)k * {d};",
        "        for (int64_t p = p0; p < p1; p++) {",
        f"          const float s = {scale}; (void)s;",
        f"          float* o = G + (int64_t)idx[p] * {d};",
        *[f"          st{w}_f32(o + {o}, ld{w}_f32(o + {o}) + (ld{w}_f32(gr + {o}){mul_s}) * gs);" for o, w in ch],
        "        }",
        "      }",
        "}",
    )


_ENTRY = r"""
/* ---- entry points ---- */

/* Shared prologue of the multi-table entry points: bag offsets from the lengths, then every
   table's kernel number and ids checked, before anything is read or written. `*offs` is NULL
   only when its allocation failed; the caller frees it. */
static int sl_prepare(int ntab, const int32_t* fn, int nfn, const int64_t* rows, const int32_t* slot_off,
                      const int32_t* slots, const int32_t* lengths, int64_t nbags, const void* idx, int idx64,
                      int64_t nidx, int64_t F, int64_t B, int64_t S, int64_t** offs, int64_t* err) {
  err[0] = err[1] = err[2] = 0; err[3] = -1;
  *offs = (int64_t*)malloc(sizeof(int64_t) * (size_t)(nbags + 1));
  if (!*offs) { err[0] = 4; return 4; }
  int rc = sl_offsets(lengths, nbags, nidx, *offs, err);
  for (int t = 0; t < ntab && !rc; t++) {
    if (fn[t] < 0 || fn[t] >= nfn) { err[0] = 5; err[3] = t; return 5; }
    rc = idx64 ? sl_check_ids_i64((const int64_t*)idx, *offs, rows[t], slots + slot_off[t], slot_off[t + 1] - slot_off[t], F, B, S, err)
               : sl_check_ids_i32((const int32_t*)idx, *offs, rows[t], slots + slot_off[t], slot_off[t + 1] - slot_off[t], F, B, S, err);
    if (rc) err[3] = t;
  }
  return rc;
}

/* Multi-table pooled lookup. Per table t: kernel number fn[t] (an index into SL_FWD), weights
   W[t] (rows[t] x dim), slots slots[slot_off[t] .. slot_off[t+1]), output out[t] with rows ldo[t]
   elements apart (ldo NULL or 0: dense rows; a column block of an exchange buffer otherwise).
   Shared: lengths (S*F*B bags), indices (nidx, i64 if idx64 else i32), per-id weights or NULL. */
int sl_forward(int ntab, const int32_t* fn, void* const* W, const int64_t* rows, const int32_t* slot_off,
               const int32_t* slots, void* const* out, const int64_t* ldo, const int32_t* lengths, int64_t nbags,
               const void* idx, int idx64, int64_t nidx, const float* wts, int64_t F, int64_t B,
               int nthreads, int64_t* err) {
  int64_t S = (F > 0 && B > 0) ? nbags / (F * B) : 0;
  int64_t* offs = NULL;
  int rc = sl_prepare(ntab, fn, SL_N_FWD, rows, slot_off, slots, lengths, nbags, idx, idx64, nidx, F, B, S, &offs, err);
  if (!offs) return rc;
  for (int t = 0; t < ntab && !rc; t++)
    SL_FWD[fn[t]](W[t], rows[t], lengths, offs, idx, nidx, wts, slots + slot_off[t],
                  slot_off[t + 1] - slot_off[t], F, B, S, out[t], ldo ? ldo[t] : 0, nthreads);
  free(offs);
  return rc;
}

/* Multi-table backward + optimizer update from pooled gradients grad[t] ([S*B, dim*nslots] f32,
   rows ldg[t] floats apart; ldg NULL or 0: dense rows). state[t] is the row-wise Adagrad
   accumulator (rows[t] floats) or NULL for SGD. Nothing is written unless every table's input
   is valid. */
int sl_update(int ntab, const int32_t* fn, void* const* W, float* const* state, const int64_t* rows,
              const int32_t* slot_off, const int32_t* slots, const float* const* grad, const int64_t* ldg,
              const int32_t* lengths, int64_t nbags, const void* idx, int idx64, int64_t nidx, const float* wts,
              int64_t F, int64_t B, float lr, float eps, float gscale, int nthreads, int64_t* err) {
  int64_t S = (F > 0 && B > 0) ? nbags / (F * B) : 0;
  int64_t* offs = NULL;
  int rc = sl_prepare(ntab, fn, SL_N_UPD, rows, slot_off, slots, lengths, nbags, idx, idx64, nidx, F, B, S, &offs, err);
  if (!offs) return rc;
  if (!rc) {
    int failed = 0;
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if(nthreads > 1 && ntab > 1) reduction(|:failed)
    for (int t = 0; t < ntab; t++) {
      int64_t terr[4] = {0, 0, 0, -1};
      int r = SL_UPD[fn[t]](W[t], state[t], rows[t], lengths, offs, idx, nidx, wts, grad[t], ldg ? ldg[t] : 0,
                            slots + slot_off[t], slot_off[t + 1] - slot_off[t], F, B, S, lr, eps, gscale, terr);
      if (r) {
        failed = 1;
        #pragma omp critical
        { err[0] = terr[0]; err[1] = terr[1]; err[2] = terr[2]; err[3] = t; }
      }
    }
    if (failed) rc = (int)err[0];
  }
  free(offs);
  return rc;
}

/* Multi-table whole-table gradients (replicated tables): G[t] (rows[t] x dim f32, zeroed by the
   caller) += every occurrence's pooled-gradient row x scale x gscale. grad[t]'s rows are ldg[t]
   floats apart (a column slice of a wider gradient needs no copy). Kernel numbers index SL_GRD
   (one per forward spec). Nothing is written unless every table's input is valid. */
int sl_grad(int ntab, const int32_t* fn, float* const* G, const int64_t* rows, const int32_t* slot_off,
            const int32_t* slots, const float* const* grad, const int64_t* ldg, const int32_t* lengths,
            int64_t nbags, const void* idx, int idx64, int64_t nidx, const float* wts, int64_t F, int64_t B,
            float gscale, int64_t* err) {
  int64_t S = (F > 0 && B > 0) ? nbags / (F * B) : 0;
  int64_t* offs = NULL;
  int rc = sl_prepare(ntab, fn, SL_N_FWD, rows, slot_off, slots, lengths, nbags, idx, idx64, nidx, F, B, S, &offs, err);
  if (!offs) return rc;
  for (int t = 0; t < ntab && !rc; t++)
    SL_GRD[fn[t]](G[t], offs, idx, wts, grad[t], ldg[t], slots + slot_off[t], slot_off[t + 1] - slot_off[t], F, B, S,
                  gscale);
  free(offs);
  return rc;
}

/* Route's id concatenation: n features' ids (each i32 or i64) back to back into dst (i32 or
   i64), every id checked against its feature's table rows in the same branch-free pass. dst is
   the caller's fresh buffer; on a bad id err = (3, position in its feature, value, feature). */
#define SL_CONCAT(NAME, ST, DT)                                                                  \
  static int NAME(const ST* restrict s, int64_t n, int64_t rows, DT* restrict d, int64_t* err) { \
    uint64_t bad = 0;                                                                          \
    for (int64_t i = 0; i < n; i++) { bad |= (uint64_t)((uint64_t)(int64_t)s[i] >= (uint64_t)rows); d[i] = (DT)s[i]; } \
    if (!bad) return 0;                                                                        \
    for (int64_t i = 0; i < n; i++)                                                            \
      if ((uint64_t)(int64_t)s[i] >= (uint64_t)rows) { err[0] = 3; err[1] = i; err[2] = (int64_t)s[i]; return 3; } \
    return 0;                                                                                  \
  }
SL_CONCAT(sl_concat_i32_i32, int32_t, int32_t)
SL_CONCAT(sl_concat_i32_i64, int32_t, int64_t)
SL_CONCAT(sl_concat_i64_i32, int64_t, int32_t)
SL_CONCAT(sl_concat_i64_i64, int64_t, int64_t)

int sl_concat_ids(int n, const void* const* src, const int32_t* src64, const int64_t* counts, const int64_t* rows,
                  void* dst, int dst64, int64_t* err) {
  err[0] = err[1] = err[2] = 0; err[3] = -1;
  int64_t at = 0;
  for (int k = 0; k < n; k++) {
    int rc;
    if (src64[k]) rc = dst64 ? sl_concat_i64_i64((const int64_t*)src[k], counts[k], rows[k], (int64_t*)dst + at, err)
                             : sl_concat_i64_i32((const int64_t*)src[k], counts[k], rows[k], (int32_t*)dst + at, err);
    else rc = dst64 ? sl_concat_i32_i64((const int32_t*)src[k], counts[k], rows[k], (int64_t*)dst + at, err)
                    : sl_concat_i32_i32((const int32_t*)src[k], counts[k], rows[k], (int32_t*)dst + at, err);
    if (rc) { err[3] = k; return rc; }
    at += counts[k];
  }
  return 0;
}

/* Strided 2-D copies: desc holds n records of (dst_byte_offset_ptr, dst_stride, src_ptr, src_stride,
   row_bytes, nrows), every pointer and stride in bytes. */
void sl_copy_blocks(int64_t n, const int64_t* desc) {
  for (int64_t i = 0; i < n; i++) {
    char* dst = (char*)(intptr_t)desc[6 * i];
    int64_t ds = desc[6 * i + 1];
    const char* src = (const char*)(intptr_t)desc[6 * i + 2];
    int64_t ss = desc[6 * i + 3], nb = desc[6 * i + 4], nr = desc[6 * i + 5];
    if (nb == ds && nb == ss) { memcpy(dst, src, (size_t)(nb * nr)); continue; }
    switch (nb) {
      case 4: for (int64_t r = 0; r < nr; r++) memcpy(dst + r * ds, src + r * ss, 4); break;
      case 8: for (int64_t r = 0; r < nr; r++) memcpy(dst + r * ds, src + r * ss, 8); break;
      case 16: for (int64_t r = 0; r < nr; r++) memcpy(dst + r * ds, src + r * ss, 16); break;
      case 32: for (int64_t r = 0; r < nr; r++) memcpy(dst + r * ds, src + r * ss, 32); break;
      case 64: for (int64_t r = 0; r < nr; r++) memcpy(dst + r * ds, src + r * ss, 64); break;
      default: for (int64_t r = 0; r < nr; r++) memcpy(dst + r * ds, src + r * ss, (size_t)nb);
    }
  }
}

int sl_abi_version(void) { return SL_ABI_VERSION; }
int sl_have_openmp(void) {
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}
"""

ABI_VERSION = 5


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


def generate_source(specs: Iterable[TableSpec], *, have_f16: bool = True, forward_prefetch: int = FORWARD_PREFETCH,
                    update_prefetch: int = UPDATE_PREFETCH, radix_bits: int = RADIX_BITS, vector_width: int = 16,
                    forward_prefetch_l2: int = FORWARD_PREFETCH_L2, update_prefetch_l2: int = UPDATE_PREFETCH_L2) -> str:
    """One C translation unit with the kernels of `specs` and the generic entry points.

    `forward_prefetch` / `update_prefetch`: how many ids ahead rows are prefetched (0: none);
    `radix_bits`: the widest digit of the update's radix sort; `vector_width`: the widest
    accumulator vector in floats (16 or 8).
    """
    fwd, upd = _dedupe(specs)
    if not have_f16 and any(s.dtype == "f16" for s in fwd):
        raise ValueError("f16 storage needs a compiler with _Float16 support")
    parts = [
        "/* Generated by sparselift.codegen.ckernels: do not edit. */",
        f"#define SL_ABI_VERSION {ABI_VERSION}",
        f"#define SL_RADIX_MAXBITS {int(radix_bits)}",
        _PRELUDE.replace("HAVE_F16_FLAG", "1" if have_f16 else "0"),
    ]
    for s in fwd:
        parts.append(f"/* forward: {s.tag} */\n" + _forward_fn(s, forward_prefetch, vector_width, forward_prefetch_l2))
    for s in fwd:
        parts.append(f"/* whole-table gradient: {s.tag} */\n" + _grad_fn(s, vector_width))
    for s in upd:
        parts.append(f"/* backward + {s.optimizer}: {s.tag} */\n" + _update_fn(s, update_prefetch, vector_width, update_prefetch_l2))
    fwd_tab = ", ".join(f"fwd_{s.tag}" for s in fwd) or "0"
    grd_tab = ", ".join(f"grd_{s.tag}" for s in fwd) or "0"
    upd_tab = ", ".join(f"upd_{s.tag}" for s in upd) or "0"
    parts.append(f"#define SL_N_FWD {len(fwd)}\nstatic const sl_fwd_fn SL_FWD[] = {{{fwd_tab}}};")
    parts.append(f"#define SL_N_UPD {len(upd)}\nstatic const sl_upd_fn SL_UPD[] = {{{upd_tab}}};")
    parts.append(f"static const sl_grd_fn SL_GRD[] = {{{grd_tab}}};")
    parts.append(_ENTRY)
    return "\n\n".join(parts) + "\n"


def source_hash(source: str, extra: Sequence[str] = ()) -> str:
    h = hashlib.sha256(source.encode())
    for e in extra:
        h.update(b"\0" + e.encode())
    return h.hexdigest()[:24]
