/*
 * codec_zeros.c - the ZEROS wire form (codec.h): a float32 vector without its +0 elements, a
 * bit per element saying which are there. Lossless, so it needs no agreement beyond the form
 * itself: decoding puts +0 back where the bitmap has none, which is the value that was there.
 * Two variants, plain C and AVX-512 (compress and expand by mask); both write the same bytes,
 * which the tests check.
 */
#include <stdint.h>
#include <string.h>

#include "reduce/codec.h"
#include "reduce/variants.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ZEROS_HAVE_X86 1
#else
#define ZEROS_HAVE_X86 0
#endif

enum { ZEROS_HEAD = CHORUS_CODEC_HEAD_BYTES, WORD_ELEMS = 64 };

static size_t bitmap_words(size_t n) { return (n + WORD_ELEMS - 1) / WORD_ELEMS; }

static void put_head(uint8_t* wire, uint32_t form, uint32_t nnz) {
  memcpy(wire, &form, sizeof form);
  memcpy(wire + 4, &nnz, sizeof nnz);
}

static size_t sparse_bytes(size_t n, size_t nnz) { return ZEROS_HEAD + 8 * bitmap_words(n) + 4 * nnz; }

/* The dense form when the sparse one would not be shorter. */
static size_t finish_dense(uint8_t* wire, const float* src, size_t n) {
  put_head(wire, CHORUS_ZEROS_DENSE, (uint32_t)n);
  memcpy(wire + ZEROS_HEAD, src, 4 * n);
  return ZEROS_HEAD + 4 * n;
}

static int sparse_pays(size_t n, size_t nnz) { return sparse_bytes(n, nnz) < ZEROS_HEAD + 4 * n; }

/* ---- plain C ---- */

static uint64_t word_bits(const float* src, size_t len) {
  uint64_t bits = 0;
  for (size_t j = 0; j < len; j++) {
    uint32_t v;
    memcpy(&v, &src[j], sizeof v);
    bits |= (uint64_t)(v != 0) << j;
  }
  return bits;
}

/* Word w of the bitmap: stores it and returns how many elements it keeps. */
static size_t put_word(uint8_t* bitmap, size_t w, uint64_t bits) {
  memcpy(bitmap + 8 * w, &bits, sizeof bits);
  return (size_t)__builtin_popcountll(bits);
}

static uint64_t get_word(const uint8_t* bitmap, size_t w) {
  uint64_t bits;
  memcpy(&bits, bitmap + 8 * w, sizeof bits);
  return bits;
}

/* Appends the kept elements of one word's elements (from src) at value *k on. */
static void compact_word(uint8_t* out, size_t* k, uint64_t bits, const float* src) {
  for (; bits; bits &= bits - 1) memcpy(out + 4 * (*k)++, &src[__builtin_ctzll(bits)], 4);
}

static size_t generic_encode(void* dst, const float* src, size_t n) {
  if (n == 0) return 0;
  uint8_t* wire = dst;
  uint8_t* bitmap = wire + ZEROS_HEAD;
  size_t words = bitmap_words(n), nnz = 0, k = 0;
  for (size_t w = 0; w < words; w++) {
    size_t first = w * WORD_ELEMS;
    nnz += put_word(bitmap, w, word_bits(src + first, n - first < WORD_ELEMS ? n - first : WORD_ELEMS));
  }
  if (!sparse_pays(n, nnz)) return finish_dense(wire, src, n);
  for (size_t w = 0; w < words; w++) compact_word(bitmap + 8 * words, &k, get_word(bitmap, w), src + w * WORD_ELEMS);
  put_head(wire, CHORUS_ZEROS_SPARSE, (uint32_t)nnz);
  return sparse_bytes(n, nnz);
}

static void dense_decode(float* dst, const uint8_t* wire, size_t n, int accumulate) {
  for (size_t i = 0; i < n; i++) {
    float x;
    memcpy(&x, wire + ZEROS_HEAD + 4 * i, sizeof x);
    dst[i] = accumulate ? dst[i] + x : x;
  }
}

static int is_dense(const uint8_t* wire) {
  uint32_t form;
  memcpy(&form, wire, sizeof form);
  return form == CHORUS_ZEROS_DENSE;
}

/* Elements [first, first + len) of one bitmap word, their values from values[*k] on. */
static void decode_word(float* dst, uint64_t bits, const uint8_t* values, size_t* k, size_t len, int accumulate) {
  for (size_t j = 0; j < len; j++) {
    float x = 0.0f;
    if (bits >> j & 1u) memcpy(&x, values + 4 * (*k)++, sizeof x);
    /* acc + (+0), not acc alone: -0 + +0 is +0, as the dense form's sum gives */
    dst[j] = accumulate ? dst[j] + x : x;
  }
}

static void generic_decode(float* dst, const void* src, size_t n, int accumulate) {
  const uint8_t* wire = src;
  if (n == 0) return;
  if (is_dense(wire)) {
    dense_decode(dst, wire, n, accumulate);
    return;
  }
  size_t words = bitmap_words(n), k = 0;
  const uint8_t* values = wire + ZEROS_HEAD + 8 * words;
  for (size_t w = 0; w < words; w++) {
    size_t first = w * WORD_ELEMS, len = n - first < WORD_ELEMS ? n - first : WORD_ELEMS;
    decode_word(dst + first, get_word(wire + ZEROS_HEAD, w), values, &k, len, accumulate);
  }
}

/* ---- AVX-512 ---- */
#if ZEROS_HAVE_X86
#define ZEROS_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))

ZEROS_AVX512 static uint64_t avx512_word_bits(const float* src) {
  uint64_t bits = 0;
  for (int q = 0; q < 4; q++) {
    __m512i v = _mm512_loadu_si512((const void*)(src + 16 * q));
    bits |= (uint64_t)_mm512_test_epi32_mask(v, v) << (16 * q);
  }
  return bits;
}

/* The bitmap, then the values: each group of 16 compressed in a register and stored whole
 * (its tail past the last value is overwritten by the next group, or lies in the slack that
 * codec.h asks of dst), which is faster than a masked compressing store on most cores. */
ZEROS_AVX512 static size_t avx512_encode(void* dst, const float* src, size_t n) {
  if (n == 0) return 0;
  uint8_t* wire = dst;
  uint8_t* bitmap = wire + ZEROS_HEAD;
  size_t words = bitmap_words(n), full = n / WORD_ELEMS, nnz = 0, k = 0;
  for (size_t w = 0; w < full; w++) nnz += put_word(bitmap, w, avx512_word_bits(src + w * WORD_ELEMS));
  if (full < words) nnz += put_word(bitmap, full, word_bits(src + full * WORD_ELEMS, n - full * WORD_ELEMS));
  if (!sparse_pays(n, nnz)) return finish_dense(wire, src, n);
  uint8_t* out = bitmap + 8 * words;
  for (size_t w = 0; w < full; w++) {
    uint64_t bits = get_word(bitmap, w);
    for (int q = 0; bits && q < 4; q++) {
      __mmask16 m = (__mmask16)(bits >> (16 * q));
      if (!m) continue;
      __m512 v = _mm512_maskz_compress_ps(m, _mm512_loadu_ps(src + w * WORD_ELEMS + 16 * q));
      _mm512_storeu_ps(out + 4 * k, v);
      k += (size_t)__builtin_popcount(m);
    }
  }
  if (full < words) compact_word(out, &k, get_word(bitmap, full), src + full * WORD_ELEMS);
  put_head(wire, CHORUS_ZEROS_SPARSE, (uint32_t)nnz);
  return sparse_bytes(n, nnz);
}

ZEROS_AVX512 static void avx512_decode(float* dst, const void* src, size_t n, int accumulate) {
  const uint8_t* wire = src;
  if (n == 0) return;
  if (is_dense(wire)) {
    dense_decode(dst, wire, n, accumulate);
    return;
  }
  size_t words = bitmap_words(n), full = n / WORD_ELEMS, k = 0;
  const uint8_t* values = wire + ZEROS_HEAD + 8 * words;
  for (size_t w = 0; w < full; w++) {
    uint64_t bits = get_word(wire + ZEROS_HEAD, w);
    for (int q = 0; q < 4; q++) {
      __mmask16 m = (__mmask16)(bits >> (16 * q));
      float* d = dst + w * WORD_ELEMS + 16 * q;
      __m512 v = _mm512_maskz_expandloadu_ps(m, values + 4 * k); /* reads only the m values */
      _mm512_storeu_ps(d, accumulate ? _mm512_add_ps(_mm512_loadu_ps(d), v) : v);
      k += (size_t)__builtin_popcount(m);
    }
  }
  if (full < words) {
    uint64_t last = get_word(wire + ZEROS_HEAD, full);
    decode_word(dst + full * WORD_ELEMS, last, values, &k, n - full * WORD_ELEMS, accumulate);
  }
}
#endif

/* ---- the variants and the checks ---- */

static const chorus_zeros_variant_t k_generic = {"generic", generic_encode, generic_decode};
#if ZEROS_HAVE_X86
static const chorus_zeros_variant_t k_avx512 = {"avx512", avx512_encode, avx512_decode};
#endif

const chorus_zeros_variant_t* chorus__zeros_variant(int isa) {
  if (chorus__reduce_variant((chorus_reduce_isa_t)isa) == NULL) return NULL;
#if ZEROS_HAVE_X86
  if (isa == CHORUS_REDUCE_ISA_AVX512) return &k_avx512;
#endif
  return isa == CHORUS_REDUCE_ISA_GENERIC ? &k_generic : NULL;
}

size_t chorus__zeros_wire_bytes(const void* head, size_t n) {
  uint32_t form, nnz;
  memcpy(&form, head, sizeof form);
  memcpy(&nnz, (const uint8_t*)head + 4, sizeof nnz);
  if (form == CHORUS_ZEROS_DENSE) return nnz == n ? ZEROS_HEAD + 4 * n : 0;
  if (form == CHORUS_ZEROS_SPARSE && nnz <= n && sparse_pays(n, nnz)) return sparse_bytes(n, nnz);
  return 0;
}

int chorus__zeros_wire_ok(const void* wire, size_t bytes, size_t n) {
  if (bytes < ZEROS_HEAD || chorus__zeros_wire_bytes(wire, n) != bytes) return 0;
  uint32_t form, nnz;
  memcpy(&form, wire, sizeof form);
  memcpy(&nnz, (const uint8_t*)wire + 4, sizeof nnz);
  if (form == CHORUS_ZEROS_DENSE) return 1;
  size_t words = bitmap_words(n), set = 0;
  for (size_t w = 0; w < words; w++) {
    uint64_t bits = get_word((const uint8_t*)wire + ZEROS_HEAD, w);
    if (w == words - 1 && n % WORD_ELEMS && bits >> (n % WORD_ELEMS)) return 0; /* bits past the end */
    set += (size_t)__builtin_popcountll(bits);
  }
  return set == nnz;
}
