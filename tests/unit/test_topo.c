/*
 * test_topo.c - the topology module (core/topo): hosts by first appearance, local indexes,
 * host groups, rails, host leaders and the host-ordered ring for blocked, round-robin and uneven layouts,
 * each checked against lists written out by hand; and the topology a communicator derives
 * from per-rank host ids given in its config (ranks as threads emulating hosts).
 */
#include "core/topo.h"

#include "ranks.h"
#include "test.h"

static void build(chorus_topo_t* topo, int n, const char* const* ids) { ASSERT_EQ(chorus__topo_init(topo, n, ids), 0); }

static void expect_group(chorus_group_t g, int size, int me, const int* ranks) {
  ASSERT_EQ(g.size, size);
  ASSERT_EQ(g.me, me);
  for (int i = 0; i < size; i++) ASSERT_EQ(chorus__group_rank(&g, i), ranks[i]);
}

TEST(round_robin_numbering) {
  const char* ids[] = {"a", "b", "a", "b", "a", "b"};
  chorus_topo_t t;
  build(&t, 6, ids);
  ASSERT_EQ(t.nhosts, 2);
  ASSERT_EQ(t.uniform, 1);
  ASSERT_EQ(t.identity, 0);
  ASSERT_EQ(t.max_local, 3);
  const int local_of[] = {0, 0, 1, 1, 2, 2}, host_of[] = {0, 1, 0, 1, 0, 1};
  for (int r = 0; r < 6; r++) {
    ASSERT_EQ(t.local_of[r], local_of[r]);
    ASSERT_EQ(t.host_of[r], host_of[r]);
  }
  expect_group(chorus__topo_host_group(&t, 1, 3), 3, 1, (const int[]){1, 3, 5});
  expect_group(chorus__topo_host_group(&t, 0, 3), 3, -1, (const int[]){0, 2, 4});
  expect_group(chorus__topo_ring(&t, 3), 6, 4, (const int[]){0, 2, 4, 1, 3, 5});
  expect_group(chorus__topo_rail(&t, 2, 5), 2, 1, (const int[]){4, 5});
  expect_group(chorus__topo_rail(&t, 0, 5), 2, -1, (const int[]){0, 1});
  /* host h's leader is its local index h mod 3: rank 0 on "a", rank 3 on "b" */
  expect_group(chorus__topo_leaders(&t, 3), 2, 1, (const int[]){0, 3});
  expect_group(chorus__topo_leaders(&t, 0), 2, 0, (const int[]){0, 3});
  expect_group(chorus__topo_leaders(&t, 1), 2, -1, (const int[]){0, 3});
  chorus__topo_free(&t);
}

TEST(blocked_numbering_is_the_identity_ring) {
  const char* ids[] = {"x", "x", "y", "y"};
  chorus_topo_t t;
  build(&t, 4, ids);
  ASSERT_EQ(t.identity, 1);
  chorus_group_t ring = chorus__topo_ring(&t, 2);
  ASSERT_NULL(ring.ranks);
  expect_group(ring, 4, 2, (const int[]){0, 1, 2, 3});
  expect_group(chorus__topo_rail(&t, 1, 3), 2, 1, (const int[]){1, 3});
  ASSERT_EQ(chorus__topo_leader_local(&t, 1), 1);
  expect_group(chorus__topo_leaders(&t, 3), 2, 1, (const int[]){0, 3});
  expect_group(chorus__topo_leaders(&t, 2), 2, -1, (const int[]){0, 3});
  chorus__topo_free(&t);
}

TEST(uneven_hosts) {
  /* 1 + 2 + 3 ranks, interleaved: more rail slots than ranks. */
  const char* ids[] = {"c", "b", "a", "c", "b", "c"};
  chorus_topo_t t;
  build(&t, 6, ids);
  ASSERT_EQ(t.nhosts, 3);
  ASSERT_EQ(t.uniform, 0);
  ASSERT_EQ(t.max_local, 3);
  ASSERT_EQ(t.host_size[0], 3); /* "c" appears first */
  ASSERT_EQ(t.host_size[1], 2);
  ASSERT_EQ(t.host_size[2], 1);
  expect_group(chorus__topo_ring(&t, 2), 6, 5, (const int[]){0, 3, 5, 1, 4, 2});
  expect_group(chorus__topo_rail(&t, 0, 2), 3, 2, (const int[]){0, 1, 2});
  expect_group(chorus__topo_rail(&t, 1, 4), 2, 1, (const int[]){3, 4});
  expect_group(chorus__topo_rail(&t, 2, 5), 1, 0, (const int[]){5});
  /* h mod the host's own size: 0 on "c" (rank 0), 1 on "b" (rank 4), 0 on "a" (rank 2) */
  expect_group(chorus__topo_leaders(&t, 4), 3, 1, (const int[]){0, 4, 2});
  expect_group(chorus__topo_leaders(&t, 3), 3, -1, (const int[]){0, 4, 2});
  chorus__topo_free(&t);
}

TEST(one_rank) {
  const char* ids[] = {"solo"};
  chorus_topo_t t;
  build(&t, 1, ids);
  ASSERT_EQ(t.nhosts, 1);
  ASSERT_EQ(t.identity, 1);
  expect_group(chorus__topo_rail(&t, 0, 0), 1, 0, (const int[]){0});
  expect_group(chorus__topo_leaders(&t, 0), 1, 0, (const int[]){0});
  chorus__topo_free(&t);
}

/* The communicator's queries under emulated hosts {0, 1, 0, 1, 2}. */
static const int kHostOf[] = {0, 1, 0, 1, 2};

static int emulated_queries(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  int hosts = 0, local_rank = -1, local_size = 0;
  ASSERT_OK(chorus_comm_host_count(comm, &hosts));
  ASSERT_OK(chorus_comm_local_rank(comm, &local_rank));
  ASSERT_OK(chorus_comm_local_size(comm, &local_size));
  ASSERT_EQ(hosts, 3);
  ASSERT_EQ(local_rank, rank / 2 - (rank == 4 ? 2 : 0));
  ASSERT_EQ(local_size, kHostOf[rank] == 2 ? 1 : 2);
  /* The data still arrives intact across the emulated hosts. */
  int32_t v = rank + 1, sum = 0;
  ASSERT_OK(chorus_allreduce(&v, &sum, 1, CHORUS_INT32, CHORUS_SUM, comm));
  ASSERT_EQ(sum, 15);
  return 0;
}

TEST(config_host_id_emulates_hosts) {
  ranks_set_hosts(5, kHostOf);
  ASSERT_EQ(run_ranks(5, emulated_queries, NULL), 0);
  ranks_set_hosts(0, NULL);
}
