/*
 * half_inline.h - branch-free, bit-exact float16/bfloat16 <-> float32 conversions, written so
 * that gcc vectorises a loop calling them (every case computed, the answer picked by selects).
 * Private to src/reduce. They give the same bits as the x86 F16C instructions, so ranks with and
 * without F16C agree: round to nearest even, subnormals kept, NaN kept NaN with the quiet bit
 * set and the payload truncated (float -> half) or widened (half -> float), sign preserved.
 */
#ifndef CHORUS_REDUCE_HALF_INLINE_H
#define CHORUS_REDUCE_HALF_INLINE_H

#include <stdint.h>
#include <string.h>

static inline uint32_t chorus__f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float chorus__f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* cond ? yes : no, written with masks: a `?:` would let gcc sink the float arithmetic of the
 * unused case into a branch, which it then may not execute unconditionally (-ftrapping-math),
 * and the loop would not vectorise. Conditions compare magnitudes as int32 (all of them are
 * below 2^31) because SSE/AVX2 have signed 32-bit compares only. */
static inline uint32_t chorus__mask_if(int cond) { return 0u - (uint32_t)(cond != 0); }

static inline uint32_t chorus__select_u32(int cond, uint32_t yes, uint32_t no) {
  uint32_t mask = chorus__mask_if(cond);
  return (yes & mask) | (no & ~mask);
}

/* binary16 -> float32: exact for every non-NaN value. */
static inline float chorus__h2f_inline(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  int32_t mag = h & 0x7fff;
  uint32_t umag = (uint32_t)mag;
  /* Normal numbers: move the fields into place and rebias the exponent (15 -> 127). */
  uint32_t normal = (umag << 13) + ((127u - 15u) << 23);
  /* Subnormals: the 10-bit mantissa times 2^-24 is exact in float32 (and normal there). */
  uint32_t subnormal = chorus__f32_bits((float)mag * 0x1p-24f);
  /* Infinity and NaN: all-ones exponent; a NaN gets the quiet bit, as F16C does. */
  uint32_t inf_nan = 0x7f800000u | (umag << 13) | (chorus__mask_if(mag > 0x7c00) & 0x00400000u);
  uint32_t bits = chorus__select_u32(mag < 0x0400, subnormal,
                                     chorus__select_u32(mag >= 0x7c00, inf_nan, normal));
  return chorus__f32_from_bits(bits | sign);
}

/* float32 -> binary16, round to nearest even; overflow gives infinity. */
static inline uint16_t chorus__f2h_inline(float f) {
  uint32_t u = chorus__f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t umag = u & 0x7fffffffu;
  int32_t mag = (int32_t)umag;
  /* Normal half range [2^-14, 65520): rebias the exponent and round on bit 13: adding
   * 0xfff plus the lowest kept bit carries exactly when the dropped bits are above half, or
   * exactly half with an odd kept bit. A carry into the exponent is the right answer, even
   * up to infinity (0x7c00). */
  uint32_t normal = (umag - ((127u - 15u) << 23) + 0xfffu + ((umag >> 13) & 1u)) >> 13;
  /* Below 2^-14 (half subnormal or zero): adding 0.5f puts the half quantum 2^-24 on the last
   * mantissa bit of the float sum, so the FPU's own round-to-nearest-even does the rounding.
   * Exact whatever the FTZ/DAZ mode: inputs it would flush round to zero anyway. */
  uint32_t subnormal = chorus__f32_bits(chorus__f32_from_bits(umag) + 0.5f) - 0x3f000000u;
  uint32_t nan = 0x7e00u | ((umag >> 13) & 0x03ffu);
  uint32_t big = chorus__select_u32(mag > 0x7f800000, nan, 0x7c00u);
  uint32_t bits = chorus__select_u32(mag < 0x38800000, subnormal,
                                     chorus__select_u32(mag < 0x47800000, normal, big));
  return (uint16_t)(bits | sign);
}

/* bfloat16 -> float32: the top half of the float. */
static inline float chorus__b2f_inline(uint16_t b) {
  return chorus__f32_from_bits((uint32_t)b << 16);
}

/* float32 -> bfloat16, round to nearest even (carries reach infinity correctly). A NaN is not
 * rounded (a carry could turn it into infinity or flip its sign): it keeps its sign and top
 * payload bits and gets the quiet bit, so it stays NaN. */
static inline uint16_t chorus__f2b_inline(float f) {
  uint32_t u = chorus__f32_bits(f);
  uint32_t nan_mask = chorus__mask_if((int32_t)(u & 0x7fffffffu) > 0x7f800000);
  uint32_t rounding = (0x7fffu + ((u >> 16) & 1u)) & ~nan_mask;
  return (uint16_t)(((u | (nan_mask & 0x00400000u)) + rounding) >> 16);
}

#endif /* CHORUS_REDUCE_HALF_INLINE_H */
