/*
 * test_split.c - chorus_comm_split: by parity, by a key that reverses the order, with equal
 * keys (old order kept), with CHORUS_SPLIT_NOCOLOR, and a split of a split. Checks each new
 * rank and size, the member order (an allgather of parent ranks), then runs collectives on the
 * subcommunicators and on the parent interleaved, blocking and with requests of both in
 * flight at once.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

enum { ITERATIONS = 6 };

typedef struct {
  int nranks;
  pthread_barrier_t done; /* no rank destroys a subcommunicator a peer may still use */
} split_arg_t;

static void expect_rank_size(chorus_comm_t* comm, int want_rank, int want_size, const char* what) {
  int rank = -1, size = -1;
  ASSERT_OK(chorus_comm_rank(comm, &rank));
  ASSERT_OK(chorus_comm_size(comm, &size));
  if (rank != want_rank || size != want_size)
    FAIL("%s: rank %d of %d, expected %d of %d", what, rank, size, want_rank, want_size);
}

/* The members' parent ranks in their new order must be want[0 .. size). */
static void expect_members(chorus_comm_t* comm, int parent_rank, const int* want, int size,
                           const char* what) {
  int32_t mine = parent_rank;
  int32_t* all = malloc(sizeof(int32_t) * (size_t)size);
  ASSERT_NOT_NULL(all);
  ASSERT_COMM_OK(comm, chorus_allgather(&mine, all, 1, CHORUS_INT32, comm));
  for (int j = 0; j < size; j++)
    if (all[j] != want[j])
      FAIL("%s: member %d is parent rank %d, expected %d", what, j, all[j], want[j]);
  free(all);
}

static void checked_call(chorus_comm_t* comm, chorus_coll_t coll, int it, uint64_t salt) {
  int rank = 0, size = 0;
  ASSERT_OK(chorus_comm_rank(comm, &rank));
  ASSERT_OK(chorus_comm_size(comm, &size));
  mx_spec_t s = {coll,
                 (size_t)(it * 517 + 3),
                 (chorus_dtype_t)((it + (int)salt) % CHORUS_DTYPE_COUNT),
                 (chorus_op_t)(it % CHORUS_OP_COUNT),
                 it % size,
                 0,
                 it % 2,
                 ref_mix64(salt * 100 + (uint64_t)it)};
  char spec[160];
  test_set_context("split salt=%d size=%d %s", (int)salt, size,
                   mx_spec_str(&s, spec, sizeof(spec)));
  mx_op_t op;
  mx_op_prepare(&op, &s, rank, size, NULL);
  ASSERT_COMM_OK(comm, mx_op_run(&op, comm));
  ASSERT_EQ(mx_op_verify(&op), 0);
  mx_op_release(&op);
}

/* A request on each of two communicators in flight together. */
static void overlapped_calls(chorus_comm_t* a, chorus_comm_t* b, int it) {
  chorus_comm_t* comms[2] = {a, b};
  chorus_coll_t colls[2] = {CH_COLL_ALLREDUCE, CH_COLL_ALLTOALL};
  mx_op_t ops[2];
  for (int k = 0; k < 2; k++) {
    int rank = 0, size = 0;
    ASSERT_OK(chorus_comm_rank(comms[k], &rank));
    ASSERT_OK(chorus_comm_size(comms[k], &size));
    mx_spec_t s = {colls[k],
                   1000 + (size_t)it,
                   CHORUS_FLOAT32,
                   CHORUS_SUM,
                   0,
                   0,
                   0,
                   ref_mix64(777 + (uint64_t)(it * 2 + k))};
    mx_op_prepare(&ops[k], &s, rank, size, NULL);
    ASSERT_COMM_OK(comms[k], mx_op_post(&ops[k], comms[k]));
  }
  for (int k = 1; k >= 0; k--) {
    ASSERT_COMM_OK(comms[k], chorus_wait(ops[k].req[0]));
    chorus_req_free(ops[k].req[0]);
    ASSERT_EQ(mx_op_verify(&ops[k]), 0);
    mx_op_release(&ops[k]);
  }
}

static int split_rank(chorus_comm_t* parent, int rank, void* arg) {
  split_arg_t* a = arg;
  int n = a->nranks, color = rank % 2;
  int want[64];
  chorus_comm_t *parity = NULL, *reversed = NULL, *tied = NULL, *without0 = NULL, *nested = NULL;

  ASSERT_COMM_OK(parent, chorus_comm_split(parent, color, rank, &parity));
  int parity_size = (n - color + 1) / 2;
  expect_rank_size(parity, rank / 2, parity_size, "split by parity");
  for (int j = 0; j < parity_size; j++) want[j] = 2 * j + color;
  expect_members(parity, rank, want, parity_size, "split by parity");

  ASSERT_COMM_OK(parent, chorus_comm_split(parent, 0, n - 1 - rank, &reversed));
  expect_rank_size(reversed, n - 1 - rank, n, "split with reversing key");
  for (int j = 0; j < n; j++) want[j] = n - 1 - j;
  expect_members(reversed, rank, want, n, "split with reversing key");

  ASSERT_COMM_OK(parent, chorus_comm_split(parent, 5, 0, &tied));
  expect_rank_size(tied, rank, n, "split with equal keys");

  ASSERT_COMM_OK(parent,
                 chorus_comm_split(parent, rank == 0 ? CHORUS_SPLIT_NOCOLOR : 3, rank, &without0));
  if (rank == 0) {
    ASSERT_NULL(without0);
  } else {
    expect_rank_size(without0, rank - 1, n - 1, "split without rank 0");
    for (int j = 0; j < n - 1; j++) want[j] = j + 1;
    expect_members(without0, rank, want, n - 1, "split without rank 0");
  }

  ASSERT_COMM_OK(parity, chorus_comm_split(parity, 0, -(rank / 2), &nested));
  expect_rank_size(nested, parity_size - 1 - rank / 2, parity_size, "split of a split");
  for (int j = 0; j < parity_size; j++) want[j] = 2 * (parity_size - 1 - j) + color;
  expect_members(nested, rank, want, parity_size, "split of a split");

  for (int it = 0; it < ITERATIONS; it++) {
    checked_call(parity, CH_COLL_ALLREDUCE, it, 1);
    checked_call(parent, CH_COLL_REDUCE_SCATTER, it, 2);
    checked_call(reversed, CH_COLL_BROADCAST, it, 3);
    if (without0) checked_call(without0, CH_COLL_ALLTOALL, it, 4);
    checked_call(nested, CH_COLL_ALLGATHER, it, 5);
    checked_call(tied, CH_COLL_REDUCE, it, 6);
    checked_call(parent, CH_COLL_ALLREDUCE, it, 7);
    overlapped_calls(parity, parent, it);
  }

  pthread_barrier_wait(&a->done);
  ASSERT_OK(chorus_comm_destroy(nested));
  ASSERT_OK(chorus_comm_destroy(without0)); /* NULL on rank 0: allowed */
  ASSERT_OK(chorus_comm_destroy(tied));
  ASSERT_OK(chorus_comm_destroy(reversed));
  ASSERT_OK(chorus_comm_destroy(parity));
  return 0;
}

static void run_split(int nranks) {
  split_arg_t a;
  a.nranks = nranks;
  ASSERT_EQ(pthread_barrier_init(&a.done, NULL, (unsigned)nranks), 0);
  ASSERT_EQ(run_ranks(nranks, split_rank, &a), 0);
  pthread_barrier_destroy(&a.done);
}

TEST(n1) { run_split(1); }
TEST(n2) { run_split(2); }
TEST(n3) { run_split(3); }
TEST(n4) { run_split(4); }
TEST_EX(n5, 60, "full") { run_split(5); }
TEST_EX(n8, 60, "full") { run_split(8); }
