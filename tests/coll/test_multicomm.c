/*
 * test_multicomm.c - several communicators in one process at once. `two_groups`: two
 * communicators (each its own unique id) driven at the same time by two threads of every rank,
 * with different collectives. `interleaved`: one thread per rank alternates non-blocking
 * operations on two communicators, so both have requests in flight together.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

enum { ITERATIONS = 30 };

typedef struct {
  int nranks;
  const chorus_coll_t* colls;
  int ncolls;
  uint64_t salt;
} group_arg_t;

static const size_t counts[] = {1, 1023, 7, 65537, 0, 4097};

static mx_spec_t iteration_spec(const group_arg_t* g, int it) {
  mx_spec_t s = {g->colls[it % g->ncolls],
                 counts[(size_t)it % (sizeof(counts) / sizeof(counts[0]))],
                 (chorus_dtype_t)((it * 7) % CHORUS_DTYPE_COUNT),
                 (chorus_op_t)(it % CHORUS_OP_COUNT),
                 it % g->nranks,
                 0,
                 (it / 2) % 2,
                 ref_mix64(g->salt + (uint64_t)it)};
  return s;
}

static int group_rank(chorus_comm_t* comm, int rank, void* arg) {
  const group_arg_t* g = arg;
  for (int it = 0; it < ITERATIONS; it++) {
    mx_spec_t s = iteration_spec(g, it);
    char spec[160];
    test_set_context("group salt=%llu %s", (unsigned long long)g->salt,
                     mx_spec_str(&s, spec, sizeof(spec)));
    mx_op_t op;
    mx_op_prepare(&op, &s, rank, g->nranks, NULL);
    ASSERT_COMM_OK(comm, mx_op_run(&op, comm));
    ASSERT_EQ(mx_op_verify(&op), 0);
    mx_op_release(&op);
  }
  return 0;
}

static const chorus_coll_t reducing[] = {CH_COLL_ALLREDUCE, CH_COLL_REDUCE_SCATTER, CH_COLL_REDUCE};
static const chorus_coll_t moving[] = {CH_COLL_ALLTOALL, CH_COLL_BROADCAST, CH_COLL_ALLGATHER,
                                       CH_COLL_GATHER,   CH_COLL_SCATTER,   CH_COLL_BARRIER};

static void two_groups(int nranks) {
  group_arg_t a = {nranks, reducing, 3, 1000};
  group_arg_t b = {nranks, moving, 6, 2000};
  ranks_group_t* ga = ranks_start(nranks, NULL, group_rank, &a);
  ranks_group_t* gb = ranks_start(nranks, NULL, group_rank, &b);
  int failed_a = ranks_join(ga);
  int failed_b = ranks_join(gb);
  ASSERT_EQ(failed_a, 0);
  ASSERT_EQ(failed_b, 0);
}

TEST(two_groups_n2) { two_groups(2); }
TEST(two_groups_n3) { two_groups(3); }
TEST(two_groups_n4) { two_groups(4); }

/* ---- one thread, two communicators, requests of both in flight ---- */

typedef struct {
  int nranks;
  chorus_unique_id_t second_id;
  pthread_barrier_t done; /* no rank destroys `second` while a peer may still use it */
} interleaved_arg_t;

static int interleaved_rank(chorus_comm_t* first, int rank, void* arg) {
  interleaved_arg_t* a = arg;
  chorus_comm_t* second = NULL;
  ASSERT_OK(chorus_comm_init(&second, a->nranks, rank, &a->second_id, NULL));
  group_arg_t g1 = {a->nranks, reducing, 3, 3000};
  group_arg_t g2 = {a->nranks, moving, 6, 4000};
  for (int it = 0; it < ITERATIONS; it++) {
    mx_spec_t s1 = iteration_spec(&g1, it), s2 = iteration_spec(&g2, it);
    char spec1[160], spec2[160];
    test_set_context("interleaved %s | %s", mx_spec_str(&s1, spec1, sizeof(spec1)),
                     mx_spec_str(&s2, spec2, sizeof(spec2)));
    mx_op_t op1, op2;
    mx_op_prepare(&op1, &s1, rank, a->nranks, NULL);
    mx_op_prepare(&op2, &s2, rank, a->nranks, NULL);
    ASSERT_COMM_OK(first, mx_op_post(&op1, first));
    ASSERT_COMM_OK(second, mx_op_post(&op2, second));
    /* Wait in the opposite order on odd iterations. */
    mx_op_t* order[2] = {it % 2 ? &op2 : &op1, it % 2 ? &op1 : &op2};
    for (int k = 0; k < 2; k++) {
      for (int j = 0; j < order[k]->nreq; j++) {
        ASSERT_OK(chorus_wait(order[k]->req[j]));
        chorus_req_free(order[k]->req[j]);
      }
    }
    ASSERT_EQ(mx_op_verify(&op1), 0);
    ASSERT_EQ(mx_op_verify(&op2), 0);
    mx_op_release(&op1);
    mx_op_release(&op2);
  }
  pthread_barrier_wait(&a->done);
  ASSERT_OK(chorus_comm_destroy(second));
  return 0;
}

static void interleaved(int nranks) {
  interleaved_arg_t a;
  a.nranks = nranks;
  ASSERT_OK(chorus_get_unique_id(&a.second_id));
  ASSERT_EQ(pthread_barrier_init(&a.done, NULL, (unsigned)nranks), 0);
  ASSERT_EQ(run_ranks(nranks, interleaved_rank, &a), 0);
  pthread_barrier_destroy(&a.done);
}

TEST(interleaved_n2) { interleaved(2); }
TEST(interleaved_n3) { interleaved(3); }
TEST(interleaved_n4) { interleaved(4); }
