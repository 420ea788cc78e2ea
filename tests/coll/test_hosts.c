/*
 * test_hosts.c - every collective and algorithm on emulated hosts (ranks as threads whose
 * communicators carry different host ids): shared memory inside a host, TCP between hosts,
 * as on a cluster. Layouts: 2 hosts x 2 ranks numbered by host and round robin, 2 x 3 and
 * 4 x 2 round robin, and the uneven 3+1 and 1+2+3, so that the host-ordered ring, rails and
 * every group mapping meet rank numberings that differ from host order. Results bitwise
 * against the independent reference (matrix.c).
 */
#include "matrix.h"
#include "test.h"

static const int k2x2_blocked[] = {0, 0, 1, 1};
static const int k2x2_rr[] = {0, 1, 0, 1};
static const int k2x3_rr[] = {0, 1, 0, 1, 0, 1};
static const int k4x2_rr[] = {0, 1, 2, 3, 0, 1, 2, 3};
static const int k3p1[] = {0, 0, 1, 0};
static const int k1p2p3[] = {2, 1, 0, 2, 1, 2};


TEST_EX(allreduce_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 4, k2x2_blocked); }
TEST_EX(allreduce_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_ALLREDUCE, 4, k2x2_rr); }
TEST_EX(allreduce_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 6, k2x3_rr); }
TEST_EX(allreduce_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 8, k4x2_rr); }
TEST_EX(allreduce_3p1, 300, "quick") { mx_run_hosts(CH_COLL_ALLREDUCE, 4, k3p1); }
TEST_EX(allreduce_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_ALLREDUCE, 6, k1p2p3); }

TEST_EX(allgather_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 4, k2x2_blocked); }
TEST_EX(allgather_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_ALLGATHER, 4, k2x2_rr); }
TEST_EX(allgather_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 6, k2x3_rr); }
TEST_EX(allgather_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 8, k4x2_rr); }
TEST_EX(allgather_3p1, 300, "quick") { mx_run_hosts(CH_COLL_ALLGATHER, 4, k3p1); }
TEST_EX(allgather_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_ALLGATHER, 6, k1p2p3); }

TEST_EX(reduce_scatter_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 4, k2x2_blocked); }
TEST_EX(reduce_scatter_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 4, k2x2_rr); }
TEST_EX(reduce_scatter_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 6, k2x3_rr); }
TEST_EX(reduce_scatter_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 8, k4x2_rr); }
TEST_EX(reduce_scatter_3p1, 300, "quick") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 4, k3p1); }
TEST_EX(reduce_scatter_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_REDUCE_SCATTER, 6, k1p2p3); }

TEST_EX(broadcast_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 4, k2x2_blocked); }
TEST_EX(broadcast_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_BROADCAST, 4, k2x2_rr); }
TEST_EX(broadcast_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 6, k2x3_rr); }
TEST_EX(broadcast_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 8, k4x2_rr); }
TEST_EX(broadcast_3p1, 300, "quick") { mx_run_hosts(CH_COLL_BROADCAST, 4, k3p1); }
TEST_EX(broadcast_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_BROADCAST, 6, k1p2p3); }

TEST_EX(reduce_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 4, k2x2_blocked); }
TEST_EX(reduce_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_REDUCE, 4, k2x2_rr); }
TEST_EX(reduce_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 6, k2x3_rr); }
TEST_EX(reduce_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 8, k4x2_rr); }
TEST_EX(reduce_3p1, 300, "quick") { mx_run_hosts(CH_COLL_REDUCE, 4, k3p1); }
TEST_EX(reduce_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_REDUCE, 6, k1p2p3); }

TEST_EX(alltoall_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 4, k2x2_blocked); }
TEST_EX(alltoall_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_ALLTOALL, 4, k2x2_rr); }
TEST_EX(alltoall_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 6, k2x3_rr); }
TEST_EX(alltoall_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 8, k4x2_rr); }
TEST_EX(alltoall_3p1, 300, "quick") { mx_run_hosts(CH_COLL_ALLTOALL, 4, k3p1); }
TEST_EX(alltoall_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_ALLTOALL, 6, k1p2p3); }

TEST_EX(gather_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 4, k2x2_blocked); }
TEST_EX(gather_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_GATHER, 4, k2x2_rr); }
TEST_EX(gather_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 6, k2x3_rr); }
TEST_EX(gather_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 8, k4x2_rr); }
TEST_EX(gather_3p1, 300, "quick") { mx_run_hosts(CH_COLL_GATHER, 4, k3p1); }
TEST_EX(gather_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_GATHER, 6, k1p2p3); }

TEST_EX(scatter_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 4, k2x2_blocked); }
TEST_EX(scatter_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_SCATTER, 4, k2x2_rr); }
TEST_EX(scatter_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 6, k2x3_rr); }
TEST_EX(scatter_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 8, k4x2_rr); }
TEST_EX(scatter_3p1, 300, "quick") { mx_run_hosts(CH_COLL_SCATTER, 4, k3p1); }
TEST_EX(scatter_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_SCATTER, 6, k1p2p3); }

TEST_EX(barrier_2x2_blocked, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 4, k2x2_blocked); }
TEST_EX(barrier_2x2_rr, 300, "quick") { mx_run_hosts(CH_COLL_BARRIER, 4, k2x2_rr); }
TEST_EX(barrier_2x3_rr, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 6, k2x3_rr); }
TEST_EX(barrier_4x2_rr, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 8, k4x2_rr); }
TEST_EX(barrier_3p1, 300, "quick") { mx_run_hosts(CH_COLL_BARRIER, 4, k3p1); }
TEST_EX(barrier_1p2p3, 300, "full") { mx_run_hosts(CH_COLL_BARRIER, 6, k1p2p3); }
