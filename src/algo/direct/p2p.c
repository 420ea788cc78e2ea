/*
 * direct/p2p.c - point-to-point send, recv and sendrecv: one transfer each way, posted at once.
 *
 * Steps: send posts one send of count elements of args.sendbuf to args.root; recv posts one
 * receive of count elements into args.recvbuf from args.root; sendrecv posts the receive of
 * recvcount elements from args.peer and the send of count elements to args.root together, so
 * two ranks exchanging large messages cannot block each other. Zero-element messages are still
 * sent (the peer posts a matching zero-byte receive). Tag = 0. Bytes: the message itself.
 *
 * Cost (alpha-beta): send/recv T = alpha + B / beta; sendrecv T = alpha + max(Bs, Br) / beta
 * (both directions use the link at once).
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"

typedef struct {
  int posted;
  int nxfers;
  chorus_xfer_t xfers[2];
} p2p_t;

static chorus_status_t p2p_init(chorus_task_t* t) {
  p2p_t* p = calloc(1, sizeof(*p));
  if (!p) return CHORUS_ERR_NO_MEMORY;
  t->state = p;
  return CHORUS_OK;
}

static void p2p_fini(chorus_task_t* t) {
  free(t->state);
  t->state = NULL;
}

static chorus_status_t post_all(chorus_task_t* t, p2p_t* p) {
  const chorus_coll_args_t* a = &t->args;
  chorus_status_t st = CHORUS_OK;
  p->posted = 1;
  if (a->coll == CH_COLL_RECV || a->coll == CH_COLL_SENDRECV) {
    int src = a->coll == CH_COLL_RECV ? a->root : a->peer;
    size_t elems = a->coll == CH_COLL_RECV ? a->count : a->recvcount;
    st = chorus__conn_irecv(t, src, a->recvbuf, elems * t->dtype_size, 0, &p->xfers[p->nxfers++]);
  }
  if (st == CHORUS_OK && (a->coll == CH_COLL_SEND || a->coll == CH_COLL_SENDRECV))
    st = chorus__conn_isend(t, a->root, a->sendbuf, a->count * t->dtype_size, 0,
                            &p->xfers[p->nxfers++]);
  return st;
}

static chorus_status_t p2p_progress(chorus_task_t* t) {
  p2p_t* p = t->state;
  if (!p->posted) {
    chorus_status_t st = post_all(t, p);
    if (st < 0) return st;
  }
  for (int i = 0; i < p->nxfers; i++)
    if (!chorus__xfer_done(&p->xfers[i])) return CHORUS_INPROGRESS;
  return CHORUS_OK;
}

static double p2p_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t elems = t->args.count;
  if (t->args.coll == CH_COLL_SENDRECV && t->args.recvcount > elems) elems = t->args.recvcount;
  return cx->flat.alpha_us + (double)elems * (double)t->dtype_size / cx->flat.bytes_per_us;
}

const chorus_algo_t chorus__algo_direct_send = {
    .name = "direct",
    .desc = "one send to the peer",
    .coll = CH_COLL_SEND,
    .supported = NULL,
    .cost_us = p2p_cost_us,
    .init = p2p_init,
    .progress = p2p_progress,
    .fini = p2p_fini,
};

const chorus_algo_t chorus__algo_direct_recv = {
    .name = "direct",
    .desc = "one receive from the peer",
    .coll = CH_COLL_RECV,
    .supported = NULL,
    .cost_us = p2p_cost_us,
    .init = p2p_init,
    .progress = p2p_progress,
    .fini = p2p_fini,
};

const chorus_algo_t chorus__algo_direct_sendrecv = {
    .name = "direct",
    .desc = "a send to one peer and a receive from another, posted together",
    .coll = CH_COLL_SENDRECV,
    .supported = NULL,
    .cost_us = p2p_cost_us,
    .init = p2p_init,
    .progress = p2p_progress,
    .fini = p2p_fini,
};
