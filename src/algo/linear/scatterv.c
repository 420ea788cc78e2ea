/*
 * linear/scatterv.c - linear scatterv: the root sends every rank its block directly, and every
 * rank confirms it.
 *
 * Steps: the root posts all n-1 sends at once, sendcounts[i] elements at displs[i] of sendbuf
 * to rank i (tag 0, empty ones too), and the n-1 receives of their confirmations (empty frames,
 * tag 1), and copies its own block to recvbuf (nothing when in place: recvbuf is that block).
 * Every other rank posts one receive of recvcount elements and, once it is done, sends the
 * empty confirmation. A rank that expects another count fails on the root's frame (its size
 * and count word, frame.h) and sends the root an abort frame in place of the confirmation:
 * both end with ERR_MISMATCH. Bytes: the sum of sendcounts but the root's sent by the root,
 * recvcount received by each other rank, plus a 48-byte frame header per rank and direction.
 *
 * Cost (alpha-beta): T = n * alpha + (S - B(root)) / beta (the root's link carries every block;
 * one more alpha for the confirmations); 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"

enum { TAG_BLOCK = 0, TAG_CONFIRM = 1 };

typedef struct {
  int posted, confirm_posted;
  chorus_algo_xfer_t* block;   /* root: send to rank i; others: [0] the receive */
  chorus_algo_xfer_t* confirm; /* root: receive from rank i; others: [0] the send */
} scatterv_t;

static chorus_status_t linear_scatterv_init(chorus_task_t* t) {
  scatterv_t* s = calloc(1, sizeof(*s));
  if (s) s->block = calloc(2 * (size_t)t->nranks, sizeof(*s->block));
  if (!s || !s->block) {
    free(s);
    return CHORUS_ERR_NO_MEMORY;
  }
  s->confirm = s->block + t->nranks;
  t->state = s;
  return CHORUS_OK;
}

static chorus_status_t post_all(chorus_task_t* t, scatterv_t* s) {
  const chorus_coll_args_t* a = &t->args;
  size_t esize = t->dtype_size;
  int root = a->root;
  s->posted = 1;
  if (t->rank != root)
    return chorus__algo_post_word(t, &s->block[0], 0, root, a->recvbuf, a->count * esize, TAG_BLOCK, a->count);
  const char* sendbuf = a->sendbuf;
  for (int i = 0; i < t->nranks; i++) {
    if (i == root) continue;
    chorus_status_t st = chorus__algo_post_word(t, &s->block[i], 1, i, sendbuf + a->sdispls[i] * esize,
                                                a->sendcounts[i] * esize, TAG_BLOCK, a->sendcounts[i]);
    if (st >= 0) st = chorus__algo_post_word(t, &s->confirm[i], 0, i, NULL, 0, TAG_CONFIRM, 0);
    if (st < 0) return st;
  }
  /* recvbuf is the root's own block (in place) or overlaps no block (args checked). */
  chorus__algo_copy(a->recvbuf, sendbuf + a->sdispls[root] * esize, a->count * esize);
  return CHORUS_OK;
}

static chorus_status_t linear_scatterv_progress(chorus_task_t* t) {
  scatterv_t* s = t->state;
  if (!s->posted) {
    chorus_status_t st = post_all(t, s);
    if (st < 0) return st;
  }
  if (t->rank != t->args.root) {
    if (!chorus__algo_done(&s->block[0])) return CHORUS_INPROGRESS;
    if (!s->confirm_posted) {
      chorus_status_t st = chorus__algo_post_word(t, &s->confirm[0], 1, t->args.root, NULL, 0, TAG_CONFIRM, 0);
      if (st < 0) return st;
      s->confirm_posted = 1;
    }
    return chorus__algo_done(&s->confirm[0]) ? CHORUS_OK : CHORUS_INPROGRESS;
  }
  for (int i = 0; i < t->nranks; i++)
    if (i != t->rank && (!chorus__algo_done(&s->block[i]) || !chorus__algo_done(&s->confirm[i])))
      return CHORUS_INPROGRESS;
  return CHORUS_OK;
}

static void linear_scatterv_fini(chorus_task_t* t) {
  scatterv_t* s = t->state;
  if (s) free(s->block);
  free(s);
  t->state = NULL;
}

/* Elements of the blocks the root sends (it alone knows them; others price their receive). */
static double linear_scatterv_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  size_t elems = t->args.count;
  if (t->rank == t->args.root) {
    elems = 0;
    for (int i = 0; i < t->nranks; i++)
      if (i != t->rank) elems += t->args.sendcounts[i];
  }
  double n = t->nranks, bytes = (double)elems * (double)t->dtype_size;
  return n * cx->flat.alpha_us + bytes / cx->flat.bytes_per_us;
}

const chorus_algo_t chorus__algo_linear_scatterv = {
    .name = "linear",
    .desc = "the root sends every rank its block (any size) directly; each rank confirms it",
    .coll = CH_COLL_SCATTERV,
    .supported = NULL,
    .cost_us = linear_scatterv_cost_us,
    .init = linear_scatterv_init,
    .progress = linear_scatterv_progress,
    .fini = linear_scatterv_fini,
};
