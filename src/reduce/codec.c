/*
 * codec.c - the codec entry points of codec.h: the run-time choice of the codec table (the best
 * one the CPU runs, cached, the same choice as the reduction kernels'), wire sizes, and top-k,
 * whose selection is scalar and lives here rather than in the per-ISA tables.
 *
 * Top-k selects without sorting and without allocating: a radix select over the 31 magnitude
 * bits (three histogram passes of 11, 11 and 9 bits, each over the elements whose higher bits
 * match the digits found so far) finds the k-th largest magnitude, the threshold; one more pass
 * in index order takes every element above it and the lowest-index ones equal to it, which is
 * both the tie rule and the ascending index order of the wire form. O(n), deterministic.
 */
#include "reduce/codec.h"

#include <stdatomic.h>
#include <string.h>

#include "reduce/half_inline.h"
#include "reduce/variants.h"

/* Defined by codec_<isa>.c; the avx2/avx512 tables exist on x86 only. */
extern const chorus_codec_variant_t chorus__codec_generic;
#if defined(__x86_64__) || defined(__i386__)
extern const chorus_codec_variant_t chorus__codec_avx2;
extern const chorus_codec_variant_t chorus__codec_avx512;
#endif

_Static_assert(CHORUS_CODEC_COUNT == 7, "a codec was added to codec.h: extend codec.c");

static const chorus_codec_variant_t* codec_table(int isa) {
  switch (isa) {
#if defined(__x86_64__) || defined(__i386__)
    case CHORUS_REDUCE_ISA_AVX512:
      return &chorus__codec_avx512;
    case CHORUS_REDUCE_ISA_AVX2:
      return &chorus__codec_avx2;
#endif
    case CHORUS_REDUCE_ISA_GENERIC:
      return &chorus__codec_generic;
    default:
      return NULL;
  }
}

/* The codec tables are compiled for the same targets as the reduction kernels, so the CPU runs
 * one exactly when it runs the other: reduce.c's check answers for both. */
const chorus_codec_variant_t* chorus__codec_variant(int isa) {
  const chorus_codec_variant_t* table = codec_table(isa);
  return table != NULL && chorus__reduce_variant((chorus_reduce_isa_t)isa) != NULL ? table : NULL;
}

/* The chosen table. Threads racing on first use all compute the same answer, so a relaxed
 * atomic is enough: whoever stores last stores the same pointer. */
static _Atomic(const chorus_codec_variant_t*) chosen_variant;

static const chorus_codec_variant_t* active_variant(void) {
  const chorus_codec_variant_t* v = atomic_load_explicit(&chosen_variant, memory_order_relaxed);
  if (v != NULL) return v;
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT && v == NULL; isa++)
    v = chorus__codec_variant(isa);
  atomic_store_explicit(&chosen_variant, v, memory_order_relaxed);
  return v;
}

/* The kinds with a per-ISA kernel in the tables. */
static int codec_has_kernels(chorus_codec_kind_t kind) {
  return kind == CHORUS_CODEC_FP16 || kind == CHORUS_CODEC_BF16 || kind == CHORUS_CODEC_INT8 ||
         kind == CHORUS_CODEC_INT4;
}

size_t chorus__codec_topk_k(double fraction, size_t n) {
  if (n == 0) return 0;
  double wanted = fraction * (double)n;
  if (!(wanted > 1.0)) return 1; /* also a NaN fraction */
  if (wanted >= (double)n) return n;
  size_t k = (size_t)wanted; /* exact: wanted < n < 2^53; then the ceiling */
  return (double)k < wanted ? k + 1 : k;
}

size_t chorus__codec_bytes(const chorus_codec_t* c, size_t n) {
  size_t scale_bytes = 4 * ((n + CHORUS_CODEC_CHUNK - 1) / CHORUS_CODEC_CHUNK);
  switch (c->kind) {
    case CHORUS_CODEC_NONE:
      return 4 * n;
    case CHORUS_CODEC_FP16:
    case CHORUS_CODEC_BF16:
      return 2 * n;
    case CHORUS_CODEC_INT8:
      return scale_bytes + n;
    case CHORUS_CODEC_INT4:
      return scale_bytes + (n + 1) / 2;
    case CHORUS_CODEC_TOPK:
      return 8 * chorus__codec_topk_k(c->topk_fraction, n);
    case CHORUS_CODEC_ZEROS:
      return n ? 8 + 4 * n : 0;
    default:
      return 0;
  }
}

const char* chorus__codec_name(chorus_codec_kind_t kind) {
  static const char* const names[CHORUS_CODEC_COUNT] = {
      [CHORUS_CODEC_NONE] = "none", [CHORUS_CODEC_FP16] = "fp16", [CHORUS_CODEC_BF16] = "bf16",
      [CHORUS_CODEC_INT8] = "int8", [CHORUS_CODEC_INT4] = "int4", [CHORUS_CODEC_TOPK] = "topk",
      [CHORUS_CODEC_ZEROS] = "zeros"};
  return (unsigned)kind < (unsigned)CHORUS_CODEC_COUNT ? names[kind] : NULL;
}

/* ---- NONE: the float32 themselves ---- */

static void none_encode(void* dst, const float* src, size_t n, float* residual) {
  memmove(dst, src, 4 * n);
  if (residual == NULL) return;
  /* x - decode(x) as for the casts: +0, or NaN where x is not finite. Read from dst: residual
   * may be src. */
  for (size_t i = 0; i < n; i++) {
    float x;
    memcpy(&x, (const unsigned char*)dst + 4 * i, sizeof x);
    residual[i] = x - x;
  }
}

static void none_decode(float* dst, const void* src, size_t n, int accumulate) {
  for (size_t i = 0; i < n; i++) {
    float x;
    memcpy(&x, (const unsigned char*)src + 4 * i, sizeof x);
    dst[i] = accumulate ? dst[i] + x : x;
  }
}

/* ---- TOPK ---- */

enum {
  TOPK_HIGH_DIGIT_BITS = 11,
  TOPK_DIGIT_PASSES = 3,
  TOPK_HISTOGRAM_BINS = 1 << TOPK_HIGH_DIGIT_BITS
};

/* The digits of the 31-bit magnitude key, most significant first: 11 + 11 + 9 bits. */
static const unsigned k_digit_shift[TOPK_DIGIT_PASSES] = {20, 9, 0};
static const unsigned k_digit_bits[TOPK_DIGIT_PASSES] = {11, 11, 9};

static uint32_t magnitude_key(float x) { return chorus__f32_bits(x) & 0x7fffffffu; }

/* The k-th largest key (1 <= k <= n) and how many elements equal to it the selection takes. */
typedef struct {
  uint32_t threshold;
  size_t ties_taken;
} topk_cut_t;

/* The first pass counts every element: four histograms, one per lane of four elements, so that
 * consecutive increments of one bin (gradients are smooth) do not wait for each other. */
static void topk_count_all(const float* src, size_t n, uint32_t* histogram) {
  uint32_t lane[3][TOPK_HISTOGRAM_BINS];
  memset(lane, 0, sizeof lane);
  unsigned shift = k_digit_shift[0];
  size_t i = 0;
  for (; n - i >= 4; i += 4) {
    histogram[magnitude_key(src[i]) >> shift]++;
    lane[0][magnitude_key(src[i + 1]) >> shift]++;
    lane[1][magnitude_key(src[i + 2]) >> shift]++;
    lane[2][magnitude_key(src[i + 3]) >> shift]++;
  }
  for (; i < n; i++) histogram[magnitude_key(src[i]) >> shift]++;
  for (int b = 0; b < TOPK_HISTOGRAM_BINS; b++) histogram[b] += lane[0][b] + lane[1][b] + lane[2][b];
}

static topk_cut_t topk_find_cut(const float* src, size_t n, size_t k) {
  uint32_t histogram[TOPK_HISTOGRAM_BINS];
  uint32_t prefix = 0, prefix_mask = 0;
  size_t still_wanted = k; /* among the elements matching the prefix */
  for (int pass = 0; pass < TOPK_DIGIT_PASSES; pass++) {
    unsigned shift = k_digit_shift[pass];
    uint32_t digit_mask = (1u << k_digit_bits[pass]) - 1;
    memset(histogram, 0, sizeof histogram);
    if (pass == 0) {
      topk_count_all(src, n, histogram);
    } else {
      for (size_t i = 0; i < n; i++) {
        uint32_t key = magnitude_key(src[i]);
        if ((key & prefix_mask) == prefix) histogram[(key >> shift) & digit_mask]++;
      }
    }
    /* The digit, from the top, at which the count of larger-or-equal elements reaches k. */
    uint32_t digit = digit_mask;
    while (histogram[digit] < still_wanted) still_wanted -= histogram[digit--];
    prefix |= digit << shift;
    prefix_mask |= digit_mask << shift;
  }
  topk_cut_t cut = {prefix, still_wanted};
  return cut;
}

static void topk_encode(double fraction, void* dst, const float* src, size_t n, float* residual) {
  size_t k = chorus__codec_topk_k(fraction, n);
  if (k == 0) return;
  topk_cut_t cut = topk_find_cut(src, n, k);
  unsigned char* index_out = dst;
  unsigned char* value_out = index_out + 4 * k;
  size_t ties_left = cut.ties_taken;
  size_t taken = 0;
  for (size_t i = 0; i < n; i++) {
    float x = src[i];
    uint32_t key = magnitude_key(x);
    int take = key > cut.threshold || (key == cut.threshold && ties_left > 0);
    if (take) {
      uint32_t index = (uint32_t)i;
      memcpy(index_out + 4 * taken, &index, sizeof index);
      memcpy(value_out + 4 * taken, &x, sizeof x);
      taken++;
      ties_left -= key == cut.threshold;
    }
    if (residual != NULL) residual[i] = take ? 0.0f : x;
  }
}

/* Indices come from another rank: one out of range (a corrupt wire) is skipped rather than
 * written outside dst. */
static void topk_scatter(float* dst, const void* src, size_t n, size_t k, int accumulate) {
  const unsigned char* index_in = src;
  const unsigned char* value_in = index_in + 4 * k;
  for (size_t j = 0; j < k; j++) {
    uint32_t index;
    float value;
    memcpy(&index, index_in + 4 * j, sizeof index);
    memcpy(&value, value_in + 4 * j, sizeof value);
    if (index >= n) continue;
    dst[index] = accumulate ? dst[index] + value : value;
  }
}

/* ---- entry points ---- */

/* The ZEROS variant of the chosen codec table's instruction set. */
static const chorus_zeros_variant_t* zeros_active(void) {
  static _Atomic(const chorus_zeros_variant_t*) chosen;
  const chorus_zeros_variant_t* v = atomic_load_explicit(&chosen, memory_order_relaxed);
  if (v != NULL) return v;
  v = chorus__zeros_variant(CHORUS_REDUCE_ISA_AVX512);
  if (v == NULL || active_variant() != chorus__codec_variant(CHORUS_REDUCE_ISA_AVX512))
    v = chorus__zeros_variant(CHORUS_REDUCE_ISA_GENERIC);
  atomic_store_explicit(&chosen, v, memory_order_relaxed);
  return v;
}

size_t chorus__codec_encode(const chorus_codec_t* c, void* dst, const float* src, size_t n, float* residual) {
  if (n == 0) return 0;
  if (codec_has_kernels(c->kind)) {
    active_variant()->encode[c->kind](dst, src, n, residual);
  } else if (c->kind == CHORUS_CODEC_TOPK) {
    topk_encode(c->topk_fraction, dst, src, n, residual);
  } else if (c->kind == CHORUS_CODEC_NONE) {
    none_encode(dst, src, n, residual);
  } else if (c->kind == CHORUS_CODEC_ZEROS) {
    size_t bytes = zeros_active()->encode(dst, src, n);
    if (residual) memset(residual, 0, n * sizeof *residual);
    return bytes;
  }
  return chorus__codec_bytes(c, n);
}

size_t chorus__codec_wire_bytes(const chorus_codec_t* c, const void* head, size_t n) {
  return chorus__codec_fixed(c) ? chorus__codec_bytes(c, n) : chorus__zeros_wire_bytes(head, n);
}

int chorus__codec_wire_ok(const chorus_codec_t* c, const void* wire, size_t bytes, size_t n) {
  return chorus__codec_fixed(c) ? bytes == chorus__codec_bytes(c, n) : chorus__zeros_wire_ok(wire, bytes, n);
}

void chorus__codec_decode(const chorus_codec_t* c, float* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (codec_has_kernels(c->kind)) {
    active_variant()->decode[c->kind](dst, src, n);
  } else if (c->kind == CHORUS_CODEC_TOPK) {
    memset(dst, 0, n * sizeof *dst);
    topk_scatter(dst, src, n, chorus__codec_topk_k(c->topk_fraction, n), 0);
  } else if (c->kind == CHORUS_CODEC_NONE) {
    none_decode(dst, src, n, 0);
  } else if (c->kind == CHORUS_CODEC_ZEROS) {
    zeros_active()->decode(dst, src, n, 0);
  }
}

void chorus__codec_decode_add(const chorus_codec_t* c, float* acc, const void* src, size_t n) {
  if (n == 0) return;
  if (codec_has_kernels(c->kind)) {
    active_variant()->decode_add[c->kind](acc, src, n);
  } else if (c->kind == CHORUS_CODEC_TOPK) {
    topk_scatter(acc, src, n, chorus__codec_topk_k(c->topk_fraction, n), 1);
  } else if (c->kind == CHORUS_CODEC_NONE) {
    none_decode(acc, src, n, 1);
  } else if (c->kind == CHORUS_CODEC_ZEROS) {
    zeros_active()->decode(acc, src, n, 1);
  }
}
