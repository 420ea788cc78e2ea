/*
 * binomial/broadcast.c - binomial-tree broadcast, chunk-pipelined, rooted at the root member;
 * the registry entry runs it over the host-ordered ring, so subtrees stay inside hosts.
 *
 * Steps: the buffer is cut into C chunks of at most chunk_bytes. A non-root rank receives
 * chunk c from its parent straight into recvbuf and forwards it to each child as soon as it has
 * arrived, so chunk c+1 travels down the upper levels while chunk c moves further down. The
 * root sends from sendbuf (and copies it to its own recvbuf unless in place). Up to
 * CHORUS_TREE_WINDOW chunks are in flight per edge. Tag = chunk index.
 * Bytes per rank: N received (non-root), N sent per child (at most ceil(log2 n) children, the
 * root has the most), N = count * elem bytes.
 *
 * Cost (alpha-beta, L = ceil(log2 n)): T = L * alpha + L * N / beta. The root pushes N to each
 * of its L children over its one link, which bounds the pipelined time; 0 for n = 1. Children
 * that share the root's host are priced at the intra-host link (binomial.h).
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "algo/binomial/binomial.h"

struct chorus_bcast {
  chorus_sched_t s;
  chorus_tree_t tree;
  int is_root;
  const char* src; /* what this rank forwards: the root's sendbuf, elsewhere recvbuf */
  char* recvbuf;
  size_t total_bytes, chunk_bytes, nchunks;
  size_t window;
  chorus_algo_xfer_t* recv_xfers; /* window, chunk c at c % window */
  chorus_algo_xfer_t* send_xfers; /* nchildren rings of window */
  size_t recvs_posted, recvs_done;
  size_t sends_posted[CHORUS_TREE_MAX_CHILDREN];
  size_t sends_done[CHORUS_TREE_MAX_CHILDREN];
  int copy_pending; /* the root's own copy */
};
typedef struct chorus_bcast bcast_t;

static size_t chunk_len(const bcast_t* b, size_t chunk) {
  return chorus__min_sz(b->chunk_bytes, b->total_bytes - chunk * b->chunk_bytes);
}

static chorus_status_t post_recvs(chorus_task_t* t, bcast_t* b, int* moved) {
  while (!b->is_root && b->recvs_posted < b->nchunks &&
         b->recvs_posted < b->recvs_done + b->window) {
    size_t c = b->recvs_posted;
    chorus_algo_xfer_t* ax = &b->recv_xfers[c % b->window];
    chorus_status_t st = chorus__sched_post(t, &b->s, ax, 0, b->tree.parent,
                                           b->recvbuf + c * b->chunk_bytes, chunk_len(b, c),
                                           (uint32_t)c);
    if (st < 0) return st;
    b->recvs_posted++;
    *moved = 1;
  }
  return CHORUS_OK;
}

/* Chunk c can be forwarded once it is here: always at the root. */
static int have_chunk(const bcast_t* b, size_t chunk) {
  return b->is_root || b->recvs_done > chunk;
}

static chorus_status_t post_sends(chorus_task_t* t, bcast_t* b, int child, int* moved) {
  chorus_algo_xfer_t* ring = &b->send_xfers[(size_t)child * b->window];
  size_t* posted = &b->sends_posted[child];
  while (*posted < b->nchunks && *posted < b->sends_done[child] + b->window &&
         have_chunk(b, *posted)) {
    size_t c = *posted;
    chorus_status_t st = chorus__sched_post(t, &b->s, &ring[c % b->window], 1, b->tree.children[child],
                                           b->src + c * b->chunk_bytes, chunk_len(b, c),
                                           (uint32_t)c);
    if (st < 0) return st;
    (*posted)++;
    *moved = 1;
  }
  return CHORUS_OK;
}

static int reap(bcast_t* b) {
  int moved = 0;
  while (b->recvs_done < b->recvs_posted &&
         chorus__algo_done(&b->recv_xfers[b->recvs_done % b->window])) {
    b->recvs_done++;
    moved = 1;
  }
  for (int j = 0; j < b->tree.nchildren; j++) {
    chorus_algo_xfer_t* ring = &b->send_xfers[(size_t)j * b->window];
    while (b->sends_done[j] < b->sends_posted[j] &&
           chorus__algo_done(&ring[b->sends_done[j] % b->window])) {
      b->sends_done[j]++;
      moved = 1;
    }
  }
  return moved;
}

static int finished(const bcast_t* b) {
  if (b->copy_pending || (!b->is_root && b->recvs_done < b->nchunks)) return 0;
  for (int j = 0; j < b->tree.nchildren; j++)
    if (b->sends_done[j] < b->nchunks) return 0;
  return 1;
}

chorus_status_t chorus__binomial_bcast_step(chorus_task_t* t, bcast_t* b) {
  int moved;
  do {
    moved = 0;
    chorus_status_t st = post_recvs(t, b, &moved);
    for (int j = 0; j < b->tree.nchildren && st == CHORUS_OK; j++)
      st = post_sends(t, b, j, &moved);
    if (st < 0) return st;
    if (b->copy_pending) { /* after the first sends, so it overlaps them */
      chorus__algo_copy(b->recvbuf, b->src, b->total_bytes);
      b->copy_pending = 0;
      moved = 1;
    }
    moved |= reap(b);
  } while (moved);
  return finished(b) ? CHORUS_OK : CHORUS_INPROGRESS;
}

chorus_status_t chorus__binomial_bcast_start(const chorus_sched_t* s, bcast_t** out) {
  *out = NULL;
  bcast_t* b = calloc(1, sizeof(*b));
  if (!b) return CHORUS_ERR_NO_MEMORY;
  b->s = *s;
  chorus__binomial_init(&b->tree, s->group.me, s->group.size, s->root);
  b->is_root = s->group.me == s->root;
  b->recvbuf = s->recvbuf;
  b->src = b->is_root ? s->sendbuf : s->recvbuf;
  b->copy_pending = b->is_root;
  b->total_bytes = s->count * s->elem_bytes;
  b->chunk_bytes = chorus__sched_chunk_elems(s) * s->elem_bytes;
  b->nchunks = chorus__div_up(b->total_bytes, b->chunk_bytes);
  b->window = CHORUS_TREE_WINDOW;
  b->recv_xfers = calloc((size_t)(1 + b->tree.nchildren) * b->window, sizeof(*b->recv_xfers));
  if (!b->recv_xfers) {
    free(b);
    return CHORUS_ERR_NO_MEMORY;
  }
  b->send_xfers = b->recv_xfers + b->window;
  *out = b;
  return CHORUS_OK;
}

void chorus__binomial_bcast_free(bcast_t* b) {
  if (b) free(b->recv_xfers);
  free(b);
}

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t binomial_broadcast_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  bcast_t* b = NULL;
  chorus_status_t st = chorus__binomial_bcast_start(&s, &b);
  t->state = b;
  return st;
}

static chorus_status_t binomial_broadcast_progress(chorus_task_t* t) {
  bcast_t* b = t->state;
  chorus_status_t st = chorus__binomial_bcast_step(t, b);
  t->step = b->recvs_done;
  return st;
}

static void binomial_broadcast_fini(chorus_task_t* t) {
  chorus__binomial_bcast_free(t->state);
  t->state = NULL;
}

static double binomial_broadcast_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  return chorus__binomial_cost_us(t, cx);
}

const chorus_algo_t chorus__algo_binomial_broadcast = {
    .name = "binomial",
    .desc = "chunk-pipelined binomial tree from the root, ceil(log2 n) levels",
    .coll = CH_COLL_BROADCAST,
    .supported = NULL,
    .cost_us = binomial_broadcast_cost_us,
    .init = binomial_broadcast_init,
    .progress = binomial_broadcast_progress,
    .fini = binomial_broadcast_fini,
};
