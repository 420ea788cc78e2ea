/*
 * bruck/allgather.c - Bruck allgather: ceil(log2 n) rounds on any n, no fold.
 *
 * Steps for member m of n: own block into place; round k (d = 2^k, while d < n): m holds the
 * blocks of members m .. m+d-1 (mod n); it sends the first c = min(d, n-d) of them to m-d and
 * receives the blocks of members m+d .. m+d+c-1 from m+d. The textbook version gathers into a
 * rotated buffer and rotates at the end; here every block goes straight to its place in
 * recvbuf, which is that rotation done for free (one transfer per run of adjacent blocks: one
 * or two per round when member i owns block i). Tag = k.
 * Bytes per rank (B = count * elem bytes): (n-1) * B sent and received.
 *
 * Cost (alpha-beta): T = ceil(log2 n) * alpha + (n-1) * B / beta; 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/bruck/bruck.h"
#include "algo/common.h"

struct chorus_bruck_allgather {
  chorus_sched_t s;
  int n, me, started, round, nx;
  size_t block_bytes;
  chorus_algo_xfer_t* x; /* 2n */
};
typedef struct chorus_bruck_allgather bag_t;

chorus_status_t chorus__bruck_allgather_step(chorus_task_t* t, bag_t* e) {
  const chorus_sched_t* s = &e->s;
  char* recvbuf = s->recvbuf;
  if (!e->started) {
    chorus__algo_copy(recvbuf + (size_t)chorus__sched_block(s, e->me) * e->block_bytes, s->sendbuf,
                      e->block_bytes);
    e->started = 1;
  }
  for (;;) {
    if (!chorus__algo_all_done(e->x, e->nx)) return CHORUS_INPROGRESS;
    e->nx = 0;
    long d = 1L << e->round;
    if (d >= e->n) return CHORUS_OK;
    int di = (int)d, c = di < e->n - di ? di : e->n - di, k = 0;
    int from = (e->me + di) % e->n, to = chorus__mod(e->me - di, e->n);
    chorus_status_t st = chorus__sched_post_blocks(t, s, e->x, &k, 0, from, recvbuf, e->block_bytes, from, c,
                                                   (uint32_t)e->round);
    e->nx = k;
    if (st == CHORUS_OK)
      st = chorus__sched_post_blocks(t, s, e->x + e->nx, &k, 1, to, recvbuf, e->block_bytes, e->me, c,
                                     (uint32_t)e->round);
    e->nx += k;
    if (st < 0) return st;
    e->round++;
  }
}

chorus_status_t chorus__bruck_allgather_start(const chorus_sched_t* s, bag_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  int n = s->group.size;
  bag_t* e = calloc(1, sizeof(*e) + 2 * (size_t)n * sizeof(chorus_algo_xfer_t));
  if (!e) return CHORUS_ERR_NO_MEMORY;
  e->s = *s;
  e->n = n;
  e->me = s->group.me;
  e->block_bytes = s->count * s->elem_bytes;
  e->x = (chorus_algo_xfer_t*)(e + 1);
  *out = e;
  return CHORUS_OK;
}

void chorus__bruck_allgather_free(bag_t* e) { free(e); }

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t bruck_allgather_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  s.block_of = s.group.ranks; /* the member at ring position i owns its rank's block */
  bag_t* e = NULL;
  chorus_status_t st = chorus__bruck_allgather_start(&s, &e);
  t->state = e;
  return st;
}

static chorus_status_t bruck_allgather_progress(chorus_task_t* t) {
  bag_t* e = t->state;
  chorus_status_t st = chorus__bruck_allgather_step(t, e);
  t->step = (size_t)e->round;
  return st;
}

static void bruck_allgather_fini(chorus_task_t* t) {
  chorus__bruck_allgather_free(t->state);
  t->state = NULL;
}

static double bruck_allgather_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  double n = t->nranks, block = (double)t->args.count * (double)t->dtype_size;
  return chorus__ceil_log2(t->nranks) * cx->spread.alpha_us + (n - 1.0) * block / cx->spread.bytes_per_us;
}

const chorus_algo_t chorus__algo_bruck_allgather = {
    .name = "bruck",
    .desc = "Bruck: ceil(log2 n) rounds on any n, to r - 2^k, from r + 2^k, blocks straight into place",
    .coll = CH_COLL_ALLGATHER,
    .supported = NULL,
    .cost_us = bruck_allgather_cost_us,
    .init = bruck_allgather_init,
    .progress = bruck_allgather_progress,
    .fini = bruck_allgather_fini,
};
