/*
 * test_errors.c - error paths with ranks as threads: invalid arguments (every rank makes the
 * same bad call, gets CHORUS_ERR_INVALID_ARG, and the communicator keeps working), bad
 * CHORUS_* settings, chorus_comm_abort (waking a blocked rank, then ERR_COMM_BROKEN), and
 * mismatched calls (every rank ends with an error within the operation timeout).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

/* ---- library-level arguments ---- */

TEST(init_args) {
  chorus_unique_id_t id;
  chorus_comm_t* comm = NULL;
  ASSERT_STATUS(chorus_get_unique_id(NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_OK(chorus_get_unique_id(&id));
  ASSERT_STATUS(chorus_comm_init(NULL, 1, 0, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(&comm, 0, 0, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(&comm, -3, 0, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(&comm, 2, -1, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(&comm, 2, 2, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(&comm, 1, 0, NULL, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_OK(chorus_comm_destroy(NULL));
  chorus_req_free(NULL);
  int done = 0;
  ASSERT_STATUS(chorus_wait(NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_test(NULL, &done), CHORUS_ERR_INVALID_ARG);
  /* The id is still good after all that. */
  ASSERT_OK(chorus_comm_init(&comm, 1, 0, &id, NULL));
  ASSERT_OK(chorus_comm_destroy(comm));
}

/* ---- invalid arguments on a live communicator ---- */

static void expect_working(chorus_comm_t* comm, int rank, int nranks, uint64_t seed) {
  mx_spec_t s = {CH_COLL_ALLREDUCE, 33, CHORUS_INT32, CHORUS_SUM, 0, 0, 0, seed};
  mx_op_t op;
  mx_op_prepare(&op, &s, rank, nranks, NULL);
  ASSERT_COMM_OK(comm, mx_op_run(&op, comm));
  ASSERT_EQ(mx_op_verify(&op), 0);
  mx_op_release(&op);
}

#define EXPECT_INVALID(call)                                                     \
  do {                                                                           \
    ASSERT_STATUS(call, CHORUS_ERR_INVALID_ARG);                                 \
    const char* last_ = chorus_comm_last_error(comm);                            \
    if (!last_ || !last_[0]) FAIL("%s: chorus_comm_last_error is empty", #call); \
  } while (0)

static int bad_args_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  float send[64] = {0}, recv[64 * 8];
  chorus_req_t* req = NULL;
  const chorus_dtype_t bad_dtype = CHORUS_DTYPE_COUNT;
  const chorus_op_t bad_op = CHORUS_OP_COUNT;
  test_set_context("bad arguments n=%d", n);

  EXPECT_INVALID(chorus_allreduce(send, recv, 4, bad_dtype, CHORUS_SUM, comm));
  EXPECT_INVALID(chorus_allreduce(send, recv, 4, (chorus_dtype_t)-1, CHORUS_SUM, comm));
  EXPECT_INVALID(chorus_allreduce(send, recv, 4, CHORUS_FLOAT32, bad_op, comm));
  EXPECT_INVALID(chorus_allreduce(send, recv, 4, CHORUS_FLOAT32, (chorus_op_t)-1, comm));
  EXPECT_INVALID(chorus_allreduce(NULL, recv, 4, CHORUS_FLOAT32, CHORUS_SUM, comm));
  EXPECT_INVALID(chorus_allreduce(send, NULL, 4, CHORUS_FLOAT32, CHORUS_SUM, comm));
  EXPECT_INVALID(chorus_broadcast(send, recv, 4, CHORUS_FLOAT32, -1, comm));
  EXPECT_INVALID(chorus_broadcast(send, recv, 4, CHORUS_FLOAT32, n, comm));
  EXPECT_INVALID(chorus_broadcast(send, recv, 4, bad_dtype, 0, comm));
  EXPECT_INVALID(chorus_reduce(send, recv, 4, CHORUS_FLOAT32, CHORUS_SUM, n, comm));
  EXPECT_INVALID(chorus_reduce(send, recv, 4, CHORUS_FLOAT32, bad_op, 0, comm));
  EXPECT_INVALID(chorus_allgather(send, NULL, 4, CHORUS_FLOAT32, comm));
  EXPECT_INVALID(chorus_allgather(send, recv, 4, bad_dtype, comm));
  EXPECT_INVALID(chorus_reduce_scatter(send, recv, 4, CHORUS_FLOAT32, bad_op, comm));
  EXPECT_INVALID(chorus_alltoall(send, recv, 4, bad_dtype, comm));
  EXPECT_INVALID(chorus_gather(send, recv, 4, CHORUS_FLOAT32, n, comm));
  EXPECT_INVALID(chorus_gather(send, recv, 4, CHORUS_FLOAT32, -1, comm));
  EXPECT_INVALID(chorus_scatter(send, recv, 4, CHORUS_FLOAT32, -1, comm));
  EXPECT_INVALID(chorus_scatter(send, recv, 4, CHORUS_FLOAT32, n, comm));
  EXPECT_INVALID(chorus_send(send, 4, CHORUS_FLOAT32, n, comm));
  EXPECT_INVALID(chorus_send(send, 4, CHORUS_FLOAT32, -1, comm));
  EXPECT_INVALID(chorus_recv(recv, 4, CHORUS_FLOAT32, n, comm));
  EXPECT_INVALID(chorus_send(send, 4, bad_dtype, 0, comm));
  EXPECT_INVALID(chorus_sendrecv(send, 4, n, recv, 4, 0, CHORUS_FLOAT32, comm));
  EXPECT_INVALID(chorus_sendrecv(send, 4, 0, recv, 4, -1, CHORUS_FLOAT32, comm));
  EXPECT_INVALID(chorus_iallreduce(send, recv, 4, CHORUS_FLOAT32, CHORUS_SUM, comm, NULL));
  EXPECT_INVALID(chorus_iallreduce(send, recv, 4, bad_dtype, CHORUS_SUM, comm, &req));
  EXPECT_INVALID(chorus_ibarrier(comm, NULL));
  EXPECT_INVALID(chorus_isend(send, 4, CHORUS_FLOAT32, n, comm, &req));
  EXPECT_INVALID(chorus_comm_split(comm, 0, 0, NULL));
  ASSERT_STATUS(chorus_allreduce(send, recv, 4, CHORUS_FLOAT32, CHORUS_SUM, NULL),
                CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_barrier(NULL), CHORUS_ERR_INVALID_ARG);

  /* None of that may break the communicator. */
  expect_working(comm, rank, n, 1);
  chorus_req_t* good = NULL;
  ASSERT_COMM_OK(comm, chorus_ibarrier(comm, &good));
  ASSERT_STATUS(chorus_test(good, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_COMM_OK(comm, chorus_wait(good));
  chorus_req_free(good);
  expect_working(comm, rank, n, 2);
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

/* ---- a destroyed, NULL or made-up communicator ---- */

/* The message a refused call left, checked without it ever reading the communicator. */
static void expect_refused(const chorus_comm_t* comm, const char* call) {
  const char* msg = chorus_comm_last_error(comm);
  if (!strstr(msg, call) || !strstr(msg, comm ? "not a valid communicator" : "NULL"))
    FAIL("chorus_comm_last_error after %s: \"%s\"", call, msg);
}

#define EXPECT_REFUSED(call, name, comm)                 \
  do {                                                   \
    ASSERT_STATUS(call, CHORUS_ERR_INVALID_ARG);          \
    expect_refused(comm, name);                          \
  } while (0)

/* Every entry point refuses a communicator that chorus_comm_destroy freed (it is looked up in
 * the set of live communicators, never read: ASan would see a use after free), a pointer that
 * never was one, and NULL; the message names the call. Other communicators are unaffected. */
TEST(destroyed_comm_is_refused) {
  chorus_unique_id_t id;
  chorus_comm_t *comm = NULL, *other = NULL, *child = NULL;
  ASSERT_OK(chorus_get_unique_id(&id));
  ASSERT_OK(chorus_comm_init(&comm, 1, 0, &id, NULL));
  ASSERT_OK(chorus_get_unique_id(&id));
  ASSERT_OK(chorus_comm_init(&other, 1, 0, &id, NULL));
  int32_t v = 1, out = 0;
  int r = -1;
  void* mem = NULL;
  chorus_req_t* req = NULL;
  ASSERT_OK(chorus_allreduce(&v, &out, 1, CHORUS_INT32, CHORUS_SUM, comm));
  chorus_comm_t* stale = comm;
  ASSERT_OK(chorus_comm_destroy(comm));

  EXPECT_REFUSED(chorus_allreduce(&v, &out, 1, CHORUS_INT32, CHORUS_SUM, stale), "chorus_allreduce", stale);
  EXPECT_REFUSED(chorus_iallreduce(&v, &out, 1, CHORUS_INT32, CHORUS_SUM, stale, &req), "chorus_allreduce", stale);
  ASSERT_TRUE(req == NULL);
  EXPECT_REFUSED(chorus_broadcast(&v, &out, 1, CHORUS_INT32, 0, stale), "chorus_broadcast", stale);
  EXPECT_REFUSED(chorus_barrier(stale), "chorus_barrier", stale);
  EXPECT_REFUSED(chorus_send(&v, 1, CHORUS_INT32, 0, stale), "chorus_send", stale);
  EXPECT_REFUSED(chorus_comm_rank(stale, &r), "chorus_comm_rank", stale);
  EXPECT_REFUSED(chorus_comm_size(stale, &r), "chorus_comm_size", stale);
  EXPECT_REFUSED(chorus_comm_split(stale, 0, 0, &child), "chorus_comm_split", stale);
  EXPECT_REFUSED(chorus_comm_abort(stale), "chorus_comm_abort", stale);
  EXPECT_REFUSED(chorus_comm_dump(stale, "/dev/null"), "chorus_comm_dump", stale);
  EXPECT_REFUSED(chorus_mem_alloc(stale, 64, &mem), "chorus_mem_alloc", stale);
  EXPECT_REFUSED(chorus_comm_destroy(stale), "chorus_comm_destroy", stale); /* a second destroy */
  ASSERT_TRUE(r == -1 && child == NULL && mem == NULL);

  static char not_a_comm[4096];
  chorus_comm_t* bogus = (chorus_comm_t*)not_a_comm;
  EXPECT_REFUSED(chorus_allreduce(&v, &out, 1, CHORUS_INT32, CHORUS_SUM, bogus), "chorus_allreduce", bogus);
  EXPECT_REFUSED(chorus_comm_destroy(bogus), "chorus_comm_destroy", bogus);
  EXPECT_REFUSED(chorus_reduce(&v, &out, 1, CHORUS_INT32, CHORUS_SUM, 0, NULL), "chorus_reduce", NULL);
  EXPECT_REFUSED(chorus_comm_rank(NULL, &r), "chorus_comm_rank", NULL);

  /* The other communicator still works, and its own last error is its own. */
  ASSERT_OK(chorus_allreduce(&v, &out, 1, CHORUS_INT32, CHORUS_SUM, other));
  ASSERT_TRUE(out == 1);
  ASSERT_TRUE(strstr(chorus_comm_last_error(other), "not a valid") == NULL);
  ASSERT_OK(chorus_comm_destroy(other));
}

/* A live communicator passes the live-communicator check on every call (a million queries);
 * the time per call is printed for the README's figure, not bounded: tests run under
 * valgrind and sanitizers too. */
TEST(live_check_passes_a_live_comm) {
  chorus_unique_id_t id;
  chorus_comm_t* comm = NULL;
  ASSERT_OK(chorus_get_unique_id(&id));
  ASSERT_OK(chorus_comm_init(&comm, 1, 0, &id, NULL));
  enum { N = 1000000 };
  int r = 0;
  double t0 = test_now_sec();
  for (int i = 0; i < N; i++) ASSERT_TRUE(chorus_comm_rank(comm, &r) == CHORUS_OK);
  double ns = (test_now_sec() - t0) / N * 1e9;
  printf("chorus_comm_rank with the live check: %.1f ns per call\n", ns);
  ASSERT_EQ(r, 0);
  ASSERT_OK(chorus_comm_destroy(comm));
}

/* ---- bad settings ---- */

/* Creates a one-rank communicator under `name=value`; returns the status of init. */
static chorus_status_t init_with_env(const char* name, const char* value, chorus_comm_t** comm) {
  const char* old = getenv(name);
  char* saved = old ? strdup(old) : NULL;
  setenv(name, value, 1);
  chorus_unique_id_t id;
  ASSERT_OK(chorus_get_unique_id(&id));
  *comm = NULL;
  chorus_status_t st = chorus_comm_init(comm, 1, 0, &id, NULL);
  if (saved)
    setenv(name, saved, 1);
  else
    unsetenv(name);
  free(saved);
  return st;
}

TEST(bad_env) {
  chorus_comm_t* comm = NULL;
  ASSERT_STATUS(init_with_env("CHORUS_TIMEOUT_SEC", "abc", &comm), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(init_with_env("CHORUS_TIMEOUT_SEC", "0", &comm), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(init_with_env("CHORUS_ALGO", "no-such-collective:ring", &comm),
                CHORUS_ERR_INVALID_ARG);
  /* An unknown algorithm name: refused at init, or by the call. Never silently ignored. */
  chorus_status_t st = init_with_env("CHORUS_ALGO", "allreduce:no-such-algorithm", &comm);
  if (st == CHORUS_OK) {
    int x = 1, y = 0;
    chorus_status_t call = chorus_allreduce(&x, &y, 1, CHORUS_INT32, CHORUS_SUM, comm);
    ASSERT_OK(chorus_comm_destroy(comm));
    if (call == CHORUS_OK) FAIL("CHORUS_ALGO=allreduce:no-such-algorithm was ignored");
  } else {
    ASSERT_STATUS(st, CHORUS_ERR_INVALID_ARG);
  }
}

/* ---- abort ---- */

typedef struct {
  chorus_comm_t* comms[2];
  pthread_barrier_t ready; /* both comms published */
  atomic_int blocked_status;
  double blocked_sec;
} abort_arg_t;

/* Rank 0 enters an allreduce that rank 1 never joins; rank 1 aborts rank 0's communicator
 * from its own thread, which must end the allreduce with an error well before the timeout. */
static int abort_rank(chorus_comm_t* comm, int rank, void* arg) {
  abort_arg_t* a = arg;
  a->comms[rank] = comm;
  pthread_barrier_wait(&a->ready);
  int32_t x[16] = {0}, y[16];
  if (rank == 0) {
    double start_sec = test_now_sec();
    chorus_status_t st = chorus_allreduce(x, y, 16, CHORUS_INT32, CHORUS_SUM, comm);
    a->blocked_sec = test_now_sec() - start_sec;
    atomic_store(&a->blocked_status, st);
    pthread_barrier_wait(&a->ready);
  } else {
    usleep(300 * 1000);
    ASSERT_OK(chorus_comm_abort(a->comms[0]));
    pthread_barrier_wait(&a->ready);
    ASSERT_OK(chorus_comm_abort(comm));
  }
  /* After abort, every operation fails at once with ERR_COMM_BROKEN; abort may repeat. */
  ASSERT_OK(chorus_comm_abort(comm));
  double start_sec = test_now_sec();
  ASSERT_STATUS(chorus_allreduce(x, y, 16, CHORUS_INT32, CHORUS_SUM, comm), CHORUS_ERR_COMM_BROKEN);
  chorus_req_t* req = NULL;
  chorus_status_t st = chorus_ibarrier(comm, &req);
  if (st == CHORUS_OK) {
    st = chorus_wait(req);
    chorus_req_free(req);
  }
  ASSERT_STATUS(st, CHORUS_ERR_COMM_BROKEN);
  ASSERT_TRUE(test_now_sec() - start_sec < 2.0);
  return 0;
}

TEST(abort_wakes_waiter) {
  abort_arg_t a;
  memset(&a, 0, sizeof(a));
  ASSERT_EQ(pthread_barrier_init(&a.ready, NULL, 2), 0);
  ASSERT_EQ(run_ranks(2, abort_rank, &a), 0);
  pthread_barrier_destroy(&a.ready);
  chorus_status_t st = atomic_load(&a.blocked_status);
  printf("  blocked allreduce ended with %s after %.2f s\n", chorus_status_name(st), a.blocked_sec);
  ASSERT_TRUE(st < 0);
  ASSERT_TRUE(a.blocked_sec < 10.0);
}

/* ---- mismatched calls ---- */

enum { MISMATCH_TIMEOUT_SEC = 5 };

typedef struct {
  int kind; /* 0: allreduce counts differ; 1: different collectives */
  atomic_int statuses[2];
  double elapsed_sec[2];
} mismatch_arg_t;

static int mismatch_rank(chorus_comm_t* comm, int rank, void* arg) {
  mismatch_arg_t* a = arg;
  float send[4096] = {0}, recv[4096 * 2];
  double start_sec = test_now_sec();
  chorus_status_t st;
  if (a->kind == 0)
    st = chorus_allreduce(send, recv, rank == 0 ? 1000 : 1500, CHORUS_FLOAT32, CHORUS_SUM, comm);
  else if (rank == 0)
    st = chorus_allreduce(send, recv, 1000, CHORUS_FLOAT32, CHORUS_SUM, comm);
  else
    st = chorus_broadcast(send, recv, 1000, CHORUS_FLOAT32, 0, comm);
  a->elapsed_sec[rank] = test_now_sec() - start_sec;
  atomic_store(&a->statuses[rank], st);
  if (st < 0)
    printf("  rank %d: %s: %s\n", rank, chorus_status_name(st), chorus_comm_last_error(comm));
  return 0;
}

static void run_mismatch(int kind) {
  mismatch_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = kind;
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = MISMATCH_TIMEOUT_SEC;
  ASSERT_EQ(run_ranks_cfg(2, &cfg, mismatch_rank, &a), 0);
  int mismatches = 0;
  for (int r = 0; r < 2; r++) {
    chorus_status_t st = atomic_load(&a.statuses[r]);
    if (st >= 0) FAIL("rank %d: mismatched call returned %s", r, chorus_status_name(st));
    ASSERT_TRUE(a.elapsed_sec[r] < MISMATCH_TIMEOUT_SEC * 2 + 5);
    if (st == CHORUS_ERR_MISMATCH) mismatches++;
  }
  if (mismatches == 0) FAIL("no rank reported CHORUS_ERR_MISMATCH");
}

TEST(mismatch_count) { run_mismatch(0); }
TEST(mismatch_collective) { run_mismatch(1); }
