/*
 * test_select.c - the automatic choice of allgather and reduce_scatter across emulated hosts,
 * from fixed link figures (a CHORUS_TUNE file holding what the probe read on 4 emulated hosts x
 * 2 ranks at 2 Gbit/s), against what the sweeps of docs/sweep.md found fastest there: recursive
 * doubling / halving for small blocks, `hier` from 16 KiB blocks on, large ones too, where 8
 * ranks share 2 cores (its copies inside the host overlap the next chunk's crossing, so the
 * seventh of the crossing bytes it saves makes it 1.2x faster than the host-ordered ring:
 * docs/cluster.md, "Every collective against Open MPI"); and of a small broadcast on hosts of 1,
 * 2 and 3 ranks; of allreduce on hosts of one rank each. Each call's result is checked too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo/algo.h"
#include "core/comm.h"
#include "ranks.h"
#include "test.h"

static const int kFourByTwo[] = {0, 0, 1, 1, 2, 2, 3, 3};

typedef struct {
  size_t block; /* elements (float32) of each rank's block */
  const char* want_ag;
  const char* want_rs;
} select_case_t;

static const char* picked(chorus_comm_t* comm, chorus_coll_t coll) {
  return comm->picked[coll].algo ? comm->picked[coll].algo->name : "(none)";
}

static int check_choices(chorus_comm_t* comm, int rank, void* arg) {
  const select_case_t* c = arg;
  const int n = 8;
  float* in = malloc(c->block * n * sizeof(float));
  float* out = malloc(c->block * n * sizeof(float));
  ASSERT_TRUE(in && out);
  for (size_t i = 0; i < c->block; i++) in[i] = (float)(rank * 1000 + (int)(i % 997));
  ASSERT_OK(chorus_allgather(in, out, c->block, CHORUS_FLOAT32, comm));
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < c->block; i += 61) ASSERT_TRUE(out[(size_t)r * c->block + i] == (float)(r * 1000 + (int)(i % 997)));
  for (size_t i = 0; i < c->block * n; i++) in[i] = (float)(rank + (int)(i % 13));
  ASSERT_OK(chorus_reduce_scatter(in, out, c->block, CHORUS_FLOAT32, CHORUS_SUM, comm));
  for (size_t i = 0; i < c->block; i += 61) ASSERT_TRUE(out[i] == (float)(28 + 8 * (int)((rank * c->block + i) % 13)));
  test_set_context("blocks of %zu floats, %.1f ranks a core", c->block, comm->cost.machine_oversub);
  ASSERT_STR_EQ(picked(comm, CH_COLL_ALLGATHER), c->want_ag);
  ASSERT_STR_EQ(picked(comm, CH_COLL_REDUCE_SCATTER), c->want_rs);
  free(in);
  free(out);
  return 0;
}

/* Runs body on n thread ranks on the emulated hosts host_of[], with the link figures `figures`
 * (a CHORUS_TUNE file's text) in place of the probe's. */
static void run_with_figures(const char* figures, int n, const int* host_of, int (*body)(chorus_comm_t*, int, void*),
                             void* arg) {
  char path[] = "/tmp/chorus-select-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  ASSERT_TRUE(write(fd, figures, strlen(figures)) == (ssize_t)strlen(figures));
  close(fd);
  setenv("CHORUS_TUNE", path, 1);
  ranks_set_hosts(n, host_of);
  int failed = run_ranks(n, body, arg);
  ranks_set_hosts(0, NULL);
  unsetenv("CHORUS_TUNE");
  unlink(path);
  ASSERT_EQ(failed, 0);
}

TEST_EX(allgather_and_reduce_scatter_on_four_hosts, 120, "full") {
  const char* figures = "intra 1.0 1938\ninter 30.8 241\ninter_ring 30.8 230\n";
  const select_case_t cases[] = {
      {2, "rd", "rhd"},          /* 8 B blocks: latency-bound, log2 n rounds */
      {4096, "hier", "hier"},    /* 16 KiB: H - 1 crossing steps of the rails */
      {512 * 1024, "hier", "hier"}, /* 2 MiB: past the caches (hier.h), its copies pipelined */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    run_with_figures(figures, 8, kFourByTwo, check_choices, (void*)&cases[i]);
}

/* Hosts of 1, 2 and 3 ranks, figures the probe read there at 2 Gbit/s: a broadcast of 1 KiB from
 * rank 0 (alone on its host) crosses two host links either way; the chain then takes 3 hops
 * inside hosts, each waiting for its next rank's turn where ranks share cores, which hier's
 * heads mode (one spread per host) does not: measured 65-77 us against 38-44 (docs/sweep.md).
 * Where ranks have cores of their own neither pays turns, and hier's tree of 3 heads still
 * crosses less than the chain (priced 72 us against 77). */
static const int kOneTwoThree[] = {0, 1, 1, 2, 2, 2};

static int check_small_broadcast(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  float buf[256];
  for (int i = 0; i < 256; i++) buf[i] = rank == 0 ? (float)(i * 3 + 1) : -1.0f;
  ASSERT_OK(chorus_broadcast(buf, buf, 256, CHORUS_FLOAT32, 0, comm));
  for (int i = 0; i < 256; i++) ASSERT_TRUE(buf[i] == (float)(i * 3 + 1));
  test_set_context("%.1f ranks a core", comm->cost.machine_oversub);
  ASSERT_STR_EQ(picked(comm, CH_COLL_BROADCAST), "hier");
  return 0;
}

TEST_EX(small_broadcast_on_hosts_of_one_two_and_three, 120, "full") {
  run_with_figures("intra 1.0 1662\ninter 31.7 245\ninter_ring 31.7 238\n", 6, kOneTwoThree, check_small_broadcast,
                   NULL);
}

/* Scatter across 4 emulated hosts x 2 ranks (the figures of the first test): the binomial tree
 * for small blocks, one message from outside per host instead of linear's six TCP messages
 * from the root (4 KiB: 16 us a call against 23, docs/cluster.md), and linear for large ones,
 * where the tree's store and forward costs (64 MiB: 230 ms against 210). Results checked. */
typedef struct {
  size_t block; /* float32 elements of each rank's block */
  const char* want;
} scatter_case_t;

static int check_scatter_choice(chorus_comm_t* comm, int rank, void* arg) {
  const scatter_case_t* c = arg;
  const int n = 8;
  float* in = rank == 0 ? malloc(c->block * n * sizeof(float)) : NULL;
  float* out = malloc(c->block * sizeof(float));
  ASSERT_TRUE(out && (rank != 0 || in));
  for (size_t i = 0; rank == 0 && i < c->block * n; i++) in[i] = (float)((int)(i % 1009) - 500);
  ASSERT_OK(chorus_scatter(in, out, c->block, CHORUS_FLOAT32, 0, comm));
  for (size_t i = 0; i < c->block; i += 7)
    ASSERT_TRUE(out[i] == (float)((int)(((size_t)rank * c->block + i) % 1009) - 500));
  test_set_context("blocks of %zu floats", c->block);
  ASSERT_STR_EQ(picked(comm, CH_COLL_SCATTER), c->want);
  free(in);
  free(out);
  return 0;
}

TEST_EX(scatter_on_four_hosts, 120, "full") {
  const char* figures = "intra 1.0 1938\ninter 30.8 241\ninter_ring 30.8 230\n";
  const scatter_case_t cases[] = {{128, "binomial"}, {2 * 1024 * 1024, "linear"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    run_with_figures(figures, 8, kFourByTwo, check_scatter_choice, (void*)&cases[i]);
}

/* On one host the tree's hand-over per level costs more than the sends it saves: linear. */
static int check_scatter_one_host(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  float in[4 * 64], out[64];
  for (int i = 0; i < 4 * 64; i++) in[i] = (float)i;
  ASSERT_OK(chorus_scatter(in, out, 64, CHORUS_FLOAT32, 0, comm));
  for (int i = 0; i < 64; i++) ASSERT_TRUE(out[i] == (float)(rank * 64 + i));
  ASSERT_STR_EQ(picked(comm, CH_COLL_SCATTER), "linear");
  return 0;
}

TEST_EX(scatter_on_one_host, 60, "full") { ASSERT_EQ(run_ranks(4, check_scatter_one_host, NULL), 0); }

/* 4 emulated hosts x 1 rank, figures the probe read there at 2 Gbit/s (its pair as placed, on
 * two cores): recursive doubling up to 8 KiB, halving-doubling from 16 KiB, as measured there
 * (4 KiB: `rd` 46-59 us, `rhd` 76-98; 8 KiB: 70 and 90; 16 KiB: 142 and 106; docs/cluster.md).
 * Priced without the turn of the core each step waits for where 4 ranks share 2 CPUs, the two
 * were level at 4 KiB (the probe's noise chose either) and `rhd` went first at 8 KiB. */
static const int kFourByOne[] = {0, 1, 2, 3};

typedef struct {
  size_t count; /* float32 elements */
  const char* want;
} allreduce_case_t;

static int check_allreduce_choice(chorus_comm_t* comm, int rank, void* arg) {
  const allreduce_case_t* c = arg;
  float* buf = malloc(c->count * sizeof(float));
  ASSERT_TRUE(buf != NULL);
  for (size_t i = 0; i < c->count; i++) buf[i] = (float)(rank * 7 + (int)(i % 101));
  ASSERT_OK(chorus_allreduce(buf, buf, c->count, CHORUS_FLOAT32, CHORUS_SUM, comm));
  int n = comm->nranks;
  for (size_t i = 0; i < c->count; i++) ASSERT_TRUE(buf[i] == (float)(7 * n * (n - 1) / 2 + n * (int)(i % 101)));
  test_set_context("%zu floats, %.1f ranks a core", c->count, comm->cost.machine_oversub);
  ASSERT_STR_EQ(picked(comm, CH_COLL_ALLREDUCE), c->want);
  free(buf);
  return 0;
}

/* 8 hosts x 1 rank, 4 ranks a CPU (the probe there: 5.7 us + 250 B/us): recursive doubling up
 * to 16 KiB (199 us against halving-doubling's 304), halving-doubling at 64 KiB (479 against
 * 833; docs/sweep.md). */
static const int kEightByOne[] = {0, 1, 2, 3, 4, 5, 6, 7};

TEST_EX(allreduce_on_eight_hosts_of_one_rank, 120, "full") {
  const char* figures = "intra 15.0 2000\ninter 5.7 250\ninter_ring 5.7 231\n";
  const allreduce_case_t cases[] = {{4096, "rd"}, {16384, "rhd"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    run_with_figures(figures, 8, kEightByOne, check_allreduce_choice, (void*)&cases[i]);
}

TEST_EX(allreduce_on_four_hosts_of_one_rank, 120, "full") {
  const char* figures = "intra 15.0 2000\ninter 5.4 252\ninter_ring 5.4 238\n";
  const allreduce_case_t cases[] = {{1024, "rd"}, {2048, "rd"}, {4096, "rhd"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    run_with_figures(figures, 4, kFourByOne, check_allreduce_choice, (void*)&cases[i]);
}
