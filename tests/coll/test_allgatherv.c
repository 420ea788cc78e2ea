/*
 * test_allgatherv.c - the allgatherv matrix: every rank gets every rank's block, each of its
 * own size, at its displacement.
 * Automatic selection (the one algorithm) x nranks {1,2,3,4,5,8} x count scales {0,1,7,1023}
 * (irregular per-rank counts with empty blocks and one large one, vmatrix.c) x every dtype x in
 * and out of place x displacements (NULL, or scattered with gaps that must stay untouched),
 * with 4 KiB chunks; each result checked bitwise on every rank against tests/harness/ref.c.
 * tcp_*: shared memory disabled.
 */
#include "matrix.h"
#include "test.h"

TEST_EX(n1, 120, "full") { mx_run_v(CH_COLL_ALLGATHERV, 1); }
TEST_EX(n2, 120, "quick") { mx_run_v(CH_COLL_ALLGATHERV, 2); }
TEST_EX(n3, 120, "quick") { mx_run_v(CH_COLL_ALLGATHERV, 3); }
TEST_EX(n4, 120, "full") { mx_run_v(CH_COLL_ALLGATHERV, 4); }
TEST_EX(n5, 120, "full") { mx_run_v(CH_COLL_ALLGATHERV, 5); }
TEST_EX(n8, 120, "full") { mx_run_v(CH_COLL_ALLGATHERV, 8); }
TEST_EX(tcp_n3, 120, "full") { mx_run_v_tcp(CH_COLL_ALLGATHERV, 3); }
