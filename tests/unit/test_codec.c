/*
 * test_codec.c - checks the gradient-compression codecs (src/reduce/codec.h) bit for bit against
 * a scalar reference written here from the contract alone (fabsf, nearbyintf, a sort-based
 * top-k): the encoded bytes, the residuals (also with residual == src), decode and decode_add,
 * for every codec variant the CPU can run and for the dispatched entry points, over random data
 * at several scales, the sizes around a chunk, and the special values (zeros, subnormals, the
 * 2^-120 cut, FLT_MAX, infinities, NaN, rounding midpoints, fp16 overflow, top-k ties).
 * Standalone: prints one line per failure and a final "N passed, N failed"; exits 0 only if
 * nothing failed.
 */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bitcheck.h"
#include "reduce/codec.h"
#include "reduce/variants.h"

enum { TEST_TIME_LIMIT_SEC = 300 };
enum { C = CHORUS_CODEC_CHUNK };

/* Uniform in [-1, 1). */
static float rnd_signed_unit(void) { return (float)((double)(rnd64() >> 11) * 0x1p-52 - 1.0); }

/* ---------------------------------------------------------------------------------------- */
/* The reference codecs, from codec.h's text                                                 */

/* (float)q * scale as one rounded product: volatile keeps any compiler from fusing it into a
 * following sum. */
static float ref_product(int q, float scale) {
  volatile float product = (float)q * scale;
  return product;
}

typedef struct {
  chorus_codec_kind_t kind;
  double fraction;
} codec_case_t;

static size_t ref_topk_k(double fraction, size_t n) {
  if (n == 0) return 0;
  double k = ceil(fraction * (double)n);
  if (k < 1) return 1;
  if (k > (double)n) return n;
  return (size_t)k;
}

static size_t ref_bytes(codec_case_t cc, size_t n) {
  size_t scales = 4 * ((n + C - 1) / C);
  switch (cc.kind) {
    case CHORUS_CODEC_FP16:
    case CHORUS_CODEC_BF16:
      return 2 * n;
    case CHORUS_CODEC_INT8:
      return scales + n;
    case CHORUS_CODEC_INT4:
      return scales + (n + 1) / 2;
    case CHORUS_CODEC_TOPK:
      return 8 * ref_topk_k(cc.fraction, n);
    default:
      return 4 * n;
  }
}

static void put_u16(uint8_t* wire, size_t i, uint16_t v) { memcpy(wire + 2 * i, &v, 2); }
static uint16_t get_u16(const uint8_t* wire, size_t i) {
  uint16_t v;
  memcpy(&v, wire + 2 * i, 2);
  return v;
}
static void put_f32(uint8_t* wire, size_t i, float v) { memcpy(wire + 4 * i, &v, 4); }
static float get_f32(const uint8_t* wire, size_t i) {
  float v;
  memcpy(&v, wire + 4 * i, 4);
  return v;
}
static void put_u32(uint8_t* wire, size_t i, uint32_t v) { memcpy(wire + 4 * i, &v, 4); }
static uint32_t get_u32(const uint8_t* wire, size_t i) {
  uint32_t v;
  memcpy(&v, wire + 4 * i, 4);
  return v;
}

/* A chunk's scale and multiplier, computed in the plainest way. */
typedef struct {
  float scale;
  float inv;
} ref_scale_t;

static ref_scale_t ref_chunk_scale(const float* x, size_t len, int qmax) {
  float amax = 0;
  int nonfinite = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isfinite(x[i]))
      nonfinite = 1;
    else if (fabsf(x[i]) > amax)
      amax = fabsf(x[i]);
  }
  ref_scale_t s = {0.0f, 0.0f};
  if (nonfinite)
    s.scale = f32_from(0x7fc00000u);
  else if (amax >= 0x1p-120f) {
    s.scale = amax / (float)qmax;
    s.inv = (float)qmax / amax;
    if (isinf((float)qmax * s.scale)) s.scale = nextafterf(s.scale, 0.0f);
  }
  return s;
}

static int ref_quantise(float x, ref_scale_t s, int qmax) {
  if (s.inv == 0) return 0; /* non-finite or tiny chunk */
  float v = nearbyintf(x * s.inv);
  if (v > (float)qmax) v = (float)qmax;
  if (v < (float)-qmax) v = (float)-qmax;
  return (int)v;
}

/* int8 (qmax 127) or int4 (qmax 7); residual always written. */
static void ref_quant_encode(int qmax, uint8_t* wire, const float* x, size_t n, float* residual) {
  size_t nchunks = (n + C - 1) / C;
  uint8_t* values = wire + 4 * nchunks;
  if (qmax == 7) memset(values, 0, (n + 1) / 2);
  for (size_t c = 0; c < nchunks; c++) {
    size_t begin = c * C, len = n - begin < (size_t)C ? n - begin : (size_t)C;
    ref_scale_t s = ref_chunk_scale(x + begin, len, qmax);
    put_f32(wire, c, s.scale);
    for (size_t i = begin; i < begin + len; i++) {
      int q = ref_quantise(x[i], s, qmax);
      if (qmax == 127)
        values[i] = (uint8_t)(int8_t)q;
      else
        values[i / 2] |= (uint8_t)(((unsigned)q & 15u) << (i % 2 ? 4 : 0));
      residual[i] = x[i] - ref_product(q, s.scale);
    }
  }
}

static void ref_quant_decode(int qmax, float* out, const uint8_t* wire, size_t n) {
  const uint8_t* values = wire + 4 * ((n + C - 1) / C);
  for (size_t i = 0; i < n; i++) {
    int q;
    if (qmax == 127) {
      q = (int8_t)values[i];
    } else {
      int nibble = (values[i / 2] >> (i % 2 ? 4 : 0)) & 15;
      q = nibble >= 8 ? nibble - 16 : nibble;
    }
    out[i] = ref_product(q, get_f32(wire, i / C));
  }
}

typedef struct {
  uint32_t key;
  uint32_t index;
} ranked_t;

/* Largest magnitude first; equal magnitudes by index. */
static int compare_rank(const void* a, const void* b) {
  const ranked_t* x = a;
  const ranked_t* y = b;
  if (x->key != y->key) return x->key > y->key ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}
static int compare_u32(const void* a, const void* b) {
  uint32_t x = *(const uint32_t*)a, y = *(const uint32_t*)b;
  return (x > y) - (x < y);
}

static void ref_topk_encode(double fraction, uint8_t* wire, const float* x, size_t n,
                            float* residual) {
  size_t k = ref_topk_k(fraction, n);
  if (k == 0) return;
  ranked_t* ranked = malloc(n * sizeof *ranked);
  uint32_t* chosen = malloc(k * sizeof *chosen);
  if (!ranked || !chosen) abort();
  for (size_t i = 0; i < n; i++) ranked[i] = (ranked_t){f32_bits(x[i]) & 0x7fffffffu, (uint32_t)i};
  qsort(ranked, n, sizeof *ranked, compare_rank);
  for (size_t j = 0; j < k; j++) chosen[j] = ranked[j].index;
  qsort(chosen, k, sizeof *chosen, compare_u32);
  for (size_t i = 0; i < n; i++) residual[i] = x[i];
  for (size_t j = 0; j < k; j++) {
    put_u32(wire, j, chosen[j]);
    put_f32(wire, k + j, x[chosen[j]]);
    residual[chosen[j]] = 0.0f;
  }
  free(ranked);
  free(chosen);
}

static void ref_encode(codec_case_t cc, uint8_t* wire, const float* x, size_t n, float* residual) {
  switch (cc.kind) {
    case CHORUS_CODEC_FP16:
      for (size_t i = 0; i < n; i++) {
        uint16_t h = ref_f2h(f32_bits(x[i]));
        put_u16(wire, i, h);
        residual[i] = x[i] - f32_from(ref_h2f_bits(h));
      }
      break;
    case CHORUS_CODEC_BF16:
      for (size_t i = 0; i < n; i++) {
        uint16_t b = ref_f2b(f32_bits(x[i]));
        put_u16(wire, i, b);
        residual[i] = x[i] - f32_from(ref_b2f_bits(b));
      }
      break;
    case CHORUS_CODEC_INT8:
      ref_quant_encode(127, wire, x, n, residual);
      break;
    case CHORUS_CODEC_INT4:
      ref_quant_encode(7, wire, x, n, residual);
      break;
    case CHORUS_CODEC_TOPK:
      ref_topk_encode(cc.fraction, wire, x, n, residual);
      break;
    default:
      abort();
  }
}

static void ref_decode(codec_case_t cc, float* out, const uint8_t* wire, size_t n) {
  switch (cc.kind) {
    case CHORUS_CODEC_FP16:
      for (size_t i = 0; i < n; i++) out[i] = f32_from(ref_h2f_bits(get_u16(wire, i)));
      break;
    case CHORUS_CODEC_BF16:
      for (size_t i = 0; i < n; i++) out[i] = f32_from(ref_b2f_bits(get_u16(wire, i)));
      break;
    case CHORUS_CODEC_INT8:
      ref_quant_decode(127, out, wire, n);
      break;
    case CHORUS_CODEC_INT4:
      ref_quant_decode(7, out, wire, n);
      break;
    case CHORUS_CODEC_TOPK: {
      size_t k = ref_topk_k(cc.fraction, n);
      for (size_t i = 0; i < n; i++) out[i] = 0.0f;
      for (size_t j = 0; j < k; j++) out[get_u32(wire, j)] = get_f32(wire, k + j);
      break;
    }
    default:
      abort();
  }
}

/* acc + decoded, element by element; for top-k only the selected ones are added (adding +0
 * elsewhere would turn an acc of -0 into +0). */
static void ref_decode_add(codec_case_t cc, float* acc, const float* decoded, const uint8_t* wire,
                           size_t n) {
  if (cc.kind == CHORUS_CODEC_TOPK) {
    size_t k = ref_topk_k(cc.fraction, n);
    for (size_t j = 0; j < k; j++) acc[get_u32(wire, j)] += get_f32(wire, k + j);
    return;
  }
  for (size_t i = 0; i < n; i++) acc[i] = acc[i] + decoded[i];
}

/* ---------------------------------------------------------------------------------------- */
/* Known answers: the reference itself against hand-computed wire forms                      */

static void test_reference_itself(void) {
  uint8_t wire[64];
  float res[8];
  float x8[4] = {1.0f, -0.5f, 0.25f, 0.0f};
  ref_quant_encode(127, wire, x8, 4, res);
  check(get_f32(wire, 0) == 1.0f / 127.0f && (int8_t)wire[4] == 127 && (int8_t)wire[5] == -64 &&
            (int8_t)wire[6] == 32 && wire[7] == 0,
        "reference int8 of {1, -0.5, 0.25, 0}: q = 127, -64 (-63.5 to even), 32, 0");
  float x4[5] = {7.0f, 0.5f, 1.5f, 2.5f, -3.5f};
  ref_quant_encode(7, wire, x4, 5, res);
  check(get_f32(wire, 0) == 1.0f && wire[4] == 0x07 && wire[5] == 0x22 && wire[6] == 0x0c,
        "reference int4 of {7, .5, 1.5, 2.5, -3.5}: bytes 07 22 0c (ties to even, odd tail)");
  check(ref_f2h(f32_bits(65519.0f)) == 0x7bff && ref_f2h(f32_bits(65520.0f)) == 0x7c00 && ref_f2h(f32_bits(-1e10f)) == 0xfc00,
        "reference fp16 overflow");
  float xt[5] = {1.0f, -3.0f, 2.0f, 3.0f, 0.5f};
  ref_topk_encode(0.4, wire, xt, 5, res);
  check(get_u32(wire, 0) == 1 && get_u32(wire, 1) == 3 && get_f32(wire, 2) == -3.0f &&
            get_f32(wire, 3) == 3.0f,
        "reference top-2 of {1, -3, 2, 3, .5}: the tie at 3 both taken, indices 1, 3");
  check(ref_topk_k(0.01, 100) == 1 && ref_topk_k(0.01, 101) == 2 && ref_topk_k(1e-9, 10) == 1 &&
            ref_topk_k(1.0, 7) == 7 && ref_topk_k(0.5, 0) == 0,
        "reference top-k k");
}

/* ---------------------------------------------------------------------------------------- */
/* Entry points under test: a variant's table or the dispatched functions                    */

typedef struct {
  const char* name;
  const chorus_codec_variant_t* table; /* NULL: the dispatched chorus__codec_* */
} runner_t;

static void run_encode(const runner_t* r, codec_case_t cc, void* wire, const float* x, size_t n,
                       float* residual) {
  if (r->table) {
    r->table->encode[cc.kind](wire, x, n, residual);
  } else {
    chorus_codec_t c = {cc.kind, cc.fraction};
    chorus__codec_encode(&c, wire, x, n, residual);
  }
}

static void run_decode(const runner_t* r, codec_case_t cc, float* out, const void* wire, size_t n,
                       int accumulate) {
  chorus_codec_t c = {cc.kind, cc.fraction};
  if (r->table)
    (accumulate ? r->table->decode_add : r->table->decode)[cc.kind](out, wire, n);
  else if (accumulate)
    chorus__codec_decode_add(&c, out, wire, n);
  else
    chorus__codec_decode(&c, out, wire, n);
}

/* ---------------------------------------------------------------------------------------- */
/* Buffers with guard bytes                                                                   */

enum { GUARD = 64, GUARD_FILL = 0xa5 };

typedef struct {
  uint8_t* mem;
  size_t bytes;  /* data bytes */
  size_t offset; /* of the data after the leading guard: 0 or an odd misalignment */
} guarded_t;

static uint8_t* guarded_data(guarded_t* g) { return g->mem + GUARD + g->offset; }

static void guarded_reset(guarded_t* g, size_t bytes, size_t offset) {
  g->bytes = bytes;
  g->offset = offset;
  memset(g->mem, GUARD_FILL, GUARD + offset + bytes + GUARD);
}

static int guarded_intact(const guarded_t* g) {
  for (size_t k = 0; k < GUARD + g->offset; k++)
    if (g->mem[k] != GUARD_FILL) return 0;
  const uint8_t* after = g->mem + GUARD + g->offset + g->bytes;
  for (size_t k = 0; k < GUARD; k++)
    if (after[k] != GUARD_FILL) return 0;
  return 1;
}

static int guarded_alloc(guarded_t* g, size_t max_bytes) {
  g->mem = aligned_alloc(64, (max_bytes + 2 * GUARD + 64 + 63) / 64 * 64);
  return g->mem != NULL;
}

/* The float views of a guarded buffer are 4-byte aligned: offset 0 or 4. */
static float* guarded_floats(guarded_t* g) { return (float*)(void*)guarded_data(g); }

typedef struct {
  float* src;  /* the input */
  float* acc0; /* decode_add's initial accumulator */
  uint8_t* want_wire;
  float* want_residual;
  float* want_decoded;
  float* want_acc;
  guarded_t wire;
  guarded_t out;   /* residual, decoded or accumulated floats */
  guarded_t alias; /* a copy of src encoded with residual == src */
} work_t;

/* Index of the first float whose bits differ, or n. */
static size_t first_diff(const float* got, const float* want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (f32_bits(got[i]) != f32_bits(want[i])) return i;
  return n;
}

static size_t first_byte_diff(const uint8_t* got, const uint8_t* want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) return i;
  return n;
}

/* One comparison of floats, with the first difference printed. */
static void check_floats(const char* what, const char* ctx, const float* got, const float* want,
                         size_t n, int guards_ok) {
  size_t i = first_diff(got, want, n);
  check(i == n && guards_ok, "%s: %s: %s%s (element %zu: got %a = 0x%08x, want %a = 0x%08x)", ctx,
        what, i == n ? "" : "wrong bits", guards_ok ? "" : " guard bytes overwritten", i,
        i < n ? (double)got[i] : 0.0, i < n ? f32_bits(got[i]) : 0u, i < n ? (double)want[i] : 0.0,
        i < n ? f32_bits(want[i]) : 0u);
}

static void check_wire(const char* what, const char* ctx, const uint8_t* got, const uint8_t* want,
                       size_t bytes, int guards_ok) {
  size_t i = first_byte_diff(got, want, bytes);
  check(i == bytes && guards_ok,
        "%s: %s: %s%s (of %zu bytes, first difference at byte %zu: got 0x%02x want 0x%02x)", ctx,
        what, i == bytes ? "" : "wrong bytes", guards_ok ? "" : " guard bytes overwritten", bytes,
        i, i < bytes ? got[i] : 0u, i < bytes ? want[i] : 0u);
}

/* Everything one runner does with one input, against the reference results in w. */
static void check_runner(const runner_t* r, codec_case_t cc, const char* ctx0, size_t n,
                         work_t* w) {
  char ctx[200];
  size_t bytes = ref_bytes(cc, n);
  size_t wire_offset = r->table ? 0 : 1; /* the dispatched calls get a misaligned wire */
  snprintf(ctx, sizeof ctx, "%s %s %s", r->name, ctx0,
           wire_offset ? "(wire at an odd address)" : "");

  guarded_reset(&w->wire, bytes, wire_offset);
  run_encode(r, cc, guarded_data(&w->wire), w->src, n, NULL);
  check_wire("encode", ctx, guarded_data(&w->wire), w->want_wire, bytes, guarded_intact(&w->wire));

  guarded_reset(&w->wire, bytes, wire_offset);
  guarded_reset(&w->out, 4 * n, 0);
  run_encode(r, cc, guarded_data(&w->wire), w->src, n, guarded_floats(&w->out));
  check_wire("encode with residual", ctx, guarded_data(&w->wire), w->want_wire, bytes,
             guarded_intact(&w->wire));
  check_floats("residual", ctx, guarded_floats(&w->out), w->want_residual, n,
               guarded_intact(&w->out));

  guarded_reset(&w->wire, bytes, wire_offset);
  guarded_reset(&w->alias, 4 * n, 0);
  float* inout = guarded_floats(&w->alias);
  if (n) memcpy(inout, w->src, 4 * n);
  run_encode(r, cc, guarded_data(&w->wire), inout, n, inout);
  check_wire("encode with residual == src", ctx, guarded_data(&w->wire), w->want_wire, bytes,
             guarded_intact(&w->wire));
  check_floats("residual written over src", ctx, inout, w->want_residual, n,
               guarded_intact(&w->alias));

  /* decode and decode_add read the reference's wire, so a wrong encoder cannot hide a decoder. */
  guarded_reset(&w->wire, bytes, wire_offset);
  if (bytes) memcpy(guarded_data(&w->wire), w->want_wire, bytes);
  guarded_reset(&w->out, 4 * n, 0);
  float* out = guarded_floats(&w->out);
  for (size_t i = 0; i < n; i++) out[i] = f32_from(0x7fbadbadu); /* decode must overwrite all */
  run_decode(r, cc, out, guarded_data(&w->wire), n, 0);
  check_floats("decode", ctx, out, w->want_decoded, n, guarded_intact(&w->out));

  if (n) memcpy(out, w->acc0, 4 * n);
  run_decode(r, cc, out, guarded_data(&w->wire), n, 1);
  check_floats("decode_add", ctx, out, w->want_acc, n, guarded_intact(&w->out));
}

/* ---------------------------------------------------------------------------------------- */
/* Inputs                                                                                     */

typedef void (*fill_fn)(float* x, size_t n);

static void fill_scaled(float* x, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) x[i] = rnd_signed_unit() * scale;
}
static void fill_unit(float* x, size_t n) { fill_scaled(x, n, 1.0f); }
static void fill_tiny(float* x, size_t n) { fill_scaled(x, n, 1e-30f); }
static void fill_milli(float* x, size_t n) { fill_scaled(x, n, 1e-3f); }
static void fill_kilo(float* x, size_t n) { fill_scaled(x, n, 1e3f); }
static void fill_huge(float* x, size_t n) { fill_scaled(x, n, 1e30f); }

/* Each chunk at its own scale, 2^-130 .. 2^125, and the elements spread over 2^-20 of it. */
static void fill_mixed_scales(float* x, size_t n) {
  for (size_t begin = 0; begin < n; begin += C) {
    int chunk_exp = (int)(rnd64() % 256) - 130;
    for (size_t i = begin; i < n && i < begin + C; i++) {
      int e = chunk_exp - (int)(rnd64() % 21);
      x[i] = rnd_signed_unit() * (float)pow2(e < -140 ? -140 : e);
    }
  }
}

static void fill_zero(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = 0.0f;
}
static void fill_negative_zero(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = -0.0f;
}

static float random_subnormal(void) {
  uint32_t bits = (uint32_t)(rnd64() & 0x807fffffu);
  return f32_from(bits);
}
static void fill_subnormal(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = random_subnormal();
}
/* Subnormals mixed with normals of order 1 (every third element). */
static void fill_subnormal_mixed(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = i % 3 == 1 ? rnd_signed_unit() : random_subnormal();
}

/* Chunks whose amax is 2^-120, the float below it, the float above it, in turn; the others
 * smaller. */
static void fill_amax_cut(float* x, size_t n) {
  static const uint32_t amax_bits[3] = {0x03800000u, 0x037fffffu, 0x03800001u};
  for (size_t begin = 0, c = 0; begin < n; begin += C, c++) {
    size_t end = n - begin < (size_t)C ? n : begin + C;
    for (size_t i = begin; i < end; i++) x[i] = rnd_signed_unit() * 0x1p-121f;
    float amax = f32_from(amax_bits[c % 3]);
    x[begin + (rnd64() % (end - begin))] = (c & 1) ? -amax : amax;
  }
}

/* FLT_MAX and -FLT_MAX among large values. */
static void fill_flt_max(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = rnd_signed_unit() * 1e38f;
  if (n > 0) x[0] = FLT_MAX;
  if (n > 2) x[n / 2] = -FLT_MAX;
  if (n > C + 1) x[C + 1] = -FLT_MAX;
}

/* +inf in chunk 0, NaN (quiet and signalling, either sign) in chunk 1, -inf in chunk 3; the rest
 * ordinary values, which must not be affected. */
static void fill_nonfinite(float* x, size_t n) {
  fill_unit(x, n);
  static const uint32_t nans[] = {0x7fc00000u, 0xffc12345u, 0x7f800001u, 0xff800abcu};
  if (n > 1) x[1] = INFINITY;
  for (size_t k = 0; k < 4 && C + 7 * k < n; k++) x[C + 7 * k] = f32_from(nans[k]);
  if (3 * C + 5 < n) x[3 * C + 5] = -INFINITY;
  if (n == 1) x[0] = f32_from(0x7fc00000u);
}

/* Exact midpoints for int8: 127 at the start of every chunk makes inv = 1, and the others are
 * k + 0.5. */
static void fill_int8_midpoints(float* x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = i % C == 0 ? 127.0f : (float)((int)(rnd64() % 254) - 127) + 0.5f;
}

/* The same for int4: 7 and k + 0.5 for k in [-7, 6]. */
static void fill_int4_midpoints(float* x, size_t n) {
  for (size_t i = 0; i < n; i++)
    x[i] = i % C == 0 ? -7.0f : (float)((int)(rnd64() % 14) - 7) + 0.5f;
}

/* fp16 and bf16 ties: the midpoint between two neighbouring 16-bit values (every format's
 * range, subnormals included), alternating with random bit patterns. */
static void fill_cast_midpoints(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd64();
    if (i % 3 == 0) {
      uint16_t h = (uint16_t)(r & 0xfbfe); /* finite, and h + 1 too */
      x[i] = (float)((half_value(h) + half_value((uint16_t)(h + 1))) / 2);
    } else if (i % 3 == 1) {
      x[i] = f32_from(((uint32_t)r & 0xffff0000u) | 0x8000u);
    } else {
      x[i] = f32_from((uint32_t)(r >> 32));
    }
  }
}

/* fp16 overflow, the largest finite halves and NaN payloads. */
static void fill_fp16_edges(float* x, size_t n) {
  static const uint32_t specials[] = {0x477fe000u /* 65504 */,
                                      0x477fefffu /* 65519.99 */,
                                      0x477ff000u /* 65520 */,
                                      0x47887000u /* 69856 */,
                                      0x501502f9u /* 1e10 */,
                                      0xd01502f9u,
                                      0x7f7fffffu,
                                      0x7f800000u,
                                      0xff800000u,
                                      0x7fc00000u,
                                      0x7f800001u,
                                      0xffbfffffu,
                                      0x33000000u,
                                      0x33000001u,
                                      0x387fe000u,
                                      0x00000001u,
                                      0x80000000u};
  enum { NS = sizeof specials / sizeof specials[0] };
  for (size_t i = 0; i < n; i++) x[i] = f32_from(specials[(i + rnd64() % 2) % NS]);
}

/* Any bit pattern: NaN payloads, infinities, everything. */
static void fill_random_bits(float* x, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] = f32_from((uint32_t)rnd64());
}

/* A few magnitudes only, either sign: top-k's threshold falls among many ties. */
static void fill_ties(float* x, size_t n) {
  static const float values[] = {0.0f, 0.5f, 1.0f, 2.0f, -1.0f, -2.0f, -0.5f, -0.0f};
  for (size_t i = 0; i < n; i++) x[i] = values[rnd64() % 8];
}

/* Ties with NaN and infinities among them. */
static void fill_ties_nonfinite(float* x, size_t n) {
  fill_ties(x, n);
  for (size_t i = 0; i < n; i += 97) x[i] = (i / 97) % 2 ? INFINITY : -INFINITY;
  for (size_t i = 50; i < n; i += 331) x[i] = f32_from((i / 331) % 2 ? 0x7fc00000u : 0xff800001u);
}

typedef struct {
  const char* name;
  fill_fn fill;
  int large; /* also at the large n */
} input_t;

static const input_t k_inputs[] = {
    {"random*1", fill_unit, 1},
    {"random*1e-30", fill_tiny, 0},
    {"random*1e-3", fill_milli, 0},
    {"random*1e3", fill_kilo, 0},
    {"random*1e30", fill_huge, 0},
    {"mixed chunk scales", fill_mixed_scales, 1},
    {"zeros", fill_zero, 0},
    {"negative zeros", fill_negative_zero, 0},
    {"subnormals", fill_subnormal, 0},
    {"subnormals and normals", fill_subnormal_mixed, 0},
    {"amax at 2^-120 and neighbours", fill_amax_cut, 0},
    {"FLT_MAX", fill_flt_max, 0},
    {"inf and NaN chunks", fill_nonfinite, 1},
    {"int8 midpoints", fill_int8_midpoints, 0},
    {"int4 midpoints", fill_int4_midpoints, 0},
    {"fp16/bf16 midpoints", fill_cast_midpoints, 0},
    {"fp16 overflow and NaN", fill_fp16_edges, 0},
    {"random bits", fill_random_bits, 0},
    {"ties", fill_ties, 1},
    {"ties with NaN and inf", fill_ties_nonfinite, 0},
};

static const size_t k_sizes[] = {0, 1, 2, 3, C - 1, C, C + 1, 2 * C + 5, 4 * C + 17};
enum { LARGE_N = 1000003 };

static const codec_case_t k_codecs[] = {
    {CHORUS_CODEC_FP16, 0},   {CHORUS_CODEC_BF16, 0},    {CHORUS_CODEC_INT8, 0},
    {CHORUS_CODEC_INT4, 0},   {CHORUS_CODEC_TOPK, 0.01}, {CHORUS_CODEC_TOPK, 0.1},
    {CHORUS_CODEC_TOPK, 0.5}, {CHORUS_CODEC_TOPK, 1.0},  {CHORUS_CODEC_TOPK, 1e-12},
};

/* The elements' error against the scale (int8/int4): |x - decoded| <= scale / 2 in a finite
 * chunk (up to the float32 roundings of inv, x * inv and the product), |x| < 2^-120 where the
 * scale is 0, NaN everywhere in a non-finite chunk. */
static void check_error_bound(const char* ctx, codec_case_t cc, const float* x, const uint8_t* wire,
                              const float* decoded, size_t n) {
  if (cc.kind != CHORUS_CODEC_INT8 && cc.kind != CHORUS_CODEC_INT4) return;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    float scale = get_f32(wire, i / C);
    int ok;
    if (isnan(scale))
      ok = isnan(decoded[i]) && f32_bits(scale) == 0x7fc00000u;
    else if (scale == 0)
      ok = decoded[i] == 0 && fabsf(x[i]) < 0x1p-120f;
    else
      ok = fabs((double)x[i] - (double)decoded[i]) <= (double)scale * (0.5 + 1e-4);
    if (!ok && bad++ == 0) first = i;
  }
  check(bad == 0, "%s: error bound: %zu elements outside (first [%zu]: x %a decoded %a scale %a)",
        ctx, bad, first, n ? (double)x[first] : 0.0, n ? (double)decoded[first] : 0.0,
        n ? (double)get_f32(wire, first / C) : 0.0);
}

/* The checks that only read the reference's results: NaN chunks decode to NaN and only they. */
static void check_nonfinite_chunks(const char* ctx, codec_case_t cc, const float* x,
                                   const float* decoded, size_t n) {
  if (cc.kind != CHORUS_CODEC_INT8 && cc.kind != CHORUS_CODEC_INT4) return;
  size_t bad = 0;
  for (size_t begin = 0; begin < n; begin += C) {
    size_t end = n - begin < (size_t)C ? n : begin + C;
    int finite = 1;
    for (size_t i = begin; i < end; i++) finite &= isfinite(x[i]) != 0;
    for (size_t i = begin; i < end; i++) bad += (isnan(decoded[i]) != 0) == finite;
  }
  check(bad == 0, "%s: %zu elements NaN in a finite chunk or not NaN in a non-finite one", ctx,
        bad);
}

static void run_case(const input_t* in, size_t n, codec_case_t cc, const runner_t* runners,
                     int nrunners, work_t* w) {
  char ctx[160];
  if (cc.kind == CHORUS_CODEC_TOPK)
    snprintf(ctx, sizeof ctx, "topk(%g) n=%zu %s", cc.fraction, n, in->name);
  else
    snprintf(ctx, sizeof ctx, "%s n=%zu %s", chorus__codec_name(cc.kind), n, in->name);
  chorus_codec_t c = {cc.kind, cc.fraction};
  size_t bytes = ref_bytes(cc, n);
  check(chorus__codec_bytes(&c, n) == bytes, "%s: chorus__codec_bytes = %zu, want %zu", ctx,
        chorus__codec_bytes(&c, n), bytes);
  memset(w->want_wire, 0, bytes);
  ref_encode(cc, w->want_wire, w->src, n, w->want_residual);
  ref_decode(cc, w->want_decoded, w->want_wire, n);
  if (n) memcpy(w->want_acc, w->acc0, 4 * n);
  ref_decode_add(cc, w->want_acc, w->want_decoded, w->want_wire, n);
  check_error_bound(ctx, cc, w->src, w->want_wire, w->want_decoded, n);
  check_nonfinite_chunks(ctx, cc, w->src, w->want_decoded, n);
  for (int k = 0; k < nrunners; k++) {
    if (runners[k].table != NULL && runners[k].table->encode[cc.kind] == NULL) continue;
    check_runner(&runners[k], cc, ctx, n, w);
  }
}

static int work_alloc(work_t* w, size_t max_n) {
  size_t fbytes = 4 * max_n + 8;
  w->src = malloc(fbytes);
  w->acc0 = malloc(fbytes);
  w->want_wire = malloc(8 * max_n + 64);
  w->want_residual = malloc(fbytes);
  w->want_decoded = malloc(fbytes);
  w->want_acc = malloc(fbytes);
  return w->src && w->acc0 && w->want_wire && w->want_residual && w->want_decoded && w->want_acc &&
         guarded_alloc(&w->wire, 8 * max_n + 8) && guarded_alloc(&w->out, fbytes) &&
         guarded_alloc(&w->alias, fbytes);
}

static void work_free(work_t* w) {
  free(w->src);
  free(w->acc0);
  free(w->want_wire);
  free(w->want_residual);
  free(w->want_decoded);
  free(w->want_acc);
  free(w->wire.mem);
  free(w->out.mem);
  free(w->alias.mem);
}

/* The accumulator decode_add starts from: ordinary values, with -0 and +0 among them. */
static void fill_acc(float* acc, size_t n) {
  for (size_t i = 0; i < n; i++)
    acc[i] = i % 5 == 0 ? (i % 2 ? -0.0f : 0.0f) : rnd_signed_unit() * 4.0f;
}

static void test_matrix(const runner_t* runners, int nrunners, work_t* w) {
  for (size_t f = 0; f < sizeof k_inputs / sizeof k_inputs[0]; f++) {
    size_t nsizes = sizeof k_sizes / sizeof k_sizes[0];
    for (size_t s = 0; s < nsizes + (k_inputs[f].large ? 1 : 0); s++) {
      size_t n = s < nsizes ? k_sizes[s] : LARGE_N;
      k_inputs[f].fill(w->src, n);
      fill_acc(w->acc0, n);
      for (size_t c = 0; c < sizeof k_codecs / sizeof k_codecs[0]; c++)
        run_case(&k_inputs[f], n, k_codecs[c], runners, nrunners, w);
    }
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Small direct checks of the contract's words                                               */

static void test_contract_examples(void) {
  chorus_codec_t int8 = {CHORUS_CODEC_INT8, 0}, int4 = {CHORUS_CODEC_INT4, 0};
  chorus_codec_t fp16 = {CHORUS_CODEC_FP16, 0}, topk = {CHORUS_CODEC_TOPK, 0.4};
  uint8_t wire[64];
  float x[6] = {1.0f, NAN, 0.25f, 0, 0, 0}, out[6];
  chorus__codec_encode(&int8, wire, x, 3, NULL);
  check(f32_bits(get_f32(wire, 0)) == 0x7fc00000u && wire[4] == 0 && wire[5] == 0 && wire[6] == 0,
        "int8: a chunk with NaN has the quiet NaN scale 0x7fc00000 and values 0 (got 0x%08x)",
        f32_bits(get_f32(wire, 0)));
  chorus__codec_decode(&int8, out, wire, 3);
  check(isnan(out[0]) && isnan(out[1]) && isnan(out[2]), "int8: the NaN chunk decodes to NaN");
  float y[5] = {7.0f, 0.5f, 1.5f, 2.5f, -3.5f};
  chorus__codec_encode(&int4, wire, y, 5, NULL);
  check(chorus__codec_bytes(&int4, 5) == 7 && wire[4] == 0x07 && wire[5] == 0x22 && wire[6] == 0x0c,
        "int4 {7, .5, 1.5, 2.5, -3.5}: 7 bytes, values 07 22 0c (got %02x %02x %02x)", wire[4],
        wire[5], wire[6]);
  float big[3] = {70000.0f, 65504.0f, -INFINITY};
  chorus__codec_encode(&fp16, wire, big, 3, NULL);
  check(get_u16(wire, 0) == 0x7c00 && get_u16(wire, 1) == 0x7bff && get_u16(wire, 2) == 0xfc00,
        "fp16: 70000 -> inf, 65504 kept, -inf kept");
  float t[5] = {1.0f, -3.0f, 2.0f, 3.0f, 0.5f};
  chorus__codec_encode(&topk, wire, t, 5, NULL);
  check(chorus__codec_bytes(&topk, 5) == 16 && get_u32(wire, 0) == 1 && get_u32(wire, 1) == 3,
        "topk(0.4) of 5: k = 2, the tie at |3| gives indices 1 and 3");
  check(chorus__codec_topk_k(0.01, 0) == 0 && chorus__codec_topk_k(0.01, 1) == 1 &&
            chorus__codec_topk_k(0.01, 100) == 1 && chorus__codec_topk_k(0.01, 101) == 2 &&
            chorus__codec_topk_k(1.0, 9) == 9 && chorus__codec_topk_k(2.0, 9) == 9 &&
            chorus__codec_topk_k(1e-12, 1000) == 1,
        "chorus__codec_topk_k: ceil, clamped to [1, n], 0 for n = 0");
  int k_ok = 1;
  for (size_t n = 1; n < 3000; n += 7)
    for (int f = 1; f <= 100; f += 3)
      k_ok &= chorus__codec_topk_k(f / 100.0, n) == ref_topk_k(f / 100.0, n);
  check(k_ok, "chorus__codec_topk_k agrees with ceil() over a grid");
  check(strcmp(chorus__codec_name(CHORUS_CODEC_NONE), "none") == 0 &&
            strcmp(chorus__codec_name(CHORUS_CODEC_FP16), "fp16") == 0 &&
            strcmp(chorus__codec_name(CHORUS_CODEC_BF16), "bf16") == 0 &&
            strcmp(chorus__codec_name(CHORUS_CODEC_INT8), "int8") == 0 &&
            strcmp(chorus__codec_name(CHORUS_CODEC_INT4), "int4") == 0 &&
            strcmp(chorus__codec_name(CHORUS_CODEC_TOPK), "topk") == 0,
        "chorus__codec_name");
  check(chorus__codec_bytes(&int8, 0) == 0 && chorus__codec_bytes(&int8, C + 1) == 8 + C + 1 &&
            chorus__codec_bytes(&int4, C + 1) == 8 + C / 2 + 1,
        "chorus__codec_bytes of int8/int4");
}

/* NONE is the float32 themselves: a copy, the residual x - x. */
static void test_none(void) {
  chorus_codec_t none = {CHORUS_CODEC_NONE, 0};
  float x[4] = {1.5f, -0.0f, INFINITY, 3.0f}, res[4], out[4], acc[4] = {1, 1, 1, 1};
  uint8_t wire[16];
  chorus__codec_encode(&none, wire, x, 4, res);
  chorus__codec_decode(&none, out, wire, 4);
  chorus__codec_decode_add(&none, acc, wire, 4);
  check(chorus__codec_bytes(&none, 4) == 16 && memcmp(out, x, sizeof x) == 0 && res[0] == 0 &&
            res[1] == 0 && isnan(res[2]) && acc[0] == 2.5f && acc[3] == 4.0f,
        "none: copies the float32, residual x - x, decode_add adds");
}

static void test_dispatch(int nrunners) {
  check(nrunners >= 2, "at least the generic variant and the dispatcher");
  check(chorus__codec_variant(CHORUS_REDUCE_ISA_GENERIC) != NULL, "generic always available");
  check(chorus__codec_variant(CHORUS_REDUCE_ISA_COUNT) == NULL && chorus__codec_variant(-1) == NULL,
        "an out-of-range isa has no table");
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT; isa++) {
    const chorus_codec_variant_t* v = chorus__codec_variant(isa);
    const chorus_reduce_variant_t* r = chorus__reduce_variant((chorus_reduce_isa_t)isa);
    check((v == NULL) == (r == NULL) && (v == NULL || strcmp(v->name, r->name) == 0),
          "isa %d: the codec table exists exactly when the reduction table does", isa);
    if (v == NULL) continue;
    int complete = 1;
    for (int k = CHORUS_CODEC_FP16; k <= CHORUS_CODEC_INT4; k++)
      complete &= v->encode[k] != NULL && v->decode[k] != NULL && v->decode_add[k] != NULL;
    complete &= v->encode[CHORUS_CODEC_TOPK] == NULL && v->encode[CHORUS_CODEC_NONE] == NULL;
    check(complete, "%s: a kernel for every cast and quantiser, none for top-k", v->name);
  }
}

static size_t dispatched_zeros_encode(void* dst, const float* src, size_t n) {
  chorus_codec_t zc = {CHORUS_CODEC_ZEROS, 0};
  return chorus__codec_encode(&zc, dst, src, n, NULL);
}

static void dispatched_zeros_decode(float* dst, const void* src, size_t n, int accumulate) {
  chorus_codec_t zc = {CHORUS_CODEC_ZEROS, 0};
  if (accumulate) chorus__codec_decode_add(&zc, dst, src, n);
  else chorus__codec_decode(&zc, dst, src, n);
}

/* A fixed pseudo-random value per run of 64 elements. */
static uint64_t ref_mix_run(size_t run) {
  uint64_t z = (uint64_t)run * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---------------------------------------------------------------------------------------- */
/* ZEROS: the lossless form of variable length, against an encoder written from codec.h's text */

static size_t ref_zeros_encode(uint8_t* wire, const float* x, size_t n) {
  if (n == 0) return 0; /* no bytes at all */
  size_t words = (n + 63) / 64, nnz = 0;
  for (size_t i = 0; i < n; i++) nnz += f32_bits(x[i]) != 0;
  size_t sparse = 8 + 8 * words + 4 * nnz, dense = 8 + 4 * n;
  if (sparse >= dense) {
    put_u32(wire, 0, 1);
    put_u32(wire, 1, (uint32_t)n);
    memcpy(wire + 8, x, 4 * n);
    return dense;
  }
  put_u32(wire, 0, 2);
  put_u32(wire, 1, (uint32_t)nnz);
  memset(wire + 8, 0, 8 * words);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (f32_bits(x[i]) == 0) continue;
    wire[8 + i / 8] |= (uint8_t)(1u << (i % 8)); /* bit i % 64 of little-endian word i / 64 */
    memcpy(wire + 8 + 8 * words + 4 * k++, &x[i], 4);
  }
  return sparse;
}

/* Inputs with a share of +0 (per mille), laid out at random or in runs of 64, with -0 and NaN
 * among the kept values. */
static void fill_zeros_case(float* x, size_t n, int permille, int runs) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd64();
    int zero = runs ? (int)((ref_mix_run(i / 64) % 1000)) < permille : (int)(r % 1000) < permille;
    float v = (r >> 20) % 97 == 0 ? -0.0f : (r >> 20) % 89 == 0 ? NAN : rnd_signed_unit() * 8.0f;
    if (f32_bits(v) == 0) v = 1.0f; /* only `zero` makes a +0 */
    x[i] = zero ? 0.0f : v;
  }
}

static size_t zeros_bytes_of(const uint8_t* wire, size_t n) { return chorus__zeros_wire_bytes(wire, n); }

static void check_zeros_variant(const char* name, size_t (*encode)(void*, const float*, size_t),
                                void (*decode)(float*, const void*, size_t, int), const char* ctx0, size_t n,
                                work_t* w) {
  char ctx[200];
  snprintf(ctx, sizeof ctx, "zeros %s %s", name, ctx0);
  size_t want = ref_zeros_encode(w->want_wire, w->src, n);
  /* The encoding may use CHORUS_CODEC_SLACK bytes past the longest form, no more. */
  chorus_codec_t zc = {CHORUS_CODEC_ZEROS, 0};
  size_t room = chorus__codec_bytes(&zc, n) + CHORUS_CODEC_SLACK;
  guarded_reset(&w->wire, room, 0);
  size_t got = encode(guarded_data(&w->wire), w->src, n);
  check(got == want, "%s: %zu bytes, want %zu", ctx, got, want);
  check(guarded_intact(&w->wire), "%s: wrote outside its %zu bytes", ctx, room);
  if (got != want) return;
  check_wire("wire", ctx, guarded_data(&w->wire), w->want_wire, want, 1);
  check(n == 0 || (zeros_bytes_of(w->want_wire, n) == want && chorus__zeros_wire_ok(w->want_wire, want, n)),
        "%s: the head announces %zu bytes and the form checks", ctx, want);
  /* Decoding reads the form's bytes only: put it against the guard's end. */
  guarded_reset(&w->wire, want, 0);
  memcpy(guarded_data(&w->wire), w->want_wire, want);
  guarded_reset(&w->out, 4 * n, 0);
  float* out = guarded_floats(&w->out);
  decode(out, guarded_data(&w->wire), n, 0);
  check_floats("decode", ctx, out, w->src, n, guarded_intact(&w->out));
  guarded_reset(&w->out, 4 * n, 0);
  out = guarded_floats(&w->out);
  if (n) memcpy(out, w->acc0, 4 * n);
  decode(out, guarded_data(&w->wire), n, 1);
  for (size_t i = 0; i < n; i++) {
    volatile float sum = w->acc0[i] + w->src[i];
    w->want_acc[i] = sum;
  }
  check_floats("decode_add", ctx, out, w->want_acc, n, guarded_intact(&w->out));
}

/* Damaged forms are refused: another count, a bit flipped, a bit past n, an unknown form, a
 * sparse form that is not shorter, a dense form of another length. */
static void test_zeros_damage(void) {
  float x[130];
  for (int i = 0; i < 130; i++) x[i] = i % 10 == 3 ? (float)i : 0.0f;
  uint8_t wire[8 + 4 * 130 + 64];
  size_t bytes = ref_zeros_encode(wire, x, 130);
  check(get_u32(wire, 0) == 2 && get_u32(wire, 1) == 13 && bytes == 8 + 24 + 52 &&
            chorus__zeros_wire_ok(wire, bytes, 130),
        "zeros: 13 of 130 kept is the sparse form, 84 bytes");
  uint8_t bad[sizeof wire];
  memcpy(bad, wire, bytes);
  put_u32(bad, 1, 14);
  check(!chorus__zeros_wire_ok(bad, bytes, 130) && !chorus__zeros_wire_ok(bad, bytes + 4, 130),
        "zeros: a count that is not the bitmap's is refused");
  memcpy(bad, wire, bytes);
  bad[8] ^= 1;
  check(!chorus__zeros_wire_ok(bad, bytes, 130), "zeros: a bitmap that disagrees with the count is refused");
  memcpy(bad, wire, bytes);
  bad[8 + 16] |= 0x80; /* word 2, bit 7: element 135 of 130 */
  bad[8 + 0] &= (uint8_t)~(1u << 3); /* one kept bit less, so the count still agrees */
  check(!chorus__zeros_wire_ok(bad, bytes, 130), "zeros: a bit past the last element is refused");
  memcpy(bad, wire, bytes);
  put_u32(bad, 0, 3);
  check(chorus__zeros_wire_bytes(bad, 130) == 0, "zeros: an unknown form announces nothing");
  put_u32(bad, 0, 2);
  put_u32(bad, 1, 127);
  check(chorus__zeros_wire_bytes(bad, 130) == 0, "zeros: a sparse form that is not shorter announces nothing");
  put_u32(bad, 0, 1);
  put_u32(bad, 1, 129);
  check(chorus__zeros_wire_bytes(bad, 130) == 0, "zeros: a dense form of another count announces nothing");
  put_u32(bad, 1, 130);
  check(chorus__zeros_wire_bytes(bad, 130) == 8 + 4 * 130, "zeros: the dense form's length");
  chorus_codec_t zc = {CHORUS_CODEC_ZEROS, 0};
  check(!chorus__codec_fixed(&zc) && chorus__codec_bytes(&zc, 130) == 8 + 4 * 130 && chorus__codec_bytes(&zc, 0) == 0 &&
            strcmp(chorus__codec_name(CHORUS_CODEC_ZEROS), "zeros") == 0,
        "zeros: variable, its longest form the dense one");
  float res[3] = {1, 2, 3}, y[3] = {0.0f, -0.0f, 5.0f};
  uint8_t small[8 + 12 + 64];
  check(chorus__codec_encode(&zc, small, y, 3, res) == 20 && res[0] == 0 && res[1] == 0 && res[2] == 0,
        "zeros: 3 elements go dense (20 bytes), the residual is +0");
}

static void test_zeros(work_t* w) {
  static const size_t sizes[] = {0, 1, 15, 16, 63, 64, 65, 127, 128, 1000, 4099, 100003};
  static const struct {
    int permille, runs;
  } shares[] = {{0, 0}, {30, 0}, {500, 0}, {900, 0}, {1000, 0}, {600, 1}, {970, 0}};
  const chorus_zeros_variant_t* variants[CHORUS_REDUCE_ISA_COUNT];
  int nv = 0;
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT; isa++)
    if ((variants[nv] = chorus__zeros_variant(isa)) != NULL) nv++;
  check(nv >= 1 && chorus__zeros_variant(CHORUS_REDUCE_ISA_GENERIC) != NULL, "zeros: the generic variant");
  for (size_t z = 0; z < sizeof shares / sizeof shares[0]; z++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      size_t n = sizes[s];
      char ctx[80];
      snprintf(ctx, sizeof ctx, "n=%zu, %d per mille +0%s", n, shares[z].permille, shares[z].runs ? " in runs" : "");
      fill_zeros_case(w->src, n, shares[z].permille, shares[z].runs);
      fill_acc(w->acc0, n);
      for (int v = 0; v < nv; v++)
        check_zeros_variant(variants[v]->name, variants[v]->encode, variants[v]->decode, ctx, n, w);
      check_zeros_variant("dispatched", dispatched_zeros_encode, dispatched_zeros_decode, ctx, n, w);
    }
  test_zeros_damage();
}

int main(void) {
  alarm(TEST_TIME_LIMIT_SEC); /* SIGALRM's default action ends the process: a bounded test */
  setvbuf(stdout, NULL, _IOLBF, 0);

  runner_t runners[CHORUS_REDUCE_ISA_COUNT + 1];
  int nrunners = 0;
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT; isa++) {
    const chorus_codec_variant_t* v = chorus__codec_variant(isa);
    if (v == NULL) {
      static const char* const names[CHORUS_REDUCE_ISA_COUNT] = {"avx512", "avx2", "generic"};
      printf("variant %s: not supported by this CPU, skipped\n", names[isa]);
      continue;
    }
    runners[nrunners++] = (runner_t){v->name, v};
  }
  runners[nrunners++] = (runner_t){"dispatched", NULL};

  test_reference_itself();
  test_contract_examples();
  test_none();
  test_dispatch(nrunners);

  work_t w;
  if (!work_alloc(&w, LARGE_N)) {
    printf("FAIL: out of memory\n");
    return 1;
  }
  test_matrix(runners, nrunners, &w);
  test_zeros(&w);
  work_free(&w);
  for (int k = 0; k < nrunners; k++) printf("ran: %s\n", runners[k].name);
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
