/*
 * test_nonblocking.c - many non-blocking operations in flight on one communicator: 20 mixed
 * i-collectives (and p2p) are posted back to back, then completed; every result is checked,
 * and chorus_test must show the collectives completing in posting order (a later collective
 * never completes before an earlier one; point-to-point requests may complete at any time).
 * Also: waiting the last request first, a blocking call behind non-blocking ones, and a
 * request freed while still in flight. The variable-size calls' arrays are freed right after
 * posting.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

enum { NOPS = 20, MAX_REQS = 2 * NOPS };

/* The variable-size calls' count and displacement arrays are overwritten and freed as soon as
 * each is posted (mx_op_post): the library must have copied them. */
static const chorus_coll_t mixed_colls[] = {
    CH_COLL_ALLREDUCE,      CH_COLL_BROADCAST,  CH_COLL_REDUCE,          CH_COLL_ALLGATHER,
    CH_COLL_REDUCE_SCATTER, CH_COLL_ALLTOALL,   CH_COLL_GATHER,          CH_COLL_SCATTER,
    CH_COLL_BARRIER,        CH_COLL_SENDRECV,   CH_COLL_SEND,            CH_COLL_ALLGATHERV,
    CH_COLL_ALLTOALLV,      CH_COLL_GATHERV,    CH_COLL_REDUCE_SCATTERV, CH_COLL_SCATTERV,
};
static const size_t mixed_counts[] = {1, 7, 1023, 4097, 0, 65537, 33};

/* Operation k of the mixed sequence: the same on every rank. */
static mx_spec_t mixed_spec(int k, int nranks, uint64_t salt) {
  size_t ncolls = sizeof(mixed_colls) / sizeof(mixed_colls[0]);
  size_t ncounts = sizeof(mixed_counts) / sizeof(mixed_counts[0]);
  mx_spec_t s = {mixed_colls[(size_t)k % ncolls],
                 mixed_counts[(size_t)k % ncounts],
                 (chorus_dtype_t)((k * 3) % CHORUS_DTYPE_COUNT),
                 (chorus_op_t)(k % CHORUS_OP_COUNT),
                 k % nranks,
                 k % 2,
                 (k / 3) % 2,
                 ref_mix64(salt * 1000 + (uint64_t)k),
                 (k / 4) % 2};
  if (!mx_coll_has_in_place(s.coll)) s.in_place = 0;
  return s;
}

typedef struct {
  int nranks;
  int nops;
} nb_arg_t;

typedef struct {
  mx_op_t ops[NOPS];
  chorus_req_t* reqs[MAX_REQS];
  int req_op[MAX_REQS]; /* which operation each request belongs to */
  int nreqs;
} batch_t;

static void describe_req(const batch_t* b, int k, char* out, size_t size) {
  char spec[160];
  snprintf(out, size, "request %d (op %d: %s)", k, b->req_op[k],
           mx_spec_str(&b->ops[b->req_op[k]].s, spec, sizeof(spec)));
}

static void batch_post(batch_t* b, chorus_comm_t* comm, int rank, int nranks, int nops,
                       uint64_t salt) {
  b->nreqs = 0;
  for (int k = 0; k < nops; k++) {
    mx_spec_t s = mixed_spec(k, nranks, salt);
    mx_op_prepare(&b->ops[k], &s, rank, nranks, NULL);
  }
  for (int k = 0; k < nops; k++) {
    ASSERT_COMM_OK(comm, mx_op_post(&b->ops[k], comm));
    for (int j = 0; j < b->ops[k].nreq; j++) {
      b->req_op[b->nreqs] = k;
      b->reqs[b->nreqs++] = b->ops[k].req[j];
    }
  }
}

static void batch_verify_and_release(batch_t* b, int nops) {
  for (int k = 0; k < b->nreqs; k++) chorus_req_free(b->reqs[k]);
  int problems = 0;
  for (int k = 0; k < nops; k++) {
    problems += mx_op_verify(&b->ops[k]);
    mx_op_release(&b->ops[k]);
  }
  if (problems) FAIL("%d wrong results (WRONG lines above)", problems);
}

/* Polls every request with chorus_test, newest first, until all are done. Seeing collective j
 * still in progress after collective k > j was seen done means k completed before j. */
static void complete_in_order(batch_t* b, chorus_comm_t* comm) {
  int done[MAX_REQS] = {0};
  int ndone = 0, newest_done = -1;
  double deadline = test_now_sec() + 60.0 * test_timeout_multiplier();
  while (ndone < b->nreqs) {
    for (int k = b->nreqs - 1; k >= 0; k--) {
      if (done[k]) continue;
      int is_done = -1;
      int ordered = !chorus__coll_is_p2p(b->ops[b->req_op[k]].s.coll);
      chorus_status_t st = chorus_test(b->reqs[k], &is_done);
      if (is_done == 1) {
        ASSERT_COMM_OK(comm, st);
        done[k] = 1;
        ndone++;
        if (ordered && k > newest_done) newest_done = k;
        continue;
      }
      ASSERT_EQ(is_done, 0);
      ASSERT_STATUS(st, CHORUS_INPROGRESS);
      if (ordered && k < newest_done) {
        char later[256], earlier[256];
        describe_req(b, newest_done, later, sizeof(later));
        describe_req(b, k, earlier, sizeof(earlier));
        FAIL("%s completed before %s", later, earlier);
      }
    }
    if (test_now_sec() > deadline)
      FAIL("%d of %d requests still in flight", b->nreqs - ndone, b->nreqs);
    sched_yield();
  }
  /* Completed requests stay completed, and chorus_wait returns their status at once. */
  for (int k = 0; k < b->nreqs; k++) {
    int is_done = 0;
    ASSERT_COMM_OK(comm, chorus_test(b->reqs[k], &is_done));
    ASSERT_EQ(is_done, 1);
    ASSERT_COMM_OK(comm, chorus_wait(b->reqs[k]));
  }
}

static int post_all_rank(chorus_comm_t* comm, int rank, void* arg) {
  nb_arg_t* a = arg;
  batch_t* b = calloc(1, sizeof(*b));
  ASSERT_NOT_NULL(b);
  for (uint64_t round = 1; round <= 3; round++) {
    test_set_context("post_all round %d", (int)round);
    batch_post(b, comm, rank, a->nranks, a->nops, round);
    complete_in_order(b, comm);
    batch_verify_and_release(b, a->nops);
  }
  free(b);
  return 0;
}

/* Waiting the newest request first: once it is done, every older one must be done too. */
static int wait_last_first_rank(chorus_comm_t* comm, int rank, void* arg) {
  nb_arg_t* a = arg;
  batch_t* b = calloc(1, sizeof(*b));
  ASSERT_NOT_NULL(b);
  test_set_context("wait_last_first");
  batch_post(b, comm, rank, a->nranks, a->nops, 7);
  ASSERT_COMM_OK(comm, chorus_wait(b->reqs[b->nreqs - 1]));
  for (int k = 0; k < b->nreqs - 1; k++) {
    int is_done = 0;
    chorus_status_t st = chorus_test(b->reqs[k], &is_done);
    if (!is_done) {
      char earlier[256];
      describe_req(b, k, earlier, sizeof(earlier));
      FAIL("%s still in flight after the last request completed", earlier);
    }
    ASSERT_COMM_OK(comm, st);
  }
  batch_verify_and_release(b, a->nops);
  free(b);
  return 0;
}

/* A blocking call posted behind non-blocking ones returns only after they are all done. */
static int blocking_behind_rank(chorus_comm_t* comm, int rank, void* arg) {
  nb_arg_t* a = arg;
  batch_t* b = calloc(1, sizeof(*b));
  ASSERT_NOT_NULL(b);
  test_set_context("blocking_behind");
  batch_post(b, comm, rank, a->nranks, a->nops, 11);
  mx_spec_t s = {CH_COLL_ALLREDUCE, 1023, CHORUS_FLOAT32, CHORUS_SUM, 0, 0, 0, 12345};
  mx_op_t blocking;
  mx_op_prepare(&blocking, &s, rank, a->nranks, NULL);
  ASSERT_COMM_OK(comm, mx_op_run(&blocking, comm));
  ASSERT_EQ(mx_op_verify(&blocking), 0);
  mx_op_release(&blocking);
  for (int k = 0; k < b->nreqs; k++) {
    int is_done = 0;
    ASSERT_COMM_OK(comm, chorus_test(b->reqs[k], &is_done));
    ASSERT_EQ(is_done, 1);
  }
  batch_verify_and_release(b, a->nops);
  free(b);
  return 0;
}

/* A request freed in flight still completes (its peers depend on it): once a later request
 * is done, its buffers hold the result. */
static int free_in_flight_rank(chorus_comm_t* comm, int rank, void* arg) {
  nb_arg_t* a = arg;
  test_set_context("free_in_flight");
  mx_spec_t s1 = {CH_COLL_ALLREDUCE, 65537, CHORUS_INT32, CHORUS_SUM, 0, 0, 0, 99};
  mx_spec_t s2 = {CH_COLL_ALLGATHER, 4097, CHORUS_FLOAT16, CHORUS_SUM, 0, 0, 0, 100};
  mx_op_t freed, later;
  mx_op_prepare(&freed, &s1, rank, a->nranks, NULL);
  mx_op_prepare(&later, &s2, rank, a->nranks, NULL);
  ASSERT_COMM_OK(comm, mx_op_post(&freed, comm));
  chorus_req_free(freed.req[0]);
  ASSERT_COMM_OK(comm, mx_op_post(&later, comm));
  ASSERT_COMM_OK(comm, chorus_wait(later.req[0]));
  chorus_req_free(later.req[0]);
  ASSERT_EQ(mx_op_verify(&later), 0);
  ASSERT_EQ(mx_op_verify(&freed), 0);
  mx_op_release(&freed);
  mx_op_release(&later);
  return 0;
}

static void run(ranks_fn fn, int nranks) {
  nb_arg_t a = {nranks, NOPS};
  ASSERT_EQ(run_ranks(nranks, fn, &a), 0);
}

TEST(post_all_n1) { run(post_all_rank, 1); }
TEST(post_all_n2) { run(post_all_rank, 2); }
TEST(post_all_n3) { run(post_all_rank, 3); }
TEST(post_all_n4) { run(post_all_rank, 4); }
TEST_EX(post_all_n5, 120, "full") { run(post_all_rank, 5); }
TEST_EX(post_all_n8, 120, "full") { run(post_all_rank, 8); }
TEST(wait_last_first_n3) { run(wait_last_first_rank, 3); }
TEST(wait_last_first_n4) { run(wait_last_first_rank, 4); }
TEST(blocking_behind_n2) { run(blocking_behind_rank, 2); }
TEST(blocking_behind_n3) { run(blocking_behind_rank, 3); }
TEST(free_in_flight_n2) { run(free_in_flight_rank, 2); }
TEST(free_in_flight_n4) { run(free_in_flight_rank, 4); }
