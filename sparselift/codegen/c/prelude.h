/* Shared by every generated kernel library: vector types, loads and stores per storage dtype
   (f32 / bf16 / f16 when SL_HAVE_F16), the SGD step's FMA, bag offsets, id checks, the update's
   radix sort and the kernel function types. The library defines SL_HAVE_F16 and
   SL_RADIX_MAXBITS before this text. */
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
/* An update's optimizer arguments (sparselift/optim_rules.py ARGUMENTS, in order; the runtime's
   `SlHyper`): the group's hyperparameters and its step's bias corrections, in double precision,
   as the reference holds them; an expression of them alone is rounded to f32 once. */
typedef struct sl_hyper { double lr, eps, beta1, beta2, weight_decay, bc1, bc2; } sl_hyper;

typedef int (*sl_upd_fn)(void*, float*, int64_t, const int32_t*, const int64_t*, const void*, int64_t,
                         const float*, const float*, int64_t, const int32_t*, int, int64_t, int64_t, int64_t,
                         const sl_hyper*, float, int64_t*);
typedef void (*sl_grd_fn)(float*, const int64_t*, const void*, const float*, const float* const*, const int64_t*, const int32_t*,
                          int, int64_t, int64_t, int64_t, float);
