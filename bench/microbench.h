/*
 * microbench.h - what the kernel micro-benchmarks (reduce_bench.c, codec_bench.c) share: the
 * clock (wall time, or with -c the thread's CPU time, which leaves out the time other processes
 * held the core on a machine busy with other work), the median of a run's samples, a sink that
 * keeps the compiler from dropping work whose result is never read, and option parsing. Each includes it once.
 */
#ifndef CHORUS_BENCH_MICROBENCH_H
#define CHORUS_BENCH_MICROBENCH_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static clockid_t g_clock = CLOCK_MONOTONIC;

static inline double now_sec(void) {
  struct timespec ts;
  clock_gettime(g_clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int compare_doubles(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return (a > b) - (a < b);
}

/* Sorts values in place. */
static inline double median(double* values, int n) {
  qsort(values, (size_t)n, sizeof *values, compare_doubles);
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

static volatile uint8_t g_sink;

/* An option's integer value in [lo, hi], or -1 when it is not one. */
static inline long parse_long(const char* s, long lo, long hi) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < lo || v > hi) return -1;
  return v;
}

#endif /* CHORUS_BENCH_MICROBENCH_H */
