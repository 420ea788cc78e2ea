/*
 * dissemination/barrier.c - dissemination barrier.
 *
 * Steps for rank r, rounds k = 0 .. ceil(log2 n)-1: send a zero-byte message to (r + 2^k) mod n
 * and receive one from (r - 2^k) mod n; round k+1 starts once round k's message has arrived.
 * After round k, rank r has heard (directly or through others) from the 2^(k+1) - 1 ranks
 * before it, so after the last round from all n - 1 others. Tag = k.
 * Bytes per rank: none (ceil(log2 n) empty frames sent and received).
 *
 * Cost (alpha-beta): T = ceil(log2 n) * alpha; 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"

/* Rounds for any int n: ceil(log2 n) <= 31. */
#define CHORUS_BARRIER_MAX_ROUNDS 32

typedef struct {
  int nrounds;
  int round;   /* rounds posted */
  int arrived; /* rounds whose message has arrived */
  char none;   /* the (empty) payload's address */
  chorus_xfer_t sends[CHORUS_BARRIER_MAX_ROUNDS];
  chorus_xfer_t recvs[CHORUS_BARRIER_MAX_ROUNDS];
} barrier_t;

static chorus_status_t post_round(chorus_task_t* t, barrier_t* b) {
  int k = b->round, n = t->nranks;
  long dist = 1L << k;
  int to = (int)((t->rank + dist) % n), from = chorus__mod((int)((t->rank - dist) % n), n);
  chorus_status_t st = chorus__conn_irecv(t, from, &b->none, 0, (uint32_t)k, &b->recvs[k]);
  if (st == CHORUS_OK) st = chorus__conn_isend(t, to, &b->none, 0, (uint32_t)k, &b->sends[k]);
  b->round++;
  return st;
}

static chorus_status_t dissemination_barrier_progress(chorus_task_t* t) {
  barrier_t* b = t->state;
  for (;;) {
    if (b->round == b->arrived && b->round < b->nrounds) {
      chorus_status_t st = post_round(t, b);
      if (st < 0) return st;
    }
    if (b->arrived < b->round && chorus__xfer_done(&b->recvs[b->arrived])) {
      b->arrived++;
      continue;
    }
    break;
  }
  t->step = (size_t)b->arrived;
  if (b->arrived < b->nrounds) return CHORUS_INPROGRESS;
  for (int k = 0; k < b->nrounds; k++)
    if (!chorus__xfer_done(&b->sends[k])) return CHORUS_INPROGRESS;
  return CHORUS_OK;
}

static chorus_status_t dissemination_barrier_init(chorus_task_t* t) {
  barrier_t* b = calloc(1, sizeof(*b));
  if (!b) return CHORUS_ERR_NO_MEMORY;
  b->nrounds = chorus__ceil_log2(t->nranks);
  t->state = b;
  return CHORUS_OK;
}

static void dissemination_barrier_fini(chorus_task_t* t) {
  free(t->state);
  t->state = NULL;
}

static double dissemination_barrier_cost_us(const chorus_task_t* t,
                                            const chorus_cost_ctx_t* cx) {
  return chorus__ceil_log2(t->nranks) * cx->flat.alpha_us;
}

const chorus_algo_t chorus__algo_dissemination_barrier = {
    .name = "dissemination",
    .desc = "ceil(log2 n) rounds of empty messages to r + 2^k, from r - 2^k",
    .coll = CH_COLL_BARRIER,
    .supported = NULL,
    .cost_us = dissemination_barrier_cost_us,
    .init = dissemination_barrier_init,
    .progress = dissemination_barrier_progress,
    .fini = dissemination_barrier_fini,
};
