/*
 * ref.c - the independent reference for collective tests (see ref.h). Everything here is
 * plain C written for the tests: values are generated as exact integers, reduced with integer
 * arithmetic, and only converted to the element type (with this file's own float16/bfloat16
 * code) when stored, so a result can be compared bitwise with the library's.
 */
#include "ref.h"

#include <stdio.h>
#include <string.h>

const ref_dtype_t ref_dtypes[CHORUS_DTYPE_COUNT] = {
    [CHORUS_INT8] = {"int8", 1, 1, 0},       [CHORUS_UINT8] = {"uint8", 1, 0, 0},
    [CHORUS_INT32] = {"int32", 4, 1, 0},     [CHORUS_UINT32] = {"uint32", 4, 0, 0},
    [CHORUS_INT64] = {"int64", 8, 1, 0},     [CHORUS_UINT64] = {"uint64", 8, 0, 0},
    [CHORUS_FLOAT16] = {"float16", 2, 1, 1}, [CHORUS_BFLOAT16] = {"bfloat16", 2, 1, 1},
    [CHORUS_FLOAT32] = {"float32", 4, 1, 1}, [CHORUS_FLOAT64] = {"float64", 8, 1, 1},
};

const char* const ref_op_names[CHORUS_OP_COUNT] = {
    [CHORUS_SUM] = "sum", [CHORUS_PROD] = "prod", [CHORUS_MAX] = "max",
    [CHORUS_MIN] = "min", [CHORUS_AVG] = "avg",
};

/* ---- float16 / bfloat16 ---- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static float bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* Rounds `value >> shift` to nearest, ties to even (shift >= 1). */
static uint32_t shift_round_even(uint32_t value, unsigned shift) {
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (kept & 1u))) kept++;
  return kept;
}

uint16_t ref_float_to_half(float f) {
  uint32_t x = f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t abs_bits = x & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u; /* NaN */
  uint32_t exp = abs_bits >> 23;
  uint32_t mant = abs_bits & 0x7fffffu;
  int half_exp = (int)exp - 127 + 15;
  if (half_exp >= 31) return sign | 0x7c00u; /* too large, or infinity */
  if (half_exp <= 0) {
    /* Half subnormal: value = (mant | implicit 1) * 2^(exp-150), counted in units of 2^-24. */
    if (exp == 0) return sign;   /* float subnormals are far below half's smallest step */
    unsigned shift = 126u - exp; /* >= 14 here */
    if (shift > 24u) return sign;
    return sign | (uint16_t)shift_round_even(mant | 0x800000u, shift);
  }
  /* Normal: keep 10 of 23 mantissa bits; a carry out of the mantissa correctly bumps the
   * exponent (and turns 65520 and above into infinity). */
  uint32_t h = ((uint32_t)half_exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return sign | (uint16_t)h;
}

float ref_half_to_float(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t exp = ((uint32_t)h >> 10) & 0x1fu;
  uint32_t mant = (uint32_t)h & 0x3ffu;
  if (exp == 0x1fu) return bits_f32(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    uint32_t shift = 0; /* normalise the subnormal */
    while (!(mant & 0x400u)) {
      mant <<= 1;
      shift++;
    }
    return bits_f32(sign | ((113u - shift) << 23) | ((mant & 0x3ffu) << 13));
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t ref_float_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  return (uint16_t)shift_round_even(x, 16); /* a carry into the exponent is correct */
}

float ref_bf16_to_float(uint16_t b) { return bits_f32((uint32_t)b << 16); }

/* ---- generators ---- */

uint64_t ref_mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/* A one-multiply mixer for the per-element hashes: the tests generate hundreds of millions
 * of values, and its input (a Weyl sequence over index and rank) is already well spread. */
static inline uint64_t mix_fast(uint64_t x) {
  x ^= x >> 32;
  x *= 0xd6e8feb86659fd93ull;
  x ^= x >> 32;
  return x;
}

static uint64_t element_hash(int rank, size_t index, uint64_t seed) {
  return mix_fast(seed + (uint64_t)(rank + 1) * 0xd1b54a32d192ed03ull +
                  (uint64_t)index * 0x9e3779b97f4a7c15ull);
}

/* How one rank's values are drawn for (dtype, op): value = (hash scaled to [0, span)) - offset
 * as a two's-complement 64-bit integer; span 0 means the full 64-bit range. prod is special. */
typedef struct {
  chorus_dtype_t dtype;
  chorus_op_t op;
  int is_signed;
  uint64_t span;
  uint64_t offset;
} gen_params_t;

/* Largest magnitude a sum may reach while staying exact (and not wrapping) in dtype. */
static uint64_t exact_sum_bound(chorus_dtype_t dtype) {
  switch (dtype) {
    case CHORUS_INT8: return INT8_MAX;
    case CHORUS_UINT8: return UINT8_MAX;
    case CHORUS_INT32: return INT32_MAX;
    case CHORUS_UINT32: return UINT32_MAX;
    case CHORUS_INT64: return INT64_MAX;
    case CHORUS_UINT64: return UINT64_MAX;
    case CHORUS_FLOAT16: return 2048; /* 11-bit significand */
    case CHORUS_BFLOAT16: return 256; /* 8-bit significand */
    case CHORUS_FLOAT32: return 1ull << 24;
    case CHORUS_FLOAT64: return 1ull << 53;
    default: return 0;
  }
}

static gen_params_t gen_params(chorus_dtype_t dtype, chorus_op_t op, int nranks) {
  gen_params_t p = {dtype, op, ref_dtypes[dtype].is_signed, 0, 0};
  uint64_t bound = exact_sum_bound(dtype);
  if (op == CHORUS_MAX || op == CHORUS_MIN) {
    /* The whole range of an integer type; the exact-integer range of a float type. */
    if (dtype == CHORUS_INT64 || dtype == CHORUS_UINT64) {
      p.span = 0;
    } else if (ref_dtypes[dtype].is_float) {
      p.span = 2 * bound + 1;
      p.offset = bound;
    } else {
      p.span = 1ull << (8 * ref_dtypes[dtype].size_bytes);
      p.offset = p.is_signed ? p.span / 2 : 0;
    }
  } else { /* sum, avg (prod ignores span) */
    uint64_t per_rank = bound / (uint64_t)nranks;
    if (p.is_signed) {
      p.span = 2 * per_rank + 1; /* fits: per_rank <= INT64_MAX */
      p.offset = per_rank;
    } else {
      p.span = per_rank + 1; /* wraps to 0 (= full range) for uint64 on one rank */
    }
  }
  return p;
}

/* Values work in chunks, each loop specialised outside its body, so that generating the
 * inputs and the reference of a 1M-element call costs milliseconds, not the test's time. */
enum { GEN_CHUNK = 512 };

/* out[k] = value of element index0 + k of rank, for k < n (n <= GEN_CHUNK). */
static void gen_chunk(const gen_params_t* p, int rank, size_t index0, size_t n, uint64_t seed,
                      uint64_t* out) {
  const uint64_t step = 0x9e3779b97f4a7c15ull;
  uint64_t x = seed + (uint64_t)(rank + 1) * 0xd1b54a32d192ed03ull + (uint64_t)index0 * step;
  if (p->op == CHORUS_PROD) {
    /* 2 where (rank + index + seed) % 3 == 0: at most ceil(nranks / 3) twos per element. */
    unsigned phase = (unsigned)(((uint64_t)rank % 3u + (uint64_t)index0 % 3u + seed % 3u) % 3u);
    for (size_t k = 0; k < n; k++, x += step) {
      uint64_t h = mix_fast(x);
      out[k] = phase == 0 ? 2 : (p->is_signed && (h & 1u)) ? (uint64_t)-1 : 1;
      phase = phase == 2 ? 0 : phase + 1;
    }
    return;
  }
  if (p->span) {
    for (size_t k = 0; k < n; k++, x += step)
      out[k] = (uint64_t)(((unsigned __int128)mix_fast(x) * p->span) >> 64) - p->offset;
  } else {
    for (size_t k = 0; k < n; k++, x += step) out[k] = mix_fast(x) - p->offset;
  }
  /* Narrow signed integers are held sign-extended, so 64-bit comparisons order them. */
  if (p->dtype == CHORUS_INT8)
    for (size_t k = 0; k < n; k++) out[k] = (uint64_t)(int64_t)(int8_t)out[k];
  if (p->dtype == CHORUS_INT32)
    for (size_t k = 0; k < n; k++) out[k] = (uint64_t)(int64_t)(int32_t)out[k];
}

/* Stores the exact integers v[0 .. n) (two's complement) as elements k0 .. k0+n-1 of buf. */
static void store_integers(void* buf, size_t k0, chorus_dtype_t dtype, const uint64_t* v,
                           size_t n) {
  switch (dtype) {
    case CHORUS_INT8:
    case CHORUS_UINT8:
      for (size_t k = 0; k < n; k++) ((uint8_t*)buf)[k0 + k] = (uint8_t)v[k];
      break;
    case CHORUS_INT32:
    case CHORUS_UINT32:
      for (size_t k = 0; k < n; k++) ((uint32_t*)buf)[k0 + k] = (uint32_t)v[k];
      break;
    case CHORUS_INT64:
    case CHORUS_UINT64:
      for (size_t k = 0; k < n; k++) ((uint64_t*)buf)[k0 + k] = v[k];
      break;
    case CHORUS_FLOAT16:
      for (size_t k = 0; k < n; k++)
        ((uint16_t*)buf)[k0 + k] = ref_float_to_half((float)(int64_t)v[k]);
      break;
    case CHORUS_BFLOAT16:
      for (size_t k = 0; k < n; k++)
        ((uint16_t*)buf)[k0 + k] = ref_float_to_bf16((float)(int64_t)v[k]);
      break;
    case CHORUS_FLOAT32:
      for (size_t k = 0; k < n; k++) ((float*)buf)[k0 + k] = (float)(int64_t)v[k];
      break;
    case CHORUS_FLOAT64:
      for (size_t k = 0; k < n; k++) ((double*)buf)[k0 + k] = (double)(int64_t)v[k];
      break;
    default: break;
  }
}

void ref_fill_reduce_input(void* buf, size_t count, chorus_dtype_t dtype, chorus_op_t op,
                           int nranks, int rank, size_t index0, uint64_t seed) {
  gen_params_t p = gen_params(dtype, op, nranks);
  uint64_t values[GEN_CHUNK];
  for (size_t k0 = 0; k0 < count; k0 += GEN_CHUNK) {
    size_t n = count - k0 < GEN_CHUNK ? count - k0 : GEN_CHUNK;
    gen_chunk(&p, rank, index0 + k0, n, seed, values);
    store_integers(buf, k0, dtype, values, n);
  }
}

/* acc[k] = acc[k] op v[k], exactly (no partial result overflows by construction). */
static void combine(const gen_params_t* p, uint64_t* acc, const uint64_t* v, size_t n) {
  switch (p->op) {
    case CHORUS_SUM:
    case CHORUS_AVG:
      for (size_t k = 0; k < n; k++) acc[k] += v[k];
      break;
    case CHORUS_PROD:
      for (size_t k = 0; k < n; k++) acc[k] *= v[k];
      break;
    case CHORUS_MAX:
      if (p->is_signed)
        for (size_t k = 0; k < n; k++) acc[k] = (int64_t)v[k] > (int64_t)acc[k] ? v[k] : acc[k];
      else
        for (size_t k = 0; k < n; k++) acc[k] = v[k] > acc[k] ? v[k] : acc[k];
      break;
    case CHORUS_MIN:
      if (p->is_signed)
        for (size_t k = 0; k < n; k++) acc[k] = (int64_t)v[k] < (int64_t)acc[k] ? v[k] : acc[k];
      else
        for (size_t k = 0; k < n; k++) acc[k] = v[k] < acc[k] ? v[k] : acc[k];
      break;
    default: break;
  }
}

/* Stores sum[k] / nranks for avg, following the library's documented rounding: integers
 * truncate toward zero, floats divide in their precision (float16/bfloat16 in float32). */
static void store_averages(void* buf, size_t k0, chorus_dtype_t dtype, uint64_t* sum, size_t n,
                           int nranks) {
  switch (dtype) {
    case CHORUS_INT8:
    case CHORUS_INT32:
    case CHORUS_INT64:
      for (size_t k = 0; k < n; k++) sum[k] = (uint64_t)((int64_t)sum[k] / nranks);
      store_integers(buf, k0, dtype, sum, n);
      break;
    case CHORUS_UINT8:
    case CHORUS_UINT32:
    case CHORUS_UINT64:
      for (size_t k = 0; k < n; k++) sum[k] /= (uint64_t)nranks;
      store_integers(buf, k0, dtype, sum, n);
      break;
    case CHORUS_FLOAT16:
      for (size_t k = 0; k < n; k++)
        ((uint16_t*)buf)[k0 + k] = ref_float_to_half((float)(int64_t)sum[k] / (float)nranks);
      break;
    case CHORUS_BFLOAT16:
      for (size_t k = 0; k < n; k++)
        ((uint16_t*)buf)[k0 + k] = ref_float_to_bf16((float)(int64_t)sum[k] / (float)nranks);
      break;
    case CHORUS_FLOAT32:
      for (size_t k = 0; k < n; k++) ((float*)buf)[k0 + k] = (float)(int64_t)sum[k] / (float)nranks;
      break;
    case CHORUS_FLOAT64:
      for (size_t k = 0; k < n; k++)
        ((double*)buf)[k0 + k] = (double)(int64_t)sum[k] / (double)nranks;
      break;
    default: break;
  }
}

void ref_reduce_expected(void* out, size_t count, chorus_dtype_t dtype, chorus_op_t op, int nranks,
                         size_t index0, uint64_t seed) {
  gen_params_t p = gen_params(dtype, op, nranks);
  uint64_t acc[GEN_CHUNK], values[GEN_CHUNK];
  for (size_t k0 = 0; k0 < count; k0 += GEN_CHUNK) {
    size_t n = count - k0 < GEN_CHUNK ? count - k0 : GEN_CHUNK;
    gen_chunk(&p, 0, index0 + k0, n, seed, acc);
    for (int r = 1; r < nranks; r++) {
      gen_chunk(&p, r, index0 + k0, n, seed, values);
      combine(&p, acc, values, n);
    }
    if (op == CHORUS_AVG)
      store_averages(out, k0, dtype, acc, n, nranks);
    else
      store_integers(out, k0, dtype, acc, n);
  }
}

static uint64_t byte_word(int rank, uint64_t seed, size_t word_index) {
  return element_hash(rank, word_index, seed ^ 0x5bd1e9955bd1e995ull);
}

/* Byte b of the stream is byte b % 8 (bits 8j..8j+7, whatever the machine's byte order) of
 * word b / 8, so any offset view is the same stream. */
static unsigned char stream_byte(int rank, uint64_t seed, size_t b) {
  return (unsigned char)(byte_word(rank, seed, b / 8) >> (8 * (b % 8)));
}

void ref_fill_bytes(void* out, size_t nbytes, int rank, uint64_t seed, size_t byte_offset) {
  unsigned char* p = out;
  size_t k = 0;
  for (; k < nbytes && (byte_offset + k) % 8; k++) p[k] = stream_byte(rank, seed, byte_offset + k);
  for (; k + 8 <= nbytes; k += 8) {
    uint64_t w = byte_word(rank, seed, (byte_offset + k) / 8);
    for (size_t j = 0; j < 8; j++) p[k + j] = (unsigned char)(w >> (8 * j));
  }
  for (; k < nbytes; k++) p[k] = stream_byte(rank, seed, byte_offset + k);
}

void ref_format_elem(char* out, size_t out_size, const void* elem, chorus_dtype_t dtype) {
  union {
    int8_t i8;
    uint8_t u8;
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    uint16_t u16;
    float f32;
    double f64;
  } v;
  memset(&v, 0, sizeof(v));
  if ((unsigned)dtype < CHORUS_DTYPE_COUNT) memcpy(&v, elem, ref_dtypes[dtype].size_bytes);
  switch (dtype) {
    case CHORUS_INT8: snprintf(out, out_size, "%d (0x%02x)", v.i8, v.u8); break;
    case CHORUS_UINT8: snprintf(out, out_size, "%u (0x%02x)", v.u8, v.u8); break;
    case CHORUS_INT32: snprintf(out, out_size, "%d (0x%08x)", v.i32, v.u32); break;
    case CHORUS_UINT32: snprintf(out, out_size, "%u (0x%08x)", v.u32, v.u32); break;
    case CHORUS_INT64:
      snprintf(out, out_size, "%lld (0x%016llx)", (long long)v.i64, (unsigned long long)v.u64);
      break;
    case CHORUS_UINT64:
      snprintf(out, out_size, "%llu (0x%016llx)", (unsigned long long)v.u64,
               (unsigned long long)v.u64);
      break;
    case CHORUS_FLOAT16:
      snprintf(out, out_size, "0x%04x (%.9g)", v.u16, (double)ref_half_to_float(v.u16));
      break;
    case CHORUS_BFLOAT16:
      snprintf(out, out_size, "0x%04x (%.9g)", v.u16, (double)ref_bf16_to_float(v.u16));
      break;
    case CHORUS_FLOAT32: snprintf(out, out_size, "0x%08x (%.9g)", v.u32, (double)v.f32); break;
    case CHORUS_FLOAT64:
      snprintf(out, out_size, "0x%016llx (%.17g)", (unsigned long long)v.u64, v.f64);
      break;
    default: snprintf(out, out_size, "?"); break;
  }
}
