/*
 * test_barrier.c - barrier and ibarrier for every registered barrier algorithm and automatic
 * selection. Ranks are threads, so a shared counter shows whether a rank left barrier k before
 * every rank had entered it: each rank counts itself in, one rank (a different one each
 * round) arrives late, and after the barrier the counter must hold every rank of the round.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "matrix.h"
#include "ranks.h"
#include "test.h"

enum { ROUNDS = 24, LATE_ARRIVAL_US = 2000 };

typedef struct {
  int nranks;
  const char* algo;
  atomic_int arrived;
  atomic_int unsupported;
} barrier_ctx_t;

/* Round k: enter (late if it is my turn), pass the barrier, check that all n ranks entered. */
static chorus_status_t barrier_round(barrier_ctx_t* ctx, chorus_comm_t* comm, int rank, int k,
                                     int nonblocking) {
  if (rank == k % ctx->nranks) usleep(LATE_ARRIVAL_US);
  atomic_fetch_add(&ctx->arrived, 1);
  chorus_status_t st;
  if (nonblocking) {
    chorus_req_t* req = NULL;
    st = chorus_ibarrier(comm, &req);
    if (st == CHORUS_OK) {
      st = chorus_wait(req);
      chorus_req_free(req);
    }
  } else {
    st = chorus_barrier(comm);
  }
  if (st != CHORUS_OK) return st;
  int seen = atomic_load(&ctx->arrived);
  if (seen < ctx->nranks * (k + 1))
    FAIL("left barrier round %d after only %d of %d arrivals", k, seen, ctx->nranks * (k + 1));
  return CHORUS_OK;
}

static int barrier_rank(chorus_comm_t* comm, int rank, void* arg) {
  barrier_ctx_t* ctx = arg;
  test_set_context("barrier algo=%s n=%d", ctx->algo ? ctx->algo : "auto", ctx->nranks);
  for (int k = 0; k < ROUNDS; k++) {
    chorus_status_t st = barrier_round(ctx, comm, rank, k, k % 2);
    /* A forced algorithm may decline; every rank declines alike, on the first round. */
    if (st == CHORUS_ERR_NOT_SUPPORTED && ctx->algo && k == 0) {
      atomic_fetch_add(&ctx->unsupported, 1);
      return 0;
    }
    ASSERT_COMM_OK(comm, st);
  }
  return 0;
}

static void run_barrier(int nranks) {
  const char* algos[MX_MAX_ALGOS + 1];
  algos[0] = NULL;
  int nalgos = 1 + mx_algo_names(CH_COLL_BARRIER, algos + 1, MX_MAX_ALGOS);
  for (int a = 0; a < nalgos; a++) {
    barrier_ctx_t ctx = {nranks, algos[a], 0, 0};
    mx_force_algo(CH_COLL_BARRIER, algos[a]);
    double start_sec = test_now_sec();
    ASSERT_EQ(run_ranks(nranks, barrier_rank, &ctx), 0);
    mx_force_algo(CH_COLL_BARRIER, NULL);
    int unsupported = atomic_load(&ctx.unsupported);
    printf("  barrier n=%d algo=%s: %s, %.2f s\n", nranks, algos[a] ? algos[a] : "auto",
           unsupported ? "unsupported" : "ok", test_now_sec() - start_sec);
    if (unsupported && unsupported != nranks)
      FAIL("algorithm %s: only %d of %d ranks said unsupported", algos[a], unsupported, nranks);
  }
}

/* Same-host ranks over TCP instead of shared memory. */
static void run_barrier_tcp(int nranks) {
  setenv("CHORUS_SHM_DISABLE", "1", 1);
  run_barrier(nranks);
  unsetenv("CHORUS_SHM_DISABLE");
}

TEST(n1) { run_barrier(1); }
TEST(n2) { run_barrier(2); }
TEST(n3) { run_barrier(3); }
TEST(n4) { run_barrier(4); }
TEST_EX(n5, 60, "full") { run_barrier(5); }
TEST_EX(n8, 60, "full") { run_barrier(8); }
TEST(tcp_n3) { run_barrier_tcp(3); }

/* On emulated hosts (shared memory inside a host, TCP between), where the two-level barrier
 * runs: nobody leaves a round before the late rank of another host entered it. */
static void run_barrier_hosts(int nranks, const int* host_of) {
  ranks_set_hosts(nranks, host_of);
  run_barrier(nranks);
  ranks_set_hosts(0, NULL);
}

static const int k2x2_rr[] = {0, 1, 0, 1};
static const int k4x2_rr[] = {0, 1, 2, 3, 0, 1, 2, 3};
static const int k3p1[] = {0, 0, 1, 0};

TEST(hosts_2x2_rr) { run_barrier_hosts(4, k2x2_rr); }
TEST(hosts_3p1) { run_barrier_hosts(4, k3p1); }
TEST_EX(hosts_4x2_rr, 60, "full") { run_barrier_hosts(8, k4x2_rr); }
