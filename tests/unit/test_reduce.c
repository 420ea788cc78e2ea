/*
 * test_reduce.c - checks the reduction kernels (src/reduce) bit for bit against a scalar
 * reference written independently here: every kernel variant the CPU can run x dtype x op x
 * count x aliasing x alignment, the float16/bfloat16 conversions exhaustively over all 65536
 * patterns (plus every rounding midpoint), avg_finish and the dispatcher. Standalone: prints
 * one line per failure and a final "N passed, N failed"; exits 0 only if nothing failed.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bitcheck.h"
#include "reduce/reduce.h"
#include "reduce/variants.h"

enum { TEST_TIME_LIMIT_SEC = 120 };


/* ---------------------------------------------------------------------------------------- */
/* Reference element operations                                                             */

/* float32 op through double: exact product, and double rounding of a sum of two floats is
 * innocuous (53 >= 2*24+2), so this is the correctly rounded float result. */
static float ref_f32_op(chorus_op_t op, float x, float y) {
  switch (op) {
    case CHORUS_SUM:
    case CHORUS_AVG:
      return (float)((double)x + (double)y);
    case CHORUS_PROD:
      return (float)((double)x * (double)y);
    case CHORUS_MAX: /* specified: b unless a is strictly greater (so NaN in b wins) */
      if (is_nan_f(x) || is_nan_f(y)) return y;
      return x > y ? x : y;
    case CHORUS_MIN:
      if (is_nan_f(x) || is_nan_f(y)) return y;
      return x < y ? x : y;
    default:
      abort();
  }
}

static double ref_f64_op(chorus_op_t op, double x, double y) {
  switch (op) {
    case CHORUS_SUM:
    case CHORUS_AVG:
#ifdef __SIZEOF_FLOAT128__
      return (double)((__float128)x + (__float128)y); /* 113 >= 2*53+2: innocuous */
#else
      return x + y;
#endif
    case CHORUS_PROD:
#ifdef __SIZEOF_FLOAT128__
      return (double)((__float128)x * (__float128)y); /* exact product, one rounding */
#else
      return x * y;
#endif
    case CHORUS_MAX:
      if (x != x || y != y) return y;
      return x > y ? x : y;
    case CHORUS_MIN:
      if (x != x || y != y) return y;
      return x < y ? x : y;
    default:
      abort();
  }
}

/* Integer op on values widened to 64 bits; the caller keeps the low bytes, which is the
 * result modulo 2^width. is_signed picks the comparison for max/min. */
static uint64_t ref_int_op(chorus_op_t op, uint64_t x, uint64_t y, int is_signed) {
  switch (op) {
    case CHORUS_SUM:
    case CHORUS_AVG:
      return x + y;
    case CHORUS_PROD:
      return x * y;
    case CHORUS_MAX:
      if (is_signed) return (int64_t)x > (int64_t)y ? x : y;
      return x > y ? x : y;
    case CHORUS_MIN:
      if (is_signed) return (int64_t)x < (int64_t)y ? x : y;
      return x < y ? x : y;
    default:
      abort();
  }
}

typedef struct {
  const char* name;
  size_t size;
  int is_int;
  int is_signed;
} dtype_info_t;

static const dtype_info_t k_dtypes[CHORUS_DTYPE_COUNT] = {
    [CHORUS_INT8] = {"int8", 1, 1, 1},       [CHORUS_UINT8] = {"uint8", 1, 1, 0},
    [CHORUS_INT32] = {"int32", 4, 1, 1},     [CHORUS_UINT32] = {"uint32", 4, 1, 0},
    [CHORUS_INT64] = {"int64", 8, 1, 1},     [CHORUS_UINT64] = {"uint64", 8, 1, 0},
    [CHORUS_FLOAT16] = {"float16", 2, 0, 0}, [CHORUS_BFLOAT16] = {"bfloat16", 2, 0, 0},
    [CHORUS_FLOAT32] = {"float32", 4, 0, 0}, [CHORUS_FLOAT64] = {"float64", 8, 0, 0},
};
static const char* const k_op_names[CHORUS_OP_COUNT] = {"sum", "prod", "max", "min", "avg"};

/* Reads an integer element widened to 64 bits (sign- or zero-extended). */
static uint64_t load_int(const void* p, const dtype_info_t* d) {
  switch (d->size) {
    case 1:
      return d->is_signed ? (uint64_t)(int64_t)(*(const int8_t*)p) : *(const uint8_t*)p;
    case 4:
      return d->is_signed ? (uint64_t)(int64_t)(*(const int32_t*)p) : *(const uint32_t*)p;
    default:
      return *(const uint64_t*)p;
  }
}

/* The low d->size bytes of v (little-endian x86: the first bytes). */
static void store_low_bytes(void* p, uint64_t v, size_t size) {
  uint8_t bytes[8];
  for (size_t k = 0; k < 8; k++) bytes[k] = (uint8_t)(v >> (8 * k));
  memcpy(p, bytes, size);
}

static uint16_t ref_half_op(chorus_dtype_t dt, chorus_op_t op, uint16_t a, uint16_t b) {
  int is_bf16 = dt == CHORUS_BFLOAT16;
  float x = f32_from(is_bf16 ? ref_b2f_bits(a) : ref_h2f_bits(a));
  float y = f32_from(is_bf16 ? ref_b2f_bits(b) : ref_h2f_bits(b));
  uint32_t r = f32_bits(ref_f32_op(op, x, y));
  return is_bf16 ? ref_f2b(r) : ref_f2h(r);
}

/* out = a op b for one element of dtype dt. */
static void ref_elem(chorus_dtype_t dt, chorus_op_t op, const void* a, const void* b, void* out) {
  const dtype_info_t* d = &k_dtypes[dt];
  if (d->is_int) {
    store_low_bytes(out, ref_int_op(op, load_int(a, d), load_int(b, d), d->is_signed), d->size);
  } else if (dt == CHORUS_FLOAT32) {
    float x, y;
    memcpy(&x, a, 4);
    memcpy(&y, b, 4);
    float r = ref_f32_op(op, x, y);
    memcpy(out, &r, 4);
  } else if (dt == CHORUS_FLOAT64) {
    double x, y;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    double r = ref_f64_op(op, x, y);
    memcpy(out, &r, 8);
  } else {
    uint16_t x, y;
    memcpy(&x, a, 2);
    memcpy(&y, b, 2);
    uint16_t r = ref_half_op(dt, op, x, y);
    memcpy(out, &r, 2);
  }
}

static int elem_is_nan(chorus_dtype_t dt, const void* p) {
  uint16_t h;
  uint32_t f;
  uint64_t g;
  switch (dt) {
    case CHORUS_FLOAT16:
      memcpy(&h, p, 2);
      return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    case CHORUS_BFLOAT16:
      memcpy(&h, p, 2);
      return (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    case CHORUS_FLOAT32:
      memcpy(&f, p, 4);
      return (f & 0x7fffffffu) > 0x7f800000u;
    case CHORUS_FLOAT64:
      memcpy(&g, p, 8);
      return (g & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default:
      return 0;
  }
}

/* Bitwise equal; except that for a float sum/product whose reference is NaN, any NaN is right
 * (which payload survives when both inputs are NaN is unspecified). */
static int elem_matches(chorus_dtype_t dt, chorus_op_t op, const void* got, const void* want) {
  if (memcmp(got, want, k_dtypes[dt].size) == 0) return 1;
  int loose = op == CHORUS_SUM || op == CHORUS_PROD || op == CHORUS_AVG;
  return loose && elem_is_nan(dt, want) && elem_is_nan(dt, got);
}

/* ---------------------------------------------------------------------------------------- */
/* Self-checks of the reference (a wrong reference must not hide a wrong kernel)             */

static void test_reference_itself(void) {
  check(ref_f2h(f32_bits(1.0f)) == 0x3c00, "ref_f2h(1.0)");
  check(ref_f2h(f32_bits(65504.0f)) == 0x7bff, "ref_f2h(65504)");
  check(ref_f2h(f32_bits(65519.0f)) == 0x7bff, "ref_f2h(65519)");
  check(ref_f2h(f32_bits(65520.0f)) == 0x7c00, "ref_f2h(65520) ties to even = inf");
  check(ref_f2h(f32_bits(0x1p-24f)) == 0x0001, "ref_f2h(2^-24)");
  check(ref_f2h(f32_bits(0x1p-25f)) == 0x0000, "ref_f2h(2^-25) ties to even = 0");
  check(ref_f2h(f32_bits(0x1.8p-24f)) == 0x0002, "ref_f2h(1.5*2^-24) ties to even = 2");
  check(ref_f2h(f32_bits(1.0f + 0x1p-11f)) == 0x3c00, "ref_f2h(1+2^-11) ties to even");
  check(ref_f2h(f32_bits(1.0f + 0x1p-11f + 0x1p-20f)) == 0x3c01, "ref_f2h above tie");
  check(ref_f2h(f32_bits(-2.0f)) == 0xc000, "ref_f2h(-2)");
  check(ref_f2b(f32_bits(1.0f)) == 0x3f80, "ref_f2b(1)");
  check(ref_f2b(0x3f808000u) == 0x3f80, "ref_f2b tie to even (down)");
  check(ref_f2b(0x3f818000u) == 0x3f82, "ref_f2b tie to even (up)");
  check(ref_f2b(0x7f7fffffu) == 0x7f80, "ref_f2b(FLT_MAX) = inf");
  check(ref_f2b(0x00000001u) == 0x0000, "ref_f2b(smallest subnormal) = 0");
  check(ref_f2b(0x00008000u) == 0x0000, "ref_f2b(subnormal tie) = 0");
  check(ref_f2b(0x00018000u) == 0x0002, "ref_f2b(subnormal tie up) = 2");
  int roundtrip_ok = 1;
  for (uint32_t h = 0; h < 0x10000; h++) {
    int nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
    if (!nan && ref_f2h(ref_h2f_bits((uint16_t)h)) != h) roundtrip_ok = 0;
    int bnan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    if (!bnan && ref_f2b(ref_b2f_bits((uint16_t)h)) != h) roundtrip_ok = 0;
  }
  check(roundtrip_ok, "reference conversions round-trip every non-NaN pattern");
}

/* ---------------------------------------------------------------------------------------- */
/* Conversions: exhaustive                                                                    */

static void test_half_to_float_exhaustive(void) {
  int bad_h = 0, bad_b = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    uint32_t got = f32_bits(chorus__half_to_float((uint16_t)h));
    if (got != ref_h2f_bits((uint16_t)h) && bad_h++ < 5)
      printf("  half_to_float(0x%04x) = 0x%08x, want 0x%08x\n", h, got, ref_h2f_bits((uint16_t)h));
    uint32_t gotb = f32_bits(chorus__bf16_to_float((uint16_t)h));
    if (gotb != ref_b2f_bits((uint16_t)h) && bad_b++ < 5)
      printf("  bf16_to_float(0x%04x) = 0x%08x, want 0x%08x\n", h, gotb, ref_b2f_bits((uint16_t)h));
  }
  check(bad_h == 0, "half_to_float over all 65536 patterns (%d wrong)", bad_h);
  check(bad_b == 0, "bf16_to_float over all 65536 patterns (%d wrong)", bad_b);
}

/* Float inputs that exercise every rounding decision of a 16-bit format: each representable
 * value, each midpoint between neighbours (the ties) and the floats just below and above. */
static int sweep_float_to_16(int is_bf16) {
  int bad = 0;
  for (uint32_t p = 0; p < 0x10000; p++) {
    uint16_t lo = (uint16_t)p;
    uint32_t lo_bits = is_bf16 ? ref_b2f_bits(lo) : ref_h2f_bits(lo);
    if ((lo_bits & 0x7f800000u) == 0x7f800000u) continue; /* inf, NaN: tested below */
    uint16_t hi = (uint16_t)(lo + 1);                      /* next magnitude, same sign */
    uint32_t hi_bits = is_bf16 ? ref_b2f_bits(hi) : ref_h2f_bits(hi);
    double hi_val = (double)f32_from(hi_bits);
    if ((hi_bits & 0x7fffffffu) == 0x7f800000u) { /* past the largest: the next power of 2 */
      double limit = is_bf16 ? 0x1p128 : 0x1p16;
      hi_val = (lo & 0x8000) ? -limit : limit;
    }
    double mid = ((double)f32_from(lo_bits) + hi_val) / 2;
    uint32_t mid_bits = f32_bits((float)mid); /* exact: 12 or 9 significant bits */
    uint32_t probes[5] = {lo_bits, mid_bits, mid_bits - 1, mid_bits + 1, hi_bits - 1};
    for (int k = 0; k < 5; k++) {
      uint16_t want = is_bf16 ? ref_f2b(probes[k]) : ref_f2h(probes[k]);
      uint16_t got = is_bf16 ? chorus__float_to_bf16(f32_from(probes[k]))
                             : chorus__float_to_half(f32_from(probes[k]));
      if (got != want && bad++ < 5)
        printf("  float_to_%s(0x%08x) = 0x%04x, want 0x%04x\n", is_bf16 ? "bf16" : "half",
               probes[k], got, want);
    }
  }
  return bad;
}

/* Specials and random float patterns (every class: NaN payloads, infinities, subnormals). */
static int sweep_float_to_16_random(int is_bf16) {
  static const uint32_t specials[] = {
      0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u,
      0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7f802000u, 0x7f801fffu, 0x7fffffffu,
      0x00000001u, 0x807fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x477fefffu,
      0x477ff000u, 0x477fe000u, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x387fe000u};
  int bad = 0;
  size_t nspecial = sizeof specials / sizeof specials[0];
  for (size_t k = 0; k < nspecial + (1u << 22); k++) {
    uint32_t bits = k < nspecial ? specials[k] : (uint32_t)rnd64();
    uint16_t want = is_bf16 ? ref_f2b(bits) : ref_f2h(bits);
    uint16_t got =
        is_bf16 ? chorus__float_to_bf16(f32_from(bits)) : chorus__float_to_half(f32_from(bits));
    if (got != want && bad++ < 5)
      printf("  float_to_%s(0x%08x) = 0x%04x, want 0x%04x\n", is_bf16 ? "bf16" : "half", bits,
             got, want);
  }
  return bad;
}

static void test_float_to_16(void) {
  check(sweep_float_to_16(0) == 0, "float_to_half: all values, midpoints and neighbours");
  check(sweep_float_to_16(1) == 0, "float_to_bf16: all values, midpoints and neighbours");
  check(sweep_float_to_16_random(0) == 0, "float_to_half: specials and 4M random floats");
  check(sweep_float_to_16_random(1) == 0, "float_to_bf16: specials and 4M random floats");
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                    */

/* Random element; floats get specials (NaN, inf, +-0, subnormals) mixed in. */
static void random_elem(chorus_dtype_t dt, void* out) {
  uint64_t r = rnd64();
  if (dt == CHORUS_FLOAT32) {
    static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                  0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x00000003u,
                                  0x807fffffu, 0x7f7fffffu, 0x3f800000u, 0xbf800000u};
    uint32_t bits;
    if ((r & 7) == 0) {
      bits = sp[(r >> 3) % (sizeof sp / sizeof sp[0])];
    } else if ((r & 7) == 1) {
      bits = (uint32_t)(r >> 32); /* any pattern: overflow, underflow */
    } else { /* a moderate value, so sums and products are mostly finite */
      bits = (uint32_t)((r >> 32) & 0x807fffffu) | (uint32_t)((112 + (r >> 8) % 32) << 23);
    }
    memcpy(out, &bits, 4);
  } else if (dt == CHORUS_FLOAT64) {
    static const uint64_t sp[] = {0, 0x8000000000000000ull, 0x7ff0000000000000ull,
                                  0xfff0000000000000ull, 0x7ff8000000000000ull,
                                  0x7ff0000000000001ull, 0x0000000000000001ull,
                                  0x7fefffffffffffffull};
    uint64_t bits;
    uint64_t r2 = rnd64();
    if ((r & 7) == 0) {
      bits = sp[(r >> 3) % (sizeof sp / sizeof sp[0])];
    } else if ((r & 7) == 1) {
      bits = r2;
    } else {
      bits = (r2 & 0x800fffffffffffffull) | ((uint64_t)(1000 + (r >> 8) % 48) << 52);
    }
    memcpy(out, &bits, 8);
  } else {
    memcpy(out, &r, k_dtypes[dt].size); /* integers and 16-bit floats: any pattern */
  }
}

enum { GUARD_BYTES = 64, GUARD_FILL = 0xa5 };

typedef enum { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B } alias_t;
static const char* const k_alias_names[] = {"dst!=a,b", "dst==a", "dst==b"};

typedef struct {
  uint8_t* a_mem;
  uint8_t* b_mem;
  uint8_t* dst_mem;
  uint8_t* want;
} buffers_t;

/* Bytes allocated for `bytes` of data: guards on both sides, room for an offset of up to 8
 * bytes, rounded up to the 64-byte alignment (aligned_alloc wants a multiple). */
static size_t buffer_total_bytes(size_t bytes) {
  return (bytes + 2 * GUARD_BYTES + 64 + 63) / 64 * 64;
}

/* Buffers with room for count elements, an offset of up to 8 bytes and guards on both sides. */
static int buffers_alloc(buffers_t* bufs, size_t bytes) {
  size_t total = buffer_total_bytes(bytes);
  bufs->a_mem = aligned_alloc(64, total);
  bufs->b_mem = aligned_alloc(64, total);
  bufs->dst_mem = aligned_alloc(64, total);
  bufs->want = malloc(bytes + 8);
  return bufs->a_mem && bufs->b_mem && bufs->dst_mem && bufs->want;
}

static void buffers_free(buffers_t* bufs) {
  free(bufs->a_mem);
  free(bufs->b_mem);
  free(bufs->dst_mem);
  free(bufs->want);
}

static int guards_intact(const uint8_t* mem, size_t data_bytes, size_t offset) {
  const uint8_t* data = mem + GUARD_BYTES + offset;
  for (size_t k = 0; k < GUARD_BYTES + offset; k++)
    if (mem[k] != GUARD_FILL) return 0;
  for (size_t k = 0; k < GUARD_BYTES; k++)
    if (data[data_bytes + k] != GUARD_FILL) return 0;
  return 1;
}

/* Runs fn on count random elements with the given aliasing and alignment offset, compares
 * every element with the reference and checks that nothing outside dst was written. */
static void run_kernel_case(const char* isa, chorus_reduce_fn fn, chorus_dtype_t dt,
                            chorus_op_t op, size_t count, alias_t alias, size_t offset,
                            buffers_t* bufs) {
  size_t esize = k_dtypes[dt].size;
  size_t bytes = count * esize;
  size_t total = buffer_total_bytes(bytes);
  memset(bufs->a_mem, GUARD_FILL, total);
  memset(bufs->b_mem, GUARD_FILL, total);
  memset(bufs->dst_mem, GUARD_FILL, total);
  uint8_t* a = bufs->a_mem + GUARD_BYTES + offset;
  uint8_t* b = bufs->b_mem + GUARD_BYTES + offset;
  uint8_t* dst = bufs->dst_mem + GUARD_BYTES + offset;
  for (size_t i = 0; i < count; i++) {
    random_elem(dt, a + i * esize);
    random_elem(dt, b + i * esize);
    ref_elem(dt, op, a + i * esize, b + i * esize, bufs->want + i * esize);
  }
  const uint8_t* in_a = a;
  const uint8_t* in_b = b;
  if (alias == ALIAS_DST_A) {
    memcpy(dst, a, bytes);
    in_a = dst;
  } else if (alias == ALIAS_DST_B) {
    memcpy(dst, b, bytes);
    in_b = dst;
  }
  fn(dst, in_a, in_b, count);
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < count; i++) {
    if (!elem_matches(dt, op, dst + i * esize, bufs->want + i * esize) && bad++ == 0) first_bad = i;
  }
  int inputs_kept = (alias == ALIAS_DST_A || memcmp(in_a, a, bytes) == 0) &&
                    (alias == ALIAS_DST_B || memcmp(in_b, b, bytes) == 0);
  uint64_t got = 0, want = 0;
  if (bad) {
    memcpy(&got, dst + first_bad * esize, esize);
    memcpy(&want, bufs->want + first_bad * esize, esize);
  }
  check(bad == 0 && inputs_kept && guards_intact(bufs->dst_mem, bytes, offset),
        "%s %s %s count=%zu %s offset=%zu: %zu wrong (first [%zu] got 0x%llx want 0x%llx), "
        "inputs %s, guards %s",
        isa, k_dtypes[dt].name, k_op_names[op], count, k_alias_names[alias], offset, bad,
        first_bad, (unsigned long long)got, (unsigned long long)want,
        inputs_kept ? "kept" : "MODIFIED",
        guards_intact(bufs->dst_mem, bytes, offset) ? "intact" : "OVERWRITTEN");
}

static const size_t k_counts[] = {0, 1, 7, 64, 1023, 4099};

static void test_kernel_matrix(const chorus_reduce_variant_t* v, buffers_t* bufs) {
  for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++) {
    for (int op = 0; op < CHORUS_OP_COUNT; op++) {
      chorus_reduce_fn fn = v->reduce[dt][op];
      check(fn != NULL, "%s: kernel %s %s exists", v->name, k_dtypes[dt].name, k_op_names[op]);
      if (fn == NULL) continue;
      for (size_t c = 0; c < sizeof k_counts / sizeof k_counts[0]; c++) {
        for (int alias = 0; alias < 3; alias++) {
          for (size_t offset = 0; offset <= k_dtypes[dt].size; offset += k_dtypes[dt].size) {
            run_kernel_case(v->name, fn, (chorus_dtype_t)dt, (chorus_op_t)op, k_counts[c],
                            (alias_t)alias, offset, bufs);
          }
        }
      }
    }
  }
}

/* 16-bit float kernels over every pattern of a against chosen b values (ties, subnormals,
 * infinities, NaNs, the largest finite), so the vector conversions (F16C or software) are
 * checked on every input pattern and on rounding ties. */
static void test_half_kernels_grid(const chorus_reduce_variant_t* v) {
  static const uint16_t b_half[] = {0x0000, 0x8000, 0x3c00, 0xbc00, 0x1000, 0x1001, 0x0c00,
                                    0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff, 0x7c00,
                                    0xfc00, 0x7e00, 0x7c01, 0x3800, 0x3e00, 0x4200, 0x0200,
                                    0x3555, 0xc1e3, 0x2e66};
  static const uint16_t b_bf16[] = {0x0000, 0x8000, 0x3f80, 0xbf80, 0x3b80, 0x3b81, 0x0001,
                                    0x8001, 0x007f, 0x0080, 0x7f7f, 0xff7f, 0x7f80, 0xff80,
                                    0x7fc0, 0x7f81, 0x3f00, 0x3fc0, 0x4040, 0x3eab, 0xc2f7,
                                    0x3400, 0x0040, 0x8040};
  enum { NB = sizeof b_half / sizeof b_half[0], NA = 0x10000 };
  _Static_assert(sizeof b_half == sizeof b_bf16, "as many bfloat16 values as float16 values");
  uint16_t* a = malloc(NA * sizeof *a);
  uint16_t* b = malloc(NA * sizeof *b);
  uint16_t* dst = malloc(NA * sizeof *dst);
  if (!a || !b || !dst) abort();
  for (int is_bf16 = 0; is_bf16 <= 1; is_bf16++) {
    chorus_dtype_t dt = is_bf16 ? CHORUS_BFLOAT16 : CHORUS_FLOAT16;
    for (int op = 0; op < CHORUS_OP_COUNT; op++) {
      size_t bad = 0;
      for (int k = 0; k < NB; k++) {
        uint16_t bval = is_bf16 ? b_bf16[k] : b_half[k];
        for (uint32_t i = 0; i < NA; i++) {
          a[i] = (uint16_t)i;
          b[i] = bval;
        }
        v->reduce[dt][op](dst, a, b, NA);
        for (uint32_t i = 0; i < NA; i++) {
          uint16_t want = ref_half_op(dt, (chorus_op_t)op, a[i], bval);
          if (!elem_matches(dt, (chorus_op_t)op, &dst[i], &want) && bad++ < 3)
            printf("  %s %s %s: 0x%04x op 0x%04x = 0x%04x, want 0x%04x\n", v->name,
                   k_dtypes[dt].name, k_op_names[op], a[i], bval, dst[i], want);
        }
      }
      check(bad == 0, "%s %s %s: every pattern x %d chosen values (%zu wrong)", v->name,
            k_dtypes[dt].name, k_op_names[op], NB, bad);
    }
  }
  free(a);
  free(b);
  free(dst);
}

/* ---------------------------------------------------------------------------------------- */
/* avg_finish                                                                                 */

/* Reference integer average: |x| / n with the sign put back, i.e. truncation toward zero. */
static uint64_t ref_int_avg(uint64_t x, const dtype_info_t* d, int nranks) {
  uint64_t n = (uint64_t)nranks;
  if (!d->is_signed) return x / n;
  int neg = (int64_t)x < 0;
  uint64_t mag = neg ? 0 - x : x; /* INT64_MIN's magnitude 2^63 is fine unsigned */
  uint64_t q = mag / n;
  return neg ? 0 - q : q;
}

static void ref_avg_elem(chorus_dtype_t dt, const void* in, void* out, int nranks) {
  const dtype_info_t* d = &k_dtypes[dt];
  if (d->is_int) {
    store_low_bytes(out, ref_int_avg(load_int(in, d), d, nranks), d->size);
  } else if (dt == CHORUS_FLOAT32) {
    float x;
    memcpy(&x, in, 4);
    float r = (float)((double)x / (double)nranks); /* innocuous double rounding, as for + */
    memcpy(out, &r, 4);
  } else if (dt == CHORUS_FLOAT64) {
    double x;
    memcpy(&x, in, 8);
    double r = x / (double)nranks;
    memcpy(out, &r, 8);
  } else {
    uint16_t h;
    memcpy(&h, in, 2);
    int is_bf16 = dt == CHORUS_BFLOAT16;
    float x = f32_from(is_bf16 ? ref_b2f_bits(h) : ref_h2f_bits(h));
    uint32_t q = f32_bits((float)((double)x / (double)nranks));
    uint16_t r = is_bf16 ? ref_f2b(q) : ref_f2h(q);
    memcpy(out, &r, 2);
  }
}

static void avg_case(const char* isa, chorus_avg_fn avg, chorus_dtype_t dt, size_t count,
                     int nranks, buffers_t* bufs) {
  size_t esize = k_dtypes[dt].size;
  size_t bytes = count * esize;
  memset(bufs->dst_mem, GUARD_FILL, buffer_total_bytes(bytes));
  uint8_t* buf = bufs->dst_mem + GUARD_BYTES;
  for (size_t i = 0; i < count; i++) {
    random_elem(dt, buf + i * esize);
    ref_avg_elem(dt, buf + i * esize, bufs->want + i * esize, nranks);
  }
  avg(buf, count, nranks);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++)
    if (!elem_matches(dt, CHORUS_AVG, buf + i * esize, bufs->want + i * esize)) bad++;
  check(bad == 0 && guards_intact(bufs->dst_mem, bytes, 0),
        "%s avg_finish %s count=%zu nranks=%d: %zu wrong", isa, k_dtypes[dt].name, count,
        nranks, bad);
}

static void test_avg_variant(const chorus_reduce_variant_t* v, buffers_t* bufs) {
  static const int nranks_list[] = {2, 3, 7, 8, 1000};
  for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++) {
    check(v->avg[dt] != NULL, "%s: avg_finish for %s exists", v->name, k_dtypes[dt].name);
    if (v->avg[dt] == NULL) continue;
    for (size_t c = 0; c < sizeof k_counts / sizeof k_counts[0]; c++)
      for (size_t n = 0; n < sizeof nranks_list / sizeof nranks_list[0]; n++)
        avg_case(v->name, v->avg[dt], (chorus_dtype_t)dt, k_counts[c], nranks_list[n], bufs);
  }
}

/* The public entry: known values (truncation toward zero, no reciprocal), and no-ops. */
static void test_avg_entry(void) {
  int32_t ints[6] = {-7, 7, -1, INT32_MIN, INT32_MAX, 0};
  chorus__reduce_avg_finish(ints, 6, CHORUS_INT32, 2);
  check(ints[0] == -3 && ints[1] == 3 && ints[2] == 0 && ints[3] == INT32_MIN / 2 &&
            ints[4] == INT32_MAX / 2 && ints[5] == 0,
        "avg_finish int32 truncates toward zero: %d %d %d", ints[0], ints[1], ints[2]);
  int8_t small[3] = {-128, 127, -5};
  chorus__reduce_avg_finish(small, 3, CHORUS_INT8, 200); /* nranks larger than int8 */
  check(small[0] == 0 && small[1] == 0 && small[2] == 0, "avg_finish int8 with nranks=200");
  uint64_t big[2] = {UINT64_MAX, 10};
  chorus__reduce_avg_finish(big, 2, CHORUS_UINT64, 3);
  check(big[0] == UINT64_MAX / 3 && big[1] == 3, "avg_finish uint64");
  /* 1/3 must be a true division: x * (1/3.0f) gives a different float for some x. */
  float f[2] = {1.0f, 7.0f};
  volatile float three = 3.0f;
  float want0 = 1.0f / three, want1 = 7.0f / three;
  chorus__reduce_avg_finish(f, 2, CHORUS_FLOAT32, 3);
  check(f32_bits(f[0]) == f32_bits(want0) && f32_bits(f[1]) == f32_bits(want1),
        "avg_finish float32 divides");
  uint16_t h[2] = {0x3c00, 0x4500}; /* 1.0, 5.0 in float16 */
  chorus__reduce_avg_finish(h, 2, CHORUS_FLOAT16, 4);
  check(h[0] == 0x3400 && h[1] == 0x3d00, "avg_finish float16 1/4, 5/4: 0x%04x 0x%04x", h[0],
        h[1]);
  int32_t keep[2] = {5, -5};
  chorus__reduce_avg_finish(keep, 2, CHORUS_INT32, 1);
  chorus__reduce_avg_finish(keep, 2, CHORUS_INT32, 0);
  chorus__reduce_avg_finish(keep, 2, CHORUS_INT32, -3);
  chorus__reduce_avg_finish(keep, 0, CHORUS_INT32, 2);
  chorus__reduce_avg_finish(keep, 2, (chorus_dtype_t)CHORUS_DTYPE_COUNT, 2);
  check(keep[0] == 5 && keep[1] == -5, "avg_finish no-op for nranks<=1, count 0, bad dtype");
}

/* ---------------------------------------------------------------------------------------- */
/* Dispatcher                                                                                */

static const chorus_reduce_variant_t* best_variant(void) {
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT; isa++) {
    const chorus_reduce_variant_t* v = chorus__reduce_variant((chorus_reduce_isa_t)isa);
    if (v) return v;
  }
  return NULL;
}

static void test_dispatch(void) {
  const chorus_reduce_variant_t* best = best_variant();
  check(best != NULL, "some kernel variant is available");
  if (!best) return;
  const char* isa = chorus__reduce_isa();
  check(isa != NULL && strcmp(isa, best->name) == 0, "chorus__reduce_isa() = %s, best = %s",
        isa ? isa : "(null)", best->name);
  check(chorus__reduce_variant(CHORUS_REDUCE_ISA_GENERIC) != NULL, "generic always available");
  check(chorus__reduce_variant(CHORUS_REDUCE_ISA_COUNT) == NULL, "out-of-range isa is NULL");
  int same = 1;
  for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++)
    for (int op = 0; op < CHORUS_OP_COUNT; op++)
      if (chorus__reduce_fn((chorus_dtype_t)dt, (chorus_op_t)op) != best->reduce[dt][op]) same = 0;
  check(same, "chorus__reduce_fn returns the chosen variant's kernels");
  check(chorus__reduce_fn(CHORUS_FLOAT32, CHORUS_AVG) ==
            chorus__reduce_fn(CHORUS_FLOAT32, CHORUS_SUM),
        "AVG reduces as SUM");
  check(chorus__reduce_fn((chorus_dtype_t)CHORUS_DTYPE_COUNT, CHORUS_SUM) == NULL &&
            chorus__reduce_fn((chorus_dtype_t)-1, CHORUS_SUM) == NULL &&
            chorus__reduce_fn(CHORUS_INT32, (chorus_op_t)CHORUS_OP_COUNT) == NULL &&
            chorus__reduce_fn(CHORUS_INT32, (chorus_op_t)-1) == NULL,
        "chorus__reduce_fn is NULL for out-of-range dtype or op");
  int32_t a[5] = {1, -2, 3, INT32_MAX, INT32_MIN}, b[5] = {10, 20, -30, 1, -1}, d[5] = {0};
  chorus__reduce(d, a, b, 5, CHORUS_INT32, CHORUS_SUM);
  check(d[0] == 11 && d[1] == 18 && d[2] == -27 && d[3] == INT32_MIN && d[4] == INT32_MAX,
        "chorus__reduce int32 sum wraps");
  int32_t untouched[2] = {7, 8};
  chorus__reduce(untouched, a, b, 2, (chorus_dtype_t)CHORUS_DTYPE_COUNT, CHORUS_SUM);
  chorus__reduce(untouched, a, b, 2, CHORUS_INT32, (chorus_op_t)CHORUS_OP_COUNT);
  check(untouched[0] == 7 && untouched[1] == 8, "chorus__reduce ignores an invalid dtype/op");
  printf("selected kernel variant: %s\n", isa);
}

int main(void) {
  alarm(TEST_TIME_LIMIT_SEC); /* SIGALRM's default action ends the process: a bounded test */
  setvbuf(stdout, NULL, _IOLBF, 0);
  test_reference_itself();
  test_half_to_float_exhaustive();
  test_float_to_16();
  test_dispatch();
  test_avg_entry();

  buffers_t bufs;
  size_t max_bytes = 4099 * 8;
  if (!buffers_alloc(&bufs, max_bytes)) {
    printf("FAIL: out of memory\n");
    return 1;
  }
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT; isa++) {
    const chorus_reduce_variant_t* v = chorus__reduce_variant((chorus_reduce_isa_t)isa);
    if (v == NULL) {
      static const char* const names[CHORUS_REDUCE_ISA_COUNT] = {"avx512", "avx2", "generic"};
      printf("variant %s: not supported by this CPU, skipped\n", names[isa]);
      continue;
    }
    int failed_before = g_failed;
    test_kernel_matrix(v, &bufs);
    test_half_kernels_grid(v);
    test_avg_variant(v, &bufs);
    printf("variant %s: %s\n", v->name, g_failed == failed_before ? "ok" : "FAILED");
  }
  buffers_free(&bufs);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
