/*
 * tree/broadcast.c - binomial-tree broadcast, chunk-pipelined, rooted at args.root.
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
 * of its L children over its one link, which bounds the pipelined time; 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "algo/tree/tree.h"

typedef struct {
  chorus_binomial_t tree;
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
} bcast_t;

static size_t chunk_len(const bcast_t* b, size_t chunk) {
  return chorus__min_sz(b->chunk_bytes, b->total_bytes - chunk * b->chunk_bytes);
}

static chorus_status_t post_recvs(chorus_task_t* t, bcast_t* b, int* moved) {
  while (!b->is_root && b->recvs_posted < b->nchunks &&
         b->recvs_posted < b->recvs_done + b->window) {
    size_t c = b->recvs_posted;
    chorus_algo_xfer_t* ax = &b->recv_xfers[c % b->window];
    chorus_status_t st = chorus__algo_post(t, ax, 0, b->tree.parent,
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
    chorus_status_t st = chorus__algo_post(t, &ring[c % b->window], 1, b->tree.children[child],
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

static chorus_status_t tree_broadcast_progress(chorus_task_t* t) {
  bcast_t* b = t->state;
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
  t->step = b->recvs_done;
  return finished(b) ? CHORUS_OK : CHORUS_INPROGRESS;
}

static chorus_status_t tree_broadcast_init(chorus_task_t* t) {
  bcast_t* b = calloc(1, sizeof(*b));
  if (!b) return CHORUS_ERR_NO_MEMORY;
  chorus__binomial_init(&b->tree, t->rank, t->nranks, t->args.root);
  b->is_root = t->rank == t->args.root;
  b->recvbuf = t->args.recvbuf;
  b->src = b->is_root ? t->args.sendbuf : t->args.recvbuf;
  b->copy_pending = b->is_root;
  b->total_bytes = t->args.count * t->dtype_size;
  b->chunk_bytes = chorus__chunk_elems(t) * t->dtype_size;
  b->nchunks = chorus__div_up(b->total_bytes, b->chunk_bytes);
  b->window = CHORUS_TREE_WINDOW;
  b->recv_xfers = calloc((size_t)(1 + b->tree.nchildren) * b->window, sizeof(*b->recv_xfers));
  if (!b->recv_xfers) {
    free(b);
    return CHORUS_ERR_NO_MEMORY;
  }
  b->send_xfers = b->recv_xfers + b->window;
  t->state = b;
  return CHORUS_OK;
}

static void tree_broadcast_fini(chorus_task_t* t) {
  bcast_t* b = t->state;
  if (b) free(b->recv_xfers);
  free(b);
  t->state = NULL;
}

static double tree_broadcast_cost_us(const chorus_task_t* t, const chorus_link_model_t* link) {
  double levels = chorus__ceil_log2(t->nranks);
  double bytes = (double)t->args.count * (double)t->dtype_size;
  return levels * link->alpha_us + levels * bytes / link->bytes_per_us;
}

const chorus_algo_t chorus__algo_tree_broadcast = {
    .name = "tree",
    .desc = "chunk-pipelined binomial tree from the root, ceil(log2 n) levels",
    .coll = CH_COLL_BROADCAST,
    .supported = NULL,
    .cost_us = tree_broadcast_cost_us,
    .init = tree_broadcast_init,
    .progress = tree_broadcast_progress,
    .fini = tree_broadcast_fini,
};
