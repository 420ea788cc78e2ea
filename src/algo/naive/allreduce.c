/*
 * naive/allreduce.c - reduce then broadcast: the seed design's allreduce, kept as the baseline
 * the others are measured against (forceable with CHORUS_ALGO=allreduce:naive).
 *
 * Steps: phase 1 runs the binomial reduce engine rooted at member 0 (chunk-pipelined; member 0
 * ends with the reduction in recvbuf and, for avg, divides it there, once, before anything
 * leaves); phase 2 runs the binomial broadcast engine from member 0, whose source is its
 * recvbuf, into every other member's recvbuf. Phase 1 uses tags tag_base + chunk, phase 2
 * tag_base + C + chunk (C = chunks of phase 1), so the phases never match each other.
 * In place is safe: a member's recvbuf is written by phase 2 only after its phase 1 is over.
 * Bytes per rank (N = count * elem bytes): N up and N down per tree edge; member 0 receives
 * N from each of its ceil(log2 n) children and sends N to each.
 *
 * Cost (alpha-beta, L = ceil(log2 n)): the two phases one after the other,
 * T = 2 L * alpha + 2 L * N / beta, above ring's 2(n-1)/n * N / beta for large N on any n;
 * 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/binomial/binomial.h"
#include "algo/common.h"
#include "algo/naive/naive.h"

struct chorus_naive_allreduce {
  int phase; /* 0: reduce, 1: broadcast, 2: done */
  chorus_treduce_t* reduce;
  chorus_bcast_t* bcast;
};
typedef struct chorus_naive_allreduce naive_t;

chorus_status_t chorus__naive_allreduce_step(chorus_task_t* t, naive_t* e) {
  chorus_status_t st;
  if (e->phase == 0) {
    st = chorus__binomial_reduce_step(t, e->reduce);
    if (st != CHORUS_OK) return st;
    e->phase = 1;
  }
  if (e->phase == 1) {
    st = chorus__binomial_bcast_step(t, e->bcast);
    if (st != CHORUS_OK) return st;
    e->phase = 2;
  }
  return CHORUS_OK;
}

void chorus__naive_allreduce_free(naive_t* e) {
  if (!e) return;
  chorus__binomial_reduce_free(e->reduce);
  chorus__binomial_bcast_free(e->bcast);
  free(e);
}

chorus_status_t chorus__naive_allreduce_start(const chorus_sched_t* s, naive_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  naive_t* e = calloc(1, sizeof(*e));
  if (!e) return CHORUS_ERR_NO_MEMORY;
  chorus_sched_t rs = *s;
  rs.root = 0;
  chorus_status_t st = chorus__binomial_reduce_start(&rs, &e->reduce);
  if (st == CHORUS_OK) {
    chorus_sched_t bs = rs;
    bs.sendbuf = s->recvbuf; /* member 0's result */
    bs.avg_divisor = 0;      /* divided once, by the reduce phase */
    bs.tag_base = s->tag_base + (uint32_t)chorus__div_up(s->count, chorus__sched_chunk_elems(s));
    st = chorus__binomial_bcast_start(&bs, &e->bcast);
  }
  if (st < 0) {
    chorus__naive_allreduce_free(e);
    return st;
  }
  *out = e;
  return CHORUS_OK;
}

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t naive_allreduce_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  naive_t* e = NULL;
  chorus_status_t st = chorus__naive_allreduce_start(&s, &e);
  t->state = e;
  return st;
}

static chorus_status_t naive_allreduce_progress(chorus_task_t* t) {
  naive_t* e = t->state;
  chorus_status_t st = chorus__naive_allreduce_step(t, e);
  t->phase = e->phase;
  return st;
}

static void naive_allreduce_fini(chorus_task_t* t) {
  chorus__naive_allreduce_free(t->state);
  t->state = NULL;
}

static double naive_allreduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double levels = chorus__ceil_log2(t->nranks);
  double bytes = (double)t->args.count * (double)t->dtype_size;
  return 2.0 * levels * cx->spread.alpha_us + 2.0 * levels * bytes / cx->spread.bytes_per_us;
}

const chorus_algo_t chorus__algo_naive_allreduce = {
    .name = "naive",
    .desc = "baseline: binomial reduce to rank 0, then binomial broadcast from it",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = naive_allreduce_cost_us,
    .init = naive_allreduce_init,
    .progress = naive_allreduce_progress,
    .fini = naive_allreduce_fini,
};
