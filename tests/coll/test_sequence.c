/*
 * test_sequence.c - different collectives and sizes back to back on one communicator of ranks
 * that share memory, every result checked bitwise: each call's schedule lays the slots out its
 * own way (two-rank broadcasts and reduces as a ring of places, shm.h; the others as two
 * halves), and each must find them free of the calls before it. Blocking calls, then three
 * posted at once and waited for. Default slots (a 12 MiB broadcast goes round its places six
 * times) and 64 KiB ones (every call of more than 64 KiB goes round).
 */
#include <stdlib.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

enum { ROUNDS = 6 };

/* count: elements (per block for allgather) */
static const struct {
  chorus_coll_t coll;
  size_t count;
} kSteps[] = {
    {CH_COLL_BROADCAST, 3u << 20}, {CH_COLL_ALLREDUCE, 65537},  {CH_COLL_REDUCE, 3u << 20},
    {CH_COLL_BROADCAST, 100003},   {CH_COLL_ALLGATHER, 4097},   {CH_COLL_REDUCE, 100003},
    {CH_COLL_BARRIER, 0},          {CH_COLL_BROADCAST, 7},      {CH_COLL_REDUCE_SCATTER, 20011},
    {CH_COLL_REDUCE, 1023},        {CH_COLL_ALLREDUCE, 3u << 18},
};
enum { NSTEPS = sizeof(kSteps) / sizeof(kSteps[0]) };

static mx_spec_t step_spec(int round, int i, int nranks) {
  mx_spec_t s = {kSteps[i].coll,
                 kSteps[i].count,
                 (chorus_dtype_t)((round * NSTEPS + i) % CHORUS_DTYPE_COUNT),
                 (chorus_op_t)((round + i) % CHORUS_OP_COUNT),
                 (round + i) % nranks,
                 0,
                 (round + i) % 3 == 0,
                 ref_mix64(7000u + (uint64_t)(round * NSTEPS + i)),
                 0};
  return s;
}

static int blocking_rank(chorus_comm_t* comm, int rank, void* arg) {
  int nranks = *(const int*)arg;
  for (int round = 0; round < ROUNDS; round++)
    for (int i = 0; i < NSTEPS; i++) {
      mx_spec_t s = step_spec(round, i, nranks);
      char spec[160];
      test_set_context("round %d, blocking %s", round, mx_spec_str(&s, spec, sizeof(spec)));
      mx_op_t op;
      mx_op_prepare(&op, &s, rank, nranks, NULL);
      ASSERT_COMM_OK(comm, mx_op_run(&op, comm));
      ASSERT_EQ(mx_op_verify(&op), 0);
      mx_op_release(&op);
    }
  return 0;
}

/* Three calls in flight at a time: the engine may run the next one's first chunks while the
 * one before still has readers of its slots. */
static int posted_rank(chorus_comm_t* comm, int rank, void* arg) {
  int nranks = *(const int*)arg;
  for (int round = 0; round < ROUNDS; round++)
    for (int i = 0; i + 3 <= NSTEPS; i += 3) {
      mx_op_t ops[3];
      for (int j = 0; j < 3; j++) {
        mx_spec_t s = step_spec(round, i + j, nranks);
        char spec[160];
        test_set_context("round %d, posted %s", round, mx_spec_str(&s, spec, sizeof(spec)));
        mx_op_prepare(&ops[j], &s, rank, nranks, NULL);
        ASSERT_COMM_OK(comm, mx_op_post(&ops[j], comm));
      }
      for (int j = 0; j < 3; j++) {
        for (int r = 0; r < ops[j].nreq; r++) {
          ASSERT_OK(chorus_wait(ops[j].req[r]));
          chorus_req_free(ops[j].req[r]);
        }
        ASSERT_EQ(mx_op_verify(&ops[j]), 0);
        mx_op_release(&ops[j]);
      }
    }
  return 0;
}

static void run_both(int nranks, const char* slot_bytes) {
  if (slot_bytes) setenv("CHORUS_SHM_SLOT_SIZE", slot_bytes, 1);
  ASSERT_EQ(run_ranks(nranks, blocking_rank, &nranks), 0);
  ASSERT_EQ(run_ranks(nranks, posted_rank, &nranks), 0);
  if (slot_bytes) unsetenv("CHORUS_SHM_SLOT_SIZE");
}

TEST_EX(two_ranks, 300, "full") { run_both(2, NULL); }
TEST_EX(two_ranks_small_slots, 300, "full") { run_both(2, "65536"); }
TEST_EX(three_ranks, 300, "full") { run_both(3, NULL); }
