/*
 * codec.h - gradient compression codecs: float32 vectors encoded into a smaller wire form and
 * decoded (or decoded and accumulated) back into float32. Selected at run time per CPU like the
 * reduction kernels (codec_body.h compiled once per instruction set); every variant gives the
 * same bits, so ranks on different CPUs agree.
 *
 * Wire forms (native byte order; n = element count; C = CHORUS_CODEC_CHUNK):
 *   FP16  n x binary16, float32 -> half rounded to nearest even, overflow to infinity, NaN kept
 *         NaN (the conversions of half_inline.h). Decoding is exact.
 *   BF16  n x bfloat16, rounded to nearest even, NaN kept NaN.
 *   INT8  ceil(n/C) float32 scales, then n int8 values. Chunk j holds elements [jC, jC+C).
 *         Per chunk: amax = the largest |x|. If the chunk holds an infinity or a NaN, its scale is
 *         NaN and its values 0: it decodes to NaN everywhere (an overflowed gradient stays
 *         visible, never silently zero). If amax < 2^-120 (zero, subnormal or nearly so), scale 0
 *         and values 0: it decodes to +0. Otherwise scale = amax / 127 and
 *         q = clamp(rne(x * (127 / amax)), -127, 127), both quotients in float32, rne = round to
 *         nearest even (computed as (v + 1.5*2^23) - 1.5*2^23, exact for |v| < 2^22 under the
 *         default rounding mode). If 127 * scale rounds to infinity (amax near FLT_MAX), scale
 *         is the next float toward zero instead, so that a finite chunk never decodes to
 *         infinity. Decoding gives (float)q * scale (one product, no fused multiply-add).
 *   INT4  as INT8 with 7 for 127, q in [-7, 7] stored as 4-bit two's complement, two per byte:
 *         element 2i in the low nibble of byte i, 2i+1 in the high one; ceil(n/2) bytes after the
 *         scales (an odd n leaves the last high nibble 0). C is even, so chunks start on bytes.
 *   TOPK  k = chorus__codec_topk_k(fraction, n) index/value pairs: k uint32 indices in ascending
 *         order, then their k float32 values, bit for bit. The k elements are those of largest
 *         magnitude, comparing (bits & 0x7fffffff) as unsigned integers (so NaN counts above
 *         infinity); among equal magnitudes at the threshold the lower indices win. Decoding
 *         puts the values at their indices (zero elsewhere); decode_add adds them there.
 *   NONE  the n float32 themselves (a copy); residual x - x, as for the casts.
 *   ZEROS lossless, of variable length (the library's own, not a chorus_compression_t): a head
 *         of two uint32, form and count, then either form DENSE (1): count = n, the n float32;
 *         or form SPARSE (2): count = the elements whose bits are not all zero (every value but
 *         +0, so -0 and NaN are kept), ceil(n/64) uint64 bitmap words (bit j of word w set when
 *         element 64w + j is kept; bits past n clear), then the kept elements in order, bit for
 *         bit. SPARSE only when it is shorter than DENSE. Decoding gives +0 where nothing was
 *         kept, the value that was there; decode_add adds that +0 too (so -0 + +0 gives +0 as
 *         with every other form). Residual: +0 (nothing is dropped). No bytes for n = 0.
 *
 * Encoding with a residual (error feedback): residual[i] = x[i] - decode(x)[i] in float32 for
 * FP16, BF16, INT8 and INT4 (NaN where the chunk decodes to NaN), and for TOPK x[i] where i was
 * not selected, +0 where it was. Accumulation is acc[i] = acc[i] + decoded[i] in float32.
 */
#ifndef CHORUS_REDUCE_CODEC_H
#define CHORUS_REDUCE_CODEC_H

#include <stddef.h>
#include <stdint.h>

/* The codecs; the numbering is chorus.h's chorus_compression_t (NONE = 0 is no codec). */
typedef enum {
  CHORUS_CODEC_NONE = 0,
  CHORUS_CODEC_FP16 = 1,
  CHORUS_CODEC_BF16 = 2,
  CHORUS_CODEC_INT8 = 3,
  CHORUS_CODEC_INT4 = 4,
  CHORUS_CODEC_TOPK = 5,
  CHORUS_CODEC_PUBLIC_COUNT, /* the kinds chorus.h names */
  CHORUS_CODEC_ZEROS = CHORUS_CODEC_PUBLIC_COUNT,
  CHORUS_CODEC_COUNT
} chorus_codec_kind_t;

enum { CHORUS_ZEROS_DENSE = 1, CHORUS_ZEROS_SPARSE = 2 };

typedef struct {
  chorus_codec_kind_t kind;
  double topk_fraction; /* TOPK only: in (0, 1] */
} chorus_codec_t;

/* Elements per int8/int4 scale. */
#define CHORUS_CODEC_CHUNK 2048

/* TOPK's k for n elements: ceil(fraction * n) computed in double, clamped to [1, n]; 0 for n = 0. */
size_t chorus__codec_topk_k(double fraction, size_t n);

/* Bytes of the wire form of n elements (0 for n = 0); for ZEROS, of its longest form. */
size_t chorus__codec_bytes(const chorus_codec_t* c, size_t n);

/* 1 when every wire form of n elements has chorus__codec_bytes(c, n) bytes (all but ZEROS). */
static inline int chorus__codec_fixed(const chorus_codec_t* c) { return c->kind != CHORUS_CODEC_ZEROS; }

/* What dst must hold past chorus__codec_bytes for an encoding (ZEROS stores whole vectors). */
#define CHORUS_CODEC_SLACK 64

/* Encodes src[0..n) into dst (chorus__codec_bytes(c, n) + CHORUS_CODEC_SLACK bytes); returns the
 * bytes of the form written. residual may be NULL; else it receives what the wire form dropped
 * (above) and may be the same pointer as src. n < 2^32. */
size_t chorus__codec_encode(const chorus_codec_t* c, void* dst, const float* src, size_t n, float* residual);

/* The bytes of the wire form of n elements whose first CHORUS_CODEC_HEAD_BYTES are at head (a
 * fixed codec's: chorus__codec_bytes); 0 when the head describes no form of n elements. */
#define CHORUS_CODEC_HEAD_BYTES 8
size_t chorus__codec_wire_bytes(const chorus_codec_t* c, const void* head, size_t n);
/* 1 when wire[0..bytes) is a whole form of n elements: what a receiver checks before decoding
 * another rank's bytes (a fixed codec's form of the right length always is). */
int chorus__codec_wire_ok(const chorus_codec_t* c, const void* wire, size_t bytes, size_t n);

/* ZEROS's own length and check, behind the two above (exposed for its fuzz target). */
size_t chorus__zeros_wire_bytes(const void* head, size_t n);
int chorus__zeros_wire_ok(const void* wire, size_t bytes, size_t n);

/* ZEROS per instruction set (variants.h's isa), for the tests: NULL when this CPU or build
 * cannot run it. */
typedef struct {
  const char* name;
  size_t (*encode)(void* dst, const float* src, size_t n);
  void (*decode)(float* dst, const void* src, size_t n, int accumulate);
} chorus_zeros_variant_t;
const chorus_zeros_variant_t* chorus__zeros_variant(int isa);

/* dst[i] = decoded element i, for i < n. */
void chorus__codec_decode(const chorus_codec_t* c, float* dst, const void* src, size_t n);

/* acc[i] = acc[i] + decoded element i, for i < n. */
void chorus__codec_decode_add(const chorus_codec_t* c, float* acc, const void* src, size_t n);

/* "fp16", "bf16", "int8", "int4", "topk", "none", "zeros"; NULL for a value that is not a codec (also
 * chorus.h's chorus_compression_name). */
const char* chorus__codec_name(chorus_codec_kind_t kind);

/* ---- the per-instruction-set tables (tests and the micro-benchmark run every variant) ---- */
typedef void (*chorus_codec_encode_fn)(void* dst, const float* src, size_t n, float* residual);
typedef void (*chorus_codec_decode_fn)(float* dst, const void* src, size_t n);

typedef struct {
  const char* name; /* "avx512", "avx2", "generic" */
  /* Indexed by kind; TOPK's and ZEROS's entries are NULL (codec.c, codec_zeros.c). */
  chorus_codec_encode_fn encode[CHORUS_CODEC_COUNT];
  chorus_codec_decode_fn decode[CHORUS_CODEC_COUNT];
  chorus_codec_decode_fn decode_add[CHORUS_CODEC_COUNT];
} chorus_codec_variant_t;

/* The table of instruction set `isa` (chorus_reduce_isa_t of variants.h), or NULL when this CPU
 * or build cannot run it. */
const chorus_codec_variant_t* chorus__codec_variant(int isa);

#endif /* CHORUS_REDUCE_CODEC_H */
