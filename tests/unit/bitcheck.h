/*
 * bitcheck.h - what the standalone bit-exact unit tests (test_reduce.c, test_codec.c) share: a
 * check() that counts passes and failures and prints the first MAX_FAILURE_LINES failures, the
 * bit views of float and double, a deterministic xorshift generator, the exact powers of two
 * their references compute with, and the reference float16/bfloat16 conversions, computed on
 * values (the library's own conversions are never used to check themselves). Each test
 * includes it once; everything is static.
 */
#ifndef CHORUS_TEST_BITCHECK_H
#define CHORUS_TEST_BITCHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { MAX_FAILURE_LINES = 60 };

static int g_passed;
static int g_failed;

__attribute__((format(printf, 2, 3))) static inline void check(int ok, const char* fmt, ...) {
  if (ok) {
    g_passed++;
    return;
  }
  g_failed++;
  if (g_failed > MAX_FAILURE_LINES) return;
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
}

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
static inline float f32_from(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  return u;
}
static inline double f64_from(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static inline uint64_t rnd64(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}

/* 2^k as a double, for normal exponents only. */
static inline double pow2(int k) { return f64_from((uint64_t)(k + 1023) << 52); }

/* The exponent E with 2^E <= a < 2^(E+1), for a positive normal double. */
static inline int exponent_of(double a) { return (int)((f64_bits(a) >> 52) & 0x7ff) - 1023; }

/* ---- reference float16 / bfloat16 conversions, on values, not bit tricks ---- */

/* Round a (0 <= a < 2^52) to the nearest integer, ties to even: the classic 2^52 trick, exact
 * in IEEE double with the default rounding mode. volatile keeps the compiler from folding. */
static inline double round_half_even(double a) {
  volatile double big = a + 0x1p52;
  return big - 0x1p52;
}

static inline int is_nan_f(float f) { return f != f; }

/* The value of a float16 pattern, from its fields (exact in double). */
static inline double half_value(uint16_t h) {
  int e = (h >> 10) & 0x1f;
  int m = h & 0x3ff;
  double mag = e == 0 ? m * pow2(-24) : (1024 + m) * pow2(e - 25);
  return (h & 0x8000) ? -mag : mag;
}

/* The value of a bfloat16 pattern, from its fields. */
static inline double bf16_value(uint16_t b) {
  int e = (b >> 7) & 0xff;
  int m = b & 0x7f;
  double mag = e == 0 ? m * pow2(-133) : (128 + m) * pow2(e - 134);
  return (b & 0x8000) ? -mag : mag;
}

/* Reference float16 -> float32 bits. Specified NaN rule (as F16C): quiet bit set, payload
 * widened, sign kept. */
static inline uint32_t ref_h2f_bits(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  if ((h & 0x7c00) == 0x7c00) {
    uint32_t m = h & 0x3ffu;
    return m == 0 ? sign | 0x7f800000u : sign | 0x7fc00000u | (m << 13);
  }
  return f32_bits((float)half_value(h)); /* exact: every half is a float */
}

/* Reference bfloat16 -> float32 bits: NaN patterns are kept as they are. */
static inline uint32_t ref_b2f_bits(uint16_t b) {
  if ((b & 0x7f80) == 0x7f80) return (uint32_t)b << 16;
  return f32_bits((float)bf16_value(b));
}

/* Round |a| (a positive, finite double) to a binary format with `mant_bits` explicit mantissa
 * bits and minimum normal exponent emin: returns the rounded value (exact double). */
static inline double round_to_format(double a, int mant_bits, int emin) {
  int e = exponent_of(a);
  int quantum_exp = (e < emin ? emin : e) - mant_bits;
  double n = round_half_even(a * pow2(-quantum_exp));
  return n * pow2(quantum_exp);
}

/* Reference float32 -> float16. NaN: sign | 0x7e00 | top 10 payload bits (as F16C). */
static inline uint16_t ref_f2h(uint32_t fb) {
  uint16_t sign = (uint16_t)((fb >> 16) & 0x8000);
  float f = f32_from(fb);
  if (is_nan_f(f)) return (uint16_t)(sign | 0x7e00 | ((fb >> 13) & 0x3ff));
  double a = (double)f;
  if (a < 0) a = -a;
  if (a == 0) return sign;
  if (a > 0x1p20) return (uint16_t)(sign | 0x7c00); /* includes infinity */
  double v = round_to_format(a, 10, -14);
  if (v >= 65536.0) return (uint16_t)(sign | 0x7c00); /* rounded past the largest, 65504 */
  if (v < 0x1p-14) return (uint16_t)(sign | (uint16_t)(v * 0x1p24)); /* subnormal */
  int e = exponent_of(v);
  uint16_t mant = (uint16_t)(v * pow2(10 - e) - 1024);
  return (uint16_t)(sign | ((e + 15) << 10) | mant);
}

/* Reference float32 -> bfloat16. NaN: top half with the quiet bit set. */
static inline uint16_t ref_f2b(uint32_t fb) {
  uint16_t sign = (uint16_t)((fb >> 16) & 0x8000);
  float f = f32_from(fb);
  if (is_nan_f(f)) return (uint16_t)((fb >> 16) | 0x40);
  double a = (double)f;
  if (a < 0) a = -a;
  if (a == 0) return sign;
  if (a > 0x1p200) return (uint16_t)(sign | 0x7f80); /* infinity */
  double v = round_to_format(a, 7, -126);
  if (v >= 0x1p128) return (uint16_t)(sign | 0x7f80);
  return (uint16_t)(sign | (f32_bits((float)v) >> 16)); /* v is a bfloat16 value: exact */
}

#endif /* CHORUS_TEST_BITCHECK_H */

