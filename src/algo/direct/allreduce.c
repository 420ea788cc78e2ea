/*
 * direct/allreduce.c - one-shot allreduce for tiny messages: no forwarding, one step.
 *
 * Steps for member m of n, per chunk c (one chunk for anything up to chunk_bytes; larger
 * calls repeat the step chunk by chunk, CHORUS_DIRECT_WINDOW chunks in flight, so the scratch
 * stays n x window chunks):
 *   post the receive of chunk c from every other member (into slot j) and the send of this
 *   member's chunk c to every other member, in the order m+1, m+2, ... (mod n) so that no
 *   member is everyone's first peer; tag = c;
 *   once all are done, recvbuf = in_0 (+) in_1 (+) ... (+) in_{n-1} in member order (in_m =
 *   this member's input; in place it is first saved to slot m, since recvbuf accumulates), so
 *   every member computes the same expression and holds the same bits; avg divides once.
 * Bytes per rank (N = count * elem bytes): (n-1) * N sent and (n-1) * N received; n-1
 * reductions of count elements.
 *
 * Cost (alpha-beta, C = chunks, W = window): the n-1 sends of a step leave together but each
 * costs its own start-up on this rank, and W steps overlap, so
 * T = ceil(C / W) * (n-1) * alpha + (n-1) * N / beta; 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "algo/direct/direct.h"

#ifndef CHORUS_DIRECT_WINDOW
#define CHORUS_DIRECT_WINDOW 4
#endif

struct chorus_direct_allreduce {
  chorus_sched_t s;
  chorus_reduce_fn reduce;
  int n, me, in_place;
  size_t chunk_elems, nchunks, window;
  size_t posted, chunk;   /* chunks posted; chunks reduced (in order) */
  size_t slot_bytes;
  char* slots;            /* window sets of n slots of one chunk: slot j holds member j's chunk */
  chorus_algo_xfer_t* x;  /* window sets of 2(n-1): receives, then sends */
};
typedef struct chorus_direct_allreduce direct_t;

static size_t chunk_elems_at(const direct_t* e, size_t c) {
  return chorus__min_sz(e->chunk_elems, e->s.count - c * e->chunk_elems);
}

static char* slot(const direct_t* e, size_t c, int j) {
  return e->slots + ((c % e->window) * (size_t)e->n + (size_t)j) * e->slot_bytes;
}

static chorus_algo_xfer_t* xfers(const direct_t* e, size_t c) {
  return e->x + (c % e->window) * 2 * (size_t)(e->n - 1);
}

static chorus_status_t post_chunk(chorus_task_t* t, direct_t* e, size_t c) {
  size_t elems = chunk_elems_at(e, c), nbytes = elems * e->s.elem_bytes;
  const char* mine = (const char*)e->s.sendbuf + c * e->chunk_elems * e->s.elem_bytes;
  chorus_algo_xfer_t* x = xfers(e, c);
  for (int k = 1; k < e->n; k++) {
    int j = (e->me + k) % e->n;
    chorus_status_t st = chorus__sched_post(t, &e->s, &x[k - 1], 0, j, slot(e, c, j), nbytes, (uint32_t)c);
    if (st < 0) return st;
  }
  for (int k = 1; k < e->n; k++) {
    int j = (e->me + k) % e->n;
    chorus_status_t st = chorus__sched_post(t, &e->s, &x[e->n - 2 + k], 1, j, mine, nbytes, (uint32_t)c);
    if (st < 0) return st;
  }
  return CHORUS_OK;
}

static void reduce_chunk(direct_t* e) {
  size_t elems = chunk_elems_at(e, e->chunk), off = e->chunk * e->chunk_elems * e->s.elem_bytes;
  const char* mine = (const char*)e->s.sendbuf + off;
  char* dst = (char*)e->s.recvbuf + off;
  if (e->n == 1) {
    chorus__algo_copy(dst, mine, elems * e->s.elem_bytes);
  } else {
    if (e->in_place && e->me > 0) { /* dst accumulates over this member's input */
      memcpy(slot(e, e->chunk, e->me), mine, elems * e->s.elem_bytes);
      mine = slot(e, e->chunk, e->me);
    }
    for (int j = 1; j < e->n; j++) {
      const char* first = j == 1 ? (e->me == 0 ? mine : slot(e, e->chunk, 0)) : dst;
      const char* in_j = j == e->me ? mine : slot(e, e->chunk, j);
      e->reduce(dst, first, in_j, elems);
    }
  }
  chorus__sched_avg_finish(&e->s, dst, elems);
}

static int chunk_done(const direct_t* e, size_t c) {
  const chorus_algo_xfer_t* x = xfers(e, c);
  for (int i = 0; i < 2 * (e->n - 1); i++)
    if (!chorus__algo_done(&x[i])) return 0;
  return 1;
}

chorus_status_t chorus__direct_allreduce_step(chorus_task_t* t, direct_t* e) {
  while (e->chunk < e->nchunks) {
    while (e->posted < e->nchunks && e->posted < e->chunk + e->window) {
      chorus_status_t st = post_chunk(t, e, e->posted);
      if (st < 0) return st;
      e->posted++;
    }
    if (!chunk_done(e, e->chunk)) return CHORUS_INPROGRESS;
    reduce_chunk(e);
    e->chunk++;
  }
  return CHORUS_OK;
}

chorus_status_t chorus__direct_allreduce_start(const chorus_sched_t* s, direct_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  chorus_reduce_fn fn = chorus__algo_reduce_fn(s->dtype, s->op);
  if (!fn) return CHORUS_ERR_NOT_SUPPORTED;
  int n = s->group.size;
  size_t chunk_elems = chorus__sched_chunk_elems(s);
  size_t slot_bytes = chorus__min_sz(chunk_elems, s->count) * s->elem_bytes;
  size_t nchunks = chorus__div_up(s->count, chunk_elems);
  size_t window = chorus__min_sz(CHORUS_DIRECT_WINDOW, nchunks ? nchunks : 1);
  size_t nx = window * 2 * (size_t)(n - 1);
  direct_t* e = calloc(1, sizeof(direct_t) + nx * sizeof(chorus_algo_xfer_t));
  if (!e) return CHORUS_ERR_NO_MEMORY;
  if (!(e->slots = chorus__sched_scratch(s, window * (size_t)n * slot_bytes))) {
    free(e);
    return CHORUS_ERR_NO_MEMORY;
  }
  e->s = *s;
  e->reduce = fn;
  e->n = n;
  e->me = s->group.me;
  e->in_place = s->sendbuf == s->recvbuf;
  e->chunk_elems = chunk_elems;
  e->nchunks = nchunks;
  e->window = window;
  e->slot_bytes = slot_bytes;
  e->x = (chorus_algo_xfer_t*)(e + 1);
  *out = e;
  return CHORUS_OK;
}

void chorus__direct_allreduce_free(direct_t* e) {
  if (!e) return;
  chorus__sched_scratch_free(&e->s, e->slots);
  free(e);
}

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t direct_allreduce_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  direct_t* e = NULL;
  chorus_status_t st = chorus__direct_allreduce_start(&s, &e);
  t->state = e;
  return st;
}

static chorus_status_t direct_allreduce_progress(chorus_task_t* t) {
  direct_t* e = t->state;
  chorus_status_t st = chorus__direct_allreduce_step(t, e);
  t->step = e->chunk;
  return st;
}

static void direct_allreduce_fini(chorus_task_t* t) {
  chorus__direct_allreduce_free(t->state);
  t->state = NULL;
}

static double direct_allreduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  double n = t->nranks, bytes = (double)t->args.count * (double)t->dtype_size;
  size_t chunk_elems = t->dtype_size ? t->chunk_bytes / t->dtype_size : 1;
  double steps = (double)chorus__div_up(chorus__div_up(t->args.count ? t->args.count : 1, chunk_elems ? chunk_elems : 1),
                                        CHORUS_DIRECT_WINDOW);
  return steps * (n - 1.0) * cx->spread.alpha_us + (n - 1.0) * bytes / cx->spread.bytes_per_us +
         (n - 1.0) * bytes / cx->reduce_bytes_per_us;
}

const chorus_algo_t chorus__algo_direct_allreduce = {
    .name = "direct",
    .desc = "one shot: every rank sends its vector to every other one and reduces all n in rank order",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = direct_allreduce_cost_us,
    .init = direct_allreduce_init,
    .progress = direct_allreduce_progress,
    .fini = direct_allreduce_fini,
};
