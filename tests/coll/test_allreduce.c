/*
 * test_allreduce.c - the allreduce matrix.
 * Allreduce: every rank gets the reduction of all inputs, for every dtype x op, in and out of
 * place. Every registered algorithm (forced with CHORUS_ALGO) and automatic selection x nranks
 * {1,2,3,4,5,8} x counts {0,1,7,1023} (quick: n <= 4) and (1<<20)+3 (full) x every dtype,
 * each result checked bitwise on every rank against tests/harness/ref.c. chunked_*: small
 * chunks, rings and slots (many pipeline steps at small sizes); tcp_*: shared memory disabled.
 */
#include "matrix.h"
#include "test.h"

TEST_EX(n1, 120, "quick") { mx_run_small(CH_COLL_ALLREDUCE, 1); }
TEST_EX(n2, 120, "quick") { mx_run_small(CH_COLL_ALLREDUCE, 2); }
TEST_EX(n3, 120, "quick") { mx_run_small(CH_COLL_ALLREDUCE, 3); }
TEST_EX(n4, 120, "quick") { mx_run_small(CH_COLL_ALLREDUCE, 4); }
TEST_EX(n5, 120, "full") { mx_run_small(CH_COLL_ALLREDUCE, 5); }
TEST_EX(n8, 120, "full") { mx_run_small(CH_COLL_ALLREDUCE, 8); }
TEST_EX(big_n1, 300, "full") { mx_run_big(CH_COLL_ALLREDUCE, 1); }
TEST_EX(big_n2, 300, "full") { mx_run_big(CH_COLL_ALLREDUCE, 2); }
TEST_EX(big_n3, 300, "full") { mx_run_big(CH_COLL_ALLREDUCE, 3); }
TEST_EX(big_n4, 300, "full") { mx_run_big(CH_COLL_ALLREDUCE, 4); }
TEST_EX(big_n5, 300, "full") { mx_run_big(CH_COLL_ALLREDUCE, 5); }
TEST_EX(big_n8, 300, "full") { mx_run_big(CH_COLL_ALLREDUCE, 8); }
TEST_EX(chunked_n2, 120, "quick") { mx_run_chunked(CH_COLL_ALLREDUCE, 2); }
TEST_EX(chunked_n3, 120, "quick_asan") { mx_run_chunked(CH_COLL_ALLREDUCE, 3); }
TEST_EX(chunked_n8, 120, "full") { mx_run_chunked(CH_COLL_ALLREDUCE, 8); }
TEST_EX(tcp_n3, 120, "quick") { mx_run_tcp(CH_COLL_ALLREDUCE, 3); }
/* full only: every algorithm at 4 MiB took 55 s under TSan; sendrecv_striped_n2 is the quick one. */
TEST_EX(striped_n3, 300, "full") { mx_run_striped(CH_COLL_ALLREDUCE, 3); }
TEST_EX(tcp_n5, 120, "full") { mx_run_tcp(CH_COLL_ALLREDUCE, 5); }
