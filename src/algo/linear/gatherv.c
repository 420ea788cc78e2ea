/*
 * linear/gatherv.c - linear gatherv: every rank sends its block straight to the root, which
 * confirms it.
 *
 * Steps: the root copies its own block to displs[root] of recvbuf (unless in place), then
 * posts all n-1 receives at once, recvcounts[i] elements from rank i at displs[i] (tag 0); as
 * each completes it sends rank i an empty frame (tag 1). Every other rank posts one send of its
 * sendcount elements (tag 0, empty ones too) and the receive of that confirmation. A rank whose
 * count the root does not expect fails at the root (frame size and count word, frame.h), which
 * sends it an abort frame in place of the confirmation: both end with ERR_MISMATCH. Bytes: the
 * sum of recvcounts but the root's received by the root, sendcount by each other rank, plus a
 * 48-byte frame header per rank and direction.
 *
 * Cost (alpha-beta): T = n * alpha + (S - B(root)) / beta (the root's link carries every block;
 * one more alpha for the confirmation); 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"

enum { TAG_BLOCK = 0, TAG_CONFIRM = 1 };

typedef struct {
  int posted;
  chorus_algo_xfer_t* block;   /* root: receive from rank i; others: [0] the send */
  chorus_algo_xfer_t* confirm; /* root: send to rank i once block[i] is done; others: [0] */
  char* confirmed;             /* root: confirm[i] posted */
} gatherv_t;

static chorus_status_t linear_gatherv_init(chorus_task_t* t) {
  gatherv_t* g = calloc(1, sizeof(*g));
  size_t n = (size_t)t->nranks;
  if (g) g->block = calloc(2 * n, sizeof(*g->block));
  if (g && g->block) g->confirmed = calloc(n, 1);
  if (!g || !g->block || !g->confirmed) {
    if (g) free(g->block);
    free(g);
    return CHORUS_ERR_NO_MEMORY;
  }
  g->confirm = g->block + n;
  t->state = g;
  return CHORUS_OK;
}

static chorus_status_t post_all(chorus_task_t* t, gatherv_t* g) {
  const chorus_coll_args_t* a = &t->args;
  size_t esize = t->dtype_size;
  int root = a->root;
  g->posted = 1;
  if (t->rank != root) {
    chorus_status_t st = chorus__algo_post_word(t, &g->block[0], 1, root, a->sendbuf, a->count * esize, TAG_BLOCK,
                                                a->count);
    if (st >= 0) st = chorus__algo_post_word(t, &g->confirm[0], 0, root, NULL, 0, TAG_CONFIRM, 0);
    return st;
  }
  char* recvbuf = a->recvbuf;
  /* Own block first: should sendbuf overlap another slot, no receive has overwritten it yet. */
  chorus__algo_copy(recvbuf + a->rdispls[root] * esize, a->sendbuf, a->count * esize);
  for (int i = 0; i < t->nranks; i++) {
    if (i == root) continue;
    chorus_status_t st = chorus__algo_post_word(t, &g->block[i], 0, i, recvbuf + a->rdispls[i] * esize,
                                                a->recvcounts[i] * esize, TAG_BLOCK, a->recvcounts[i]);
    if (st < 0) return st;
  }
  return CHORUS_OK;
}

/* Root: confirms every block that arrived; *finished once every confirmation is sent. */
static chorus_status_t root_step(chorus_task_t* t, gatherv_t* g, int* finished) {
  *finished = 1;
  for (int i = 0; i < t->nranks; i++) {
    if (i == t->args.root) continue;
    if (!g->confirmed[i] && chorus__algo_done(&g->block[i])) {
      chorus_status_t st = chorus__algo_post_word(t, &g->confirm[i], 1, i, NULL, 0, TAG_CONFIRM, 0);
      if (st < 0) return st;
      g->confirmed[i] = 1;
    }
    if (!g->confirmed[i] || !chorus__algo_done(&g->confirm[i])) *finished = 0;
  }
  return CHORUS_OK;
}

static chorus_status_t linear_gatherv_progress(chorus_task_t* t) {
  gatherv_t* g = t->state;
  if (!g->posted) {
    chorus_status_t st = post_all(t, g);
    if (st < 0) return st;
  }
  if (t->rank != t->args.root)
    return chorus__algo_done(&g->block[0]) && chorus__algo_done(&g->confirm[0]) ? CHORUS_OK : CHORUS_INPROGRESS;
  int finished;
  chorus_status_t st = root_step(t, g, &finished);
  if (st < 0) return st;
  return finished ? CHORUS_OK : CHORUS_INPROGRESS;
}

static void linear_gatherv_fini(chorus_task_t* t) {
  gatherv_t* g = t->state;
  if (g) {
    free(g->block);
    free(g->confirmed);
  }
  free(g);
  t->state = NULL;
}

/* Elements of the blocks the root receives (it alone knows them; others price their send). */
static double linear_gatherv_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  size_t elems = t->args.count;
  if (t->rank == t->args.root) {
    elems = 0;
    for (int i = 0; i < t->nranks; i++)
      if (i != t->rank) elems += t->args.recvcounts[i];
  }
  double n = t->nranks, bytes = (double)elems * (double)t->dtype_size;
  return n * cx->flat.alpha_us + bytes / cx->flat.bytes_per_us;
}

const chorus_algo_t chorus__algo_linear_gatherv = {
    .name = "linear",
    .desc = "every rank sends its block (any size) straight to the root, which confirms it",
    .coll = CH_COLL_GATHERV,
    .supported = NULL,
    .cost_us = linear_gatherv_cost_us,
    .init = linear_gatherv_init,
    .progress = linear_gatherv_progress,
    .fini = linear_gatherv_fini,
};
