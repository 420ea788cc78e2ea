/*
 * test_queries.c - communicator queries (rank, size, local rank/size, host count: all ranks
 * are threads of one process, so one host), their NULL-argument errors, the name/size/version
 * functions against the public header's own tables, and the algorithm registry.
 */
#include <stdio.h>

#include "algo/algo.h"
#include "matrix.h"
#include "ranks.h"
#include "test.h"

static int queries_rank(chorus_comm_t* comm, int rank, void* arg) {
  int nranks = *(int*)arg;
  int value = -1;
  ASSERT_OK(chorus_comm_rank(comm, &value));
  ASSERT_EQ(value, rank);
  ASSERT_OK(chorus_comm_size(comm, &value));
  ASSERT_EQ(value, nranks);
  ASSERT_OK(chorus_comm_local_rank(comm, &value));
  ASSERT_EQ(value, rank);
  ASSERT_OK(chorus_comm_local_size(comm, &value));
  ASSERT_EQ(value, nranks);
  ASSERT_OK(chorus_comm_host_count(comm, &value));
  ASSERT_EQ(value, 1);
  ASSERT_STATUS(chorus_comm_rank(comm, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_size(comm, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_local_rank(comm, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_local_size(comm, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_host_count(comm, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_rank(NULL, &value), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_size(NULL, &value), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_local_rank(NULL, &value), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_local_size(NULL, &value), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_host_count(NULL, &value), CHORUS_ERR_INVALID_ARG);
  const char* last = chorus_comm_last_error(comm);
  ASSERT_NOT_NULL(last);
  ASSERT_STR_EQ(last, ""); /* no error yet */
  return 0;
}

static void run_queries(int nranks) { ASSERT_EQ(run_ranks(nranks, queries_rank, &nranks), 0); }

TEST(comm_n1) { run_queries(1); }
TEST(comm_n2) { run_queries(2); }
TEST(comm_n3) { run_queries(3); }
TEST(comm_n4) { run_queries(4); }
TEST(comm_n8) { run_queries(8); }

TEST(names) {
#define XX(name, val, str)                                           \
  ASSERT_STR_EQ(chorus_status_name(CHORUS_##name), "CHORUS_" #name); \
  ASSERT_STR_EQ(chorus_status_str(CHORUS_##name), str);
  CHORUS_STATUS_MAP(XX)
#undef XX
  ASSERT_STR_EQ(chorus_status_name((chorus_status_t)12345), "CHORUS_UNKNOWN_STATUS");
  ASSERT_NOT_NULL(chorus_status_str((chorus_status_t)-12345));

#define XX(name, str, size)                             \
  ASSERT_STR_EQ(chorus_dtype_name(CHORUS_##name), str); \
  ASSERT_EQ(chorus_dtype_size(CHORUS_##name), size);
  CHORUS_DTYPE_MAP(XX)
#undef XX
  ASSERT_NULL(chorus_dtype_name(CHORUS_DTYPE_COUNT));
  ASSERT_NULL(chorus_dtype_name((chorus_dtype_t)-1));
  ASSERT_EQ(chorus_dtype_size(CHORUS_DTYPE_COUNT), 0);

#define XX(name, str) ASSERT_STR_EQ(chorus_op_name(CHORUS_##name), str);
  CHORUS_OP_MAP(XX)
#undef XX
  ASSERT_NULL(chorus_op_name(CHORUS_OP_COUNT));
  ASSERT_EQ(chorus_version(), CHORUS_VERSION_CODE);
}

/* Every collective has at least one algorithm; names are unique per collective and found by
 * chorus__algo_find; each entry has the functions the engine calls. */
TEST(algo_registry) {
  ASSERT_GT(chorus__nalgos, 0);
  for (int coll = 0; coll < CH_COLL_COUNT; coll++) {
    const char* names[MX_MAX_ALGOS];
    int n = mx_algo_names((chorus_coll_t)coll, names, MX_MAX_ALGOS);
    printf("  %s:", mx_coll_name((chorus_coll_t)coll));
    for (int i = 0; i < n; i++) printf(" %s", names[i]);
    printf("\n");
    if (coll <= CH_COLL_BARRIER && n == 0)
      FAIL("no algorithm for %s", mx_coll_name((chorus_coll_t)coll));
    for (int i = 0; i < n; i++) {
      for (int j = i + 1; j < n; j++) ASSERT_TRUE(strcmp(names[i], names[j]) != 0);
      /* "hier/rhd": a two-level algorithm with one of its inner engines. */
      char name[48];
      snprintf(name, sizeof(name), "%s", names[i]);
      char* inner = strchr(name, '/');
      if (inner) *inner++ = '\0';
      const chorus_algo_t* a = chorus__algo_find((chorus_coll_t)coll, name);
      ASSERT_NOT_NULL(a);
      ASSERT_STR_EQ(a->name, name);
      if (inner) ASSERT_TRUE(chorus__algo_has_sub(a, inner));
      ASSERT_EQ(a->coll, coll);
      ASSERT_NOT_NULL(a->progress);
      ASSERT_NOT_NULL(a->init);
      ASSERT_NOT_NULL(a->desc);
    }
    ASSERT_NULL(chorus__algo_find((chorus_coll_t)coll, "no-such-algorithm"));
  }
}
