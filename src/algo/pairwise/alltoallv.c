/*
 * pairwise/alltoallv.c - pairwise-exchange alltoallv: pairwise/alltoall.c's schedule with a
 * block of its own size and place per peer and direction.
 *
 * Steps for rank r, k = 1 .. n-1: send sendcounts[r+k] elements at sdispls[r+k] to rank r+k,
 * receive recvcounts[r-k] elements at rdispls[r-k] from rank r-k; up to
 * CHORUS_PAIRWISE_WINDOW steps in flight, sends and receives advancing independently; the own
 * block is copied locally while they travel. Tag = k. Every pair exchanges a frame both ways,
 * empty blocks included: a frame's size is what the sender sends and its count word what the
 * sender expects back (frame.h), so each end checks both directions of the pair against its
 * own counts and a disagreement fails both with ERR_MISMATCH. In place (one set of blocks, sent
 * and then replaced) the blocks of ranks r-1 .. r-floor(n/2), which step k <= n/2 receives
 * over before step n-k sends them, are first saved to a stash and sent from there; the receive
 * of a step k > n/2 waits until step n-k has sent its block from recvbuf.
 * Bytes per rank: the sum of its sendcounts and of its recvcounts but its own, plus a 48-byte
 * frame header per peer and direction (and the stash when in place).
 *
 * Cost (alpha-beta): T = (n-1) * alpha + max(sent, received) / beta; 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"

#ifndef CHORUS_PAIRWISE_WINDOW
#define CHORUS_PAIRWISE_WINDOW 4
#endif

typedef struct {
  int nranks, rank, in_place;
  size_t esize;
  const size_t *sendcounts, *sdispls, *recvcounts, *rdispls; /* the task's copies */
  const char* sendbuf;
  char* recvbuf;
  char* stash;          /* in place: the blocks of ranks r-1 .. r-floor(n/2), back to back */
  size_t* stash_offset; /* in place: byte offset in stash of the block of rank r-k, k >= 1 */
  size_t window;
  chorus_algo_xfer_t* send_xfers; /* window; step k at k % window */
  chorus_algo_xfer_t* recv_xfers;
  int next_send, sends_done; /* step numbers: first not posted / first not done */
  int next_recv, recvs_done;
  int setup_pending; /* own block copy and stash, done at the first progress */
} alltoallv_t;

static int stashed(const alltoallv_t* a, int step) { return a->in_place && 2 * step <= a->nranks; }

static const char* send_block(const alltoallv_t* a, int step) {
  int n = a->nranks, dst = (a->rank + step) % n;
  if (stashed(a, n - step)) return a->stash + a->stash_offset[n - step];
  return a->sendbuf + a->sdispls[dst] * a->esize;
}

static void setup(alltoallv_t* a) {
  int me = a->rank;
  chorus__algo_copy(a->recvbuf + a->rdispls[me] * a->esize, a->sendbuf + a->sdispls[me] * a->esize,
                    a->recvcounts[me] * a->esize);
  for (int k = 1; stashed(a, k) && k < a->nranks; k++) {
    int src = chorus__mod(me - k, a->nranks);
    chorus__algo_copy(a->stash + a->stash_offset[k], a->recvbuf + a->rdispls[src] * a->esize,
                      a->recvcounts[src] * a->esize);
  }
  a->setup_pending = 0;
}

static int can_post_recv(const alltoallv_t* a, int step) {
  if (step >= a->nranks || step >= a->recvs_done + (int)a->window) return 0;
  /* In place, an unstashed block is sent from recvbuf at step n-k: wait for it to leave. */
  return !a->in_place || stashed(a, step) || a->sends_done > a->nranks - step;
}

static chorus_status_t post(chorus_task_t* t, alltoallv_t* a, int* moved) {
  int n = a->nranks;
  while (a->next_send < n && a->next_send < a->sends_done + (int)a->window) {
    int k = a->next_send, dst = (a->rank + k) % n;
    chorus_status_t st = chorus__algo_post_word(t, &a->send_xfers[k % a->window], 1, dst, send_block(a, k),
                                                a->sendcounts[dst] * a->esize, (uint32_t)k, a->recvcounts[dst]);
    if (st < 0) return st;
    a->next_send++;
    *moved = 1;
  }
  while (can_post_recv(a, a->next_recv)) {
    int k = a->next_recv, src = chorus__mod(a->rank - k, n);
    chorus_status_t st = chorus__algo_post_word(t, &a->recv_xfers[k % a->window], 0, src,
                                                a->recvbuf + a->rdispls[src] * a->esize,
                                                a->recvcounts[src] * a->esize, (uint32_t)k, a->sendcounts[src]);
    if (st < 0) return st;
    a->next_recv++;
    *moved = 1;
  }
  return CHORUS_OK;
}

static int reap(alltoallv_t* a) {
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

static chorus_status_t pairwise_alltoallv_progress(chorus_task_t* t) {
  alltoallv_t* a = t->state;
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

static void pairwise_alltoallv_fini(chorus_task_t* t) {
  alltoallv_t* a = t->state;
  if (a) {
    free(a->stash);
    free(a->stash_offset);
    free(a->send_xfers);
  }
  free(a);
  t->state = NULL;
}

/* In place: where each stashed block goes; returns the stash's bytes. */
static size_t plan_stash(alltoallv_t* a) {
  size_t bytes = 0;
  for (int k = 1; stashed(a, k) && k < a->nranks; k++) {
    a->stash_offset[k] = bytes;
    bytes += a->recvcounts[chorus__mod(a->rank - k, a->nranks)] * a->esize;
  }
  return bytes;
}

static chorus_status_t pairwise_alltoallv_init(chorus_task_t* t) {
  alltoallv_t* a = calloc(1, sizeof(*a));
  if (!a) return CHORUS_ERR_NO_MEMORY;
  const chorus_coll_args_t* args = &t->args;
  a->nranks = t->nranks;
  a->rank = t->rank;
  a->esize = t->dtype_size;
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
    if (bytes && !(a->stash = malloc(bytes))) goto nomem;
  }
  return CHORUS_OK;
nomem:
  pairwise_alltoallv_fini(t);
  return CHORUS_ERR_NO_MEMORY;
}

static double pairwise_alltoallv_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  const chorus_coll_args_t* a = &t->args;
  size_t sent = 0, received = 0;
  for (int i = 0; i < t->nranks; i++) {
    if (i == t->rank) continue;
    sent += a->sendcounts[i];
    received += a->recvcounts[i];
  }
  double n = t->nranks, bytes = (double)(sent > received ? sent : received) * (double)t->dtype_size;
  return (n - 1.0) * cx->spread.alpha_us + bytes / cx->spread.bytes_per_us;
}

const chorus_algo_t chorus__algo_pairwise_alltoallv = {
    .name = "pairwise",
    .desc = "n-1 pairwise exchange steps (to r+k, from r-k), blocks of any size, a few steps in flight",
    .coll = CH_COLL_ALLTOALLV,
    .supported = NULL,
    .cost_us = pairwise_alltoallv_cost_us,
    .init = pairwise_alltoallv_init,
    .progress = pairwise_alltoallv_progress,
    .fini = pairwise_alltoallv_fini,
};
