/*
 * pairwise/alltoall.c - pairwise-exchange alltoall.
 *
 * Steps for rank r, k = 1 .. n-1: send block (r+k) mod n of sendbuf to rank r+k, receive block
 * (r-k) mod n of recvbuf from rank r-k; up to CHORUS_PAIRWISE_WINDOW steps in flight, sends and
 * receives advancing independently. The own block is copied locally while they travel. Tag = k.
 * In place (sendbuf == recvbuf) the receive of step k <= n/2 would overwrite block r-k before
 * step n-k sends it, so those floor(n/2) blocks are first saved to a stash and sent from there;
 * the receive of a step k > n/2 waits until step n-k has sent its block from recvbuf.
 * Bytes per rank: (n-1) * B sent and received, B = count * elem bytes (plus floor(n/2) * B
 * copied when in place).
 *
 * Cost (alpha-beta): T = (n-1) * alpha + (n-1) * B / beta; 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"

#ifndef CHORUS_PAIRWISE_WINDOW
#define CHORUS_PAIRWISE_WINDOW 4
#endif

typedef struct {
  int nranks, rank, in_place;
  const char* sendbuf;
  char* recvbuf;
  size_t block_bytes;
  char* stash; /* in place: blocks r-1 .. r-floor(n/2), stash[k-1] = block r-k */
  size_t window;
  chorus_algo_xfer_t* send_xfers; /* window; step k at k % window */
  chorus_algo_xfer_t* recv_xfers;
  int next_send, sends_done; /* step numbers: first not posted / first not done */
  int next_recv, recvs_done;
  int setup_pending; /* own block copy and stash, done at the first progress */
} alltoall_t;

static int stashed(const alltoall_t* a, int step) { return a->in_place && 2 * step <= a->nranks; }

static const char* send_block(const alltoall_t* a, int step) {
  int n = a->nranks, dst = (a->rank + step) % n;
  if (stashed(a, n - step)) return a->stash + (size_t)(n - step - 1) * a->block_bytes;
  return a->sendbuf + (size_t)dst * a->block_bytes;
}

static void setup(alltoall_t* a) {
  size_t own = (size_t)a->rank * a->block_bytes;
  chorus__algo_copy(a->recvbuf + own, a->sendbuf + own, a->block_bytes);
  for (int k = 1; stashed(a, k) && k < a->nranks; k++) {
    int src = chorus__mod(a->rank - k, a->nranks);
    chorus__algo_copy(a->stash + (size_t)(k - 1) * a->block_bytes,
                      a->recvbuf + (size_t)src * a->block_bytes, a->block_bytes);
  }
  a->setup_pending = 0;
}

static int can_post_recv(const alltoall_t* a, int step) {
  if (step >= a->nranks || step >= a->recvs_done + (int)a->window) return 0;
  /* In place, an unstashed block is sent from recvbuf at step n-k: wait for it to leave. */
  return !a->in_place || stashed(a, step) || a->sends_done > a->nranks - step;
}

static chorus_status_t post(chorus_task_t* t, alltoall_t* a, int* moved) {
  int n = a->nranks;
  while (a->next_send < n && a->next_send < a->sends_done + (int)a->window) {
    int k = a->next_send;
    chorus_status_t st = chorus__algo_post(t, &a->send_xfers[k % a->window], 1, (a->rank + k) % n,
                                           send_block(a, k), a->block_bytes, (uint32_t)k);
    if (st < 0) return st;
    a->next_send++;
    *moved = 1;
  }
  while (can_post_recv(a, a->next_recv)) {
    int k = a->next_recv, src = chorus__mod(a->rank - k, n);
    chorus_status_t st = chorus__algo_post(t, &a->recv_xfers[k % a->window], 0, src,
                                           a->recvbuf + (size_t)src * a->block_bytes,
                                           a->block_bytes, (uint32_t)k);
    if (st < 0) return st;
    a->next_recv++;
    *moved = 1;
  }
  return CHORUS_OK;
}

static int reap(alltoall_t* a) {
  int moved = 0;
  while (a->sends_done < a->next_send &&
         chorus__algo_done(&a->send_xfers[a->sends_done % a->window])) {
    a->sends_done++;
    moved = 1;
  }
  while (a->recvs_done < a->next_recv &&
         chorus__algo_done(&a->recv_xfers[a->recvs_done % a->window])) {
    a->recvs_done++;
    moved = 1;
  }
  return moved;
}

static chorus_status_t pairwise_alltoall_progress(chorus_task_t* t) {
  alltoall_t* a = t->state;
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

static void pairwise_alltoall_fini(chorus_task_t* t) {
  alltoall_t* a = t->state;
  if (a) {
    free(a->stash);
    free(a->send_xfers);
  }
  free(a);
  t->state = NULL;
}

static chorus_status_t pairwise_alltoall_init(chorus_task_t* t) {
  alltoall_t* a = calloc(1, sizeof(*a));
  if (!a) return CHORUS_ERR_NO_MEMORY;
  a->nranks = t->nranks;
  a->rank = t->rank;
  a->sendbuf = t->args.sendbuf;
  a->recvbuf = t->args.recvbuf;
  a->in_place = a->sendbuf == a->recvbuf;
  a->block_bytes = t->args.count * t->dtype_size;
  a->window = CHORUS_PAIRWISE_WINDOW;
  a->next_send = a->sends_done = a->next_recv = a->recvs_done = 1; /* steps start at 1 */
  a->setup_pending = 1;
  t->state = a;
  a->send_xfers = calloc(2 * a->window, sizeof(*a->send_xfers));
  if (!a->send_xfers) goto nomem;
  a->recv_xfers = a->send_xfers + a->window;
  size_t nstash = a->in_place ? (size_t)(a->nranks / 2) : 0;
  if (nstash && a->block_bytes) {
    a->stash = malloc(nstash * a->block_bytes);
    if (!a->stash) goto nomem;
  }
  return CHORUS_OK;
nomem:
  pairwise_alltoall_fini(t);
  return CHORUS_ERR_NO_MEMORY;
}

static double pairwise_alltoall_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double n = t->nranks, block_bytes = (double)t->args.count * (double)t->dtype_size;
  if (t->nranks <= 1) return 0.0;
  return (n - 1.0) * cx->spread.alpha_us + (n - 1.0) * block_bytes / cx->spread.bytes_per_us;
}

const chorus_algo_t chorus__algo_pairwise_alltoall = {
    .name = "pairwise",
    .desc = "n-1 pairwise exchange steps (to r+k, from r-k), a few steps in flight",
    .coll = CH_COLL_ALLTOALL,
    .supported = NULL,
    .cost_us = pairwise_alltoall_cost_us,
    .init = pairwise_alltoall_init,
    .progress = pairwise_alltoall_progress,
    .fini = pairwise_alltoall_fini,
};
