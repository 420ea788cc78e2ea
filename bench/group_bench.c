/*
 * group_bench.c - chorus-group-bench: what grouping saves. Times N allreduces of B bytes each
 * (float32 sum, N distinct buffers, out of place) made one by one with blocking calls, the
 * same N blocking calls made inside chorus_group_start/chorus_group_end (fused into few
 * allreduces by the library), the same N as non-blocking calls all in flight before the first
 * wait (as DDP posts its buckets), and, as the floor that fusion can approach, one allreduce
 * of N x B bytes on contiguous buffers; the four take turns, R times; every time is the maximum
 * over ranks, after a barrier. Prints each repetition, the medians and the ratios, and checks
 * the results of a last grouped round bitwise against the exact sums. Any launcher:
 *   build/chorus-run -n 2 build/bench/chorus-group-bench -N 1000 -b 4096 -r 11
 * Exit status 0 when every result was right, 1 otherwise, 2 for bad usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"

/* one by one, grouped, one allreduce of it all, non-blocking calls in flight together */
enum { MODE_ONE, MODE_GROUP, MODE_SINGLE, MODE_IN_FLIGHT, NMODES };

typedef struct {
  int calls;      /* -N */
  size_t bytes;   /* -b, per call */
  int reps;       /* -r */
  int warmup;     /* -w */
  int only;       /* -m: 0 all, else one mode only (for profiling): MODE_ONE + 1, ... */
} opts_t;

static int usage(const char* why) {
  fprintf(stderr, "chorus-group-bench: %s\nusage: chorus-group-bench [-N calls (1000)] [-b bytes per call (4096)] "
          "[-r repetitions (11)] [-w warm-up rounds (2)] [-m all|one|group|single|inflight (all; one mode only, to "
          "profile it)]\n",
          why);
  return 2;
}

static int parse(int argc, char** argv, opts_t* o) {
  *o = (opts_t){1000, 4096, 11, 2, 0};
  int c;
  while ((c = getopt(argc, argv, "N:b:r:w:m:h")) != -1) {
    long v = optarg ? atol(optarg) : 0;
    switch (c) {
      case 'N': o->calls = (int)v; break;
      case 'b': o->bytes = (size_t)v; break;
      case 'r': o->reps = (int)v; break;
      case 'w': o->warmup = (int)v; break;
      case 'm':
        if (strcmp(optarg, "all") == 0 || strcmp(optarg, "both") == 0) o->only = 0;
        else if (strcmp(optarg, "one") == 0) o->only = MODE_ONE + 1;
        else if (strcmp(optarg, "group") == 0) o->only = MODE_GROUP + 1;
        else if (strcmp(optarg, "single") == 0) o->only = MODE_SINGLE + 1;
        else if (strcmp(optarg, "inflight") == 0) o->only = MODE_IN_FLIGHT + 1;
        else return -1;
        break;
      default: return -1;
    }
  }
  if (o->calls < 1 || o->reps < 1 || o->warmup < 0 || o->bytes < 4 || o->bytes % 4) return -1;
  return 0;
}

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

typedef struct {
  chorus_comm_t* comm;
  int rank, nranks;
  opts_t o;
  size_t count;
  float** send;
  float** recv;
  float *all_send, *all_recv; /* N x B bytes each, for MODE_SINGLE */
  chorus_req_t** reqs;        /* N, for MODE_IN_FLIGHT */
} bench_t;

/* N non-blocking allreduces posted, then waited for in order. */
static chorus_status_t in_flight(bench_t* b) {
  chorus_status_t st = CHORUS_OK;
  int posted = 0;
  for (; posted < b->o.calls && st == CHORUS_OK; posted++)
    st = chorus_iallreduce(b->send[posted], b->recv[posted], b->count, CHORUS_FLOAT32, CHORUS_SUM, b->comm,
                           &b->reqs[posted]);
  if (st != CHORUS_OK) posted--; /* the failed post made no request */
  for (int k = 0; k < posted; k++) {
    chorus_status_t done = chorus_wait(b->reqs[k]);
    if (st == CHORUS_OK) st = done;
    chorus_req_free(b->reqs[k]);
  }
  return st;
}

/* The slowest rank's time of one round of `mode`, in seconds; < 0 on a failed call; 0 for a
 * mode left out with -m. */
static double round_time(bench_t* b, int mode) {
  if (b->o.only && b->o.only != 1 + mode) return 0;
  if (chorus_barrier(b->comm) != CHORUS_OK) return -1;
  int grouped = mode == MODE_GROUP;
  double t0 = now_sec();
  chorus_status_t st = CHORUS_OK;
  if (grouped) st = chorus_group_start();
  if (mode == MODE_SINGLE)
    st = chorus_allreduce(b->all_send, b->all_recv, b->count * (size_t)b->o.calls, CHORUS_FLOAT32, CHORUS_SUM, b->comm);
  if (mode == MODE_IN_FLIGHT) st = in_flight(b);
  for (int k = 0; k < b->o.calls && st == CHORUS_OK && (mode == MODE_ONE || mode == MODE_GROUP); k++)
    st = chorus_allreduce(b->send[k], b->recv[k], b->count, CHORUS_FLOAT32, CHORUS_SUM, b->comm);
  if (grouped) {
    chorus_status_t end = chorus_group_end();
    if (st == CHORUS_OK) st = end;
  }
  double mine = now_sec() - t0, slowest = 0;
  if (st != CHORUS_OK) {
    fprintf(stderr, "chorus-group-bench: rank %d: %s: %s\n", b->rank, chorus_status_name(st),
            chorus_comm_last_error(b->comm));
    return -1;
  }
  if (chorus_allreduce(&mine, &slowest, 1, CHORUS_FLOAT64, CHORUS_MAX, b->comm) != CHORUS_OK) return -1;
  return slowest;
}

/* Element i of call k on rank r: small integers, so every sum is exact in float32. */
static float input(int k, size_t i, int r) { return (float)((k * 7 + (int)(i % 1000) + r * 3) % 4096); }

/* 0 when every rank's grouped results equal the exact sums. */
static long count_wrong(const bench_t* b) {
  long wrong = 0;
  for (int k = 0; k < b->o.calls; k++)
    for (size_t i = 0; i < b->count; i++) {
      float want = 0;
      for (int r = 0; r < b->nranks; r++) want += input(k, i, r);
      wrong += b->recv[k][i] != want;
    }
  long all = 0;
  chorus_allreduce(&wrong, &all, 1, CHORUS_INT64, CHORUS_SUM, b->comm);
  return all;
}

int main(int argc, char** argv) {
  bench_t b = {0};
  if (parse(argc, argv, &b.o) < 0) return usage("bad arguments");
  chorus_status_t st = chorus_comm_init_env(&b.comm, NULL);
  if (st != CHORUS_OK) {
    fprintf(stderr, "chorus-group-bench: chorus_comm_init_env: %s\n", chorus_status_name(st));
    return 1;
  }
  chorus_comm_rank(b.comm, &b.rank);
  chorus_comm_size(b.comm, &b.nranks);
  int hosts = 1;
  chorus_comm_host_count(b.comm, &hosts);
  b.count = b.o.bytes / sizeof(float);
  b.send = calloc((size_t)b.o.calls, sizeof(float*));
  b.recv = calloc((size_t)b.o.calls, sizeof(float*));
  b.reqs = calloc((size_t)b.o.calls, sizeof(chorus_req_t*));
  double* t[NMODES];
  for (int m = 0; m < NMODES; m++) t[m] = calloc((size_t)b.o.reps, sizeof(double));
  b.all_send = calloc((size_t)b.o.calls, b.o.bytes);
  b.all_recv = calloc((size_t)b.o.calls, b.o.bytes);
  if (!b.send || !b.recv || !b.reqs || !t[0] || !t[1] || !t[2] || !t[3] || !b.all_send || !b.all_recv) return 1;
  for (int k = 0; k < b.o.calls; k++) {
    b.send[k] = malloc(b.o.bytes);
    b.recv[k] = malloc(b.o.bytes);
    if (!b.send[k] || !b.recv[k]) return 1;
    for (size_t i = 0; i < b.count; i++) b.send[k][i] = b.all_send[(size_t)k * b.count + i] = input(k, i, b.rank);
  }
  if (b.rank == 0)
    printf("# chorus-group-bench: %d allreduces of %zu bytes (float32 sum) per round, %d ranks on %d host(s)\n"
           "# one by one: blocking calls in a loop; grouped: the same calls between chorus_group_start/end;\n"
           "# single: one allreduce of all their bytes (contiguous), the floor grouping can approach;\n"
           "# in flight: the calls non-blocking, all posted before the first wait\n"
           "# time: slowest rank, after a barrier; %d warm-up rounds of each, then %d in turn\n"
           "#%5s %14s %14s %14s %14s %8s\n", b.o.calls, b.o.bytes, b.nranks, hosts, b.o.warmup, b.o.reps, "rep",
           "one-by-one ms", "grouped ms", "single ms", "in flight ms", "ratio");
  int failed = 0;
  for (int w = 0; w < b.o.warmup && !failed; w++)
    for (int m = 0; m < NMODES && !failed; m++) failed = round_time(&b, m) < 0;
  for (int r = 0; r < b.o.reps && !failed; r++) {
    /* Rotate which goes first, so a slow spell of the machine hits every mode. */
    for (int i = 0; i < NMODES && !failed; i++) {
      int m = (r + i) % NMODES;
      t[m][r] = round_time(&b, m);
      failed = t[m][r] < 0;
    }
    double one = t[MODE_ONE][r], grp = t[MODE_GROUP][r];
    if (!failed && b.rank == 0)
      printf(" %5d %14.3f %14.3f %14.3f %14.3f %8.2f\n", r, one * 1e3, grp * 1e3, t[MODE_SINGLE][r] * 1e3,
             t[MODE_IN_FLIGHT][r] * 1e3, grp > 0 ? one / grp : 0.0);
  }
  /* The check: one more round (grouped, unless -m one or -m inflight) into cleared buffers; the
   * single mode writes other buffers, so -m single checks a grouped round too. */
  int checked = b.o.only == MODE_ONE + 1 || b.o.only == MODE_IN_FLIGHT + 1 ? b.o.only - 1 : MODE_GROUP, only = b.o.only;
  for (int k = 0; k < b.o.calls && !failed; k++) memset(b.recv[k], 0xff, b.o.bytes);
  b.o.only = 0; /* round_time skips modes -m left out */
  if (!failed) failed = round_time(&b, checked) < 0;
  b.o.only = only;
  long wrong = failed ? 1 : count_wrong(&b);
  if (!failed && b.rank == 0) {
    for (int m = 0; m < NMODES; m++) qsort(t[m], (size_t)b.o.reps, sizeof(double), cmp_double);
    double m1 = t[MODE_ONE][b.o.reps / 2], mg = t[MODE_GROUP][b.o.reps / 2], ms = t[MODE_SINGLE][b.o.reps / 2];
    printf("# median: one by one %.3f ms (%.2f us per call), grouped %.3f ms (%.2f us per call), ratio %.2f\n",
           m1 * 1e3, m1 * 1e6 / b.o.calls, mg * 1e3, mg * 1e6 / b.o.calls, mg > 0 ? m1 / mg : 0.0);
    printf("# median: single allreduce of %zu bytes %.3f ms; one by one / single %.2f (the most grouping could "
           "give), grouped / single %.2f\n",
           b.o.bytes * (size_t)b.o.calls, ms * 1e3, ms > 0 ? m1 / ms : 0.0, ms > 0 ? mg / ms : 0.0);
    double mf = t[MODE_IN_FLIGHT][b.o.reps / 2];
    printf("# median: in flight %.3f ms (%.2f us per call); one by one / in flight %.2f\n", mf * 1e3,
           mf * 1e6 / b.o.calls, mf > 0 ? m1 / mf : 0.0);
    printf("# wrong elements: %ld %s\n", wrong, wrong ? "FAILED" : "OK");
  }
  for (int k = 0; k < b.o.calls; k++) {
    free(b.send[k]);
    free(b.recv[k]);
  }
  free(b.send);
  free(b.recv);
  free(b.reqs);
  for (int m = 0; m < NMODES; m++) free(t[m]);
  free(b.all_send);
  free(b.all_recv);
  chorus_comm_destroy(b.comm);
  return failed || wrong ? 1 : 0;
}
