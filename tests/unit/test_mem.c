/*
 * test_mem.c - registered memory (chorus_mem_alloc) and the zero-copy collectives on it:
 * results against an independent reference, in place and out of place, every reducing op on
 * int32 and float32, roots other than 0; a rank that passes plain memory while the others pass
 * registered memory gets ERR_MISMATCH; bad arguments; no mapping left after free and destroy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"
#include "test.h"

#define COUNT ((1u << 18) + 3u) /* several zero-copy cache blocks, an uneven slice split */

/* Rank r's element i: small integers, so float sums and products are exact. */
static int32_t value(int r, size_t i) { return (int32_t)((r * 7 + (int)(i % 13)) % 5) + 1; }

static int32_t expect_reduce(int n, size_t i, chorus_op_t op) {
  int64_t acc = value(0, i);
  for (int r = 1; r < n; r++) {
    int64_t v = value(r, i);
    switch (op) {
      case CHORUS_SUM: case CHORUS_AVG: acc += v; break;
      case CHORUS_PROD: acc *= v; break;
      case CHORUS_MAX: acc = v > acc ? v : acc; break;
      default: acc = v < acc ? v : acc; break;
    }
  }
  return (int32_t)(op == CHORUS_AVG ? acc / n : acc);
}

static void fill(int32_t* buf, int rank, size_t count) {
  for (size_t i = 0; i < count; i++) buf[i] = value(rank, i);
}

static int count_maps(const char* needle) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  int n = 0;
  while (f && fgets(line, sizeof(line), f)) n += strstr(line, needle) != NULL;
  if (f) fclose(f);
  return n;
}

static int allreduce_body(chorus_comm_t* c, int rank, void* arg) {
  int n = *(int*)arg;
  int32_t *a = NULL, *b = NULL;
  ASSERT_COMM_OK(c, chorus_mem_alloc(c, COUNT * sizeof(int32_t) * (size_t)n, (void**)&a));
  ASSERT_COMM_OK(c, chorus_mem_alloc(c, COUNT * sizeof(int32_t) * (size_t)n, (void**)&b));
  for (int op = 0; op < CHORUS_OP_COUNT; op++) {
    for (int in_place = 0; in_place < 2; in_place++) {
      test_set_context("allreduce op=%d in_place=%d", op, in_place);
      fill(a, rank, COUNT);
      int32_t* out = in_place ? a : b;
      ASSERT_COMM_OK(c, chorus_allreduce(a, out, COUNT, CHORUS_INT32, (chorus_op_t)op, c));
      for (size_t i = 0; i < COUNT; i++)
        if (out[i] != expect_reduce(n, i, (chorus_op_t)op)) FAIL("element %zu: %d", i, out[i]);
    }
  }
  /* float32 sum, out of place */
  float *fa = (float*)a, *fb = (float*)b;
  for (size_t i = 0; i < COUNT; i++) fa[i] = (float)value(rank, i);
  ASSERT_COMM_OK(c, chorus_allreduce(fa, fb, COUNT, CHORUS_FLOAT32, CHORUS_SUM, c));
  for (size_t i = 0; i < COUNT; i++) ASSERT_TRUE(fb[i] == (float)expect_reduce(n, i, CHORUS_SUM));
  ASSERT_COMM_OK(c, chorus_mem_free(c, a));
  ASSERT_COMM_OK(c, chorus_mem_free(c, b));
  return 0;
}

static int others_body(chorus_comm_t* c, int rank, void* arg) {
  int n = *(int*)arg;
  size_t block = COUNT / 4;
  int32_t *in = NULL, *out = NULL;
  ASSERT_COMM_OK(c, chorus_mem_alloc(c, block * sizeof(int32_t) * (size_t)n, (void**)&in));
  ASSERT_COMM_OK(c, chorus_mem_alloc(c, block * sizeof(int32_t) * (size_t)n, (void**)&out));
  /* reduce_scatter: block r of the sum lands on rank r */
  for (int r = 0; r < n; r++) fill(in + (size_t)r * block, rank * n + r, block);
  ASSERT_COMM_OK(c, chorus_reduce_scatter(in, out, block, CHORUS_INT32, CHORUS_SUM, c));
  for (size_t i = 0; i < block; i++) {
    int32_t want = 0;
    for (int q = 0; q < n; q++) want += value(q * n + rank, i);
    if (out[i] != want) FAIL("reduce_scatter element %zu: %d, want %d", i, out[i], want);
  }
  /* allgather, in place: my block already sits at out + rank * block */
  fill(out + (size_t)rank * block, rank, block);
  ASSERT_COMM_OK(c, chorus_allgather(out + (size_t)rank * block, out, block, CHORUS_INT32, c));
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < block; i++) ASSERT_EQ(out[(size_t)q * block + i], value(q, i));
  /* broadcast and reduce from the last rank */
  int root = n - 1;
  fill(in, rank, block);
  memset(out, 0, block * sizeof(int32_t));
  ASSERT_COMM_OK(c, chorus_broadcast(in, out, block, CHORUS_INT32, root, c));
  for (size_t i = 0; i < block; i++) ASSERT_EQ(out[i], value(root, i));
  ASSERT_COMM_OK(c, chorus_reduce(in, out, block, CHORUS_INT32, CHORUS_MAX, root, c));
  if (rank == root)
    for (size_t i = 0; i < block; i++) ASSERT_EQ(out[i], expect_reduce(n, i, CHORUS_MAX));
  ASSERT_COMM_OK(c, chorus_mem_free(c, in));
  ASSERT_COMM_OK(c, chorus_mem_free(c, out));
  return 0;
}

TEST(registered_allreduce) {
  for (int n = 2; n <= 4; n++) {
    test_set_context("n=%d", n);
    ASSERT_EQ(run_ranks(n, allreduce_body, &n), 0);
  }
  ASSERT_EQ(count_maps("chorus-window"), 0);
}

TEST(registered_other_collectives) {
  for (int n = 2; n <= 4; n++) ASSERT_EQ(run_ranks(n, others_body, &n), 0);
  ASSERT_EQ(count_maps("chorus-window"), 0);
}

/* The same with every output written by streaming stores (otherwise from 8 MiB on). */
TEST(registered_other_collectives_streaming) {
  setenv("CHORUS_SHM_STREAM_BYTES", "1", 1);
  for (int n = 2; n <= 4; n++) ASSERT_EQ(run_ranks(n, others_body, &n), 0);
  unsetenv("CHORUS_SHM_STREAM_BYTES");
  ASSERT_EQ(count_maps("chorus-window"), 0);
}

/* Rank 0 passes plain memory, the others registered memory: every rank gets ERR_MISMATCH,
 * and the communicator reports both sides. */
static int mismatch_body(chorus_comm_t* c, int rank, void* arg) {
  (void)arg;
  static int32_t plain[2][1024];
  int32_t* reg = NULL;
  ASSERT_COMM_OK(c, chorus_mem_alloc(c, sizeof(plain[0]), (void**)&reg));
  int32_t* buf = rank == 0 ? plain[rank] : reg;
  chorus_status_t st = chorus_allreduce(buf, buf, 1024, CHORUS_INT32, CHORUS_SUM, c);
  if (st != CHORUS_ERR_MISMATCH) FAIL("got %s: %s", chorus_status_name(st), chorus_comm_last_error(c));
  ASSERT_TRUE(strstr(chorus_comm_last_error(c), "registered memory") != NULL);
  ASSERT_COMM_OK(c, chorus_mem_free(c, reg));
  return 0;
}

TEST(registered_on_one_side_only_is_a_mismatch) { ASSERT_EQ(run_ranks(2, mismatch_body, NULL), 0); }

static int bad_args_body(chorus_comm_t* c, int rank, void* arg) {
  (void)rank;
  (void)arg;
  void* p = NULL;
  int local = 0;
  ASSERT_STATUS(chorus_mem_alloc(c, 0, &p), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_mem_alloc(c, 64, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_mem_free(c, &local), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_mem_alloc(NULL, 64, &p), CHORUS_ERR_INVALID_ARG);
  /* A window left allocated is released by destroy. */
  ASSERT_COMM_OK(c, chorus_mem_alloc(c, 1 << 20, &p));
  memset(p, 1, 1 << 20);
  return 0;
}

TEST(registered_bad_arguments_and_destroy_releases) {
  ASSERT_EQ(run_ranks(2, bad_args_body, NULL), 0);
  ASSERT_EQ(count_maps("chorus-window"), 0);
}

/* Several hosts: the ranks of each host map each other's regions only (one mapping of its own
 * and one of each host-mate's per rank), and collectives on registered buffers work as on any
 * other buffer. 2 emulated hosts of 2 ranks, numbered round robin. */
static int hosts_body(chorus_comm_t* c, int rank, void* arg) {
  (void)arg;
  int n = 4, expect_maps = 4 * 2; /* 4 ranks: own region + the host-mate's */
  int32_t* w = NULL;
  ASSERT_COMM_OK(c, chorus_mem_alloc(c, 4096, (void**)&w));
  ASSERT_COMM_OK(c, chorus_barrier(c));
  if (rank == 0 && count_maps("chorus-window") != expect_maps)
    FAIL("%d window mappings in the process, want %d", count_maps("chorus-window"), expect_maps);
  ASSERT_COMM_OK(c, chorus_barrier(c));
  ASSERT_COMM_OK(c, chorus_mem_free(c, w));
  int rc = allreduce_body(c, rank, &n);
  return rc ? rc : others_body(c, rank, &n);
}

TEST(registered_on_emulated_hosts) {
  static const int host_of[4] = {0, 1, 0, 1};
  ranks_set_hosts(4, host_of);
  int rc = run_ranks(4, hosts_body, NULL);
  ranks_set_hosts(0, NULL);
  ASSERT_EQ(rc, 0);
  ASSERT_EQ(count_maps("chorus-window"), 0);
}

/* Hosts whose ranks share no memory: every rank is refused alike, with the reason. */
static int no_shm_body(chorus_comm_t* c, int rank, void* arg) {
  (void)rank;
  (void)arg;
  void* p = NULL;
  ASSERT_STATUS(chorus_mem_alloc(c, 4096, &p), CHORUS_ERR_NOT_SUPPORTED);
  ASSERT_TRUE(p == NULL);
  ASSERT_TRUE(strstr(chorus_comm_last_error(c), "share no memory") != NULL);
  ASSERT_COMM_OK(c, chorus_barrier(c)); /* still usable */
  return 0;
}

TEST(registered_needs_shared_memory_on_every_host) {
  static const int host_of[4] = {0, 0, 1, 1};
  ranks_set_hosts(4, host_of);
  setenv("CHORUS_SHM_DISABLE", "1", 1);
  int rc = run_ranks(4, no_shm_body, NULL);
  unsetenv("CHORUS_SHM_DISABLE");
  ranks_set_hosts(0, NULL);
  ASSERT_EQ(rc, 0);
}
