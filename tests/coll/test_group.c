/*
 * test_group.c - grouped calls (chorus_group_start/end): many allreduces fused into few
 * (blocking and non-blocking, several dtypes and ops, pieces under CHORUS_GROUP_FUSE_BYTES,
 * through the two-level allreduce's rails across emulated hosts, more calls than the requests a
 * communicator keeps),
 * fused allgathers, a group mixing every collective with point-to-point calls made in an order
 * that would deadlock outside a group, results bitwise against the independent reference
 * (matrix.c); ranks whose groups differ get ERR_MISMATCH on one host and across emulated
 * hosts; usage errors (end without start, waiting inside the group, nesting). The `quick`
 * cases are one of each kind; the `full` ones add rank counts and layouts.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

static const int kHosts4[] = {0, 1, 0, 1};

/* Runs fn(comm, rank, &n) on n ranks: on one host, or on the emulated hosts `hosts`. */
static void run_on(int n, const int* hosts, ranks_fn fn) {
  ranks_set_hosts(hosts ? n : 0, hosts);
  ASSERT_EQ(run_ranks(n, fn, &n), 0);
  ranks_set_hosts(0, NULL);
}

enum { MAX_CALLS = 64 };

typedef struct {
  mx_op_t ops[MAX_CALLS];
  int blocking[MAX_CALLS];
  int n;
} calls_t;

/* Waits for the non-blocking calls, then checks and releases every call. */
static void finish_calls(chorus_comm_t* comm, calls_t* c) {
  int problems = 0;
  for (int k = 0; k < c->n; k++) {
    for (int j = 0; j < c->ops[k].nreq && !c->blocking[k]; j++) {
      ASSERT_COMM_OK(comm, chorus_wait(c->ops[k].req[j]));
      chorus_req_free(c->ops[k].req[j]);
    }
    problems += mx_op_verify(&c->ops[k]);
    mx_op_release(&c->ops[k]);
  }
  if (problems) FAIL("%d wrong results (WRONG lines above)", problems);
}

/* Makes the calls: blocking ones through mx_op_run, the others through mx_op_post. */
static void make_calls(chorus_comm_t* comm, calls_t* c) {
  for (int k = 0; k < c->n; k++) {
    if (c->blocking[k]) ASSERT_COMM_OK(comm, mx_op_run(&c->ops[k], comm));
    else ASSERT_COMM_OK(comm, mx_op_post(&c->ops[k], comm));
  }
}

/* Runs the calls in one group, then checks every result. */
static void run_group(chorus_comm_t* comm, calls_t* c) {
  ASSERT_OK(chorus_group_start());
  make_calls(comm, c);
  /* Inside the group nothing has run: a request is not done, and waiting is refused. */
  for (int k = 0; k < c->n; k++) {
    if (c->blocking[k] || !c->ops[k].nreq) continue;
    int done = -1;
    ASSERT_STATUS(chorus_test(c->ops[k].req[0], &done), CHORUS_INPROGRESS);
    ASSERT_EQ(done, 0);
    ASSERT_STATUS(chorus_wait(c->ops[k].req[0]), CHORUS_ERR_INVALID_USAGE);
    break;
  }
  ASSERT_COMM_OK(comm, chorus_group_end());
  finish_calls(comm, c);
}

static void add(calls_t* c, mx_spec_t s, int blocking, int rank, int nranks) {
  ASSERT_LT(c->n, MAX_CALLS);
  mx_op_prepare(&c->ops[c->n], &s, rank, nranks, NULL);
  c->blocking[c->n++] = blocking;
}

/* 40 allreduces: counts from 0 to 5000, float32 sum, int32 max, bfloat16 avg and float64 sum
 * interleaved, in and out of place, every third one non-blocking. */
static int fused_allreduce_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  static const size_t counts[] = {0, 1, 7, 1023, 1024, 5000, 33, 64};
  static const chorus_dtype_t dts[] = {CHORUS_FLOAT32, CHORUS_INT32, CHORUS_BFLOAT16, CHORUS_FLOAT64};
  static const chorus_op_t ops[] = {CHORUS_SUM, CHORUS_MAX, CHORUS_AVG, CHORUS_SUM};
  for (int round = 0; round < 2; round++) {
    calls_t* c = calloc(1, sizeof(*c));
    ASSERT_NOT_NULL(c);
    for (int k = 0; k < 40; k++) {
      mx_spec_t s = {CH_COLL_ALLREDUCE, counts[k % 8], dts[k % 4], ops[k % 4], 0, 0, k % 5 == 0,
                     ref_mix64((uint64_t)(round * 100 + k))};
      add(c, s, k % 3 != 0, rank, n);
    }
    test_set_context("40 fused allreduces, round %d", round);
    run_group(comm, c);
    free(c);
  }
  return 0;
}

TEST_EX(fused_allreduce_n1, 60, "full") { run_on(1, NULL, fused_allreduce_rank); }
TEST_EX(fused_allreduce_n2, 60, "full") { run_on(2, NULL, fused_allreduce_rank); }
TEST_EX(fused_allreduce_n3, 60, "full") { run_on(3, NULL, fused_allreduce_rank); }
TEST_EX(fused_allreduce_n4, 60, "full") { run_on(4, NULL, fused_allreduce_rank); }
TEST(fused_allreduce_hosts_n4) { run_on(4, kHosts4, fused_allreduce_rank); }
/* Small pieces: many fused operations, and calls larger than a piece run alone. */
TEST(fused_allreduce_pieces_n3) {
  setenv("CHORUS_GROUP_FUSE_BYTES", "4096", 1);
  run_on(3, NULL, fused_allreduce_rank);
}
/* Pieces (16 KiB) under the streaming threshold (32 KiB) in buckets over it: the pieces write
 * their members' results with streaming stores, as their group's outputs together no longer
 * stay cached (task.group_bytes); over shared memory (2 ranks: the one-phase combine streams)
 * and across emulated hosts. */
static void run_streamed(int n, const int* hosts) {
  setenv("CHORUS_GROUP_FUSE_BYTES", "16384", 1);
  setenv("CHORUS_SHM_STREAM_BYTES", "32768", 1);
  run_on(n, hosts, fused_allreduce_rank);
}
TEST(fused_allreduce_streamed_n2) { run_streamed(2, NULL); }
TEST(fused_allreduce_streamed_hosts_n4) { run_streamed(4, kHosts4); }
TEST_EX(fused_allreduce_off_n2, 60, "full") {
  setenv("CHORUS_GROUP_FUSE_BYTES", "0", 1);
  run_on(2, NULL, fused_allreduce_rank);
}

/* A fused group across hosts through the two-level allreduce's rails (forced), whose
 * intra-host phases read the members' inputs and write their results where they are instead
 * of through a packed vector: calls of many sizes, some in place, so that members straddle
 * pipeline chunks, shared-memory sub-chunks (64 KiB slots) and every local rank's segment;
 * float32 sum, bfloat16 avg and int32 max, one fused piece each. */
static int fused_hier_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  static const size_t counts[] = {70001, 1, 0, 4099, 333, 25000, 7, 131072};
  static const chorus_dtype_t dts[] = {CHORUS_FLOAT32, CHORUS_BFLOAT16, CHORUS_INT32};
  static const chorus_op_t ops[] = {CHORUS_SUM, CHORUS_AVG, CHORUS_MAX};
  calls_t* c = calloc(1, sizeof(*c));
  ASSERT_NOT_NULL(c);
  for (int k = 0; k < 36; k++) {
    mx_spec_t s = {CH_COLL_ALLREDUCE, counts[k % 8], dts[k % 3], ops[k % 3], 0, 0, k % 4 == 1,
                   ref_mix64(900 + (uint64_t)k)};
    add(c, s, k % 5 != 0, rank, n);
  }
  run_group(comm, c);
  free(c);
  return 0;
}

static void run_fused_hier(int n, const int* hosts) {
  setenv("CHORUS_ALGO", "allreduce:hier/ring", 1);
  setenv("CHORUS_GROUP_FUSE_BYTES", "4194304", 1);
  setenv("CHORUS_SHM_SLOT_SIZE", "65536", 1);
  run_on(n, hosts, fused_hier_rank);
}
TEST(fused_hier_hosts_2x2) { run_fused_hier(4, kHosts4); }
TEST_EX(fused_hier_hosts_2x3, 120, "full") {
  static const int hosts[] = {0, 0, 0, 1, 1, 1};
  run_fused_hier(6, hosts);
}

/* Two groups of 5000 one-element allreduces, half of them non-blocking: more requests at once
 * than a communicator keeps for reuse (4096), so the first group ends with some freed and the
 * second reuses the kept ones. Every result is checked. */
static int many_calls_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  enum { CALLS = 5000 };
  int32_t* in = malloc(CALLS * sizeof(*in));
  int32_t* out = malloc(CALLS * sizeof(*out));
  chorus_req_t** reqs = calloc(CALLS, sizeof(*reqs));
  ASSERT_TRUE(in && out && reqs);
  for (int round = 0; round < 2; round++) {
    for (int k = 0; k < CALLS; k++) {
      in[k] = 7 * k + round + rank;
      out[k] = -1;
    }
    ASSERT_OK(chorus_group_start());
    for (int k = 0; k < CALLS; k++) {
      if (k % 2) ASSERT_COMM_OK(comm, chorus_allreduce(&in[k], &out[k], 1, CHORUS_INT32, CHORUS_SUM, comm));
      else ASSERT_COMM_OK(comm, chorus_iallreduce(&in[k], &out[k], 1, CHORUS_INT32, CHORUS_SUM, comm, &reqs[k]));
    }
    ASSERT_COMM_OK(comm, chorus_group_end());
    for (int k = 0; k < CALLS; k += 2) {
      ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
      chorus_req_free(reqs[k]);
    }
    for (int k = 0; k < CALLS; k++) {
      int32_t want = n * (7 * k + round) + n * (n - 1) / 2;
      if (out[k] != want) FAIL("round %d, call %d: %d, expected %d", round, k, (int)out[k], (int)want);
    }
  }
  free(in);
  free(out);
  free(reqs);
  return 0;
}

TEST(many_calls_n2) { run_on(2, NULL, many_calls_rank); }

/* Allgathers of two dtypes (one in place) fused per dtype, beside allreduces. */
static int fused_allgather_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  calls_t* c = calloc(1, sizeof(*c));
  ASSERT_NOT_NULL(c);
  static const size_t counts[] = {1, 0, 100, 7, 2049};
  for (int k = 0; k < 15; k++) {
    chorus_coll_t coll = k % 5 == 4 ? CH_COLL_ALLREDUCE : CH_COLL_ALLGATHER;
    mx_spec_t s = {coll, counts[k % 5], k % 2 ? CHORUS_UINT8 : CHORUS_FLOAT16, CHORUS_SUM, 0, 0, k % 3 == 1,
                   ref_mix64(500 + (uint64_t)k)};
    if (coll == CH_COLL_ALLREDUCE) s.dtype = CHORUS_INT64;
    add(c, s, k % 2, rank, n);
  }
  run_group(comm, c);
  free(c);
  return 0;
}

TEST_EX(fused_allgather_n3, 60, "full") { run_on(3, NULL, fused_allgather_rank); }
TEST_EX(fused_allgather_hosts_n4, 60, "full") { run_on(4, kHosts4, fused_allgather_rank); }

/* Every collective, barriers, and a ring of blocking sends and receives in which every rank
 * sends first (outside a group, large messages would wait on each other). */
static int mixed_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  calls_t* c = calloc(1, sizeof(*c));
  ASSERT_NOT_NULL(c);
  static const chorus_coll_t colls[] = {CH_COLL_ALLREDUCE,      CH_COLL_BROADCAST, CH_COLL_BARRIER, CH_COLL_REDUCE,
                                        CH_COLL_ALLGATHER,      CH_COLL_ALLREDUCE, CH_COLL_BARRIER, CH_COLL_ALLTOALL,
                                        CH_COLL_REDUCE_SCATTER, CH_COLL_GATHER,    CH_COLL_SCATTER, CH_COLL_ALLGATHER,
                                        CH_COLL_ALLREDUCE};
  int ncolls = (int)(sizeof(colls) / sizeof(colls[0]));
  for (int k = 0; k < ncolls; k++) {
    mx_spec_t s = {colls[k], (size_t)(k * 97 % 300), CHORUS_FLOAT32, CHORUS_SUM, k % n, 0, 0,
                   ref_mix64(900 + (uint64_t)k)};
    add(c, s, k % 2, rank, n);
  }
  size_t big = 70001; /* over the eager size: a blocking send waits for its receive */
  float* out = malloc(big * sizeof(float));
  float* in = malloc(big * sizeof(float));
  ASSERT_TRUE(out && in);
  ref_fill_bytes(out, big * sizeof(float), rank, 7, 0);
  int to = (rank + 1) % n, from = (rank + n - 1) % n;
  ASSERT_OK(chorus_group_start());
  ASSERT_COMM_OK(comm, chorus_send_tag(out, big, CHORUS_FLOAT32, to, 3, comm));
  make_calls(comm, c);
  chorus_msg_info_t info = {-1, -1, 0};
  ASSERT_COMM_OK(comm, chorus_recv_tag(in, big, CHORUS_FLOAT32, from, 3, comm, &info));
  ASSERT_EQ(info.source, -1); /* filled by chorus_group_end */
  ASSERT_COMM_OK(comm, chorus_group_end());
  ASSERT_EQ(info.source, from);
  ASSERT_EQ(info.count, big);
  float* want = malloc(big * sizeof(float));
  ASSERT_NOT_NULL(want);
  ref_fill_bytes(want, big * sizeof(float), from, 7, 0);
  if (memcmp(in, want, big * sizeof(float)) != 0) FAIL("the ring message from rank %d arrived wrong", from);
  finish_calls(comm, c);
  free(out);
  free(in);
  free(want);
  free(c);
  return 0;
}

TEST_EX(mixed_n2, 60, "full") { run_on(2, NULL, mixed_rank); }
TEST_EX(mixed_n4, 60, "full") { run_on(4, NULL, mixed_rank); }
TEST(mixed_hosts_n4) { run_on(4, kHosts4, mixed_rank); }

/* Sends to and receives from every rank, in an order that differs per rank (blocking calls,
 * large messages): the group completes whatever the order. */
static int all_pairs_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  size_t count = 30000;
  float* out = malloc(count * sizeof(float));
  float* in = malloc((size_t)n * count * sizeof(float));
  ASSERT_TRUE(out && in);
  ref_fill_bytes(out, count * sizeof(float), rank, 11, 0);
  ASSERT_OK(chorus_group_start());
  for (int k = 0; k < n; k++) {
    int p = (rank + k) % n;
    if (rank % 2) ASSERT_COMM_OK(comm, chorus_recv(in + (size_t)p * count, count, CHORUS_FLOAT32, p, comm));
    ASSERT_COMM_OK(comm, chorus_send(out, count, CHORUS_FLOAT32, (rank + n - k) % n, comm));
    if (!(rank % 2)) ASSERT_COMM_OK(comm, chorus_recv(in + (size_t)p * count, count, CHORUS_FLOAT32, p, comm));
  }
  ASSERT_COMM_OK(comm, chorus_group_end());
  float* want = malloc(count * sizeof(float));
  ASSERT_NOT_NULL(want);
  for (int p = 0; p < n; p++) {
    ref_fill_bytes(want, count * sizeof(float), p, 11, 0);
    if (memcmp(in + (size_t)p * count, want, count * sizeof(float)) != 0) FAIL("message from rank %d wrong", p);
  }
  free(out);
  free(in);
  free(want);
  return 0;
}

TEST_EX(all_pairs_n4, 60, "full") { run_on(4, NULL, all_pairs_rank); }
TEST_EX(all_pairs_hosts_n4, 60, "full") { run_on(4, kHosts4, all_pairs_rank); }

/* One group over two communicators (the world and its halves): each posts its own calls. */
static int two_comms_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  chorus_comm_t* half = NULL;
  ASSERT_COMM_OK(comm, chorus_comm_split(comm, rank % 2, rank, &half));
  int hsize = 0, hrank = 0;
  chorus_comm_size(half, &hsize);
  chorus_comm_rank(half, &hrank);
  int64_t a[3] = {rank, rank, rank}, b[3] = {rank, rank, rank}, c[5], got = -1;
  for (int i = 0; i < 5; i++) c[i] = rank * 10 + i;
  int64_t mine = rank;
  ASSERT_OK(chorus_group_start());
  ASSERT_COMM_OK(comm, chorus_allreduce(a, a, 3, CHORUS_INT64, CHORUS_SUM, comm));
  ASSERT_COMM_OK(half, chorus_allreduce(b, b, 3, CHORUS_INT64, CHORUS_SUM, half));
  ASSERT_COMM_OK(half, chorus_allreduce(c, c, 5, CHORUS_INT64, CHORUS_MAX, half));
  ASSERT_COMM_OK(half, chorus_send(&mine, 1, CHORUS_INT64, (hrank + 1) % hsize, half));
  ASSERT_COMM_OK(half, chorus_recv(&got, 1, CHORUS_INT64, (hrank + hsize - 1) % hsize, half));
  ASSERT_COMM_OK(comm, chorus_group_end());
  int64_t half_sum = 0, half_max = -1;
  for (int q = rank % 2; q < n; q += 2) half_sum += q, half_max = q;
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(a[i], (int64_t)n * (n - 1) / 2);
    ASSERT_EQ(b[i], half_sum);
  }
  for (int i = 0; i < 5; i++) ASSERT_EQ(c[i], half_max * 10 + i);
  /* Half ranks are ordered by world rank (key = rank): the previous one is two world ranks back. */
  int prev = hrank ? rank - 2 : rank % 2 + 2 * (hsize - 1);
  ASSERT_EQ(got, prev);
  ASSERT_COMM_OK(half, chorus_comm_destroy(half));
  return 0;
}

TEST_EX(two_comms_n4, 60, "full") { run_on(4, NULL, two_comms_rank); }

/* ---- ranks whose groups differ: ERR_MISMATCH, not garbage ---- */

typedef struct {
  int variant; /* 0: rank 0 splits 8 elements in 4 + 4, the others call once with 8;
                  1: rank 0 fuses two sums, the others a sum and a max (same total count) */
  int hosts;   /* on emulated hosts */
} mismatch_arg_t;

static int mismatch_rank(chorus_comm_t* comm, int rank, void* arg) {
  const mismatch_arg_t* m = arg;
  float a[8], b[8];
  for (int i = 0; i < 8; i++) a[i] = b[i] = (float)(rank + i);
  ASSERT_OK(chorus_group_start());
  if (m->variant == 0) {
    if (rank == 0) {
      ASSERT_OK(chorus_allreduce(a, a, 4, CHORUS_FLOAT32, CHORUS_SUM, comm));
      ASSERT_OK(chorus_allreduce(a + 4, a + 4, 4, CHORUS_FLOAT32, CHORUS_SUM, comm));
    } else {
      ASSERT_OK(chorus_allreduce(a, a, 8, CHORUS_FLOAT32, CHORUS_SUM, comm));
    }
  } else {
    ASSERT_OK(chorus_allreduce(a, a, 4, CHORUS_FLOAT32, CHORUS_SUM, comm));
    ASSERT_OK(chorus_allreduce(b, b, 4, CHORUS_FLOAT32, rank == 0 ? CHORUS_SUM : CHORUS_MAX, comm));
  }
  chorus_status_t st = chorus_group_end();
  /* The rank whose group differs, and those that exchange with it, see the mismatch; across
   * hosts a rank that only hears of it through a peer closing its connection gets ERR_REMOTE
   * (README: a peer learns of a broken communicator from a connection it uses). Never OK. */
  int knows = rank == 0 || !m->hosts;
  if (st != CHORUS_ERR_MISMATCH && (knows || st != CHORUS_ERR_REMOTE))
    FAIL("a group that differs across ranks returned %s: %s", chorus_status_name(st), chorus_comm_last_error(comm));
  return 0;
}

static void run_mismatch(int variant, int n, const int* hosts) {
  mismatch_arg_t m = {variant, hosts != NULL};
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = 20;
  ranks_set_hosts(hosts ? n : 0, hosts);
  ASSERT_EQ(run_ranks_cfg(n, &cfg, mismatch_rank, &m), 0);
  ranks_set_hosts(0, NULL);
}

TEST_EX(mismatch_split_n2, 60, "full") { run_mismatch(0, 2, NULL); }
TEST_EX(mismatch_split_hosts_n4, 60, "full") { run_mismatch(0, 4, kHosts4); }
TEST(mismatch_ops_n3) { run_mismatch(1, 3, NULL); }
TEST_EX(mismatch_ops_hosts_n4, 60, "full") { run_mismatch(1, 4, kHosts4); }

/* ---- usage ---- */

static int usage_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  ASSERT_STATUS(chorus_group_end(), CHORUS_ERR_INVALID_USAGE);
  int32_t v[4] = {rank, rank, rank, rank}, w[4];
  chorus_req_t *req = NULL, *dropped = NULL;
  /* Nested: posted only by the outermost end. */
  ASSERT_OK(chorus_group_start());
  ASSERT_OK(chorus_group_start());
  ASSERT_COMM_OK(comm, chorus_iallreduce(v, w, 4, CHORUS_INT32, CHORUS_SUM, comm, &req));
  /* Bad arguments are refused at once, inside a group too. */
  ASSERT_STATUS(chorus_allreduce(v, w, 4, (chorus_dtype_t)99, CHORUS_SUM, comm), CHORUS_ERR_INVALID_ARG);
  ASSERT_COMM_OK(comm, chorus_group_end());
  int done = -1;
  ASSERT_STATUS(chorus_test(req, &done), CHORUS_INPROGRESS);
  ASSERT_EQ(done, 0);
  /* A request freed inside the group still runs (and is freed when it ends). */
  ASSERT_COMM_OK(comm, chorus_ibarrier(comm, &dropped));
  chorus_req_free(dropped);
  ASSERT_COMM_OK(comm, chorus_group_end());
  ASSERT_COMM_OK(comm, chorus_wait(req));
  chorus_req_free(req);
  int n = 0;
  chorus_comm_size(comm, &n);
  for (int i = 0; i < 4; i++) ASSERT_EQ(w[i], n * (n - 1) / 2);
  /* An empty group. */
  ASSERT_OK(chorus_group_start());
  ASSERT_OK(chorus_group_end());
  /* A communicator with calls in the open group cannot be destroyed. */
  ASSERT_OK(chorus_group_start());
  ASSERT_COMM_OK(comm, chorus_barrier(comm));
  ASSERT_STATUS(chorus_comm_destroy(comm), CHORUS_ERR_INVALID_USAGE);
  ASSERT_TRUE(strstr(chorus_comm_last_error(comm), "group") != NULL);
  ASSERT_COMM_OK(comm, chorus_group_end());
  return 0;
}

TEST(usage_n2) { ASSERT_EQ(run_ranks(2, usage_rank, NULL), 0); }
