/*
 * fuzz_zeros.c - libFuzzer target for the lossless ZEROS form's checks and decoders
 * (src/reduce/codec_zeros.c). A receiver reads another rank's bytes: the head announces the
 * form's length (chorus__zeros_wire_bytes), the whole form is checked (chorus__zeros_wire_ok)
 * and only then decoded. Here every form the check accepts is decoded by every variant this CPU
 * runs, from a buffer of exactly the form's bytes into one of exactly n floats (ASan sees any
 * read or write past them), and compared bit for bit with a decoder written here from codec.h's
 * text; the check's verdict is compared with an oracle written from the same text, and the
 * announced length with the form's.
 *
 * Input: [0, 2) n = 1 + (LE u16 % 2048), then the wire bytes (the form under test).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/codec.h"
#include "reduce/variants.h"

static uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static uint64_t u64_at(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

/* The form's length by codec.h, or 0 when the head describes none. */
static size_t oracle_bytes(const uint8_t* w, size_t n) {
  uint32_t form = u32_at(w), count = u32_at(w + 4);
  size_t words = (n + 63) / 64;
  if (form == 1) return count == n ? 8 + 4 * n : 0;
  if (form != 2 || count > n) return 0;
  size_t sparse = 8 + 8 * words + 4 * (size_t)count;
  return sparse < 8 + 4 * n ? sparse : 0;
}

/* Whether w[0..len) is a whole form of n elements by codec.h: its length, and for a sparse
 * one a bitmap with count bits set, none past n. */
static int oracle_ok(const uint8_t* w, size_t len, size_t n) {
  if (len < 8 || oracle_bytes(w, n) != len) return 0;
  if (u32_at(w) == 1) return 1;
  size_t set = 0;
  for (size_t i = 0; i < n; i++) set += (w[8 + i / 8] >> (i % 8)) & 1u;
  for (size_t i = n; i < 64 * ((n + 63) / 64); i++)
    if ((w[8 + i / 8] >> (i % 8)) & 1u) return 0;
  return set == u32_at(w + 4);
}

static void oracle_decode(float* out, const uint8_t* w, size_t n) {
  if (u32_at(w) == 1) {
    memcpy(out, w + 8, 4 * n);
    return;
  }
  const uint8_t* values = w + 8 + 8 * ((n + 63) / 64);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    out[i] = 0.0f;
    if ((u64_at(w + 8 + 8 * (i / 64)) >> (i % 64)) & 1u) memcpy(&out[i], values + 4 * k++, 4);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  size_t n = 1 + (size_t)((data[0] | data[1] << 8) % 2048);
  const uint8_t* wire_in = data + 2;
  size_t len = size - 2;
  if (len >= 8 && chorus__zeros_wire_bytes(wire_in, n) != oracle_bytes(wire_in, n)) abort();
  int ok = chorus__zeros_wire_ok(wire_in, len, n);
  if (ok != oracle_ok(wire_in, len, n)) abort();
  if (!ok) return 0;
  uint8_t* wire = malloc(len);
  float* want = malloc(4 * n);
  float* got = malloc(4 * n);
  if (!wire || !want || !got) abort();
  memcpy(wire, wire_in, len);
  oracle_decode(want, wire, n);
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT; isa++) {
    const chorus_zeros_variant_t* v = chorus__zeros_variant(isa);
    if (!v) continue;
    memset(got, 0xa5, 4 * n);
    v->decode(got, wire, n, 0);
    if (memcmp(got, want, 4 * n) != 0) abort();
    for (size_t i = 0; i < n; i++) got[i] = 0.0f;
    v->decode(got, wire, n, 1); /* +0 plus each element: the element, but -0 + +0 is +0 */
    for (size_t i = 0; i < n; i++) {
      float sum = 0.0f + want[i];
      if (memcmp(&got[i], &sum, 4) != 0 && !(got[i] != got[i] && sum != sum)) abort();
    }
  }
  free(wire);
  free(want);
  free(got);
  return 0;
}
