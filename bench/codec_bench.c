/*
 * codec_bench.c - micro-benchmark of the gradient-compression codecs (src/reduce/codec.h):
 * for every codec and every codec variant the CPU runs, encode (without and with a residual) and
 * decode+accumulate, each next to memcpy of the same float32 bytes in the same run, at a
 * cache-resident and a memory-bound size, median of several repetitions. Throughput is in GB/s of
 * float32 input (n * 4 bytes per second), so every column compares with memcpy of the gradient
 * itself. Top-k (fraction 0.01) has no per-ISA variant: its row is the dispatched code.
 * Target: the casts and int8 encode and decode+accumulate at >= 2 GB/s per core.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "microbench.h"
#include "reduce/codec.h"
#include "reduce/variants.h"

enum { DEFAULT_REPS = 7, MIN_REPS = 3 };
/* Input bytes one timed sample should cover, so that the small size is repeated enough times
 * for the clock to resolve it. */
static const size_t SAMPLE_TARGET_BYTES = (size_t)64 << 20;
static const size_t k_sizes_bytes[] = {(size_t)256 << 10, (size_t)64 << 20};
static const double TOPK_FRACTION = 0.01;


typedef enum {
  MEASURE_MEMCPY,
  MEASURE_ENCODE,
  MEASURE_ENCODE_RESIDUAL,
  MEASURE_DECODE_ADD,
  MEASURE_COUNT
} measure_t;

/* The codec under test: a variant's kernels, or (table NULL) the dispatched entry points. */
typedef struct {
  chorus_codec_t codec;
  const chorus_codec_variant_t* table;
} codec_impl_t;

typedef struct {
  float* src;
  float* residual;
  float* acc;
  float* copy;
  uint8_t* wire;
  size_t n;
} buffers_t;

static void impl_encode(const codec_impl_t* impl, const buffers_t* b, float* residual) {
  if (impl->table)
    impl->table->encode[impl->codec.kind](b->wire, b->src, b->n, residual);
  else
    chorus__codec_encode(&impl->codec, b->wire, b->src, b->n, residual);
}

static void impl_decode(const codec_impl_t* impl, const buffers_t* b, float* out, int accumulate) {
  const chorus_codec_variant_t* t = impl->table;
  if (t)
    (accumulate ? t->decode_add : t->decode)[impl->codec.kind](out, b->wire, b->n);
  else if (accumulate)
    chorus__codec_decode_add(&impl->codec, out, b->wire, b->n);
  else
    chorus__codec_decode(&impl->codec, out, b->wire, b->n);
}

/* Seconds for one pass of measurement m (the mean over `iters` back-to-back passes). The
 * decode+accumulate passes read the wire the encode passes wrote. */
static double time_one(const codec_impl_t* impl, const buffers_t* b, measure_t m, size_t iters) {
  double start = now_sec();
  for (size_t it = 0; it < iters; it++) {
    switch (m) {
      case MEASURE_MEMCPY:
        memcpy(b->copy, b->src, b->n * sizeof(float));
        break;
      case MEASURE_ENCODE:
        impl_encode(impl, b, NULL);
        break;
      case MEASURE_ENCODE_RESIDUAL:
        impl_encode(impl, b, b->residual);
        break;
      default:
        impl_decode(impl, b, b->acc, 1);
        break;
    }
  }
  double elapsed = now_sec() - start;
  g_sink = ((const uint8_t*)b->copy)[b->n - 1] ^ b->wire[0];
  return elapsed / (double)iters;
}

/* A proof that the timed code computes: encode then decode gives back the input within the
 * codec's error (half a step of 1/127 or 1/7 of the chunk's largest |x| <= 1, fp16/bf16
 * rounding) at the first, middle and last element; top-k's decode is each input or 0. */
static int roundtrip_ok(const codec_impl_t* impl, const buffers_t* b) {
  impl_encode(impl, b, NULL);
  impl_decode(impl, b, b->copy, 0);
  static const double k_tolerance[CHORUS_CODEC_COUNT] = {[CHORUS_CODEC_FP16] = 1e-3,
                                                         [CHORUS_CODEC_BF16] = 1e-2,
                                                         [CHORUS_CODEC_INT8] = 0.5 / 127 + 1e-6,
                                                         [CHORUS_CODEC_INT4] = 0.5 / 7 + 1e-6};
  size_t idx[3] = {0, b->n / 2, b->n - 1};
  for (int k = 0; k < 3; k++) {
    double x = b->src[idx[k]], got = b->copy[idx[k]];
    int ok = impl->codec.kind == CHORUS_CODEC_TOPK ? (got == x || got == 0)
                                                   : fabs(got - x) <= k_tolerance[impl->codec.kind];
    if (!ok) return 0;
  }
  return 1;
}

static void size_label(char* out, size_t cap, size_t bytes) {
  if (bytes >= ((size_t)1 << 20))
    snprintf(out, cap, "%zuMiB", bytes >> 20);
  else
    snprintf(out, cap, "%zuKiB", bytes >> 10);
}

/* Runs every measurement `reps` times, interleaved so that drift hits all of them alike, and
 * prints one row. Returns 0, or -1 if the codec's result was wrong. */
static int bench_row(const codec_impl_t* impl, const char* variant_name, buffers_t* b, int reps,
                     double* samples) {
  const char* name = chorus__codec_name(impl->codec.kind);
  if (!roundtrip_ok(impl, b)) {
    fprintf(stderr, "codec_bench: %s (%s) decode(encode(x)) is not x within its error\n", name,
            variant_name);
    return -1;
  }
  size_t input_bytes = b->n * sizeof(float);
  size_t iters = SAMPLE_TARGET_BYTES / input_bytes;
  if (iters == 0) iters = 1;
  memset(b->acc, 0, input_bytes);
  for (int m = 0; m < MEASURE_COUNT; m++) time_one(impl, b, (measure_t)m, 1); /* warm up */
  for (int r = 0; r < reps; r++)
    for (int m = 0; m < MEASURE_COUNT; m++)
      samples[m * reps + r] = time_one(impl, b, (measure_t)m, iters);
  double gbps[MEASURE_COUNT];
  for (int m = 0; m < MEASURE_COUNT; m++)
    gbps[m] = (double)input_bytes / median(samples + m * reps, reps) / 1e9;
  char label[32];
  size_label(label, sizeof label, input_bytes);
  printf("%-10s %-8s %7s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n", name, variant_name, label,
         gbps[MEASURE_MEMCPY], gbps[MEASURE_ENCODE], gbps[MEASURE_ENCODE_RESIDUAL],
         gbps[MEASURE_DECODE_ADD], gbps[MEASURE_ENCODE] / gbps[MEASURE_MEMCPY],
         gbps[MEASURE_DECODE_ADD] / gbps[MEASURE_MEMCPY]);
  fflush(stdout);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: chorus-codec-bench [-r REPS] [-v VARIANT] [-c]\n"
          "  -r REPS     repetitions per figure, median reported (>= %d, default %d)\n"
          "  -v VARIANT  only this variant: avx512, avx2 or generic (default: every one the CPU "
          "runs)\n"
          "  -c          time with the thread's CPU clock instead of the wall clock\n",
          MIN_REPS, DEFAULT_REPS);
}

typedef struct {
  int reps;
  const char* variant_name; /* NULL: all */
} options_t;

/* Returns 0, or -1 after printing the usage. */
static int parse_options(int argc, char** argv, options_t* opt) {
  opt->reps = DEFAULT_REPS;
  opt->variant_name = NULL;
  for (int i = 1; i < argc; i++) {
    const char* value = i + 1 < argc ? argv[i + 1] : "";
    long v;
    if (strcmp(argv[i], "-r") == 0 && (v = parse_long(value, MIN_REPS, 1000)) > 0) {
      opt->reps = (int)v;
    } else if (strcmp(argv[i], "-v") == 0 && i + 1 < argc) {
      opt->variant_name = value;
    } else if (strcmp(argv[i], "-c") == 0) {
      g_clock = CLOCK_THREAD_CPUTIME_ID;
      continue; /* takes no value */
    } else {
      usage();
      return -1;
    }
    i++; /* the option's value */
  }
  return 0;
}

/* Deterministic values in [-1, 1). */
static void fill_input(float* x, size_t n) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((double)(state >> 11) * 0x1p-52 - 1.0);
  }
}

static int alloc_buffers(buffers_t* b, size_t max_bytes) {
  b->src = aligned_alloc(4096, max_bytes);
  b->residual = aligned_alloc(4096, max_bytes);
  b->acc = aligned_alloc(4096, max_bytes);
  b->copy = aligned_alloc(4096, max_bytes);
  b->wire = aligned_alloc(4096, max_bytes); /* the largest wire form, fp16's, is half of it */
  if (!b->src || !b->residual || !b->acc || !b->copy || !b->wire) return -1;
  /* fault every page in before timing */
  fill_input(b->src, max_bytes / sizeof(float));
  memset(b->residual, 0, max_bytes);
  memset(b->acc, 0, max_bytes);
  memset(b->copy, 0, max_bytes);
  memset(b->wire, 0, max_bytes);
  return 0;
}

static void free_buffers(buffers_t* b) {
  free(b->src);
  free(b->residual);
  free(b->acc);
  free(b->copy);
  free(b->wire);
}

/* The rows of one size: each cast/quantiser in every selected variant, then top-k. */
static int bench_size(buffers_t* b, const options_t* opt, double* samples) {
  static const chorus_codec_kind_t kinds[] = {CHORUS_CODEC_FP16, CHORUS_CODEC_BF16,
                                              CHORUS_CODEC_INT8, CHORUS_CODEC_INT4};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
    for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT; isa++) {
      const chorus_codec_variant_t* v = chorus__codec_variant(isa);
      if (v == NULL || (opt->variant_name && strcmp(opt->variant_name, v->name) != 0)) continue;
      codec_impl_t impl = {{kinds[k], 0}, v};
      if (bench_row(&impl, v->name, b, opt->reps, samples) != 0) return -1;
    }
  }
  codec_impl_t topk = {{CHORUS_CODEC_TOPK, TOPK_FRACTION}, NULL};
  return bench_row(&topk, "scalar", b, opt->reps, samples);
}

int main(int argc, char** argv) {
  options_t opt;
  if (parse_options(argc, argv, &opt) != 0) return 2;
  int found = opt.variant_name == NULL;
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT && !found; isa++) {
    const chorus_codec_variant_t* v = chorus__codec_variant(isa);
    found = v != NULL && strcmp(v->name, opt.variant_name) == 0;
  }
  if (!found) {
    fprintf(stderr, "codec_bench: variant '%s' is unknown or not supported by this CPU\n",
            opt.variant_name);
    return 2;
  }
  size_t max_bytes = k_sizes_bytes[sizeof k_sizes_bytes / sizeof k_sizes_bytes[0] - 1];
  buffers_t b;
  double* samples = malloc(sizeof(double) * MEASURE_COUNT * (size_t)opt.reps);
  if (alloc_buffers(&b, max_bytes) != 0 || samples == NULL) {
    fprintf(stderr, "codec_bench: cannot allocate 5 x %zu bytes\n", max_bytes);
    return 1;
  }
  printf(
      "# chorus-codec-bench: median of %d reps, %s clock; GB/s of float32 input (n * 4 bytes "
      "per second)\n",
      opt.reps, g_clock == CLOCK_MONOTONIC ? "wall" : "thread CPU");
  printf(
      "# encode: no residual; enc+res: with a residual; dec+acc: acc += decode(wire); "
      "topk at fraction %.2f\n",
      TOPK_FRACTION);
  printf("%-10s %-8s %7s %8s %8s %8s %8s %8s %8s\n", "codec", "variant", "size", "memcpy", "encode",
         "enc+res", "dec+acc", "enc/cp", "dacc/cp");
  int status = 0;
  for (size_t s = 0; s < sizeof k_sizes_bytes / sizeof k_sizes_bytes[0] && status == 0; s++) {
    b.n = k_sizes_bytes[s] / sizeof(float);
    status = bench_size(&b, &opt, samples) != 0;
  }
  free(samples);
  free_buffers(&b);
  return status;
}
