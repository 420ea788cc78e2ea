/*
 * test_hosts.c - every collective and algorithm on emulated hosts (ranks as threads whose
 * communicators carry different host ids): shared memory inside a host, TCP between hosts,
 * as on a cluster. Layouts: 2 hosts x 2 ranks numbered by host and round robin, 2 x 3 and
 * 4 x 2 round robin (2 x 3 also by host), and the uneven 3+1 (also numbered by host) and
 * 1+2+3, so that the
 * host-ordered ring, rails and every group mapping meet rank numberings that differ from host
 * order (and hier's in-place paths meet the host order itself); the variable-size
 * collectives on some of them. Results bitwise against the independent reference (matrix.c,
 * vmatrix.c).
 */
#include <stdlib.h>
#include <string.h>

#include "matrix.h"
#include "ranks.h"
#include "test.h"

static const int k2x2_blocked[] = {0, 0, 1, 1};
static const int k2x3_blocked[] = {0, 0, 0, 1, 1, 1};
static const int k2x2_rr[] = {0, 1, 0, 1};
static const int k2x3_rr[] = {0, 1, 0, 1, 0, 1};
static const int k4x2_rr[] = {0, 1, 2, 3, 0, 1, 2, 3};
static const int k3p1[] = {0, 0, 1, 0};
static const int k3p1_blocked[] = {0, 0, 0, 1}; /* numbered by host: hier's leader mode works in place */
static const int k1p2p3[] = {2, 1, 0, 2, 1, 2};


TEST_EX(allreduce_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 4, k2x2_blocked); }
TEST_EX(allreduce_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_ALLREDUCE, 4, k2x2_rr); }
TEST_EX(allreduce_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 6, k2x3_rr); }
TEST_EX(allreduce_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 8, k4x2_rr); }
TEST_EX(allreduce_3p1, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 4, k3p1); }
TEST_EX(allreduce_3p1_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 4, k3p1_blocked); }
TEST_EX(allreduce_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 6, k1p2p3); }

TEST_EX(allgather_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 4, k2x2_blocked); }
TEST_EX(allgather_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_ALLGATHER, 4, k2x2_rr); }
TEST_EX(allgather_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 6, k2x3_rr); }
TEST_EX(allgather_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 8, k4x2_rr); }
TEST_EX(allgather_3p1, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 4, k3p1); }
TEST_EX(allgather_3p1_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 4, k3p1_blocked); }
TEST_EX(allgather_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 6, k1p2p3); }
/* The rails with the steps inside each host as rings over TCP (no shared segment). */
TEST_EX(allgather_2x3_rr_tcp, 300, "full") { mx_run_hosts_tcp(CH_COLL_ALLGATHER, 6, k2x3_rr); }

TEST_EX(reduce_scatter_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 4, k2x2_blocked); }
TEST_EX(reduce_scatter_2x3_rr_tcp, 300, "full") { mx_run_hosts_tcp(CH_COLL_REDUCE_SCATTER, 6, k2x3_rr); }
TEST_EX(reduce_scatter_2x3_blocked, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 6, k2x3_blocked); }
TEST_EX(reduce_scatter_2x2_rr, 300, "quick_asan") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 4, k2x2_rr); }
TEST_EX(reduce_scatter_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 6, k2x3_rr); }
TEST_EX(reduce_scatter_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 8, k4x2_rr); }
TEST_EX(reduce_scatter_3p1, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 4, k3p1); }
TEST_EX(reduce_scatter_3p1_blocked, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 4, k3p1_blocked); }
TEST_EX(reduce_scatter_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 6, k1p2p3); }

TEST_EX(broadcast_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 4, k2x2_blocked); }
TEST_EX(broadcast_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_BROADCAST, 4, k2x2_rr); }
TEST_EX(broadcast_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 6, k2x3_rr); }
TEST_EX(broadcast_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 8, k4x2_rr); }
TEST_EX(broadcast_3p1, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 4, k3p1); }
TEST_EX(broadcast_3p1_blocked, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 4, k3p1_blocked); }
TEST_EX(broadcast_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 6, k1p2p3); }

TEST_EX(reduce_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 4, k2x2_blocked); }
TEST_EX(reduce_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_REDUCE, 4, k2x2_rr); }
TEST_EX(reduce_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 6, k2x3_rr); }
TEST_EX(reduce_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 8, k4x2_rr); }
TEST_EX(reduce_3p1, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 4, k3p1); }
TEST_EX(reduce_3p1_blocked, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 4, k3p1_blocked); }
TEST_EX(reduce_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 6, k1p2p3); }

TEST_EX(alltoall_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 4, k2x2_blocked); }
/* Pairwise steps follow the hosts interleaved, not rank order, when ranks are numbered by host. */
TEST_EX(alltoall_2x3_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 6, k2x3_blocked); }
TEST_EX(alltoall_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_ALLTOALL, 4, k2x2_rr); }
TEST_EX(alltoall_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 6, k2x3_rr); }
TEST_EX(alltoall_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 8, k4x2_rr); }
TEST_EX(alltoall_3p1, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 4, k3p1); }
TEST_EX(alltoall_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 6, k1p2p3); }

TEST_EX(gather_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 4, k2x2_blocked); }
TEST_EX(gather_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_GATHER, 4, k2x2_rr); }
TEST_EX(gather_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 6, k2x3_rr); }
TEST_EX(gather_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 8, k4x2_rr); }
TEST_EX(gather_3p1, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 4, k3p1); }
TEST_EX(gather_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 6, k1p2p3); }

TEST_EX(scatter_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 4, k2x2_blocked); }
TEST_EX(scatter_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_SCATTER, 4, k2x2_rr); }
TEST_EX(scatter_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 6, k2x3_rr); }
TEST_EX(scatter_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 8, k4x2_rr); }
TEST_EX(scatter_3p1, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 4, k3p1); }
TEST_EX(scatter_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 6, k1p2p3); }

TEST_EX(barrier_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 4, k2x2_blocked); }
TEST_EX(barrier_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_BARRIER, 4, k2x2_rr); }
TEST_EX(barrier_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 6, k2x3_rr); }
TEST_EX(barrier_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 8, k4x2_rr); }
TEST_EX(barrier_3p1, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 4, k3p1); }
TEST_EX(barrier_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 6, k1p2p3); }

/* Variable-size collectives: count scales {0, 1, 7, 1023} with empty and large blocks. */
TEST_EX(allgatherv_2x2_rr, 300, "quick") { mx_run_v_hosts(CH_COLL_ALLGATHERV, 4, k2x2_rr); }
TEST_EX(allgatherv_2x3_rr, 300, "full") { mx_run_v_hosts(CH_COLL_ALLGATHERV, 6, k2x3_rr); }
TEST_EX(allgatherv_1p2p3, 300, "full") { mx_run_v_hosts(CH_COLL_ALLGATHERV, 6, k1p2p3); }
TEST_EX(alltoallv_2x2_blocked, 300, "full") { mx_run_v_hosts(CH_COLL_ALLTOALLV, 4, k2x2_blocked); }
TEST_EX(alltoallv_2x3_blocked, 300, "full") { mx_run_v_hosts(CH_COLL_ALLTOALLV, 6, k2x3_blocked); }
TEST_EX(reduce_scatterv_2x2_rr, 300, "full") { mx_run_v_hosts(CH_COLL_REDUCE_SCATTERV, 4, k2x2_rr); }
TEST_EX(reduce_scatterv_2x3_rr, 300, "full") { mx_run_v_hosts(CH_COLL_REDUCE_SCATTERV, 6, k2x3_rr); }
TEST_EX(reduce_scatterv_1p2p3, 300, "full") { mx_run_v_hosts(CH_COLL_REDUCE_SCATTERV, 6, k1p2p3); }
TEST_EX(alltoallv_2x2_rr, 300, "quick") { mx_run_v_hosts(CH_COLL_ALLTOALLV, 4, k2x2_rr); }
TEST_EX(alltoallv_2x3_rr, 300, "full") { mx_run_v_hosts(CH_COLL_ALLTOALLV, 6, k2x3_rr); }
TEST_EX(alltoallv_3p1, 300, "full") { mx_run_v_hosts(CH_COLL_ALLTOALLV, 4, k3p1); }
TEST_EX(gatherv_2x2_rr, 300, "full") { mx_run_v_hosts(CH_COLL_GATHERV, 4, k2x2_rr); }
TEST_EX(gatherv_3p1, 300, "full") { mx_run_v_hosts(CH_COLL_GATHERV, 4, k3p1); }
TEST_EX(scatterv_2x2_rr, 300, "full") { mx_run_v_hosts(CH_COLL_SCATTERV, 4, k2x2_rr); }
TEST_EX(scatterv_3p1, 300, "full") { mx_run_v_hosts(CH_COLL_SCATTERV, 4, k3p1); }

/* CHORUS_ALGO routes calls by size: below 1 KiB the ring, from 1 KiB on shm, which cannot
 * serve a communicator that spans hosts, so those calls fail and name it; the same sizes in
 * the other order run everywhere once shm is out of the way. */
static int algo_ranges_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)rank;
  int expect_big_fails = *(int*)arg;
  int32_t small[16] = {1}, big[512] = {1};
  ASSERT_OK(chorus_allreduce(small, small, 16, CHORUS_INT32, CHORUS_SUM, comm));
  chorus_status_t st = chorus_allreduce(big, big, 512, CHORUS_INT32, CHORUS_SUM, comm);
  if (expect_big_fails) {
    ASSERT_STATUS(st, CHORUS_ERR_NOT_SUPPORTED);
    ASSERT_TRUE(strstr(chorus_comm_last_error(comm), "\"shm\"") != NULL);
  } else {
    ASSERT_OK(st);
    ASSERT_EQ(big[0], 4);
  }
  ASSERT_EQ(small[0], 4);
  return 0;
}

TEST(algo_spec_size_ranges) {
  ranks_set_hosts(4, k2x2_rr);
  int fails = 1;
  setenv("CHORUS_ALGO", "allreduce:ring@0-1K,shm@1K-", 1);
  ASSERT_EQ(run_ranks(4, algo_ranges_rank, &fails), 0);
  fails = 0;
  setenv("CHORUS_ALGO", "allreduce:shm@0-1K;allreduce:hier/ring@0-1K,ring@1K-", 1);
  ASSERT_EQ(run_ranks(4, algo_ranges_rank, &fails), 0);
  unsetenv("CHORUS_ALGO");
  ranks_set_hosts(0, NULL);
}

/* Calls of no elements may pass NULL buffers: on hosts of unequal size numbered by host, where
 * hier's allgather gathers straight into the receive buffer, every two-level collective takes
 * them, forced and chosen alike. */
static int empty_calls_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)rank;
  (void)arg;
  ASSERT_OK(chorus_allreduce(NULL, NULL, 0, CHORUS_FLOAT32, CHORUS_SUM, comm));
  ASSERT_OK(chorus_allgather(NULL, NULL, 0, CHORUS_FLOAT32, comm));
  ASSERT_OK(chorus_reduce_scatter(NULL, NULL, 0, CHORUS_FLOAT32, CHORUS_SUM, comm));
  ASSERT_OK(chorus_broadcast(NULL, NULL, 0, CHORUS_FLOAT32, 3, comm));
  ASSERT_OK(chorus_reduce(NULL, NULL, 0, CHORUS_FLOAT32, CHORUS_AVG, 1, comm));
  ASSERT_OK(chorus_barrier(comm));
  return 0;
}

TEST(empty_calls_null_buffers_3p1_blocked) {
  ranks_set_hosts(4, k3p1_blocked);
  ASSERT_EQ(run_ranks(4, empty_calls_rank, NULL), 0);
  setenv("CHORUS_ALGO", "allreduce:hier;allgather:hier;reduce_scatter:hier;broadcast:hier;reduce:hier;barrier:hier", 1);
  ASSERT_EQ(run_ranks(4, empty_calls_rank, NULL), 0);
  unsetenv("CHORUS_ALGO");
  ranks_set_hosts(0, NULL);
}
