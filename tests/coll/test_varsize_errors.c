/*
 * test_varsize_errors.c - the variable-size collectives' error paths, with ranks as threads:
 * bad arguments (every rank makes the same bad call, gets CHORUS_ERR_INVALID_ARG with a
 * sentence naming the problem, and the communicator keeps working), and counts that disagree
 * across ranks (every rank ends with CHORUS_ERR_MISMATCH, well before the operation timeout,
 * never with data of the wrong size), over shared memory, over TCP and across emulated hosts.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

/* ---- bad arguments ---- */

/* The call must fail with ERR_INVALID_ARG and a message containing `words`. */
#define EXPECT_INVALID(call, words)                                                           \
  do {                                                                                        \
    ASSERT_STATUS(call, CHORUS_ERR_INVALID_ARG);                                              \
    const char* last_ = chorus_comm_last_error(comm);                                         \
    if (!last_ || !strstr(last_, words))                                                      \
      FAIL("%s: chorus_comm_last_error \"%s\" does not say \"%s\"", #call, last_ ? last_ : "", \
           words);                                                                            \
  } while (0)

static void expect_working(chorus_comm_t* comm, int rank, int n, uint64_t seed) {
  mx_spec_t s = {CH_COLL_ALLGATHERV, 7, CHORUS_INT32, CHORUS_SUM, 0, 0, 0, seed, 1};
  mx_op_t op;
  mx_op_prepare(&op, &s, rank, n, NULL);
  ASSERT_COMM_OK(comm, mx_op_run(&op, comm));
  ASSERT_EQ(mx_op_verify(&op), 0);
  mx_op_release(&op);
}

enum { BAD_MAX_RANKS = 4 };

static int bad_args_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  float send[64] = {0}, recv[64 * BAD_MAX_RANKS];
  size_t counts[BAD_MAX_RANKS], displs[BAD_MAX_RANKS], zeros[BAD_MAX_RANKS] = {0};
  for (int i = 0; i < n; i++) counts[i] = 2, displs[i] = (size_t)(n - 1 - i) * 2;
  chorus_req_t* req = NULL;
  const chorus_dtype_t f32 = CHORUS_FLOAT32;
  test_set_context("variable-size bad arguments n=%d", n);

  /* Arrays the rank needs. */
  EXPECT_INVALID(chorus_allgatherv(send, 2, recv, NULL, NULL, f32, comm), "recvcounts is NULL");
  EXPECT_INVALID(chorus_reduce_scatterv(send, recv, NULL, f32, CHORUS_SUM, comm), "recvcounts is NULL");
  EXPECT_INVALID(chorus_alltoallv(send, NULL, NULL, recv, counts, NULL, f32, comm), "sendcounts is NULL");
  EXPECT_INVALID(chorus_alltoallv(send, counts, NULL, recv, NULL, NULL, f32, comm), "recvcounts is NULL");
  EXPECT_INVALID(chorus_gatherv(send, 2, recv, NULL, NULL, f32, rank, comm), "recvcounts is NULL");
  EXPECT_INVALID(chorus_scatterv(send, NULL, NULL, recv, 2, f32, rank, comm), "sendcounts is NULL");
  /* Buffers. */
  EXPECT_INVALID(chorus_allgatherv(NULL, 2, recv, counts, NULL, f32, comm), "send buffer is NULL");
  EXPECT_INVALID(chorus_allgatherv(send, 2, NULL, counts, NULL, f32, comm), "receive buffer is NULL");
  EXPECT_INVALID(chorus_reduce_scatterv(NULL, recv, counts, f32, CHORUS_SUM, comm), "send buffer is NULL");
  EXPECT_INVALID(chorus_alltoallv(send, counts, NULL, NULL, counts, NULL, f32, comm), "receive buffer is NULL");
  EXPECT_INVALID(chorus_scatterv(NULL, counts, NULL, recv, 2, f32, rank, comm), "send buffer is NULL");
  EXPECT_INVALID(chorus_gatherv(send, 2, NULL, counts, NULL, f32, rank, comm), "receive buffer is NULL");
  /* A rank's own counts that contradict each other. */
  EXPECT_INVALID(chorus_allgatherv(send, 3, recv, counts, NULL, f32, comm), "sendcount = 3 differs");
  EXPECT_INVALID(chorus_gatherv(send, 1, recv, counts, NULL, f32, rank, comm), "sendcount = 1 differs");
  EXPECT_INVALID(chorus_scatterv(send, counts, NULL, recv, 5, f32, rank, comm), "recvcount = 5 differs");
  counts[rank] = 3;
  EXPECT_INVALID(chorus_alltoallv(send, counts, NULL, recv, zeros, NULL, f32, comm), "differs from recvcounts");
  counts[rank] = 2;
  /* Counts and displacements beyond the address space, sums that overflow. */
  size_t huge[BAD_MAX_RANKS], far[BAD_MAX_RANKS];
  for (int i = 0; i < n; i++) huge[i] = SIZE_MAX / 8 + 1, far[i] = SIZE_MAX - 1;
  EXPECT_INVALID(chorus_allgatherv(send, 2, recv, huge, NULL, f32, comm), "beyond the address space");
  EXPECT_INVALID(chorus_reduce_scatterv(send, recv, huge, f32, CHORUS_SUM, comm), "beyond the address space");
  EXPECT_INVALID(chorus_alltoallv(send, counts, far, recv, counts, NULL, f32, comm), "beyond the address space");
  EXPECT_INVALID(chorus_gatherv(send, 2, recv, counts, far, f32, rank, comm), "beyond the address space");
  /* Send blocks may overlap, but what they add up to must still be countable. */
  for (int i = 0; i < n; i++) huge[i] = SIZE_MAX / 2 / sizeof(float) / (size_t)n + 1;
  if (n > 1) EXPECT_INVALID(chorus_alltoallv(send, huge, zeros, recv, counts, NULL, f32, comm), "add up to more");
  /* Receive blocks that overlap; send and receive buffers that overlap without being in place. */
  if (n > 1) {
    size_t overlapping[BAD_MAX_RANKS];
    for (int i = 0; i < n; i++) overlapping[i] = (size_t)i; /* blocks of 2 starting 1 apart */
    EXPECT_INVALID(chorus_allgatherv(send, 2, recv, counts, overlapping, f32, comm), "overlap");
    EXPECT_INVALID(chorus_alltoallv(send, counts, NULL, recv, counts, overlapping, f32, comm), "overlap");
    EXPECT_INVALID(chorus_gatherv(send, 2, recv, counts, overlapping, f32, rank, comm), "overlap");
    /* Overlapping send blocks are fine (the same data to several ranks). */
    ASSERT_COMM_OK(comm, chorus_alltoallv(send, counts, overlapping, recv, counts, NULL, f32, comm));
  }
  float* other_slot = recv + displs[(rank + 1) % n];
  if (n > 1)
    EXPECT_INVALID(chorus_allgatherv(other_slot, 2, recv, counts, displs, f32, comm), "without being in place");
  EXPECT_INVALID(chorus_reduce_scatterv(recv, recv + 1, counts, f32, CHORUS_SUM, comm), "without being in place");
  EXPECT_INVALID(chorus_alltoallv(recv + 1, counts, NULL, recv, counts, NULL, f32, comm), "without being in place");
  /* In-place alltoallv whose send arrays say something else. */
  size_t other[BAD_MAX_RANKS];
  memcpy(other, counts, sizeof(other));
  other[(rank + 1) % n] = 1;
  if (n > 1) EXPECT_INVALID(chorus_alltoallv(recv, other, NULL, recv, counts, NULL, f32, comm), "in place");
  if (n > 1) EXPECT_INVALID(chorus_alltoallv(recv, counts, displs, recv, counts, NULL, f32, comm), "in place");
  /* The checks every call shares. */
  EXPECT_INVALID(chorus_allgatherv(send, 2, recv, counts, NULL, CHORUS_DTYPE_COUNT, comm), "invalid dtype");
  EXPECT_INVALID(chorus_reduce_scatterv(send, recv, counts, f32, CHORUS_OP_COUNT, comm), "invalid reduction op");
  EXPECT_INVALID(chorus_gatherv(send, 2, recv, counts, NULL, f32, n, comm), "root");
  EXPECT_INVALID(chorus_scatterv(send, counts, NULL, recv, 2, f32, -1, comm), "root");
  EXPECT_INVALID(chorus_iallgatherv(send, 2, recv, counts, NULL, f32, comm, NULL), "request pointer is NULL");
  req = (chorus_req_t*)&req; /* a refused call sets it to NULL */
  EXPECT_INVALID(chorus_ialltoallv(send, NULL, NULL, recv, counts, NULL, f32, comm, &req), "sendcounts is NULL");
  ASSERT_TRUE(req == NULL);

  /* A non-root's receive (gatherv) or send (scatterv) arrays are not read: NULL is fine. */
  ASSERT_COMM_OK(comm, chorus_gatherv(send, 2, rank == 0 ? recv : NULL, rank == 0 ? counts : NULL, NULL, f32, 0, comm));
  ASSERT_COMM_OK(comm, chorus_scatterv(rank == 0 ? send : NULL, rank == 0 ? counts : NULL, NULL, recv, 2, f32, 0, comm));
  /* None of that may break the communicator. */
  expect_working(comm, rank, n, 1);
  return 0;
}

TEST(bad_args_n1) {
  int n = 1;
  ASSERT_EQ(run_ranks(1, bad_args_rank, &n), 0);
}

TEST(bad_args_n3) {
  int n = 3;
  ASSERT_EQ(run_ranks(3, bad_args_rank, &n), 0);
}

/* ---- counts that disagree across ranks ---- */

enum { MISMATCH_TIMEOUT_SEC = 5, MM_MAX_RANKS = 4, MM_ELEMS = 4096 };

typedef enum {
  MM_ALLGATHERV,       /* rank 0 believes rank 1's block is one element longer */
  MM_ALLGATHERV_ZERO,  /* rank 0 believes every block is empty; rank 1 sends 3 */
  MM_ALLGATHERV_SWAP,  /* rank 0 swaps the counts of ranks 0 and 1: the same total */
  MM_REDUCE_SCATTERV,  /* rank 0 believes the last rank's block is one element longer */
  MM_ALLTOALLV,        /* rank 0 sends everyone one element more than they expect */
  MM_ALLTOALLV_PAIR,   /* only ranks 0 and 1 disagree: 0 sends 1 nothing, 1 expects 2 */
  MM_GATHERV,          /* the root expects one element more from every rank */
  MM_SCATTERV,         /* every rank expects one element less than the root sends it */
} mm_kind_t;

static const char* const mm_names[] = {"allgatherv", "allgatherv (empty vs non-empty)", "allgatherv (swapped counts)",
                                       "reduce_scatterv",
                                       "alltoallv", "alltoallv (one pair)", "gatherv", "scatterv"};

typedef struct {
  mm_kind_t kind;
  int nranks;
  atomic_int status[MM_MAX_RANKS];
  double elapsed_sec[MM_MAX_RANKS];
} mm_arg_t;

static chorus_status_t mismatched_call(const mm_arg_t* a, chorus_comm_t* comm, int rank, float* send, float* recv) {
  int n = a->nranks, root = n - 1;
  size_t counts[MM_MAX_RANKS], sc[MM_MAX_RANKS], rc[MM_MAX_RANKS];
  for (int i = 0; i < n; i++) counts[i] = sc[i] = rc[i] = (size_t)(2 + i);
  const chorus_dtype_t f32 = CHORUS_FLOAT32;
  switch (a->kind) {
    case MM_ALLGATHERV:
      if (rank == 0) counts[1]++;
      return chorus_allgatherv(send, counts[rank], recv, counts, NULL, f32, comm);
    case MM_ALLGATHERV_ZERO:
      for (int i = 0; i < n; i++) counts[i] = rank == 0 || i != 1 ? 0 : 3;
      return chorus_allgatherv(send, counts[rank], recv, counts, NULL, f32, comm);
    case MM_ALLGATHERV_SWAP:
      if (rank == 0) counts[0] = 3, counts[1] = 2;
      return chorus_allgatherv(send, counts[rank], recv, counts, NULL, f32, comm);
    case MM_REDUCE_SCATTERV:
      if (rank == 0) counts[n - 1]++;
      return chorus_reduce_scatterv(send, recv, counts, f32, CHORUS_SUM, comm);
    case MM_ALLTOALLV:
      for (int j = 0; j < n; j++) sc[j] = (size_t)(2 + rank + j) + (rank == 0 && j != 0);
      for (int i = 0; i < n; i++) rc[i] = (size_t)(2 + i + rank);
      return chorus_alltoallv(send, sc, NULL, recv, rc, NULL, f32, comm);
    case MM_ALLTOALLV_PAIR: /* two ranks: 0 -> 1 disagrees, 1 -> 0 agrees */
      for (int i = 0; i < n; i++) sc[i] = rc[i] = 1;
      if (rank == 0) sc[1] = 0;
      if (rank == 1) rc[0] = 2;
      return chorus_alltoallv(send, sc, NULL, recv, rc, NULL, f32, comm);
    case MM_GATHERV:
      if (rank == root)
        for (int i = 0; i < n; i++) counts[i] += i != root;
      return chorus_gatherv(send, counts[rank], recv, counts, NULL, f32, root, comm);
    case MM_SCATTERV:
      return chorus_scatterv(send, counts, NULL, recv, counts[rank] - (rank != root), f32, root, comm);
  }
  return CHORUS_ERR_INTERNAL;
}

/* allgatherv, reduce_scatterv: a rank that found the mismatch in a peer's frame names two
 * different counts hashes (the frames carry the hash of the whole vector). */
static void expect_two_hashes(const char* msg) {
  const char* first = strstr(msg, "the peer sent");
  if (!first) return; /* it heard of the mismatch from an abort frame */
  const char* a = strstr(first, "counts hash ");
  const char* b = a ? strstr(a + 1, "counts hash ") : NULL;
  if (!a || !b) FAIL("no two counts hashes in \"%s\"", msg);
  if (strncmp(a, b, strlen("counts hash ") + 16) == 0) FAIL("equal counts hashes in \"%s\"", msg);
}

static int mismatch_rank(chorus_comm_t* comm, int rank, void* arg) {
  mm_arg_t* a = arg;
  static __thread float send[MM_ELEMS], recv[MM_ELEMS];
  double start_sec = test_now_sec();
  chorus_status_t st = mismatched_call(a, comm, rank, send, recv);
  a->elapsed_sec[rank] = test_now_sec() - start_sec;
  atomic_store(&a->status[rank], st);
  const char* msg = chorus_comm_last_error(comm);
  printf("  rank %d: %s after %.2f s: %s\n", rank, chorus_status_name(st), a->elapsed_sec[rank], msg);
  if (st == CHORUS_ERR_MISMATCH && !strstr(msg, "mismatched calls"))
    FAIL("rank %d: the message does not say \"mismatched calls\": %s", rank, msg);
  if (st == CHORUS_ERR_MISMATCH && a->kind <= MM_REDUCE_SCATTERV) expect_two_hashes(msg);
  /* The communicator is broken now: the next call fails at once. */
  if (st < 0) ASSERT_STATUS(chorus_barrier(comm), CHORUS_ERR_COMM_BROKEN);
  return 0;
}

/* Every rank must end with ERR_MISMATCH, found from the frames (well before the timeout). */
static void run_mismatch(mm_kind_t kind, int nranks) {
  mm_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = kind;
  a.nranks = nranks;
  printf("%s, %d ranks%s\n", mm_names[kind], nranks, ranks_hosts_active(nranks) ? ", emulated hosts" : "");
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = MISMATCH_TIMEOUT_SEC;
  ASSERT_EQ(run_ranks_cfg(nranks, &cfg, mismatch_rank, &a), 0);
  for (int r = 0; r < nranks; r++) {
    chorus_status_t st = atomic_load(&a.status[r]);
    if (st != CHORUS_ERR_MISMATCH)
      FAIL("%s on %d ranks: rank %d returned %s, expected CHORUS_ERR_MISMATCH", mm_names[kind], nranks, r,
           chorus_status_name(st));
    if (a.elapsed_sec[r] >= MISMATCH_TIMEOUT_SEC)
      FAIL("%s: rank %d took %.1f s: the timeout, not the frames, ended it", mm_names[kind], r, a.elapsed_sec[r]);
  }
}

static void run_every_mismatch(void) {
  for (int n = 2; n <= 3; n++) {
    run_mismatch(MM_ALLGATHERV, n);
    run_mismatch(MM_ALLGATHERV_ZERO, n);
    run_mismatch(MM_ALLGATHERV_SWAP, n);
    run_mismatch(MM_REDUCE_SCATTERV, n);
    run_mismatch(MM_ALLTOALLV, n);
    run_mismatch(MM_GATHERV, n);
    run_mismatch(MM_SCATTERV, n);
  }
  run_mismatch(MM_ALLTOALLV_PAIR, 2);
  run_mismatch(MM_ALLGATHERV, 4);
}

TEST(mismatch_shm) { run_every_mismatch(); }

/* TCP and emulated hosts: in the normal tree only (the sanitizer trees run the quick label). */
TEST_EX(mismatch_tcp, 60, "full") {
  setenv("CHORUS_SHM_DISABLE", "1", 1);
  run_every_mismatch();
  unsetenv("CHORUS_SHM_DISABLE");
}

TEST_EX(mismatch_hosts, 60, "full") {
  static const int two_hosts[] = {0, 1, 0, 1};
  ranks_set_hosts(4, two_hosts);
  run_mismatch(MM_ALLGATHERV, 4);
  run_mismatch(MM_REDUCE_SCATTERV, 4);
  run_mismatch(MM_ALLTOALLV, 4);
  run_mismatch(MM_GATHERV, 4);
  run_mismatch(MM_SCATTERV, 4);
  ranks_set_hosts(0, NULL);
}
