/*
 * test_p2p.c - point to point: blocking send/recv and sendrecv over a ring shift (r -> r+1)
 * and a pairwise exchange (r <-> r^1; an odd rank out exchanges with itself through sendrecv)
 * for every count x dtype and every registered algorithm; the non-blocking twins; and
 * in-order delivery of many messages between one pair.
 */
#include <stdio.h>
#include <stdlib.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

TEST_EX(send_n1, 120, "quick") { mx_run_small(CH_COLL_SEND, 1); }
TEST_EX(send_n2, 120, "quick") { mx_run_small(CH_COLL_SEND, 2); }
TEST_EX(send_n3, 120, "quick") { mx_run_small(CH_COLL_SEND, 3); }
TEST_EX(send_n4, 120, "quick") { mx_run_small(CH_COLL_SEND, 4); }
TEST_EX(send_n5, 120, "full") { mx_run_small(CH_COLL_SEND, 5); }
TEST_EX(send_n8, 120, "full") { mx_run_small(CH_COLL_SEND, 8); }
TEST_EX(send_big_n2, 300, "full") { mx_run_big(CH_COLL_SEND, 2); }
TEST_EX(send_big_n5, 300, "full") { mx_run_big(CH_COLL_SEND, 5); }
TEST_EX(send_big_n8, 300, "full") { mx_run_big(CH_COLL_SEND, 8); }
TEST_EX(send_chunked_n3, 120, "quick") { mx_run_chunked(CH_COLL_SEND, 3); }
TEST_EX(send_tcp_n3, 120, "quick") { mx_run_tcp(CH_COLL_SEND, 3); }
TEST_EX(sendrecv_n1, 120, "quick") { mx_run_small(CH_COLL_SENDRECV, 1); }
TEST_EX(sendrecv_n2, 120, "quick") { mx_run_small(CH_COLL_SENDRECV, 2); }
TEST_EX(sendrecv_n3, 120, "quick") { mx_run_small(CH_COLL_SENDRECV, 3); }
TEST_EX(sendrecv_n4, 120, "quick") { mx_run_small(CH_COLL_SENDRECV, 4); }
TEST_EX(sendrecv_n5, 120, "full") { mx_run_small(CH_COLL_SENDRECV, 5); }
TEST_EX(sendrecv_n8, 120, "full") { mx_run_small(CH_COLL_SENDRECV, 8); }
TEST_EX(sendrecv_big_n1, 300, "full") { mx_run_big(CH_COLL_SENDRECV, 1); }
TEST_EX(sendrecv_big_n2, 300, "full") { mx_run_big(CH_COLL_SENDRECV, 2); }
TEST_EX(sendrecv_big_n5, 300, "full") { mx_run_big(CH_COLL_SENDRECV, 5); }
TEST_EX(sendrecv_big_n8, 300, "full") { mx_run_big(CH_COLL_SENDRECV, 8); }
TEST_EX(sendrecv_chunked_n3, 120, "quick") { mx_run_chunked(CH_COLL_SENDRECV, 3); }
TEST_EX(sendrecv_tcp_n3, 120, "quick") { mx_run_tcp(CH_COLL_SENDRECV, 3); }
TEST_EX(sendrecv_striped_n2, 300, "quick") { mx_run_striped(CH_COLL_SENDRECV, 2); }

/* ---- non-blocking: both patterns posted with isend/irecv and isendrecv, then waited ---- */

static const size_t nonblocking_counts[] = {0, 1, 7, 1023, 65537};

static int nonblocking_rank(chorus_comm_t* comm, int rank, void* arg) {
  int nranks = *(int*)arg;
  uint64_t seed = 1;
  for (size_t ci = 0; ci < sizeof(nonblocking_counts) / sizeof(nonblocking_counts[0]); ci++) {
    for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++) {
      for (int pattern = MX_P2P_RING; pattern <= MX_P2P_PAIRS; pattern++) {
        chorus_coll_t colls[2] = {CH_COLL_SEND, CH_COLL_SENDRECV};
        for (int c = 0; c < 2; c++) {
          mx_spec_t s = {
              colls[c], nonblocking_counts[ci], (chorus_dtype_t)dt, CHORUS_SUM, 0, pattern,
              0,        ref_mix64(seed++)};
          char spec[160];
          test_set_context("nonblocking %s", mx_spec_str(&s, spec, sizeof(spec)));
          mx_op_t op;
          mx_op_prepare(&op, &s, rank, nranks, NULL);
          ASSERT_COMM_OK(comm, mx_op_post(&op, comm));
          for (int k = 0; k < op.nreq; k++) {
            ASSERT_COMM_OK(comm, chorus_wait(op.req[k]));
            chorus_req_free(op.req[k]);
          }
          ASSERT_EQ(mx_op_verify(&op), 0);
          mx_op_release(&op);
        }
      }
    }
  }
  return 0;
}

static void run_nonblocking(int nranks) {
  ASSERT_EQ(run_ranks(nranks, nonblocking_rank, &nranks), 0);
}

TEST(nonblocking_n1) { run_nonblocking(1); }
TEST(nonblocking_n2) { run_nonblocking(2); }
TEST(nonblocking_n3) { run_nonblocking(3); }
TEST(nonblocking_n4) { run_nonblocking(4); }

/* ---- ordering: messages of one pair arrive in the order they were sent ---- */

enum { ORDER_MESSAGES = 24 };

/* Message k has its own length (0 included) and contents, so a swap shows. */
static size_t order_len(int k) { return (size_t)((k * 7919) % 5000) * (size_t)(k % 3); }

static int ordering_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  chorus_req_t* reqs[ORDER_MESSAGES];
  unsigned char* bufs[ORDER_MESSAGES];
  for (int k = 0; k < ORDER_MESSAGES; k++) {
    size_t len = order_len(k);
    bufs[k] = malloc(len + 1);
    ASSERT_NOT_NULL(bufs[k]);
    if (rank == 0) {
      ref_fill_bytes(bufs[k], len, 0, (uint64_t)k, 0);
      ASSERT_COMM_OK(comm, chorus_isend(bufs[k], len, CHORUS_UINT8, 1, comm, &reqs[k]));
    } else {
      memset(bufs[k], 0xa5, len + 1);
      ASSERT_COMM_OK(comm, chorus_irecv(bufs[k], len, CHORUS_UINT8, 0, comm, &reqs[k]));
    }
  }
  for (int k = 0; k < ORDER_MESSAGES; k++) {
    ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
    chorus_req_free(reqs[k]);
  }
  for (int k = 0; k < ORDER_MESSAGES && rank == 1; k++) {
    size_t len = order_len(k);
    unsigned char* want = malloc(len + 1);
    ASSERT_NOT_NULL(want);
    ref_fill_bytes(want, len, 0, (uint64_t)k, 0);
    if (memcmp(want, bufs[k], len) != 0) FAIL("message %d (%zu bytes) arrived wrong", k, len);
    ASSERT_EQ(bufs[k][len], 0xa5); /* nothing written past the message */
    free(want);
  }
  for (int k = 0; k < ORDER_MESSAGES; k++) free(bufs[k]);
  return 0;
}

TEST(ordering) { ASSERT_EQ(run_ranks(2, ordering_rank, NULL), 0); }
