/*
 * pairwise.c - the pairwise-exchange engine of alltoall and alltoallv.
 *
 * Steps for rank r, k = 1 .. n-1: send its block for rank r+k, receive rank r-k's block into
 * its place; up to CHORUS_PAIRWISE_WINDOW steps in flight, sends and receives advancing
 * independently. The own block is copied locally while they travel. Tag = k.
 * "r+k" counts in an order that interleaves the hosts when they are of equal size (the rails one
 * after another: local rank 0 of every host, then local rank 1, ...; core/topo.h), whatever the
 * numbering: then every step but the multiples of H sends each rank's block to another host,
 * and all the ranks of a host to the same one, the load every host link carries at each step
 * is the same, and ranks whose steps run ahead or behind never crowd one link. In rank order,
 * ranks numbered by host spent a few steps inside the host and took 6.6-10.4 ms for a 1 MiB
 * alltoall on 4 emulated hosts x 2 ranks at 2 Gbit/s (6 launches) against 6.6-6.9 numbered round
 * robin, where rank order is that order. On one host, or hosts of unequal size: rank order.
 * alltoall skips empty blocks on both ends (both know every size); alltoallv exchanges a frame
 * with every peer both ways, empty blocks included: a frame's size is what the sender sends and
 * its count word what the sender expects back (frame.h), so each end checks both directions of
 * the pair against its own counts and a disagreement fails both with ERR_MISMATCH.
 * In place (sendbuf == recvbuf: one set of blocks, each sent and then replaced) the receive of
 * step k <= n/2 would overwrite the block of rank r-k (in step order, as every "r+k" and "r-k"
 * here) before step n-k sends it, so those floor(n/2) blocks are first saved to a stash and
 * sent from there; the receive of a step k > n/2 waits until step n-k has sent its block from
 * recvbuf.
 */
#include "algo/pairwise/pairwise.h"

#include <stdlib.h>

#include "algo/common.h"

typedef struct {
  int nranks, rank, in_place, v;
  const int* order; /* the ranks in step order (topo's rails, back to back); NULL: rank order */
  int pos;          /* this rank's place in it */
  size_t esize;
  size_t block; /* alltoall: elements per block */
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls; /* alltoallv: the task's copies */
  const char* sendbuf;
  char* recvbuf;
  char* stash;          /* in place: the blocks of ranks r-1 .. r-floor(n/2) (step order), back to back */
  size_t* stash_offset; /* in place: byte offset in stash of the block of rank r-k (step order), k >= 1 */
  size_t window;
  chorus_algo_xfer_t* send_xfers; /* window; step k at k % window */
  chorus_algo_xfer_t* recv_xfers;
  int next_send, sends_done; /* step numbers: first not posted / first not done */
  int next_recv, recvs_done;
  int setup_pending; /* own block copy and stash, done at the first progress */
} pairwise_t;

/* ---- the blocks: elements and element offset of rank p's block, per direction ---- */

static size_t send_elems(const pairwise_t* a, int p) { return a->v ? a->sendcounts[p] : a->block; }
static size_t send_at(const pairwise_t* a, int p) { return a->v ? a->sdispls[p] : (size_t)p * a->block; }
static size_t recv_elems(const pairwise_t* a, int p) { return a->v ? a->recvcounts[p] : a->block; }
static size_t recv_at(const pairwise_t* a, int p) { return a->v ? a->rdispls[p] : (size_t)p * a->block; }

static int stashed(const pairwise_t* a, int step) { return a->in_place && 2 * step <= a->nranks; }

/* The rank k places after me in step order (k may be negative). */
static int peer_at(const pairwise_t* a, int k) {
  int v = chorus__mod(a->pos + k, a->nranks);
  return a->order ? a->order[v] : v;
}

static const char* send_block(const pairwise_t* a, int step) {
  int n = a->nranks, dst = peer_at(a, step);
  if (stashed(a, n - step)) return a->stash + a->stash_offset[n - step];
  return a->sendbuf + send_at(a, dst) * a->esize;
}

static void setup(pairwise_t* a) {
  int me = a->rank;
  chorus__algo_copy(a->recvbuf + recv_at(a, me) * a->esize, a->sendbuf + send_at(a, me) * a->esize,
                    recv_elems(a, me) * a->esize);
  for (int k = 1; stashed(a, k) && k < a->nranks; k++) {
    int src = peer_at(a, -k);
    chorus__algo_copy(a->stash + a->stash_offset[k], a->recvbuf + recv_at(a, src) * a->esize,
                      recv_elems(a, src) * a->esize);
  }
  a->setup_pending = 0;
}

static int can_post_recv(const pairwise_t* a, int step) {
  if (step >= a->nranks || step >= a->recvs_done + (int)a->window) return 0;
  /* In place, an unstashed block is sent from recvbuf at step n-k: wait for it to leave. */
  return !a->in_place || stashed(a, step) || a->sends_done > a->nranks - step;
}

/* alltoallv's frames always travel, with the count the other direction must carry. */
static chorus_status_t post_block(chorus_task_t* t, const pairwise_t* a, chorus_algo_xfer_t* ax, int is_send,
                                  int peer, const char* buf, size_t elems, int step, size_t other_way) {
  if (a->v) return chorus__algo_post_word(t, ax, is_send, peer, buf, elems * a->esize, (uint32_t)step, other_way);
  return chorus__algo_post(t, ax, is_send, peer, buf, elems * a->esize, (uint32_t)step);
}

static chorus_status_t post(chorus_task_t* t, pairwise_t* a, int* moved) {
  int n = a->nranks;
  while (a->next_send < n && a->next_send < a->sends_done + (int)a->window) {
    int k = a->next_send, dst = peer_at(a, k);
    chorus_status_t st = post_block(t, a, &a->send_xfers[k % a->window], 1, dst, send_block(a, k),
                                    send_elems(a, dst), k, recv_elems(a, dst));
    if (st < 0) return st;
    a->next_send++;
    *moved = 1;
  }
  while (can_post_recv(a, a->next_recv)) {
    int k = a->next_recv, src = peer_at(a, -k);
    chorus_status_t st = post_block(t, a, &a->recv_xfers[k % a->window], 0, src,
                                    a->recvbuf + recv_at(a, src) * a->esize, recv_elems(a, src), k,
                                    send_elems(a, src));
    if (st < 0) return st;
    a->next_recv++;
    *moved = 1;
  }
  return CHORUS_OK;
}

static int reap(pairwise_t* a) {
  int moved = 0;
  while (a->sends_done < a->next_send && chorus__algo_done(&a->send_xfers[a->sends_done % a->window])) {
    a->sends_done++;
    moved = 1;
  }
  while (a->recvs_done < a->next_recv && chorus__algo_done(&a->recv_xfers[a->recvs_done % a->window])) {
    a->recvs_done++;
    moved = 1;
  }
  return moved;
}

chorus_status_t chorus__pairwise_progress(chorus_task_t* t) {
  pairwise_t* a = t->state;
  if (a->setup_pending) setup(a); /* before any receive can overwrite a stashed block */
  int moved;
  do {
    moved = 0;
    chorus_status_t st = post(t, a, &moved);
    if (st < 0) return st;
    moved |= reap(a);
  } while (moved);
  t->step = (size_t)a->recvs_done;
  return a->sends_done == a->nranks && a->recvs_done == a->nranks ? CHORUS_OK : CHORUS_INPROGRESS;
}

void chorus__pairwise_fini(chorus_task_t* t) {
  pairwise_t* a = t->state;
  if (a) {
    chorus__task_scratch_free(t, a->stash);
    free(a->stash_offset);
    free(a->send_xfers);
  }
  free(a);
  t->state = NULL;
}

/* In place: where each stashed block goes; returns the stash's bytes. */
static size_t plan_stash(pairwise_t* a) {
  size_t bytes = 0;
  for (int k = 1; stashed(a, k) && k < a->nranks; k++) {
    a->stash_offset[k] = bytes;
    bytes += recv_elems(a, peer_at(a, -k)) * a->esize;
  }
  return bytes;
}

chorus_status_t chorus__pairwise_init(chorus_task_t* t) {
  pairwise_t* a = calloc(1, sizeof(*a));
  if (!a) return CHORUS_ERR_NO_MEMORY;
  const chorus_coll_args_t* args = &t->args;
  a->nranks = t->nranks;
  a->rank = a->pos = t->rank;
  if (chorus__topo_has_rails(t->topo)) {
    const chorus_topo_t* topo = t->topo;
    a->order = topo->rails;
    a->pos = topo->local_of[t->rank] * topo->nhosts + topo->host_of[t->rank];
  }
  a->esize = t->dtype_size;
  a->v = args->coll == CH_COLL_ALLTOALLV;
  a->block = args->count;
  a->sendcounts = args->sendcounts;
  a->sdispls = args->sdispls;
  a->recvcounts = args->recvcounts;
  a->rdispls = args->rdispls;
  a->sendbuf = args->sendbuf;
  a->recvbuf = args->recvbuf;
  a->in_place = a->sendbuf == a->recvbuf;
  a->window = CHORUS_PAIRWISE_WINDOW;
  a->next_send = a->sends_done = a->next_recv = a->recvs_done = 1; /* steps start at 1 */
  a->setup_pending = 1;
  t->state = a;
  a->send_xfers = calloc(2 * a->window, sizeof(*a->send_xfers));
  if (!a->send_xfers) goto nomem;
  a->recv_xfers = a->send_xfers + a->window;
  if (a->in_place) {
    a->stash_offset = calloc((size_t)a->nranks, sizeof(*a->stash_offset));
    if (!a->stash_offset) goto nomem;
    size_t bytes = plan_stash(a);
    if (bytes && !(a->stash = chorus__task_scratch(t, bytes))) goto nomem;
  }
  return CHORUS_OK;
nomem:
  chorus__pairwise_fini(t);
  return CHORUS_ERR_NO_MEMORY;
}
