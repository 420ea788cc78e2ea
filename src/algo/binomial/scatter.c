/*
 * binomial/scatter.c - binomial-tree scatter over the host-ordered ring: the root hands each
 * child the blocks of its whole subtree in one message, and every inner rank passes on the
 * parts of its children the same way, so that the root sends ceil(log2 n) messages instead of
 * n-1 and, numbered along the hosts, each other host gets one message from outside (the tree's
 * lower levels stay inside hosts).
 *
 * The tree is binomial.h's over the members of the host-ordered ring, relabelled so that the
 * root is vrank 0; vrank v's subtree is vranks [v, v + size), size its lowest set bit (clipped
 * to n; all n for the root). Each rank holds its subtree's blocks in vrank order: the root packs
 * sendbuf (blocks by rank) that way into a scratch first, an inner rank receives its subtree
 * into a scratch, a leaf its one block straight into recvbuf. Children are sent their parts
 * largest first, once the whole subtree is here (store and forward). Tag = 0.
 * Bytes: the root sends (n-1) B, as linear scatter's root does; a rank of vrank v with a
 * subtree of s blocks receives s B and sends (s-1) B. B = count * elem bytes.
 *
 * Cost (alpha-beta, levels = ceil(log2 n), over the host-ordered ring): the root's link
 * carries all its children's parts one after the other, the largest subtree's head passes on
 * what is not its own only after all of it arrived, and a deepest leaf waits for a level of
 * hand-overs: T = levels * alpha + ((n-1) + (n/2-1)) B / beta + the root's pack of n B at memory
 * speed. On a pure link the forwarding would overlap the root's later sends; it does not where
 * ranks share cores, and the tree carries more bytes between hosts than linear (host 3's through
 * host 2 on 4 hosts): with 10 Gbit/s links on 4 emulated hosts x 2, priced without it, the tree
 * was chosen at 1 MiB and took 755-811 us to linear's 648-658. The
 * first levels inside the root's host are priced at the intra-host link, as binomial broadcast
 * prices them (binomial.h). Linear scatter sends n-1 messages: on 4 emulated hosts x 2 ranks (8
 * ranks on 2 cores) its 4 KiB scatter took 23 us a call back to back, where Open MPI's took 16.
 */
#include <float.h>
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/binomial/binomial.h"
#include "algo/common.h"

typedef struct {
  chorus_sched_t s;
  chorus_tree_t tree;
  size_t block;     /* bytes of one rank's block */
  size_t subtree;   /* blocks this rank holds: its subtree's, in vrank order */
  char* held;       /* those blocks: the root's packed scratch, an inner rank's scratch, a leaf's recvbuf */
  char* scratch;    /* what held points into when it is a scratch */
  int recv_posted;  /* the receive from the parent */
  int received;     /* the subtree is here (always at the root) */
  int posted;       /* the sends to the children are posted */
  chorus_algo_xfer_t recv_xfer;
  chorus_algo_xfer_t send_xfers[CHORUS_TREE_MAX_CHILDREN];
} bscatter_t;

/* The number of vranks in v's subtree. */
static size_t subtree_of(long v, long n) {
  if (v == 0) return (size_t)n;
  long low = v & -v;
  return (size_t)(v + low <= n ? low : n - v);
}

/* The root packs sendbuf's blocks in vrank order: vrank i is ring member root + i. */
static void pack_at_root(const chorus_task_t* t, bscatter_t* b) {
  int n = b->s.group.size;
  for (int i = 0; i < n; i++) {
    int rank = chorus__group_rank(&b->s.group, (b->s.root + i) % n);
    chorus__algo_copy(b->held + (size_t)i * b->block, (const char*)t->args.sendbuf + (size_t)rank * b->block, b->block);
  }
}

static chorus_status_t post_children(chorus_task_t* t, bscatter_t* b) {
  long n = b->s.group.size;
  for (int c = 0; c < b->tree.nchildren; c++) {
    long child_v = chorus__mod(b->tree.children[c] - b->s.root, (int)n);
    size_t first = (size_t)(child_v - b->tree.vrank), blocks = subtree_of(child_v, n);
    chorus_status_t st = chorus__sched_post(t, &b->s, &b->send_xfers[c], 1, b->tree.children[c],
                                           b->held + first * b->block, blocks * b->block, 0);
    if (st < 0) return st;
  }
  b->posted = 1;
  /* My own block is the first I hold (a leaf received it in place). */
  chorus__algo_copy(t->args.recvbuf, b->held, b->block);
  return CHORUS_OK;
}

static chorus_status_t binomial_scatter_progress(chorus_task_t* t) {
  bscatter_t* b = t->state;
  if (!b->received && !b->recv_posted) {
    chorus_status_t st = chorus__sched_post(t, &b->s, &b->recv_xfer, 0, b->tree.parent, b->held,
                                            b->subtree * b->block, 0);
    if (st < 0) return st;
    b->recv_posted = 1;
  }
  if (!b->received) {
    if (!chorus__algo_done(&b->recv_xfer)) return CHORUS_INPROGRESS;
    b->received = 1;
  }
  if (!b->posted) {
    chorus_status_t st = post_children(t, b);
    if (st < 0) return st;
  }
  for (int c = 0; c < b->tree.nchildren; c++)
    if (!chorus__algo_done(&b->send_xfers[c])) return CHORUS_INPROGRESS;
  return CHORUS_OK;
}

static void binomial_scatter_fini(chorus_task_t* t) {
  bscatter_t* b = t->state;
  if (b) chorus__task_scratch_free(t, b->scratch);
  free(b);
  t->state = NULL;
}

static chorus_status_t binomial_scatter_init(chorus_task_t* t) {
  bscatter_t* b = calloc(1, sizeof(*b));
  if (!b) return CHORUS_ERR_NO_MEMORY;
  t->state = b;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &b->s);
  int n = b->s.group.size;
  chorus__binomial_init(&b->tree, b->s.group.me, n, b->s.root);
  b->block = t->args.count * t->dtype_size;
  b->subtree = subtree_of(b->tree.vrank, n);
  b->received = b->tree.parent < 0;
  if (b->subtree > 1 || b->received) { /* the root, or an inner rank: a scratch of its subtree */
    b->scratch = chorus__task_scratch(t, b->subtree * b->block);
    if (!b->scratch) {
      binomial_scatter_fini(t);
      return CHORUS_ERR_NO_MEMORY;
    }
    b->held = b->scratch;
  } else {
    b->held = t->args.recvbuf;
  }
  if (b->received) pack_at_root(t, b);
  return CHORUS_OK;
}

/* On one host it is not a candidate: there the root's sends land in the shared rings at once,
 * so linear's ranks each wait one hand-over where the tree's wait one a level (4 ranks on 2
 * cores, up to 8 KiB: linear 0.78-1.49 us, the tree 1.18-1.85, which its alphas alone had
 * chosen). Across hosts the tree sends H-1 messages between hosts where linear sends n-L, and
 * ranks that share cores pay for each TCP message they handle. */
static double binomial_scatter_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  if (cx->nhosts <= 1) return DBL_MAX;
  double n = t->nranks, levels = chorus__ceil_log2(t->nranks), block = (double)t->args.count * (double)t->dtype_size;
  double inside = chorus__root_first_on_host(t) ? chorus__cost_rounds_inside_hosts(cx, t->nranks) : 0;
  return (levels - inside) * cx->flat.alpha_us + inside * (cx->intra.alpha_us + chorus__cost_inhost_turn_us(cx)) +
         (n - 1.0 + (n / 2.0 - 1.0)) * block / cx->flat.bytes_per_us + n * block / CHORUS_COST_COPY_BYTES_PER_US;
}

const chorus_algo_t chorus__algo_binomial_scatter = {
    .name = "binomial",
    .desc = "binomial tree from the root over the host-ordered ring, each child sent its subtree's blocks at once",
    .coll = CH_COLL_SCATTER,
    .supported = NULL,
    .cost_us = binomial_scatter_cost_us,
    .init = binomial_scatter_init,
    .progress = binomial_scatter_progress,
    .fini = binomial_scatter_fini,
};
