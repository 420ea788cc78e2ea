/*
 * direct/p2p.c - point-to-point send, recv and sendrecv: one transfer each way, posted at once
 * and matched by source and tag on the receiving side (transport/match.h).
 *
 * Steps: send posts one send of count elements of args.sendbuf to args.root; recv posts one
 * receive of up to count elements into args.recvbuf from args.root (or any source); sendrecv
 * posts the receive of up to recvcount elements from args.peer and the send of count elements
 * to args.root together, so two ranks exchanging large messages cannot block each other.
 * Zero-element messages are still sent. Tag: args.tag. Bytes: the message itself. A receive
 * reports what it got (source, tag, count) in the task; a longer message (ERR_TRUNCATED) or
 * one of another dtype (ERR_MISMATCH) fails this task alone.
 *
 * Cost (alpha-beta): send/recv T = alpha + B / beta; sendrecv T = alpha + max(Bs, Br) / beta
 * (both directions use the link at once).
 */
#include <stdio.h>
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "core/comm.h"

typedef struct {
  int posted;
  chorus_xfer_t recv, send;
  int has_recv, has_send;
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
    p->has_recv = 1;
    st = chorus__conn_p2p_recv(t, src, a->recvbuf, elems * t->dtype_size, a->tag, &p->recv);
  }
  if (st == CHORUS_OK && (a->coll == CH_COLL_SEND || a->coll == CH_COLL_SENDRECV)) {
    p->has_send = 1;
    st = chorus__conn_p2p_send(t, a->root, a->sendbuf, a->count * t->dtype_size, a->tag, &p->send);
  }
  return st;
}

/* The receive is in: what it got, and whether it failed alone. */
static chorus_status_t recv_result(chorus_task_t* t, const chorus_xfer_t* x) {
  t->got_src = x->got_src;
  t->got_tag = (int)x->got_tag;
  t->got_count = x->got_bytes / t->dtype_size;
  if (x->xst >= 0) return CHORUS_OK;
  char* err = t->comm->tp.err;
  size_t errlen = sizeof(t->comm->tp.err);
  size_t cap = x->nbytes / t->dtype_size;
  const char* dt = chorus_dtype_name((chorus_dtype_t)x->hdr.dtype);
  if (x->xst == CHORUS_ERR_TRUNCATED)
    snprintf(err, errlen, "the message from rank %d (tag %u) has %zu elements, more than the %zu of the receive buffer "
             "(the first %zu were received)", x->got_src, x->got_tag, t->got_count, cap, cap);
  else
    snprintf(err, errlen, "the message from rank %d (tag %u, %llu bytes) is not of the receive's dtype %s",
             x->got_src, x->got_tag, (unsigned long long)x->got_bytes, dt ? dt : "?");
  t->local_fail = 1;
  return x->xst;
}

static chorus_status_t p2p_progress(chorus_task_t* t) {
  p2p_t* p = t->state;
  if (!p->posted) {
    chorus_status_t st = post_all(t, p);
    if (st < 0) return st;
  }
  if ((p->has_recv && !chorus__xfer_done(&p->recv)) || (p->has_send && !chorus__xfer_done(&p->send)))
    return CHORUS_INPROGRESS;
  return p->has_recv ? recv_result(t, &p->recv) : CHORUS_OK;
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
