/*
 * linear/scatter.c - linear scatter: the root sends every rank its block directly.
 *
 * Steps: the root posts all n-1 sends at once, block i of sendbuf to rank i, and copies block
 * root to its own recvbuf (nothing when recvbuf already is that block; after the sends when
 * recvbuf overlaps other blocks, e.g. recvbuf == sendbuf); every other rank posts one receive
 * into recvbuf. Tag = 0. Bytes: (n-1) * B sent by the root, B received by each
 * other rank, B = recvcount * elem bytes.
 *
 * Cost (alpha-beta): T = (n-1) * alpha + (n-1) * B / beta (the root's link carries every
 * block); 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"

typedef struct {
  int nposted;
  int copy_pending;          /* root: its own block, once no send still reads what it covers */
  chorus_algo_xfer_t* xfers; /* root: one per rank (its own unused); others: one */
} linear_t;

/* The root's recvbuf may overlap blocks of sendbuf that are still being sent (recvbuf ==
 * sendbuf, root > 0): its own copy then waits for every send to finish. */
static int copy_overlaps_sends(const chorus_task_t* t, size_t block_bytes) {
  const char* send_lo = t->args.sendbuf;
  const char* send_hi = send_lo + (size_t)t->nranks * block_bytes;
  const char* own = send_lo + (size_t)t->args.root * block_bytes;
  const char* dst = t->args.recvbuf;
  return dst != own && dst < send_hi && dst + block_bytes > send_lo;
}

static chorus_status_t linear_scatter_init(chorus_task_t* t) {
  linear_t* s = calloc(1, sizeof(*s));
  if (!s) return CHORUS_ERR_NO_MEMORY;
  s->xfers = calloc((size_t)t->nranks, sizeof(*s->xfers));
  if (!s->xfers) {
    free(s);
    return CHORUS_ERR_NO_MEMORY;
  }
  t->state = s;
  return CHORUS_OK;
}

static chorus_status_t post_all(chorus_task_t* t, linear_t* s) {
  size_t block_bytes = t->args.count * t->dtype_size;
  int root = t->args.root;
  if (t->rank != root) {
    s->nposted = 1;
    return chorus__algo_post(t, &s->xfers[0], 0, root, t->args.recvbuf, block_bytes, 0);
  }
  const char* sendbuf = t->args.sendbuf;
  for (int i = 0; i < t->nranks; i++) {
    s->nposted = i + 1;
    if (i == root) continue;
    chorus_status_t st =
        chorus__algo_post(t, &s->xfers[i], 1, i, sendbuf + (size_t)i * block_bytes, block_bytes, 0);
    if (st < 0) return st;
  }
  s->copy_pending = 1;
  if (!copy_overlaps_sends(t, block_bytes)) {
    chorus__algo_copy(t->args.recvbuf, sendbuf + (size_t)root * block_bytes, block_bytes);
    s->copy_pending = 0;
  }
  return CHORUS_OK;
}

static chorus_status_t linear_scatter_progress(chorus_task_t* t) {
  linear_t* s = t->state;
  if (s->nposted == 0) {
    chorus_status_t st = post_all(t, s);
    if (st < 0) return st;
  }
  for (int i = 0; i < s->nposted; i++) {
    if (t->rank == t->args.root && i == t->args.root) continue;
    if (!chorus__algo_done(&s->xfers[i])) return CHORUS_INPROGRESS;
  }
  if (s->copy_pending) {
    size_t block_bytes = t->args.count * t->dtype_size;
    chorus__algo_copy(t->args.recvbuf,
                      (const char*)t->args.sendbuf + (size_t)t->args.root * block_bytes,
                      block_bytes);
    s->copy_pending = 0;
  }
  return CHORUS_OK;
}

static void linear_scatter_fini(chorus_task_t* t) {
  linear_t* s = t->state;
  if (s) free(s->xfers);
  free(s);
  t->state = NULL;
}

static double linear_scatter_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double n = t->nranks, block_bytes = (double)t->args.count * (double)t->dtype_size;
  if (t->nranks <= 1) return 0.0;
  return (n - 1.0) * cx->flat.alpha_us + (n - 1.0) * block_bytes / cx->flat.bytes_per_us;
}

const chorus_algo_t chorus__algo_linear_scatter = {
    .name = "linear",
    .desc = "the root sends every rank its block directly",
    .coll = CH_COLL_SCATTER,
    .supported = NULL,
    .cost_us = linear_scatter_cost_us,
    .init = linear_scatter_init,
    .progress = linear_scatter_progress,
    .fini = linear_scatter_fini,
};
