/*
 * reduce_bench.c - micro-benchmark of the reduction kernels against memcpy in the same run:
 * float32, bfloat16 and float16 sums at sizes from cache-resident to memory-bound, as
 * c = a + b and as a += b (the in-place form collectives use), each next to memcpy of the same
 * size, median of several repetitions, with the kernel/memcpy ratio. The kernels must be
 * bandwidth-bound: a += b should reach at least 80% of memcpy at the large sizes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "microbench.h"
#include "reduce/reduce.h"
#include "reduce/variants.h"

enum { DEFAULT_REPS = 7, MIN_REPS = 5 };
/* Array traffic one timed sample should cover, so that small sizes are repeated enough times
 * for the clock to resolve them. */
static const size_t SAMPLE_TARGET_BYTES = (size_t)256 << 20;
static const size_t k_sizes_bytes[] = {(size_t)64 << 10, (size_t)1 << 20, (size_t)16 << 20,
                                       (size_t)256 << 20};

typedef struct {
  chorus_dtype_t dtype;
  const char* name;
  size_t elem_bytes;
} bench_dtype_t;

static const bench_dtype_t k_dtypes[] = {
    {CHORUS_FLOAT32, "float32", 4},
    {CHORUS_BFLOAT16, "bfloat16", 2},
    {CHORUS_FLOAT16, "float16", 2},
};


typedef enum {
  MEASURE_MEMCPY,
  MEASURE_C_EQ_A_PLUS_B,
  MEASURE_A_PLUS_EQ_B,
  MEASURE_COUNT
} measure_t;
static const char* const k_measure_names[] = {"memcpy", "c=a+b", "a+=b"};

typedef struct {
  uint8_t* a;
  uint8_t* b;
  uint8_t* c;
  size_t bytes;
  size_t count; /* elements */
  chorus_reduce_fn sum;
} bench_case_t;

/* Seconds for one pass of measurement m (the mean over `iters` back-to-back passes). */
static double time_one(const bench_case_t* bc, measure_t m, size_t iters) {
  double start = now_sec();
  for (size_t it = 0; it < iters; it++) {
    switch (m) {
      case MEASURE_MEMCPY:
        memcpy(bc->c, bc->a, bc->bytes);
        break;
      case MEASURE_C_EQ_A_PLUS_B:
        bc->sum(bc->c, bc->a, bc->b, bc->count);
        break;
      default:
        bc->sum(bc->a, bc->a, bc->b, bc->count);
        break;
    }
  }
  double elapsed = now_sec() - start;
  g_sink = bc->c[bc->bytes - 1] ^ bc->a[bc->bytes / 2];
  return elapsed / (double)iters;
}

/* Values that stay finite and normal however many times a += b runs: 1.0 and 1.0. */
static void fill_ones(uint8_t* buf, size_t count, chorus_dtype_t dtype) {
  for (size_t i = 0; i < count; i++) {
    if (dtype == CHORUS_FLOAT32) {
      float one = 1.0f;
      memcpy(buf + 4 * i, &one, 4);
    } else {
      uint16_t one = dtype == CHORUS_FLOAT16 ? chorus__float_to_half(1.0f)
                                              : chorus__float_to_bf16(1.0f);
      memcpy(buf + 2 * i, &one, 2);
    }
  }
}

/* A cheap proof that the timed kernel computes: c = a + b with a = b = 1 gives 2 everywhere
 * we look (first, middle, last element). */
static int kernel_result_ok(const bench_case_t* bc, chorus_dtype_t dtype) {
  fill_ones(bc->a, bc->count, dtype);
  fill_ones(bc->b, bc->count, dtype);
  bc->sum(bc->c, bc->a, bc->b, bc->count);
  size_t idx[3] = {0, bc->count / 2, bc->count - 1};
  for (int k = 0; k < 3; k++) {
    float v;
    if (dtype == CHORUS_FLOAT32) {
      memcpy(&v, bc->c + 4 * idx[k], 4);
    } else {
      uint16_t h;
      memcpy(&h, bc->c + 2 * idx[k], 2);
      v = dtype == CHORUS_FLOAT16 ? chorus__half_to_float(h) : chorus__bf16_to_float(h);
    }
    if (v != 2.0f) return 0;
  }
  return 1;
}

/* Runs every measurement `reps` times, interleaved so that drift hits all of them alike, and
 * prints one row. Returns 0, or -1 if the kernel's result was wrong. */
static int bench_row(const bench_dtype_t* dt, bench_case_t* bc, int reps, double* samples) {
  if (!kernel_result_ok(bc, dt->dtype)) {
    fprintf(stderr, "reduce_bench: %s sum gave a wrong result\n", dt->name);
    return -1;
  }
  size_t iters = SAMPLE_TARGET_BYTES / bc->bytes;
  if (iters == 0) iters = 1;
  for (int m = 0; m < MEASURE_COUNT; m++) time_one(bc, (measure_t)m, 1); /* warm up */
  for (int r = 0; r < reps; r++)
    for (int m = 0; m < MEASURE_COUNT; m++)
      samples[m * reps + r] = time_one(bc, (measure_t)m, iters);
  double gbps[MEASURE_COUNT];
  for (int m = 0; m < MEASURE_COUNT; m++) {
    /* memcpy moves 2x its size (read + write); a kernel 3x (read a, read b, write dst). */
    double traffic_bytes = (double)bc->bytes * (m == MEASURE_MEMCPY ? 2.0 : 3.0);
    gbps[m] = traffic_bytes / median(samples + m * reps, reps) / 1e9;
  }
  char size_label[32];
  if (bc->bytes >= ((size_t)1 << 20))
    snprintf(size_label, sizeof size_label, "%zuMiB", bc->bytes >> 20);
  else
    snprintf(size_label, sizeof size_label, "%zuKiB", bc->bytes >> 10);
  printf("%-9s %7s %11.2f %11.2f %11.2f %9.2f %9.2f\n", dt->name, size_label,
         gbps[MEASURE_MEMCPY], gbps[MEASURE_C_EQ_A_PLUS_B], gbps[MEASURE_A_PLUS_EQ_B],
         gbps[MEASURE_C_EQ_A_PLUS_B] / gbps[MEASURE_MEMCPY],
         gbps[MEASURE_A_PLUS_EQ_B] / gbps[MEASURE_MEMCPY]);
  fflush(stdout);
  return 0;
}

static void usage(void) {
  fprintf(stderr,
          "usage: chorus-reduce-bench [-r REPS] [-m MAX_MIB] [-v VARIANT] [-c]\n"
          "  -r REPS     repetitions per figure, median reported (>= %d, default %d)\n"
          "  -m MAX_MIB  skip array sizes above MAX_MIB MiB (default 256)\n"
          "  -v VARIANT  kernel variant: avx512, avx2 or generic (default: the one chosen at "
          "run time)\n"
          "  -c          time with the thread's CPU clock instead of the wall clock\n",
          MIN_REPS, DEFAULT_REPS);
}

/* The variant named `name` if this CPU runs it, else NULL. */
static const chorus_reduce_variant_t* find_variant(const char* name) {
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT; isa++) {
    const chorus_reduce_variant_t* v = chorus__reduce_variant((chorus_reduce_isa_t)isa);
    if (v && strcmp(v->name, name) == 0) return v;
  }
  return NULL;
}

typedef struct {
  int reps;
  size_t max_bytes;
  const char* variant_name;
} options_t;

/* Returns 0, or -1 after printing the usage. */
static int parse_options(int argc, char** argv, options_t* opt) {
  opt->reps = DEFAULT_REPS;
  opt->max_bytes = (size_t)256 << 20;
  opt->variant_name = chorus__reduce_isa();
  for (int i = 1; i < argc; i++) {
    const char* value = i + 1 < argc ? argv[i + 1] : "";
    long v;
    if (strcmp(argv[i], "-r") == 0 && (v = parse_long(value, MIN_REPS, 1000)) > 0) {
      opt->reps = (int)v;
    } else if (strcmp(argv[i], "-m") == 0 && (v = parse_long(value, 1, 1 << 20)) > 0) {
      opt->max_bytes = (size_t)v << 20;
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

/* The largest benchmarked size not above max_bytes (at least the smallest size). */
static size_t largest_size(size_t max_bytes) {
  size_t largest = k_sizes_bytes[0];
  for (size_t s = 0; s < sizeof k_sizes_bytes / sizeof k_sizes_bytes[0]; s++)
    if (k_sizes_bytes[s] <= max_bytes && k_sizes_bytes[s] > largest) largest = k_sizes_bytes[s];
  return largest;
}

int main(int argc, char** argv) {
  options_t opt;
  if (parse_options(argc, argv, &opt) != 0) return 2;
  int reps = opt.reps;
  const chorus_reduce_variant_t* variant = find_variant(opt.variant_name);
  if (variant == NULL) {
    fprintf(stderr, "reduce_bench: variant '%s' is unknown or not supported by this CPU\n",
            opt.variant_name);
    return 2;
  }

  size_t alloc_bytes = largest_size(opt.max_bytes);
  uint8_t* a = aligned_alloc(4096, alloc_bytes);
  uint8_t* b = aligned_alloc(4096, alloc_bytes);
  uint8_t* c = aligned_alloc(4096, alloc_bytes);
  double* samples = malloc(sizeof(double) * MEASURE_COUNT * (size_t)reps);
  if (!a || !b || !c || !samples) {
    fprintf(stderr, "reduce_bench: cannot allocate 3 x %zu bytes\n", alloc_bytes);
    return 1;
  }
  memset(c, 0, alloc_bytes); /* fault every page in before timing */

  printf("# chorus-reduce-bench: kernel variant %s (run-time choice: %s), median of %d reps, "
         "%s clock\n",
         variant->name, chorus__reduce_isa(), reps,
         g_clock == CLOCK_MONOTONIC ? "wall" : "thread CPU");
  printf("# GB/s: memcpy counts 2 x size (read, write); kernels 3 x size (read a, read b, "
         "write c or a)\n");
  printf("%-9s %7s %11s %11s %11s %9s %9s\n", "dtype", "size", "memcpy", k_measure_names[1],
         k_measure_names[2], "c=a+b/cp", "a+=b/cp");
  int status = 0;
  for (size_t d = 0; d < sizeof k_dtypes / sizeof k_dtypes[0] && status == 0; d++) {
    for (size_t s = 0; s < sizeof k_sizes_bytes / sizeof k_sizes_bytes[0]; s++) {
      size_t bytes = k_sizes_bytes[s];
      if (bytes > opt.max_bytes) continue;
      bench_case_t bc = {a, b, c, bytes, bytes / k_dtypes[d].elem_bytes,
                         variant->reduce[k_dtypes[d].dtype][CHORUS_SUM]};
      if (bench_row(&k_dtypes[d], &bc, reps, samples) != 0) {
        status = 1;
        break;
      }
    }
  }
  free(samples);
  free(a);
  free(b);
  free(c);
  return status;
}
