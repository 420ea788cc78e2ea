/*
 * codec_body.h - the fp16, bf16, int8 and int4 codec kernels (codec.h). Not a normal header:
 * each codec_<isa>.c includes it once, after `#pragma GCC target(...)`, so the same C source
 * becomes one chorus_codec_variant_t per instruction set, as kernel_body.h does for the
 * reductions.
 *
 * Parameters, defined by the including file:
 *   CODEC_TABLE      name of the chorus_codec_variant_t to define (e.g. chorus__codec_avx2)
 *   CODEC_ISA_NAME   its name string ("avx2")
 *   CODEC_HAVE_F16C  1 to convert float16 with the F16C instructions, else 0
 *
 * How the loops vectorise at -O2 (gcc's "very cheap" cost model: no loop versioning for
 * aliasing, no vector epilogues): every element loop runs over a piece whose length is a
 * compile-time constant (CODEC_PIECES), selects instead of branches, and the pointers that may
 * alias only exactly (a residual that is the source) are declared so with CODEC_IVDEP. The wire
 * is accessed through memcpy, so it may have any alignment.
 *
 * Bits: every variant must give the same bits. The arithmetic is float32 products, sums and
 * quotients in the default rounding mode, written in one order; the build compiles this file
 * with -ffp-contract=off so that no variant fuses a decode's product and sum into one rounding.
 */

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "reduce/codec.h"
#include "reduce/half_inline.h"

#if CODEC_HAVE_F16C
#include <immintrin.h>
#endif

/* "No loop-carried dependence": gcc's ivdep; clang's equivalent. */
#if defined(__clang__)
#define CODEC_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#else
#define CODEC_IVDEP _Pragma("GCC ivdep")
#endif

#define CODEC_INLINE static inline __attribute__((always_inline))

/* Piece lengths in elements: a block of 64 float32 (256 bytes, four 512-bit vectors), then steps
 * of 8 (one 256-bit vector) for the remainder, then the last few. The amax reduction takes
 * longer blocks so that folding the vector lanes into one maximum is rare. */
enum { CODEC_BLOCK = 64, CODEC_STEP = 8, CODEC_AMAX_BLOCK = 512 };
_Static_assert(CHORUS_CODEC_CHUNK % CODEC_AMAX_BLOCK == 0 && CHORUS_CODEC_CHUNK % 2 == 0,
               "a chunk is whole amax blocks and starts on an int4 byte");

/* Calls RUN(start, len, ...) over [begin, end) in pieces of block, then step, then the rest, so
 * that RUN (always inlined) sees a constant len in the first two loops and vectorises them. */
#define CODEC_PIECES(begin, end, block, step, RUN, ...)                   \
  do {                                                                    \
    size_t piece_start_ = (begin);                                        \
    const size_t piece_end_ = (end);                                      \
    for (; piece_end_ - piece_start_ >= (block); piece_start_ += (block)) \
      RUN(piece_start_, (block), __VA_ARGS__);                            \
    for (; piece_end_ - piece_start_ >= (step); piece_start_ += (step))   \
      RUN(piece_start_, (step), __VA_ARGS__);                             \
    RUN(piece_start_, piece_end_ - piece_start_, __VA_ARGS__);            \
  } while (0)

/* ---- wire access (any alignment) ---- */

CODEC_INLINE uint16_t codec_load_u16(const uint8_t* wire, size_t i) {
  uint16_t v;
  memcpy(&v, wire + 2 * i, sizeof v);
  return v;
}

CODEC_INLINE void codec_store_u16(uint8_t* wire, size_t i, uint16_t v) {
  memcpy(wire + 2 * i, &v, sizeof v);
}

CODEC_INLINE float codec_load_scale(const uint8_t* wire, size_t chunk) {
  float v;
  memcpy(&v, wire + 4 * chunk, sizeof v);
  return v;
}

CODEC_INLINE void codec_store_scale(uint8_t* wire, size_t chunk, float v) {
  memcpy(wire + 4 * chunk, &v, sizeof v);
}

/* ---- fp16 and bf16: one conversion per element ---- */

/* One loop body for both 16-bit forms: NARROW/WIDEN are half_inline.h's pair. */
#define CODEC_CAST_RUNS(NAME, NARROW, WIDEN)                                             \
  CODEC_INLINE void NAME##_encode_run(size_t start, size_t len, uint8_t* restrict wire,  \
                                      const float* src, float* residual) {               \
    uint8_t* restrict out = wire + 2 * start;                                            \
    const float* in = src + start;                                                       \
    if (residual != NULL) {                                                              \
      float* res = residual + start;                                                     \
      CODEC_IVDEP for (size_t j = 0; j < len; j++) {                                     \
        float x = in[j];                                                                 \
        uint16_t h = NARROW(x);                                                          \
        codec_store_u16(out, j, h);                                                      \
        res[j] = x - WIDEN(h);                                                           \
      }                                                                                  \
    } else {                                                                             \
      for (size_t j = 0; j < len; j++) codec_store_u16(out, j, NARROW(in[j]));           \
    }                                                                                    \
  }                                                                                      \
  CODEC_INLINE void NAME##_decode_run(size_t start, size_t len, float* restrict dst,     \
                                      const uint8_t* restrict wire) {                    \
    float* restrict out = dst + start;                                                   \
    const uint8_t* restrict in = wire + 2 * start;                                       \
    for (size_t j = 0; j < len; j++) out[j] = WIDEN(codec_load_u16(in, j));              \
  }                                                                                      \
  CODEC_INLINE void NAME##_decode_add_run(size_t start, size_t len, float* restrict acc, \
                                          const uint8_t* restrict wire) {                \
    float* restrict out = acc + start;                                                   \
    const uint8_t* restrict in = wire + 2 * start;                                       \
    for (size_t j = 0; j < len; j++) out[j] = out[j] + WIDEN(codec_load_u16(in, j));     \
  }

CODEC_CAST_RUNS(fp16, chorus__f2h_inline, chorus__h2f_inline)
CODEC_CAST_RUNS(bf16, chorus__f2b_inline, chorus__b2f_inline)

#if CODEC_HAVE_F16C
/* F16C, 8 elements at a time; returns how many it did (a multiple of 8). The instructions round
 * to nearest even by their immediate and agree with the software conversion bit for bit. */
static size_t fp16_encode_vector(uint8_t* restrict wire, const float* src, size_t n,
                                 float* residual) {
  size_t i = 0;
  for (; n - i >= 8; i += 8) {
    __m256 x = _mm256_loadu_ps(src + i);
    __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128((__m128i*)(void*)(wire + 2 * i), h);
    if (residual != NULL) _mm256_storeu_ps(residual + i, _mm256_sub_ps(x, _mm256_cvtph_ps(h)));
  }
  return i;
}

static size_t fp16_decode_vector(float* restrict dst, const uint8_t* restrict wire, size_t n,
                                 int accumulate) {
  size_t i = 0;
  for (; n - i >= 8; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(const void*)(wire + 2 * i)));
    if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(dst + i), v);
    _mm256_storeu_ps(dst + i, v);
  }
  return i;
}
#else
/* Without F16C the software conversion in the pieces does everything. */
static size_t fp16_encode_vector(uint8_t* restrict wire, const float* src, size_t n,
                                 float* residual) {
  (void)wire, (void)src, (void)n, (void)residual;
  return 0;
}

static size_t fp16_decode_vector(float* restrict dst, const uint8_t* restrict wire, size_t n,
                                 int accumulate) {
  (void)dst, (void)wire, (void)n, (void)accumulate;
  return 0;
}
#endif

static void fp16_encode(void* dst, const float* src, size_t n, float* residual) {
  size_t done = fp16_encode_vector(dst, src, n, residual);
  CODEC_PIECES(done, n, CODEC_BLOCK, CODEC_STEP, fp16_encode_run, dst, src, residual);
}

static void fp16_decode(float* dst, const void* src, size_t n) {
  size_t done = fp16_decode_vector(dst, src, n, 0);
  CODEC_PIECES(done, n, CODEC_BLOCK, CODEC_STEP, fp16_decode_run, dst, src);
}

static void fp16_decode_add(float* acc, const void* src, size_t n) {
  size_t done = fp16_decode_vector(acc, src, n, 1);
  CODEC_PIECES(done, n, CODEC_BLOCK, CODEC_STEP, fp16_decode_add_run, acc, src);
}

static void bf16_encode(void* dst, const float* src, size_t n, float* residual) {
  CODEC_PIECES(0, n, CODEC_BLOCK, CODEC_STEP, bf16_encode_run, dst, src, residual);
}

static void bf16_decode(float* dst, const void* src, size_t n) {
  CODEC_PIECES(0, n, CODEC_BLOCK, CODEC_STEP, bf16_decode_run, dst, src);
}

static void bf16_decode_add(float* acc, const void* src, size_t n) {
  CODEC_PIECES(0, n, CODEC_BLOCK, CODEC_STEP, bf16_decode_add_run, acc, src);
}

/* ---- int8 and int4: a scale per chunk ---- */

/* A chunk's scale, and the multiplier that maps its values onto [-qmax, qmax]. */
typedef struct {
  float scale;
  float inv;
  int nonfinite; /* an infinity or NaN: scale NaN, every value 0 */
} codec_scale_t;

enum {
  CODEC_F32_INF_BITS = 0x7f800000,
  CODEC_F32_QUIET_NAN_BITS = 0x7fc00000,
  CODEC_TINY_AMAX_BITS = 0x03800000 /* 2^-120: below it, qmax / amax could overflow */
};

/* *amax = max(*amax, |x|) over the piece, on the magnitude bits as int32: for non-negative
 * floats the integer order is the float order, and an infinity or NaN compares above every
 * finite value, so one integer maximum finds both amax and the non-finite case. (Signed because
 * SSE2 and AVX2 compare int32 only signed; magnitudes are below 2^31.) */
CODEC_INLINE void amax_run(size_t start, size_t len, const float* src, int32_t* amax) {
  const float* in = src + start;
  int32_t m = *amax;
  for (size_t j = 0; j < len; j++) {
    int32_t mag = (int32_t)(chorus__f32_bits(in[j]) & 0x7fffffffu);
    m = mag > m ? mag : m;
  }
  *amax = m;
}

static codec_scale_t chunk_scale(const float* src, size_t len, int32_t qmax) {
  int32_t amax_bits = 0;
  CODEC_PIECES(0, len, CODEC_AMAX_BLOCK, CODEC_STEP, amax_run, src, &amax_bits);
  codec_scale_t s = {0.0f, 0.0f, 0};
  if (amax_bits >= CODEC_F32_INF_BITS) {
    s.scale = chorus__f32_from_bits(CODEC_F32_QUIET_NAN_BITS);
    s.nonfinite = 1;
  } else if (amax_bits >= CODEC_TINY_AMAX_BITS) {
    float amax = chorus__f32_from_bits((uint32_t)amax_bits);
    s.scale = amax / (float)qmax;
    s.inv = (float)qmax / amax;
    /* amax near FLT_MAX: amax / qmax may round up so far that qmax * scale overflows, and a
     * finite chunk would decode to infinity (its residual to -infinity). One ulp less is finite. */
    int decodes_to_inf = chorus__f32_bits((float)qmax * s.scale) == CODEC_F32_INF_BITS;
    s.scale = chorus__f32_from_bits(chorus__f32_bits(s.scale) - (uint32_t)decodes_to_inf);
  }
  /* Below 2^-120: scale 0 and inv 0, which quantises every value to 0 (x * 0 is +-0). */
  return s;
}

/* clamp(rne(x * inv), -qmax, qmax). Adding and subtracting 1.5 * 2^23 rounds to an integer in
 * the FPU's own round-to-nearest-even for |v| < 2^22 (|x * inv| <= qmax + a rounding here). */
CODEC_INLINE int32_t codec_quantise(float x, float inv, int32_t qmax) {
  int32_t q = (int32_t)((x * inv + 0x1.8p23f) - 0x1.8p23f);
  /* In integers: a float select here is not if-converted by gcc, and the loop would not
   * vectorise. The conversion is exact, so clamping before or after it is the same. */
  q = q > qmax ? qmax : q;
  return q < -qmax ? -qmax : q;
}

/* The two's complement value of a 4-bit field. */
CODEC_INLINE int32_t codec_nibble_value(uint32_t nibble) { return (int32_t)(nibble ^ 8u) - 8; }

/* The residual of a value whose quantised form q decodes to (float)q * scale. */
CODEC_INLINE float codec_residual(float x, int32_t q, float scale) { return x - (float)q * scale; }

CODEC_INLINE void int8_quantise_run(size_t start, size_t len, int8_t* restrict q, const float* src,
                                    float* residual, codec_scale_t s) {
  int8_t* restrict out = q + start;
  const float* in = src + start;
  if (residual != NULL) {
    float* res = residual + start;
    CODEC_IVDEP for (size_t j = 0; j < len; j++) {
      float x = in[j];
      int32_t v = codec_quantise(x, s.inv, 127);
      out[j] = (int8_t)v;
      res[j] = codec_residual(x, v, s.scale);
    }
  } else {
    for (size_t j = 0; j < len; j++) out[j] = (int8_t)codec_quantise(in[j], s.inv, 127);
  }
}

/* Pairs [start, start + len): element 2p in the low nibble of byte p, 2p + 1 in the high one. */
CODEC_INLINE void int4_quantise_run(size_t start, size_t len, uint8_t* restrict packed,
                                    const float* src, float* residual, codec_scale_t s) {
  uint8_t* restrict out = packed + start;
  const float* in = src + 2 * start;
  if (residual != NULL) {
    float* res = residual + 2 * start;
    CODEC_IVDEP for (size_t p = 0; p < len; p++) {
      float x_lo = in[2 * p], x_hi = in[2 * p + 1];
      int32_t lo = codec_quantise(x_lo, s.inv, 7), hi = codec_quantise(x_hi, s.inv, 7);
      out[p] = (uint8_t)(((uint32_t)lo & 15u) | ((uint32_t)hi << 4));
      res[2 * p] = codec_residual(x_lo, lo, s.scale);
      res[2 * p + 1] = codec_residual(x_hi, hi, s.scale);
    }
  } else {
    for (size_t p = 0; p < len; p++) {
      int32_t lo = codec_quantise(in[2 * p], s.inv, 7);
      int32_t hi = codec_quantise(in[2 * p + 1], s.inv, 7);
      out[p] = (uint8_t)(((uint32_t)lo & 15u) | ((uint32_t)hi << 4));
    }
  }
}

/* A non-finite chunk's residual: x minus its decoded NaN (0 * scale), as for any chunk. */
CODEC_INLINE void nonfinite_residual_run(size_t start, size_t len, const float* src,
                                         float* residual, float scale) {
  const float* in = src + start;
  float* res = residual + start;
  CODEC_IVDEP for (size_t j = 0; j < len; j++) res[j] = codec_residual(in[j], 0, scale);
}

static void nonfinite_residual(const float* src, size_t len, float* residual, float scale) {
  if (residual != NULL)
    CODEC_PIECES(0, len, CODEC_BLOCK, CODEC_STEP, nonfinite_residual_run, src, residual, scale);
}

/* Where a chunk's values start: after the scales of all ceil(n / C) chunks. */
static size_t codec_values_offset(size_t n) {
  return 4 * ((n + CHORUS_CODEC_CHUNK - 1) / CHORUS_CODEC_CHUNK);
}

static void int8_encode_chunk(uint8_t* restrict wire, size_t chunk, int8_t* restrict q,
                              const float* src, size_t len, float* residual) {
  codec_scale_t s = chunk_scale(src, len, 127);
  codec_store_scale(wire, chunk, s.scale);
  if (s.nonfinite) {
    memset(q, 0, len);
    nonfinite_residual(src, len, residual, s.scale);
    return;
  }
  CODEC_PIECES(0, len, CODEC_BLOCK, CODEC_STEP, int8_quantise_run, q, src, residual, s);
}

static void int8_encode(void* dst, const float* src, size_t n, float* residual) {
  uint8_t* wire = dst;
  int8_t* values = (int8_t*)(wire + codec_values_offset(n));
  for (size_t begin = 0, chunk = 0; begin < n; begin += CHORUS_CODEC_CHUNK, chunk++) {
    size_t len = n - begin < CHORUS_CODEC_CHUNK ? n - begin : CHORUS_CODEC_CHUNK;
    int8_encode_chunk(wire, chunk, values + begin, src + begin, len,
                      residual != NULL ? residual + begin : NULL);
  }
}

static void int4_encode_chunk(uint8_t* restrict wire, size_t chunk, uint8_t* restrict packed,
                              const float* src, size_t len, float* residual) {
  codec_scale_t s = chunk_scale(src, len, 7);
  codec_store_scale(wire, chunk, s.scale);
  size_t pairs = len / 2;
  if (s.nonfinite) {
    memset(packed, 0, (len + 1) / 2);
    nonfinite_residual(src, len, residual, s.scale);
    return;
  }
  CODEC_PIECES(0, pairs, CODEC_BLOCK / 2, CODEC_STEP / 2, int4_quantise_run, packed, src, residual,
               s);
  if (len % 2 != 0) { /* only the last chunk of an odd n: its high nibble stays 0 */
    float x = src[len - 1];
    int32_t q = codec_quantise(x, s.inv, 7);
    packed[pairs] = (uint8_t)((uint32_t)q & 15u);
    if (residual != NULL) residual[len - 1] = codec_residual(x, q, s.scale);
  }
}

static void int4_encode(void* dst, const float* src, size_t n, float* residual) {
  uint8_t* wire = dst;
  uint8_t* values = wire + codec_values_offset(n);
  for (size_t begin = 0, chunk = 0; begin < n; begin += CHORUS_CODEC_CHUNK, chunk++) {
    size_t len = n - begin < CHORUS_CODEC_CHUNK ? n - begin : CHORUS_CODEC_CHUNK;
    int4_encode_chunk(wire, chunk, values + begin / 2, src + begin, len,
                      residual != NULL ? residual + begin : NULL);
  }
}

/* ---- int8 / int4 decoding: (float)q * scale, plus acc for decode_add ---- */

CODEC_INLINE void int8_decode_run(size_t start, size_t len, float* restrict dst,
                                  const int8_t* restrict q, float scale, int accumulate) {
  float* restrict out = dst + start;
  const int8_t* restrict in = q + start;
  if (accumulate) {
    for (size_t j = 0; j < len; j++) out[j] = out[j] + (float)in[j] * scale;
  } else {
    for (size_t j = 0; j < len; j++) out[j] = (float)in[j] * scale;
  }
}

CODEC_INLINE void int4_decode_run(size_t start, size_t len, float* restrict dst,
                                  const uint8_t* restrict packed, float scale, int accumulate) {
  float* restrict out = dst + 2 * start;
  const uint8_t* restrict in = packed + start;
  if (accumulate) {
    for (size_t p = 0; p < len; p++) {
      uint32_t b = in[p];
      out[2 * p] = out[2 * p] + (float)codec_nibble_value(b & 15u) * scale;
      out[2 * p + 1] = out[2 * p + 1] + (float)codec_nibble_value(b >> 4) * scale;
    }
  } else {
    for (size_t p = 0; p < len; p++) {
      uint32_t b = in[p];
      out[2 * p] = (float)codec_nibble_value(b & 15u) * scale;
      out[2 * p + 1] = (float)codec_nibble_value(b >> 4) * scale;
    }
  }
}

CODEC_INLINE void int8_decode_all(float* restrict dst, const void* src, size_t n, int accumulate) {
  const uint8_t* wire = src;
  const int8_t* values = (const int8_t*)(wire + codec_values_offset(n));
  for (size_t begin = 0, chunk = 0; begin < n; begin += CHORUS_CODEC_CHUNK, chunk++) {
    size_t len = n - begin < CHORUS_CODEC_CHUNK ? n - begin : CHORUS_CODEC_CHUNK;
    float scale = codec_load_scale(wire, chunk);
    CODEC_PIECES(0, len, CODEC_BLOCK, CODEC_STEP, int8_decode_run, dst + begin, values + begin,
                 scale, accumulate);
  }
}

CODEC_INLINE void int4_decode_all(float* restrict dst, const void* src, size_t n, int accumulate) {
  const uint8_t* wire = src;
  const uint8_t* values = wire + codec_values_offset(n);
  for (size_t begin = 0, chunk = 0; begin < n; begin += CHORUS_CODEC_CHUNK, chunk++) {
    size_t len = n - begin < CHORUS_CODEC_CHUNK ? n - begin : CHORUS_CODEC_CHUNK;
    float scale = codec_load_scale(wire, chunk);
    float* out = dst + begin;
    const uint8_t* packed = values + begin / 2;
    CODEC_PIECES(0, len / 2, CODEC_BLOCK / 2, CODEC_STEP / 2, int4_decode_run, out, packed, scale,
                 accumulate);
    if (len % 2 != 0) {
      float v = (float)codec_nibble_value(packed[len / 2] & 15u) * scale;
      out[len - 1] = accumulate ? out[len - 1] + v : v;
    }
  }
}

static void int8_decode(float* dst, const void* src, size_t n) { int8_decode_all(dst, src, n, 0); }

static void int8_decode_add(float* acc, const void* src, size_t n) {
  int8_decode_all(acc, src, n, 1);
}

static void int4_decode(float* dst, const void* src, size_t n) { int4_decode_all(dst, src, n, 0); }

static void int4_decode_add(float* acc, const void* src, size_t n) {
  int4_decode_all(acc, src, n, 1);
}

/* ---- the table (codec.c declares it too, to choose among the variants) ---- */

extern const chorus_codec_variant_t CODEC_TABLE;
const chorus_codec_variant_t CODEC_TABLE = {
    .name = CODEC_ISA_NAME,
    .encode = {[CHORUS_CODEC_FP16] = fp16_encode,
               [CHORUS_CODEC_BF16] = bf16_encode,
               [CHORUS_CODEC_INT8] = int8_encode,
               [CHORUS_CODEC_INT4] = int4_encode},
    .decode = {[CHORUS_CODEC_FP16] = fp16_decode,
               [CHORUS_CODEC_BF16] = bf16_decode,
               [CHORUS_CODEC_INT8] = int8_decode,
               [CHORUS_CODEC_INT4] = int4_decode},
    .decode_add = {[CHORUS_CODEC_FP16] = fp16_decode_add,
                   [CHORUS_CODEC_BF16] = bf16_decode_add,
                   [CHORUS_CODEC_INT8] = int8_decode_add,
                   [CHORUS_CODEC_INT4] = int4_decode_add},
};
