/*
 * test_p2p_match.c - point-to-point operations that progress independently (chorus.h, "point
 * to point"): every rank posts its receives before its sends (the pattern that deadlocked when
 * operations ran in posting order), on one host and on emulated hosts, with small (eager) and
 * large (rendezvous) messages; tags matched out of posting order and the non-overtaking rule;
 * receives from any source reporting the source, tag and count; larger and smaller buffers,
 * other dtypes; point-to-point beside collectives (non-blocking, and from another thread);
 * the unexpected-message bound; timeouts, abort and bad arguments. Message contents are
 * bitwise checked against an independent fill (ref.h). The sanitizer trees run the `quick`
 * cases (one of each kind, on emulated hosts where it matters); the `full` ones add the other
 * rank counts and layouts.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ranks.h"
#include "ref.h"
#include "test.h"

/* Small ones go eagerly, large ones (over CHORUS_P2P_EAGER_BYTES = 64 KiB) by rendezvous. */
static const size_t kCounts[] = {0, 1, 1000, 70001};
enum { NCOUNTS = 4 };

/* The bytes rank src sends to dst as message k with tag. */
static void fill_msg(void* buf, size_t bytes, int src, int dst, int tag, int k) {
  ref_fill_bytes(buf, bytes, src, ref_mix64((uint64_t)dst << 40 ^ (uint64_t)tag << 20 ^ (uint64_t)k), 0);
}

static void check_msg(const void* got, size_t bytes, int src, int dst, int tag, int k) {
  unsigned char* want = malloc(bytes + 1);
  ASSERT_NOT_NULL(want);
  fill_msg(want, bytes, src, dst, tag, k);
  if (memcmp(got, want, bytes) != 0)
    FAIL("message %d (tag %d, %zu bytes) from rank %d to rank %d arrived wrong", k, tag, bytes, src, dst);
  free(want);
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static chorus_config_t config(int timeout_sec) {
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = timeout_sec;
  return cfg;
}

/* ---- every rank: receives from everyone (itself too) first, then sends ---- */

static int recv_first_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  double t0 = test_now_sec();
  for (int ci = 0; ci < NCOUNTS; ci++) {
    size_t bytes = kCounts[ci] * sizeof(float);
    chorus_req_t** reqs = calloc((size_t)(2 * n), sizeof(*reqs));
    char** in = calloc((size_t)n, sizeof(*in));
    char** out = calloc((size_t)n, sizeof(*out));
    ASSERT_TRUE(reqs && in && out);
    for (int p = 0; p < n; p++) {
      in[p] = malloc(bytes + 1);
      out[p] = malloc(bytes + 1);
      ASSERT_TRUE(in[p] && out[p]);
      memset(in[p], 0xa5, bytes + 1);
      fill_msg(out[p], bytes, rank, p, ci, 0);
      ASSERT_COMM_OK(comm, chorus_irecv(in[p], kCounts[ci], CHORUS_FLOAT32, p, comm, &reqs[p]));
    }
    for (int p = 0; p < n; p++)
      ASSERT_COMM_OK(comm, chorus_isend(out[p], kCounts[ci], CHORUS_FLOAT32, p, comm, &reqs[n + p]));
    for (int k = 0; k < 2 * n; k++) {
      ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
      chorus_req_free(reqs[k]);
    }
    for (int p = 0; p < n; p++) {
      check_msg(in[p], bytes, p, rank, ci, 0);
      ASSERT_EQ((unsigned char)in[p][bytes], 0xa5);
      free(in[p]);
      free(out[p]);
    }
    free(reqs);
    free(in);
    free(out);
  }
  /* Promptly: a deadlock would last the whole timeout. */
  ASSERT_LT(test_now_sec() - t0, 5.0 * test_timeout_multiplier());
  return 0;
}

static void run_recv_first(int n, const int* hosts) {
  chorus_config_t cfg = config(20);
  ranks_set_hosts(hosts ? n : 0, hosts);
  ASSERT_EQ(run_ranks_cfg(n, &cfg, recv_first_rank, &n), 0);
  ranks_set_hosts(0, NULL);
}

static const int kHosts2[] = {0, 1}, kHosts3[] = {0, 1, 0}, kHosts4[] = {0, 1, 0, 1};

TEST_EX(recv_first_n1, 60, "full") { run_recv_first(1, NULL); }
TEST_EX(recv_first_n2, 60, "full") { run_recv_first(2, NULL); }
TEST_EX(recv_first_n3, 60, "full") { run_recv_first(3, NULL); }
TEST_EX(recv_first_n4, 60, "full") { run_recv_first(4, NULL); }
TEST_EX(recv_first_hosts_n2, 60, "full") { run_recv_first(2, kHosts2); }
TEST_EX(recv_first_hosts_n3, 60, "full") { run_recv_first(3, kHosts3); }
TEST(recv_first_hosts_n4) { run_recv_first(4, kHosts4); }

/* Every message by rendezvous, and no room for unexpected messages: still no deadlock. */
TEST_EX(recv_first_all_rendezvous_n3, 60, "full") {
  setenv("CHORUS_P2P_EAGER_BYTES", "0", 1);
  setenv("CHORUS_P2P_UNEXPECTED_BYTES", "0", 1);
  run_recv_first(3, kHosts3);
}

/* ---- tags: matched out of posting order; one tag's messages in sending order ---- */

/* Rank 0 sends (tag, size): its messages 1 and 3 share tag 3, 3 being small and 1 large, so a
 * small message must not overtake a large one of the same tag. */
static const int kTags[] = {5, 3, 9, 3, 7};
static const size_t kTagCounts[] = {10, 70001, 0, 3, 70001};
/* Rank 1 receives: tag (or ANY), and which message it must get. */
static const int kRecvTags[] = {9, 3, 5, 3, CHORUS_ANY_TAG};
static const int kRecvGets[] = {2, 1, 0, 3, 4};
enum { NTAGGED = 5 };

static int tags_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  chorus_req_t* reqs[NTAGGED];
  char* bufs[NTAGGED];
  /* Round 0: receives and messages race; round 1: the receives come after the messages. */
  for (int round = 0; round < 2; round++) {
    for (int k = 0; k < NTAGGED; k++) {
      bufs[k] = malloc(70001 * sizeof(float));
      ASSERT_NOT_NULL(bufs[k]);
    }
    if (rank == 0) {
      for (int k = 0; k < NTAGGED; k++) {
        fill_msg(bufs[k], kTagCounts[k] * sizeof(float), 0, 1, kTags[k], round);
        ASSERT_COMM_OK(comm, chorus_isend_tag(bufs[k], kTagCounts[k], CHORUS_FLOAT32, 1, kTags[k], comm, &reqs[k]));
      }
      if (round == 1) ASSERT_COMM_OK(comm, chorus_barrier(comm));
    } else {
      if (round == 1) ASSERT_COMM_OK(comm, chorus_barrier(comm));
      for (int k = 0; k < NTAGGED; k++)
        ASSERT_COMM_OK(comm, chorus_irecv_tag(bufs[k], 70001, CHORUS_FLOAT32, 0, kRecvTags[k], comm, &reqs[k]));
    }
    for (int k = 0; k < NTAGGED; k++) ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
    for (int k = 0; k < NTAGGED && rank == 1; k++) {
      chorus_msg_info_t info;
      ASSERT_COMM_OK(comm, chorus_req_info(reqs[k], &info));
      int m = kRecvGets[k];
      ASSERT_EQ(info.source, 0);
      ASSERT_EQ(info.tag, kTags[m]);
      ASSERT_EQ(info.count, kTagCounts[m]);
      check_msg(bufs[k], kTagCounts[m] * sizeof(float), 0, 1, kTags[m], round);
    }
    for (int k = 0; k < NTAGGED; k++) {
      chorus_req_free(reqs[k]);
      free(bufs[k]);
    }
  }
  return 0;
}

TEST(tags_out_of_order) { ASSERT_EQ(run_ranks(2, tags_rank, NULL), 0); }
TEST_EX(tags_out_of_order_hosts, 60, "full") {
  ranks_set_hosts(2, kHosts2);
  ASSERT_EQ(run_ranks(2, tags_rank, NULL), 0);
  ranks_set_hosts(0, NULL);
}

/* Many messages of one tag, mixed sizes: received in the order sent. */
enum { NORDER = 32 };

static size_t order_count(int k) { return k % 4 == 1 ? 20000 + (size_t)k : (size_t)(k * 37 % 200); }

static int order_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  chorus_req_t* reqs[NORDER];
  char* bufs[NORDER];
  for (int k = 0; k < NORDER; k++) {
    size_t bytes = order_count(k) * sizeof(int32_t);
    bufs[k] = malloc(bytes + 1);
    ASSERT_NOT_NULL(bufs[k]);
    if (rank == 0) {
      fill_msg(bufs[k], bytes, 0, 1, 4, k);
      ASSERT_COMM_OK(comm, chorus_isend_tag(bufs[k], order_count(k), CHORUS_INT32, 1, 4, comm, &reqs[k]));
    } else {
      ASSERT_COMM_OK(comm, chorus_irecv_tag(bufs[k], order_count(k), CHORUS_INT32, 0, 4, comm, &reqs[k]));
    }
  }
  for (int k = 0; k < NORDER; k++) {
    ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
    chorus_req_free(reqs[k]);
  }
  for (int k = 0; k < NORDER; k++) {
    if (rank == 1) check_msg(bufs[k], order_count(k) * sizeof(int32_t), 0, 1, 4, k);
    free(bufs[k]);
  }
  return 0;
}

TEST_EX(one_tag_in_order, 60, "full") { ASSERT_EQ(run_ranks(2, order_rank, NULL), 0); }

/* ---- any source: the request reports who sent what ---- */

static int any_source_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  size_t max = 70001 + (size_t)n;
  for (int round = 0; round < 2; round++) {
    if (rank != 0) {
      /* Round 0: small messages, round 1: large ones. */
      size_t count = round ? 70000 + (size_t)rank : 10 * (size_t)rank;
      char* out = malloc(count * sizeof(uint16_t));
      ASSERT_NOT_NULL(out);
      fill_msg(out, count * sizeof(uint16_t), rank, 0, 100 + rank, round);
      ASSERT_COMM_OK(comm, chorus_send_tag(out, count, CHORUS_FLOAT16, 0, 100 + rank, comm));
      free(out);
      /* Rank 0 joins once it has every message of this round: none of the next is sent yet. */
      ASSERT_COMM_OK(comm, chorus_barrier(comm));
      continue;
    }
    chorus_req_t** reqs = calloc((size_t)n, sizeof(*reqs));
    char** in = calloc((size_t)n, sizeof(*in));
    int* seen = calloc((size_t)n, sizeof(int));
    ASSERT_TRUE(reqs && in && seen);
    for (int k = 1; k < n; k++) {
      in[k] = malloc(max * sizeof(uint16_t));
      ASSERT_NOT_NULL(in[k]);
      ASSERT_COMM_OK(comm, chorus_irecv_tag(in[k], max, CHORUS_FLOAT16, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, comm, &reqs[k]));
    }
    for (int k = 1; k < n; k++) {
      ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
      chorus_msg_info_t info = {-7, -7, 0};
      ASSERT_COMM_OK(comm, chorus_req_info(reqs[k], &info));
      ASSERT_TRUE(info.source >= 1 && info.source < n);
      ASSERT_EQ(seen[info.source]++, 0);
      ASSERT_EQ(info.tag, 100 + info.source);
      size_t want = round ? 70000 + (size_t)info.source : 10 * (size_t)info.source;
      ASSERT_EQ(info.count, want);
      check_msg(in[k], want * sizeof(uint16_t), info.source, 0, 100 + info.source, round);
      chorus_req_free(reqs[k]);
      free(in[k]);
    }
    free(reqs);
    free(in);
    free(seen);
    ASSERT_COMM_OK(comm, chorus_barrier(comm));
  }
  /* The blocking form: every other rank sends one more; rank 0 takes them from anyone. */
  int32_t v = rank * 11;
  if (rank != 0) ASSERT_COMM_OK(comm, chorus_send_tag(&v, 1, CHORUS_INT32, 0, 42, comm));
  for (int k = 1; k < n && rank == 0; k++) {
    chorus_msg_info_t info = {-1, -1, 0};
    int32_t got = -1;
    ASSERT_COMM_OK(comm, chorus_recv_tag(&got, 1, CHORUS_INT32, CHORUS_ANY_SOURCE, 42, comm, &info));
    ASSERT_EQ(info.tag, 42);
    ASSERT_EQ(info.count, 1);
    ASSERT_EQ(got, info.source * 11);
  }
  return 0;
}

static void run_any_source(int n, const int* hosts) {
  ranks_set_hosts(hosts ? n : 0, hosts);
  ASSERT_EQ(run_ranks(n, any_source_rank, &n), 0);
  ranks_set_hosts(0, NULL);
}

TEST_EX(any_source_n2, 60, "full") { run_any_source(2, NULL); }
TEST(any_source_n4) { run_any_source(4, NULL); }
TEST_EX(any_source_hosts_n4, 60, "full") { run_any_source(4, kHosts4); }

/* ---- sizes and dtypes: a shorter message is fine, a longer one is ERR_TRUNCATED, another
 * dtype ERR_MISMATCH; they fail only that receive ---- */

static int sizes_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  for (int big = 0; big < 2; big++) {
    size_t count = big ? 70000 : 100;
    size_t bytes = count * sizeof(float);
    char* buf = malloc(2 * bytes + 64);
    ASSERT_NOT_NULL(buf);
    if (rank == 0) {
      fill_msg(buf, bytes, 0, 1, 1, big);
      ASSERT_COMM_OK(comm, chorus_send_tag(buf, count, CHORUS_FLOAT32, 1, 1, comm));
      ASSERT_COMM_OK(comm, chorus_send_tag(buf, count, CHORUS_FLOAT32, 1, 2, comm));
      ASSERT_COMM_OK(comm, chorus_send_tag(buf, count, CHORUS_FLOAT32, 1, 3, comm));
    } else {
      chorus_msg_info_t info;
      /* A buffer twice the message: OK, the count says how much came. */
      memset(buf, 0xa5, 2 * bytes + 64);
      ASSERT_COMM_OK(comm, chorus_recv_tag(buf, 2 * count, CHORUS_FLOAT32, 0, 1, comm, &info));
      ASSERT_EQ(info.count, count);
      check_msg(buf, bytes, 0, 1, 1, big);
      ASSERT_EQ((unsigned char)buf[bytes], 0xa5);
      /* Half the message: the first half arrives, nothing past it, ERR_TRUNCATED. */
      memset(buf, 0xa5, 2 * bytes + 64);
      chorus_req_t* req = NULL;
      ASSERT_COMM_OK(comm, chorus_irecv_tag(buf, count / 2, CHORUS_FLOAT32, 0, 2, comm, &req));
      ASSERT_STATUS(chorus_wait(req), CHORUS_ERR_TRUNCATED);
      ASSERT_TRUE(strstr(chorus_comm_last_error(comm), "more than the") != NULL);
      ASSERT_COMM_OK(comm, chorus_req_info(req, &info));
      ASSERT_EQ(info.count, count);
      ASSERT_EQ(info.source, 0);
      chorus_req_free(req);
      check_msg(buf, bytes / 2, 0, 1, 1, big); /* tag 2 carried the same bytes */
      ASSERT_EQ((unsigned char)buf[bytes / 2], 0xa5);
      /* Another dtype: nothing written, ERR_MISMATCH. */
      memset(buf, 0xa5, 2 * bytes + 64);
      ASSERT_STATUS(chorus_recv_tag(buf, count, CHORUS_INT32, 0, 3, comm, &info), CHORUS_ERR_MISMATCH);
      ASSERT_TRUE(strstr(chorus_comm_last_error(comm), "dtype") != NULL);
      ASSERT_EQ((unsigned char)buf[0], 0xa5);
    }
    free(buf);
  }
  /* The communicator goes on. */
  int32_t x = rank + 1, sum = 0;
  ASSERT_COMM_OK(comm, chorus_allreduce(&x, &sum, 1, CHORUS_INT32, CHORUS_SUM, comm));
  ASSERT_EQ(sum, 3);
  return 0;
}

TEST(sizes_and_dtypes) { ASSERT_EQ(run_ranks(2, sizes_rank, NULL), 0); }
TEST_EX(sizes_and_dtypes_hosts, 60, "full") {
  ranks_set_hosts(2, kHosts2);
  ASSERT_EQ(run_ranks(2, sizes_rank, NULL), 0);
  ranks_set_hosts(0, NULL);
}

/* ---- beside collectives ---- */

/* Rank pairs (r, r^1): the lower posts a non-blocking allgatherv and allreduce and then sends;
 * the higher receives first (blocking) and only then joins the collectives, so their frames are
 * ahead of the message it needs in the stream (the variable-size kinds are numbered after the
 * point-to-point ones). A blocking allreduce follows on both. */
static void post_beside(chorus_comm_t* comm, int rank, const int32_t* vec, int32_t* res, const int32_t* mine,
                        const size_t* gcounts, const size_t* gdispls, int32_t* gathered, chorus_req_t** ar,
                        chorus_req_t** gr) {
  ASSERT_COMM_OK(comm, chorus_iallgatherv(mine, gcounts[rank], gathered, gcounts, gdispls, CHORUS_INT32, comm, gr));
  ASSERT_COMM_OK(comm, chorus_iallreduce(vec, res, 4096, CHORUS_INT32, CHORUS_SUM, comm, ar));
}

static int beside_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  int partner = rank ^ 1;
  if (partner >= n) partner = rank;
  for (int ci = 0; ci < NCOUNTS; ci++) {
    size_t count = kCounts[ci], bytes = count * sizeof(float);
    float* msg = malloc(bytes + 4);
    int32_t* vec = malloc(4096 * sizeof(int32_t));
    int32_t* res = malloc(4096 * sizeof(int32_t));
    size_t gcounts[4], gdispls[4], gtotal = 0;
    ASSERT_TRUE(n <= 4);
    for (int r = 0; r < n; r++) {
      gcounts[r] = (size_t)(100 * r + 7);
      gdispls[r] = gtotal;
      gtotal += gcounts[r];
    }
    int32_t* gathered = malloc(gtotal * sizeof(int32_t));
    int32_t mine[400];
    ASSERT_TRUE(msg && vec && res && gathered);
    for (int i = 0; i < 4096; i++) vec[i] = rank + i;
    for (size_t i = 0; i < gcounts[rank]; i++) mine[i] = rank * 1000 + (int32_t)i + (int32_t)ci;
    chorus_req_t *ar = NULL, *gr = NULL, *sr = NULL;
    if (rank <= partner) {
      fill_msg(msg, bytes, rank, partner, 9, ci);
      post_beside(comm, rank, vec, res, mine, gcounts, gdispls, gathered, &ar, &gr);
      ASSERT_COMM_OK(comm, chorus_isend_tag(msg, count, CHORUS_FLOAT32, partner, 9, comm, &sr));
      if (partner == rank) ASSERT_COMM_OK(comm, chorus_recv_tag(msg, count, CHORUS_FLOAT32, rank, 9, comm, NULL));
    } else {
      ASSERT_COMM_OK(comm, chorus_recv_tag(msg, count, CHORUS_FLOAT32, partner, 9, comm, NULL));
      check_msg(msg, bytes, partner, rank, 9, ci);
      post_beside(comm, rank, vec, res, mine, gcounts, gdispls, gathered, &ar, &gr);
    }
    int32_t x = 1, total = 0;
    ASSERT_COMM_OK(comm, chorus_allreduce(&x, &total, 1, CHORUS_INT32, CHORUS_SUM, comm));
    ASSERT_EQ(total, n);
    ASSERT_COMM_OK(comm, chorus_wait(ar));
    ASSERT_COMM_OK(comm, chorus_wait(gr));
    chorus_req_free(ar);
    chorus_req_free(gr);
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < gcounts[r]; i++)
        ASSERT_EQ(gathered[gdispls[r] + i], r * 1000 + (int32_t)i + (int32_t)ci);
    free(gathered);
    if (sr) {
      ASSERT_COMM_OK(comm, chorus_wait(sr));
      chorus_req_free(sr);
    }
    for (int i = 0; i < 4096; i++) ASSERT_EQ(res[i], n * (n - 1) / 2 + n * i);
    free(msg);
    free(vec);
    free(res);
  }
  return 0;
}

static void run_beside(int n, const int* hosts) {
  ranks_set_hosts(hosts ? n : 0, hosts);
  chorus_config_t cfg = config(20);
  ASSERT_EQ(run_ranks_cfg(n, &cfg, beside_rank, &n), 0);
  ranks_set_hosts(0, NULL);
}

TEST(beside_collectives_n2) { run_beside(2, NULL); }
TEST_EX(beside_collectives_n3, 60, "full") { run_beside(3, NULL); }
TEST_EX(beside_collectives_hosts_n4, 60, "full") { run_beside(4, kHosts4); }

/* A second thread exchanges messages with the partner on the same communicator while the
 * rank's own thread runs collectives. */
typedef struct {
  chorus_comm_t* comm;
  int rank, partner, iters;
} pinger_t;

static void* pinger(void* arg) {
  pinger_t* p = arg;
  test_set_rank(p->rank);
  for (int k = 0; k < p->iters; k++) {
    size_t count = k % 3 == 2 ? 20000 : (size_t)(k * 13 % 500);
    size_t bytes = count * sizeof(uint32_t);
    char *in = malloc(bytes + 1), *out = malloc(bytes + 1);
    ASSERT_TRUE(in && out);
    fill_msg(out, bytes, p->rank, p->partner, 77, k);
    chorus_req_t *r = NULL, *s = NULL;
    ASSERT_COMM_OK(p->comm, chorus_irecv_tag(in, count, CHORUS_UINT32, p->partner, 77, p->comm, &r));
    ASSERT_COMM_OK(p->comm, chorus_isend_tag(out, count, CHORUS_UINT32, p->partner, 77, p->comm, &s));
    ASSERT_COMM_OK(p->comm, chorus_wait(r));
    ASSERT_COMM_OK(p->comm, chorus_wait(s));
    chorus_req_free(r);
    chorus_req_free(s);
    check_msg(in, bytes, p->partner, p->rank, 77, k);
    free(in);
    free(out);
  }
  return NULL;
}

static int threads_rank(chorus_comm_t* comm, int rank, void* arg) {
  int n = *(int*)arg;
  pinger_t p = {comm, rank, (rank ^ 1) < n ? rank ^ 1 : rank, 60};
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, pinger, &p), 0);
  for (int k = 0; k < 60; k++) {
    int64_t v[64], out[64];
    for (int i = 0; i < 64; i++) v[i] = rank * 1000 + k + i;
    ASSERT_COMM_OK(comm, chorus_allreduce(v, out, 64, CHORUS_INT64, CHORUS_MAX, comm));
    for (int i = 0; i < 64; i++) ASSERT_EQ(out[i], (n - 1) * 1000 + k + i);
  }
  pthread_join(th, NULL);
  return 0;
}

static void run_threads(const int* hosts) {
  int n = 4;
  ranks_set_hosts(hosts ? n : 0, hosts);
  ASSERT_EQ(run_ranks(n, threads_rank, &n), 0);
  ranks_set_hosts(0, NULL);
}

TEST_EX(beside_collectives_threads_n4, 60, "full") { run_threads(NULL); }
TEST(beside_collectives_threads_hosts_n4) { run_threads(kHosts4); }

/* ---- the unexpected-message bound: with no room at all, messages wait in the connection
 * until their receives come, and every receive still completes ---- */

enum { NREVERSE = 6 };

static int reverse_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  chorus_req_t* reqs[NREVERSE];
  int32_t bufs[NREVERSE][300];
  for (int k = 0; k < NREVERSE; k++) {
    if (rank == 0) {
      fill_msg(bufs[k], sizeof(bufs[k]), 0, 1, k, 0);
      ASSERT_COMM_OK(comm, chorus_isend_tag(bufs[k], 300, CHORUS_INT32, 1, k, comm, &reqs[k]));
    } else { /* in the reverse order of the tags sent */
      int tag = NREVERSE - 1 - k;
      ASSERT_COMM_OK(comm, chorus_irecv_tag(bufs[tag], 300, CHORUS_INT32, 0, tag, comm, &reqs[k]));
    }
  }
  for (int k = 0; k < NREVERSE; k++) {
    ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
    chorus_req_free(reqs[k]);
  }
  for (int k = 0; k < NREVERSE && rank == 1; k++) check_msg(bufs[k], sizeof(bufs[k]), 0, 1, k, 0);
  return 0;
}

TEST(unexpected_bound_zero) {
  setenv("CHORUS_P2P_UNEXPECTED_BYTES", "0", 1);
  ASSERT_EQ(run_ranks(2, reverse_rank, NULL), 0);
  ranks_set_hosts(2, kHosts2);
  ASSERT_EQ(run_ranks(2, reverse_rank, NULL), 0);
  ranks_set_hosts(0, NULL);
}

/* ---- failures reach pending point-to-point requests ---- */

static volatile int peer_done;

/* Rank 1 waits for a message rank 0 never sends: ERR_TIMEOUT within the timeout, naming the
 * receive, its peer and tag; a large send to a rank that never receives times out too. */
static int timeout_rank(chorus_comm_t* comm, int rank, void* arg) {
  int large_send = *(int*)arg;
  if (rank == 0) {
    while (!__atomic_load_n(&peer_done, __ATOMIC_ACQUIRE)) sleep_ms(10);
    return 0;
  }
  double t0 = test_now_sec();
  chorus_req_t* req = NULL;
  float* buf = calloc(100000, sizeof(float));
  ASSERT_NOT_NULL(buf);
  if (large_send) ASSERT_COMM_OK(comm, chorus_isend_tag(buf, 100000, CHORUS_FLOAT32, 0, 5, comm, &req));
  else ASSERT_COMM_OK(comm, chorus_irecv_tag(buf, 16, CHORUS_FLOAT32, 0, 5, comm, &req));
  ASSERT_STATUS(chorus_wait(req), CHORUS_ERR_TIMEOUT);
  double took = test_now_sec() - t0;
  const char* err = chorus_comm_last_error(comm);
  if (!strstr(err, large_send ? "send #" : "recv #") || !strstr(err, "rank 0") || !strstr(err, "tag 5") ||
      !strstr(err, "timed out"))
    FAIL("timeout message does not name the operation, peer and tag: %s", err);
  ASSERT_LT(took, 4.0 * test_timeout_multiplier());
  chorus_req_free(req);
  /* The communicator is broken now: later calls fail at once. */
  ASSERT_STATUS(chorus_send(buf, 0, CHORUS_FLOAT32, 0, comm), CHORUS_ERR_COMM_BROKEN);
  free(buf);
  __atomic_store_n(&peer_done, 1, __ATOMIC_RELEASE);
  return 0;
}

static void run_timeout(int large_send, const int* hosts) {
  chorus_config_t cfg = config(1);
  peer_done = 0;
  ranks_set_hosts(hosts ? 2 : 0, hosts);
  ranks_group_t* g = ranks_start(2, &cfg, timeout_rank, &large_send);
  ASSERT_EQ(ranks_join(g), 0);
  ranks_set_hosts(0, NULL);
}

TEST(timeout_recv) { run_timeout(0, NULL); }
TEST_EX(timeout_recv_hosts, 60, "full") { run_timeout(0, kHosts2); }
TEST_EX(timeout_large_send, 60, "full") { run_timeout(1, NULL); }

/* Another thread aborts the communicator while a receive, an any-source receive and a large
 * send wait: all end with ERR_COMM_BROKEN at once. */
typedef struct {
  chorus_comm_t* comm;
} aborter_t;

static void* aborter(void* arg) {
  sleep_ms(200);
  chorus_comm_abort(((aborter_t*)arg)->comm);
  return NULL;
}

static int abort_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  if (rank == 0) {
    while (!__atomic_load_n(&peer_done, __ATOMIC_ACQUIRE)) sleep_ms(10);
    return 0;
  }
  float* buf = calloc(100000, sizeof(float));
  ASSERT_NOT_NULL(buf);
  chorus_req_t* reqs[3];
  ASSERT_COMM_OK(comm, chorus_irecv_tag(buf, 8, CHORUS_FLOAT32, 0, 1, comm, &reqs[0]));
  ASSERT_COMM_OK(comm, chorus_irecv_tag(buf + 8, 8, CHORUS_FLOAT32, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, comm, &reqs[1]));
  ASSERT_COMM_OK(comm, chorus_isend_tag(buf + 16, 90000, CHORUS_FLOAT32, 0, 1, comm, &reqs[2]));
  aborter_t a = {comm};
  pthread_t th;
  double t0 = test_now_sec();
  ASSERT_EQ(pthread_create(&th, NULL, aborter, &a), 0);
  for (int k = 0; k < 3; k++) {
    ASSERT_STATUS(chorus_wait(reqs[k]), CHORUS_ERR_COMM_BROKEN);
    chorus_msg_info_t info;
    if (k < 2) ASSERT_STATUS(chorus_req_info(reqs[k], &info), CHORUS_ERR_COMM_BROKEN);
    chorus_req_free(reqs[k]);
  }
  ASSERT_LT(test_now_sec() - t0, 5.0 * test_timeout_multiplier());
  pthread_join(th, NULL);
  free(buf);
  __atomic_store_n(&peer_done, 1, __ATOMIC_RELEASE);
  return 0;
}

TEST(abort_wakes_p2p) {
  chorus_config_t cfg = config(60);
  peer_done = 0;
  ranks_group_t* g = ranks_start(2, &cfg, abort_rank, NULL);
  ASSERT_EQ(ranks_join(g), 0);
}

/* ---- bad arguments ---- */

static int args_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  (void)rank;
  float b[4] = {0};
  chorus_req_t* req = NULL;
  chorus_msg_info_t info;
  ASSERT_STATUS(chorus_send_tag(b, 4, CHORUS_FLOAT32, 0, -2, comm), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_send_tag(b, 4, CHORUS_FLOAT32, 0, CHORUS_ANY_TAG, comm), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_send_tag(b, 4, CHORUS_FLOAT32, CHORUS_ANY_SOURCE, 0, comm), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_irecv_tag(b, 4, CHORUS_FLOAT32, 0, -5, comm, &req), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_irecv_tag(b, 4, CHORUS_FLOAT32, -2, 0, comm, &req), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_irecv_tag(b, 4, CHORUS_FLOAT32, 2, 0, comm, &req), CHORUS_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(chorus_comm_last_error(comm), "not a rank") != NULL);
  ASSERT_STATUS(chorus_req_info(NULL, &info), CHORUS_ERR_INVALID_ARG);
  /* A send request has no message info; a receive has none before it completes. */
  int32_t v = 3, w = 0;
  chorus_req_t *s = NULL, *r = NULL;
  ASSERT_COMM_OK(comm, chorus_irecv_tag(&w, 1, CHORUS_INT32, 0, 8, comm, &r));
  ASSERT_STATUS(chorus_req_info(r, &info), CHORUS_INPROGRESS);
  ASSERT_COMM_OK(comm, chorus_isend_tag(&v, 1, CHORUS_INT32, 0, 8, comm, &s));
  ASSERT_STATUS(chorus_req_info(s, &info), CHORUS_ERR_INVALID_ARG);
  ASSERT_COMM_OK(comm, chorus_wait(r));
  ASSERT_COMM_OK(comm, chorus_wait(s));
  ASSERT_COMM_OK(comm, chorus_req_info(r, &info));
  ASSERT_EQ(info.source, 0);
  ASSERT_EQ(w, 3);
  chorus_req_free(r);
  chorus_req_free(s);
  return 0;
}

TEST_EX(bad_arguments, 60, "full") { ASSERT_EQ(run_ranks(1, args_rank, NULL), 0); }
