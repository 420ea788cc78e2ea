/*
 * test_mismatch.c - mismatched calls must end with CHORUS_ERR_MISMATCH on every involved rank,
 * with both calls named in the message, over shared memory and over TCP, quickly: never wrong
 * data, never a hang. Two ranks: both are involved.
 */
#include <string.h>

#include "ranks.h"
#include "test.h"

typedef struct {
  int kind; /* 0: counts differ; 1: allreduce vs broadcast; 2: dtypes differ; 3: roots differ;
             * 4: small counts differ (one low-latency line on both sides); 5: a small count
             * against a large one (low-latency lines against slots); 6: a reduce whose
             * ranks each take the other for the root; 7: a reduce whose ranks both take
             * themselves for the root (shared memory only: over TCP both wait for a message
             * that nobody sends, until the timeout); 8: as 3 with a payload in the low-latency
             * lines; 9: a broadcast whose payload goes in the root's low-latency lines on one
             * side and through its slot on the other; 10: small counts that take different
             * numbers of low-latency lines (1 and 3; 8-10: shared memory only, like 7); 11-13:
             * reduces in the low-latency lines whose ranks each take the other for the root, both
             * take themselves, or agree on the root but not on the count; 14: a two-rank reduce
             * of one staged chunk whose counts differ (11-14: shared memory only, where the
             * ranks other than the root leave once the root has entered) */
} case_t;

static int body(chorus_comm_t* c, int rank, void* arg) {
  const case_t* k = arg;
  static float bufs[2][2][8192];
  float *in = bufs[rank][0], *out = bufs[rank][1];
  double t0 = test_now_sec();
  chorus_status_t st;
  switch (k->kind) {
    case 0: st = chorus_allreduce(in, out, rank ? 1500 : 1000, CHORUS_FLOAT32, CHORUS_SUM, c); break;
    case 1:
      st = rank ? chorus_broadcast(in, out, 1000, CHORUS_FLOAT32, 0, c)
                : chorus_allreduce(in, out, 1000, CHORUS_FLOAT32, CHORUS_SUM, c);
      break;
    case 2: st = chorus_allreduce(in, out, 1000, rank ? CHORUS_INT32 : CHORUS_FLOAT32, CHORUS_SUM, c); break;
    case 4: st = chorus_allreduce(in, out, rank ? 12 : 10, CHORUS_FLOAT32, CHORUS_SUM, c); break;
    case 5: st = chorus_allreduce(in, out, rank ? 3000 : 10, CHORUS_FLOAT32, CHORUS_SUM, c); break;
    case 6:
      /* Nobody combines anything; as in kind 3, over TCP the next call reads the stale frame. */
      st = chorus_reduce(in, out, 1000, CHORUS_FLOAT32, CHORUS_SUM, 1 - rank, c);
      if (st == CHORUS_OK) st = chorus_barrier(c);
      break;
    case 7: st = chorus_reduce(in, out, 1000, CHORUS_FLOAT32, CHORUS_SUM, rank, c); break;
    case 8: st = chorus_broadcast(in, out, 4, CHORUS_FLOAT32, rank, c); break;
    case 9: st = chorus_broadcast(in, out, rank ? 1000 : 4, CHORUS_FLOAT32, 0, c); break;
    case 10: st = chorus_allreduce(in, out, rank ? 40 : 10, CHORUS_FLOAT32, CHORUS_SUM, c); break;
    case 11: st = chorus_reduce(in, out, 4, CHORUS_FLOAT32, CHORUS_SUM, 1 - rank, c); break;
    case 12: st = chorus_reduce(in, out, 4, CHORUS_FLOAT32, CHORUS_SUM, rank, c); break;
    case 13: st = chorus_reduce(in, out, rank ? 6 : 4, CHORUS_FLOAT32, CHORUS_SUM, 0, c); break;
    case 14: st = chorus_reduce(in, out, rank ? 1200 : 1000, CHORUS_FLOAT32, CHORUS_SUM, 1, c); break;
    default:
      /* Both ranks think they are the root: nobody receives anything. Shared memory catches it
       * in the call; over TCP the next call reads the other root's stale frame. */
      st = chorus_broadcast(in, out, 1000, CHORUS_FLOAT32, rank, c);
      if (st == CHORUS_OK) st = chorus_barrier(c);
      break;
  }
  if (st != CHORUS_ERR_MISMATCH) FAIL("rank %d got %s: %s", rank, chorus_status_name(st), chorus_comm_last_error(c));
  const char* msg = chorus_comm_last_error(c);
  /* Both calls are in the sentence: two sequence numbers. */
  const char* first = strstr(msg, " #");
  ASSERT_TRUE(first != NULL && strstr(first + 2, " #") != NULL);
  ASSERT_TRUE(test_now_sec() - t0 < 5.0);
  /* The communicator is broken now, at once. */
  ASSERT_STATUS(chorus_barrier(c), CHORUS_ERR_COMM_BROKEN);
  return 0;
}

static void run_all_kinds(int shm) {
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = 20;
  for (int kind = 0; kind < (shm ? 15 : 7); kind++) {
    case_t k = {kind};
    test_set_context("kind %d", kind);
    ASSERT_EQ(run_ranks_cfg(2, &cfg, body, &k), 0);
  }
}

TEST(mismatch_every_rank_knows_shm) { run_all_kinds(1); }

TEST(mismatch_every_rank_knows_tcp) {
  setenv("CHORUS_SHM_DISABLE", "1", 1);
  run_all_kinds(0);
  unsetenv("CHORUS_SHM_DISABLE");
}

/* Three ranks whose reduce of 16 bytes travels in the low-latency lines of the ranks other
 * than the root (shm/reduce.c), every rank involved: kind 0, each takes itself for the root
 * (all wait for lines that nobody writes); kind 1, each takes the next rank for the root (all
 * write their lines and would leave at once, but for the wait for the root's entry). */
static int body_three(chorus_comm_t* c, int rank, void* arg) {
  int kind = *(const int*)arg;
  float in[4] = {1, 2, 3, 4}, out[4];
  double t0 = test_now_sec();
  int root = kind == 0 ? rank : (rank + 1) % 3;
  chorus_status_t st = chorus_reduce(in, out, 4, CHORUS_FLOAT32, CHORUS_SUM, root, c);
  if (st != CHORUS_ERR_MISMATCH) FAIL("rank %d got %s: %s", rank, chorus_status_name(st), chorus_comm_last_error(c));
  ASSERT_TRUE(test_now_sec() - t0 < 5.0);
  ASSERT_STATUS(chorus_barrier(c), CHORUS_ERR_COMM_BROKEN);
  return 0;
}

TEST(mismatch_reduce_low_latency_three_ranks) {
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = 20;
  for (int kind = 0; kind < 2; kind++) {
    test_set_context("kind %d", kind);
    ASSERT_EQ(run_ranks_cfg(3, &cfg, body_three, &kind), 0);
  }
}
