/*
 * perf_check.h - the correctness check of chorus-perf: input patterns made of small integers
 * (so every sum and product is exact in every dtype), the expected outputs each rank computes
 * on its own with plain loops, and bitwise comparison. Included once, by chorus-perf.c only:
 * the functions are static so the tool stays one translation unit (one CMake source).
 */
#ifndef CHORUS_PERF_CHECK_H
#define CHORUS_PERF_CHECK_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"

/* Values repeat with this period along a buffer. It is prime, so a chunk that lands at a
 * power-of-two offset from where it belongs never lines up with the pattern. */
#define PAT_PERIOD 61
/* Elements compared or filled per memcmp/memcpy; the tables hold PERIOD + CHUNK elements so that
 * any phase can be followed by a whole chunk. */
#define PAT_CHUNK 4096
#define PAT_SPAN (PAT_PERIOD + PAT_CHUNK)
/* Written over outputs before the call, so an element the library never wrote is caught. No
 * pattern value or expected result has these bytes in any dtype. */
#define PAT_SENTINEL_BYTE 0xA5

/* Periodic tables of one (dtype, op, nranks): what each rank sends and the reduction of all. */
typedef struct {
  chorus_dtype_t dtype;
  chorus_op_t op;
  int nranks;
  size_t elem_bytes;
  unsigned char** input; /* input[r]: rank r's values, PAT_SPAN elements */
  unsigned char* reduced; /* op over all ranks, avg already divided, PAT_SPAN elements */
  int zero_permille;      /* share of each rank's elements that are 0 (-Z) */
} perf_pattern_t;

/* ---- float16 / bfloat16, written here so the check does not trust the library's own ---- */

static uint32_t float_bits(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return bits;
}

/* IEEE binary16, round to nearest even; overflow gives infinity, NaN stays NaN. */
static uint16_t float_to_f16_rne(float f) {
  uint32_t bits = float_bits(f);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
  uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 rounds to infinity */
  if (abs_bits >= 0x38800000u) {                      /* normal half: >= 2^-14 */
    uint32_t rounded = abs_bits + 0xfffu + ((abs_bits >> 13) & 1u);
    return sign | (uint16_t)((rounded - 0x38000000u) >> 13);
  }
  /* Subnormal half: the result counts units of 2^-24. */
  uint32_t exponent = abs_bits >> 23;
  if (exponent < 102) return sign; /* below 2^-25: rounds to zero */
  uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126 - exponent; /* 14..24 */
  uint32_t quotient = mantissa >> shift;
  uint32_t rest = mantissa & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (quotient & 1u))) quotient++;
  return sign | (uint16_t)quotient;
}

/* bfloat16 (the top half of a float32), round to nearest even; NaN stays NaN. */
static uint16_t float_to_bf16_rne(float f) {
  uint32_t bits = float_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x0040u);
  return (uint16_t)((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

/* ---- values ---- */

static int dtype_is_signed(chorus_dtype_t dtype) {
  return dtype != CHORUS_UINT8 && dtype != CHORUS_UINT32 && dtype != CHORUS_UINT64;
}

static uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  return h ^ (h >> 16);
}

/* The small integer rank r contributes at phase `phase` (index modulo PAT_PERIOD).
 * prod: magnitudes 1 or 2, and 3 from at most one rank per phase, so a product of up to 8 ranks
 * is 3 * 2^k <= 384: two significant bits, exact in bfloat16 whatever the order. Other ops:
 * |v| <= amplitude with amplitude * nranks <= 120, so every partial sum is exact in bfloat16
 * (integers up to 256) and fits int8. */
static int64_t pattern_value(int r, int phase, int nranks, chorus_op_t op, int is_signed, int zero_permille) {
  uint32_t h = mix32((uint32_t)phase * 2654435761u + (uint32_t)(r + 1) * 40503u);
  if (zero_permille && op != CHORUS_PROD && (int)(mix32(h ^ 0x2545f491u) % 1000u) < zero_permille) return 0;
  if (op == CHORUS_PROD) {
    int64_t magnitude = (phase % nranks == r && (h & 4u)) ? 3 : 1 + (int64_t)(h & 1u);
    return (is_signed && (h & 0x30u) == 0) ? -magnitude : magnitude;
  }
  int64_t amplitude = nranks <= 8 ? 15 : (120 / nranks > 0 ? 120 / nranks : 1);
  if (!is_signed) return (int64_t)(h % (uint32_t)(amplitude + 1));
  return (int64_t)(h % (uint32_t)(2 * amplitude + 1)) - amplitude;
}

/* Stores integer v as one element; integer dtypes keep the low bytes (wrap-around). */
static void store_integer(chorus_dtype_t dtype, int64_t v, void* out) {
  uint64_t bits = (uint64_t)v;
  switch (dtype) {
    case CHORUS_INT8:
    case CHORUS_UINT8: *(uint8_t*)out = (uint8_t)bits; break;
    case CHORUS_INT32:
    case CHORUS_UINT32: { uint32_t x = (uint32_t)bits; memcpy(out, &x, 4); break; }
    case CHORUS_INT64:
    case CHORUS_UINT64: memcpy(out, &bits, 8); break;
    case CHORUS_FLOAT16: { uint16_t x = float_to_f16_rne((float)v); memcpy(out, &x, 2); break; }
    case CHORUS_BFLOAT16: { uint16_t x = float_to_bf16_rne((float)v); memcpy(out, &x, 2); break; }
    case CHORUS_FLOAT32: { float x = (float)v; memcpy(out, &x, 4); break; }
    case CHORUS_FLOAT64: { double x = (double)v; memcpy(out, &x, 8); break; }
    default: break;
  }
}

/* Stores sum / nranks with the library's rule: integers truncate toward zero; float32 divides
 * in float32; float16 and bfloat16 divide in float32 then round to nearest even. */
static void store_average(chorus_dtype_t dtype, int64_t sum, int nranks, void* out) {
  float q_f32 = (float)sum / (float)nranks;
  switch (dtype) {
    case CHORUS_FLOAT16: { uint16_t x = float_to_f16_rne(q_f32); memcpy(out, &x, 2); break; }
    case CHORUS_BFLOAT16: { uint16_t x = float_to_bf16_rne(q_f32); memcpy(out, &x, 2); break; }
    case CHORUS_FLOAT32: memcpy(out, &q_f32, 4); break;
    case CHORUS_FLOAT64: { double x = (double)sum / (double)nranks; memcpy(out, &x, 8); break; }
    default: store_integer(dtype, sum / nranks, out); break;
  }
}

/* The exact result of op over all ranks at one phase, in int64 (no overflow: |prod| <= 3*2^7
 * per 8 ranks, sums <= 120). */
static int64_t reduce_phase(const perf_pattern_t* p, int phase, int is_signed) {
  int64_t acc = pattern_value(0, phase, p->nranks, p->op, is_signed, p->zero_permille);
  for (int r = 1; r < p->nranks; r++) {
    int64_t v = pattern_value(r, phase, p->nranks, p->op, is_signed, p->zero_permille);
    switch (p->op) {
      case CHORUS_PROD: acc *= v; break;
      case CHORUS_MAX: acc = v > acc ? v : acc; break;
      case CHORUS_MIN: acc = v < acc ? v : acc; break;
      default: acc += v; break; /* SUM and AVG */
    }
  }
  return acc;
}

static void pattern_free(perf_pattern_t* p) {
  if (p->input != NULL) {
    for (int r = 0; r < p->nranks; r++) free(p->input[r]);
  }
  free(p->input);
  free(p->reduced);
  memset(p, 0, sizeof *p);
}

/* Builds the tables of (dtype, op) for nranks ranks. Returns 0, or -1 when out of memory. */
static int pattern_build(perf_pattern_t* p, chorus_dtype_t dtype, chorus_op_t op, int nranks, int zero_permille) {
  pattern_free(p);
  p->zero_permille = zero_permille;
  p->dtype = dtype;
  p->op = op;
  p->nranks = nranks;
  p->elem_bytes = chorus_dtype_size(dtype);
  p->input = calloc((size_t)nranks, sizeof *p->input);
  p->reduced = malloc(PAT_SPAN * p->elem_bytes);
  if (p->input == NULL || p->reduced == NULL) return -1;
  int is_signed = dtype_is_signed(dtype);
  for (int r = 0; r < nranks; r++) {
    p->input[r] = malloc(PAT_SPAN * p->elem_bytes);
    if (p->input[r] == NULL) return -1;
    for (size_t i = 0; i < PAT_SPAN; i++) {
      int64_t v = pattern_value(r, (int)(i % PAT_PERIOD), nranks, op, is_signed, zero_permille);
      store_integer(dtype, v, p->input[r] + i * p->elem_bytes);
    }
  }
  for (size_t i = 0; i < PAT_SPAN; i++) {
    int64_t acc = reduce_phase(p, (int)(i % PAT_PERIOD), is_signed);
    unsigned char* out = p->reduced + i * p->elem_bytes;
    if (op == CHORUS_AVG) store_average(dtype, acc, nranks, out);
    else store_integer(dtype, acc, out);
  }
  return 0;
}

/* ---- filling and comparing regions of a buffer ----
 * A region is `count` elements whose element k holds table[(first_index + k) % PAT_PERIOD]. */

static void region_fill(void* buf, size_t count, const unsigned char* table, size_t elem_bytes,
                        size_t first_index) {
  unsigned char* dst = buf;
  for (size_t off = 0; off < count; off += PAT_CHUNK) {
    size_t n = count - off < PAT_CHUNK ? count - off : PAT_CHUNK;
    size_t phase = (first_index + off) % PAT_PERIOD;
    memcpy(dst + off * elem_bytes, table + phase * elem_bytes, n * elem_bytes);
  }
}

/* Number of elements of the region that differ bitwise from the table. */
static uint64_t region_count_wrong(const void* buf, size_t count, const unsigned char* table,
                                   size_t elem_bytes, size_t first_index) {
  const unsigned char* got = buf;
  uint64_t wrong = 0;
  for (size_t off = 0; off < count; off += PAT_CHUNK) {
    size_t n = count - off < PAT_CHUNK ? count - off : PAT_CHUNK;
    const unsigned char* want = table + ((first_index + off) % PAT_PERIOD) * elem_bytes;
    const unsigned char* have = got + off * elem_bytes;
    if (memcmp(have, want, n * elem_bytes) == 0) continue;
    for (size_t k = 0; k < n; k++) {
      wrong += memcmp(have + k * elem_bytes, want + k * elem_bytes, elem_bytes) != 0;
    }
  }
  return wrong;
}

#endif /* CHORUS_PERF_CHECK_H */
