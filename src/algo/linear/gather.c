/*
 * linear/gather.c - linear gather: every rank sends its block straight to the root.
 *
 * Steps: the root copies its own block (unless in place: sendbuf is its slot of recvbuf), then
 * posts all n-1 receives at once, block i of recvbuf from rank i; every other rank posts one
 * send of its sendbuf. Tag = 0. Bytes: (n-1) * B received by the root, B sent by each other
 * rank, B = sendcount * elem bytes.
 *
 * Cost (alpha-beta): T = (n-1) * alpha + (n-1) * B / beta (the root's link carries every
 * block); 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"

typedef struct {
  int nposted;
  chorus_algo_xfer_t* xfers; /* root: one per rank (its own unused); others: one */
} linear_t;

static chorus_status_t linear_gather_init(chorus_task_t* t) {
  linear_t* g = calloc(1, sizeof(*g));
  if (!g) return CHORUS_ERR_NO_MEMORY;
  g->xfers = calloc((size_t)t->nranks, sizeof(*g->xfers));
  if (!g->xfers) {
    free(g);
    return CHORUS_ERR_NO_MEMORY;
  }
  t->state = g;
  return CHORUS_OK;
}

static chorus_status_t post_all(chorus_task_t* t, linear_t* g) {
  size_t block_bytes = t->args.count * t->dtype_size;
  int root = t->args.root;
  if (t->rank != root) {
    g->nposted = 1;
    return chorus__algo_post(t, &g->xfers[0], 1, root, t->args.sendbuf, block_bytes, 0);
  }
  char* recvbuf = t->args.recvbuf;
  /* Own block first: should sendbuf overlap another slot, no receive has overwritten it yet. */
  chorus__algo_copy(recvbuf + (size_t)root * block_bytes, t->args.sendbuf, block_bytes);
  for (int i = 0; i < t->nranks; i++) {
    g->nposted = i + 1;
    if (i == root) continue;
    chorus_status_t st =
        chorus__algo_post(t, &g->xfers[i], 0, i, recvbuf + (size_t)i * block_bytes, block_bytes, 0);
    if (st < 0) return st;
  }
  return CHORUS_OK;
}

static chorus_status_t linear_gather_progress(chorus_task_t* t) {
  linear_t* g = t->state;
  if (g->nposted == 0) {
    chorus_status_t st = post_all(t, g);
    if (st < 0) return st;
  }
  for (int i = 0; i < g->nposted; i++) {
    if (t->rank == t->args.root && i == t->args.root) continue;
    if (!chorus__algo_done(&g->xfers[i])) return CHORUS_INPROGRESS;
  }
  return CHORUS_OK;
}

static void linear_gather_fini(chorus_task_t* t) {
  linear_t* g = t->state;
  if (g) free(g->xfers);
  free(g);
  t->state = NULL;
}

static double linear_gather_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double n = t->nranks, block_bytes = (double)t->args.count * (double)t->dtype_size;
  if (t->nranks <= 1) return 0.0;
  return (n - 1.0) * cx->flat.alpha_us + (n - 1.0) * block_bytes / cx->flat.bytes_per_us;
}

const chorus_algo_t chorus__algo_linear_gather = {
    .name = "linear",
    .desc = "every rank sends its block straight to the root",
    .coll = CH_COLL_GATHER,
    .supported = NULL,
    .cost_us = linear_gather_cost_us,
    .init = linear_gather_init,
    .progress = linear_gather_progress,
    .fini = linear_gather_fini,
};
