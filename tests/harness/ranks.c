/*
 * ranks.c - ranks as threads of the test process (see ranks.h). Every rank thread joins the
 * same unique id; a thread barrier after fn makes sure no rank destroys its communicator while
 * a peer may still need it, as chorus_comm_destroy requires.
 */
#define _GNU_SOURCE
#include "ranks.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "test.h"

typedef struct {
  ranks_group_t* group;
  int rank;
  int result;
  pthread_t thread;
} rank_slot_t;

struct ranks_group {
  int nranks;
  chorus_unique_id_t id;
  chorus_config_t cfg;
  int has_cfg;
  ranks_fn fn;
  void* arg;
  pthread_barrier_t done_barrier;
  rank_slot_t* slots;
};

enum { MAX_EMULATED_RANKS = 64 };
static int emulated_n;
static int emulated_host_of[MAX_EMULATED_RANKS];

void ranks_set_hosts(int n, const int* host_of) {
  if (n < 0 || n > MAX_EMULATED_RANKS) FAIL("ranks_set_hosts: %d ranks (at most %d)", n, MAX_EMULATED_RANKS);
  emulated_n = host_of ? n : 0;
  for (int r = 0; r < emulated_n; r++) emulated_host_of[r] = host_of[r];
}

int ranks_hosts_active(int n) { return emulated_n == n && n > 0; }

static int timeouts_n;
static int timeouts_sec[MAX_EMULATED_RANKS];

void ranks_set_timeouts(int n, const int* timeout_sec) {
  if (n < 0 || n > MAX_EMULATED_RANKS) FAIL("ranks_set_timeouts: %d ranks (at most %d)", n, MAX_EMULATED_RANKS);
  timeouts_n = timeout_sec ? n : 0;
  for (int r = 0; r < timeouts_n; r++) timeouts_sec[r] = timeout_sec[r];
}

static void* rank_main(void* p) {
  rank_slot_t* slot = p;
  ranks_group_t* g = slot->group;
  test_set_rank(slot->rank);
  chorus_comm_t* comm = NULL;
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  if (g->has_cfg) cfg = g->cfg;
  char host[32];
  if (emulated_n == g->nranks) {
    snprintf(host, sizeof(host), "emu%d", emulated_host_of[slot->rank]);
    cfg.host_id = host;
  }
  int own_timeout = timeouts_n == g->nranks && timeouts_sec[slot->rank] > 0;
  if (own_timeout) cfg.timeout_sec = timeouts_sec[slot->rank];
  chorus_status_t st = chorus_comm_init(&comm, g->nranks, slot->rank, &g->id,
                                        g->has_cfg || emulated_n == g->nranks || own_timeout ? &cfg : NULL);
  if (st != CHORUS_OK)
    FAIL("chorus_comm_init(nranks=%d, rank=%d) returned %s (%s)", g->nranks, slot->rank,
         chorus_status_name(st), chorus_status_str(st));
  slot->result = g->fn(comm, slot->rank, g->arg);
  if (slot->result != 0)
    fprintf(stderr, "[rank %d] failed (%d) %s\n", slot->rank, slot->result, test_get_context());
  pthread_barrier_wait(&g->done_barrier);
  st = chorus_comm_destroy(comm);
  if (st != CHORUS_OK)
    FAIL("chorus_comm_destroy returned %s (%s)", chorus_status_name(st), chorus_status_str(st));
  return NULL;
}

ranks_group_t* ranks_start(int nranks, const chorus_config_t* cfg, ranks_fn fn, void* arg) {
  if (nranks < 1) FAIL("ranks_start: nranks %d < 1", nranks);
  ranks_group_t* g = calloc(1, sizeof(*g));
  ASSERT_NOT_NULL(g);
  g->slots = calloc((size_t)nranks, sizeof(*g->slots));
  ASSERT_NOT_NULL(g->slots);
  g->nranks = nranks;
  g->fn = fn;
  g->arg = arg;
  if (cfg) {
    g->cfg = *cfg;
    g->has_cfg = 1;
  }
  ASSERT_OK(chorus_get_unique_id(&g->id));
  ASSERT_EQ(pthread_barrier_init(&g->done_barrier, NULL, (unsigned)nranks), 0);
  for (int r = 0; r < nranks; r++) {
    g->slots[r].group = g;
    g->slots[r].rank = r;
    ASSERT_EQ(pthread_create(&g->slots[r].thread, NULL, rank_main, &g->slots[r]), 0);
    char name[16];
    snprintf(name, sizeof(name), "rank%d", r);
    pthread_setname_np(g->slots[r].thread, name);
  }
  return g;
}

int ranks_join(ranks_group_t* g) {
  int failed = 0;
  for (int r = 0; r < g->nranks; r++) {
    ASSERT_EQ(pthread_join(g->slots[r].thread, NULL), 0);
    if (g->slots[r].result != 0) failed++;
  }
  pthread_barrier_destroy(&g->done_barrier);
  free(g->slots);
  free(g);
  return failed;
}

int run_ranks_cfg(int nranks, const chorus_config_t* cfg, ranks_fn fn, void* arg) {
  int failed = ranks_join(ranks_start(nranks, cfg, fn, arg));
  if (failed) FAIL("%d of %d ranks failed", failed, nranks);
  return 0;
}

int run_ranks(int nranks, ranks_fn fn, void* arg) { return run_ranks_cfg(nranks, NULL, fn, arg); }

chorus_status_t ranks_create_alone(void) {
  chorus_unique_id_t id;
  chorus_status_t st = chorus_get_unique_id(&id);
  if (st < 0) return st;
  chorus_comm_t* comm = NULL;
  st = chorus_comm_init(&comm, 1, 0, &id, NULL);
  if (st >= 0) return chorus_comm_destroy(comm);
  return comm ? CHORUS_ERR_INTERNAL : st;
}
