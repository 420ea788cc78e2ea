/*
 * test_ref.c - checks the reference itself (tests/harness/ref.c), since every collective test
 * trusts it: float16/bfloat16 conversion (exhaustive round trips, ties to even at every
 * midpoint, the compiler's own _Float16 where available), and that the generated inputs make
 * every reduction exact: the reference result equals the true mathematical result.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ref.h"
#include "test.h"

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

TEST(half_known_values) {
  ASSERT_EQ(ref_float_to_half(0.0f), 0x0000);
  ASSERT_EQ(ref_float_to_half(-0.0f), 0x8000);
  ASSERT_EQ(ref_float_to_half(1.0f), 0x3c00);
  ASSERT_EQ(ref_float_to_half(-2.0f), 0xc000);
  ASSERT_EQ(ref_float_to_half(65504.0f), 0x7bff);       /* largest finite */
  ASSERT_EQ(ref_float_to_half(65519.99f), 0x7bff);      /* below the midpoint to infinity */
  ASSERT_EQ(ref_float_to_half(65520.0f), 0x7c00);       /* the midpoint rounds to even: inf */
  ASSERT_EQ(ref_float_to_half(ldexpf(1, -24)), 0x0001); /* smallest subnormal */
  ASSERT_EQ(ref_float_to_half(ldexpf(1, -25)), 0x0000); /* half of it: ties to even, 0 */
  ASSERT_EQ(ref_float_to_half(ldexpf(3, -26)), 0x0001);
  ASSERT_EQ(ref_float_to_half(ldexpf(1, -14)), 0x0400);        /* smallest normal */
  ASSERT_EQ(ref_float_to_half(1.0f + ldexpf(1, -11)), 0x3c00); /* tie -> even */
  ASSERT_EQ(ref_float_to_half(1.0f + ldexpf(3, -11)), 0x3c02); /* tie -> even */
  ASSERT_EQ(ref_float_to_half(1.0f / 3.0f), 0x3555);
  ASSERT_EQ(ref_float_to_half(INFINITY), 0x7c00);
  ASSERT_TRUE(isnan(ref_half_to_float(ref_float_to_half(NAN))));
  ASSERT_TRUE(ref_half_to_float(0x3c00) == 1.0f);
  ASSERT_TRUE(ref_half_to_float(0x0001) == ldexpf(1, -24));
  ASSERT_TRUE(ref_half_to_float(0x7bff) == 65504.0f);
  ASSERT_EQ(ref_float_to_bf16(1.0f), 0x3f80);
  ASSERT_EQ(ref_float_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80); /* tie -> even */
  ASSERT_EQ(ref_float_to_bf16(1.0f + ldexpf(3, -8)), 0x3f82); /* tie -> even */
  ASSERT_EQ(ref_float_to_bf16(-256.0f), 0xc380);
  ASSERT_TRUE(isnan(ref_bf16_to_float(ref_float_to_bf16(NAN))));
}

/* Every half converts to float and back unchanged; between two neighbours the exact midpoint
 * goes to the even one and anything nearer to the nearer one. */
TEST(half_exhaustive) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = ref_half_to_float((uint16_t)h);
    if (isnan(f)) {
      ASSERT_EQ((h & 0x7c00), 0x7c00);
      continue;
    }
    ASSERT_EQ(ref_float_to_half(f), h);
    if ((h & 0x7fff) >= 0x7bff) continue; /* no finite neighbour above */
    float next = ref_half_to_float((uint16_t)(h + 1));
    float mid = (f + next) / 2; /* exact in float */
    uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
    ASSERT_EQ(ref_float_to_half(mid), even);
    ASSERT_EQ(ref_float_to_half(nextafterf(mid, f)), h);
    ASSERT_EQ(ref_float_to_half(nextafterf(mid, next)), h + 1);
  }
}

TEST(bf16_exhaustive) {
  for (uint32_t b = 0; b < 0x10000; b++) {
    float f = ref_bf16_to_float((uint16_t)b);
    ASSERT_EQ(f32_bits(f), b << 16);
    if (isnan(f)) continue;
    ASSERT_EQ(ref_float_to_bf16(f), b);
    if ((b & 0x7fff) >= 0x7f7f) continue;
    uint32_t mid_bits = (b << 16) | 0x8000u;
    float mid;
    memcpy(&mid, &mid_bits, sizeof(mid));
    uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
    ASSERT_EQ(ref_float_to_bf16(mid), even);
    ASSERT_EQ(ref_float_to_bf16(nextafterf(mid, f)), b);
    ASSERT_EQ(ref_float_to_bf16(nextafterf(mid, ref_bf16_to_float((uint16_t)(b + 1)))), b + 1);
  }
}

/* The compiler's _Float16 (libgcc's soft conversion on x86-64) as a second opinion. */
TEST(half_vs_compiler) {
#ifdef __FLT16_MAX__
  uint64_t x = 12345;
  for (uint32_t k = 0; k < (1u << 22); k++) {
    x = ref_mix64(x + k);
    uint32_t bits = (uint32_t)x;
    if (k % 2) bits = (bits & 0x8fffffffu) | 0x30000000u; /* bias towards half's range */
    float f;
    memcpy(&f, &bits, sizeof(f));
    if (isnan(f)) continue;
    _Float16 c = (_Float16)f;
    uint16_t cb;
    memcpy(&cb, &c, sizeof(cb));
    if (ref_float_to_half(f) != cb)
      FAIL("float 0x%08x: ref gives 0x%04x, compiler 0x%04x", bits, ref_float_to_half(f), cb);
  }
#else
  SKIP("this compiler has no _Float16");
#endif
}

/* ---- the generators make every reduction exact ---- */

/* Reads element k as a long double exact for every generated value (|v| < 2^64 fits in
 * long double's 64-bit significand on x86; other targets: integers are read exactly). */
static long double read_elem(const void* buf, size_t k, chorus_dtype_t dt) {
  switch (dt) {
    case CHORUS_INT8: return ((const int8_t*)buf)[k];
    case CHORUS_UINT8: return ((const uint8_t*)buf)[k];
    case CHORUS_INT32: return ((const int32_t*)buf)[k];
    case CHORUS_UINT32: return ((const uint32_t*)buf)[k];
    case CHORUS_INT64: return (long double)((const int64_t*)buf)[k];
    case CHORUS_UINT64: return (long double)((const uint64_t*)buf)[k];
    case CHORUS_FLOAT16: return ref_half_to_float(((const uint16_t*)buf)[k]);
    case CHORUS_BFLOAT16: return ref_bf16_to_float(((const uint16_t*)buf)[k]);
    case CHORUS_FLOAT32: return ((const float*)buf)[k];
    case CHORUS_FLOAT64: return ((const double*)buf)[k];
    default: return 0;
  }
}

enum { GEN_COUNT = 2048, GEN_MAX_RANKS = 8 };

TEST(generators_exact) {
  static unsigned char inputs[GEN_MAX_RANKS][GEN_COUNT * 8];
  static unsigned char expect[GEN_COUNT * 8];
  for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++) {
    for (int op = 0; op < CHORUS_OP_COUNT; op++) {
      if (op == CHORUS_AVG && ref_dtypes[dt].is_float) continue; /* rounded, not exact */
      for (int n = 1; n <= GEN_MAX_RANKS; n++) {
        uint64_t seed = ref_mix64((uint64_t)(dt * 100 + op * 10 + n));
        for (int r = 0; r < n; r++)
          ref_fill_reduce_input(inputs[r], GEN_COUNT, (chorus_dtype_t)dt, (chorus_op_t)op, n, r, 0,
                                seed);
        ref_reduce_expected(expect, GEN_COUNT, (chorus_dtype_t)dt, (chorus_op_t)op, n, 0, seed);
        for (size_t k = 0; k < GEN_COUNT; k++) {
          long double acc = read_elem(inputs[0], k, (chorus_dtype_t)dt);
          for (int r = 0; r < n; r++) {
            long double v = read_elem(inputs[r], k, (chorus_dtype_t)dt);
            if (!ref_dtypes[dt].is_signed && v < 0) FAIL("negative input for unsigned type");
            if (v != floorl(v)) FAIL("non-integer input");
            if (r == 0) continue;
            if (op == CHORUS_SUM || op == CHORUS_AVG) acc += v;
            if (op == CHORUS_PROD) acc *= v;
            if (op == CHORUS_MAX) acc = v > acc ? v : acc;
            if (op == CHORUS_MIN) acc = v < acc ? v : acc;
          }
          if (op == CHORUS_AVG) acc = truncl(acc / n);
          long double got = read_elem(expect, k, (chorus_dtype_t)dt);
          if (got != acc)
            FAIL("%s %s n=%d element %zu: reference %.1Lf, exact %.1Lf", ref_dtypes[dt].name,
                 ref_op_names[op], n, k, got, acc);
        }
      }
    }
  }
}

/* The inputs are not trivial: values differ across ranks and elements, and span a good part
 * of their allowed range (a generator stuck at 0 or 1 would make the matrix blind). */
TEST(generators_spread) {
  static unsigned char a[GEN_COUNT * 8], b[GEN_COUNT * 8];
  for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++) {
    for (int op = 0; op < CHORUS_OP_COUNT; op++) {
      ref_fill_reduce_input(a, GEN_COUNT, (chorus_dtype_t)dt, (chorus_op_t)op, 4, 0, 0, 77);
      ref_fill_reduce_input(b, GEN_COUNT, (chorus_dtype_t)dt, (chorus_op_t)op, 4, 1, 0, 77);
      size_t es = ref_dtypes[dt].size_bytes, differ = 0, distinct_neighbours = 0;
      for (size_t k = 0; k < GEN_COUNT; k++) {
        differ += memcmp(a + k * es, b + k * es, es) != 0;
        if (k) distinct_neighbours += memcmp(a + k * es, a + (k - 1) * es, es) != 0;
      }
      if (differ < GEN_COUNT / 4 || distinct_neighbours < GEN_COUNT / 4)
        FAIL("%s %s: inputs too uniform (%zu differ across ranks, %zu from neighbours)",
             ref_dtypes[dt].name, ref_op_names[op], differ, distinct_neighbours);
    }
  }
  unsigned char x[64], y[64];
  ref_fill_bytes(x, 64, 0, 1, 0);
  ref_fill_bytes(y, 64, 1, 1, 0);
  ASSERT_TRUE(memcmp(x, y, 64) != 0);
  ref_fill_bytes(y, 61, 0, 1, 3); /* an offset view is the same stream */
  ASSERT_TRUE(memcmp(x + 3, y, 61) == 0);
}
