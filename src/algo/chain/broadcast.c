/*
 * chain/broadcast.c - pipelined chain broadcast for large messages; the registry entry runs it
 * over the host-ordered ring, so the chain crosses each host boundary once.
 *
 * Steps: v = (member - root) mod n. The buffer is cut into C chunks of at most chunk_bytes.
 * Member v > 0 receives chunk c from v-1 straight into recvbuf and, once it is there, sends it
 * to v+1 (v < n-1), while chunk c+1 is already arriving. The root sends from sendbuf and copies
 * it to its recvbuf (unless in place). CHORUS_CHAIN_WINDOW chunks in flight per link; tag =
 * chunk index. Bytes per rank: N received (non-root), N sent (all but the last), N = count *
 * elem bytes: every link carries N exactly once.
 *
 * The registry entry cuts a message into chunks, and is priced, as chain.h says.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/chain/chain.h"
#include "algo/common.h"

struct chorus_chain {
  chorus_sched_t s;
  int prev, next; /* member indexes, -1: none */
  const char* src; /* what this member forwards: the root's sendbuf, elsewhere recvbuf */
  char* recvbuf;
  size_t total_bytes, chunk_bytes, nchunks;
  chorus_algo_xfer_t recv_xfers[CHORUS_CHAIN_WINDOW], send_xfers[CHORUS_CHAIN_WINDOW];
  size_t recvs_posted, recvs_done, sends_posted, sends_done;
  int copy_pending;
};
typedef struct chorus_chain chain_t;

static size_t chunk_len(const chain_t* c, size_t i) {
  return chorus__min_sz(c->chunk_bytes, c->total_bytes - i * c->chunk_bytes);
}

chorus_status_t chorus__chain_bcast_step(chorus_task_t* t, chain_t* c) {
  const size_t w = CHORUS_CHAIN_WINDOW;
  int moved;
  do {
    moved = 0;
    while (c->prev >= 0 && c->recvs_posted < c->nchunks && c->recvs_posted < c->recvs_done + w) {
      size_t i = c->recvs_posted;
      chorus_status_t st = chorus__sched_post(t, &c->s, &c->recv_xfers[i % w], 0, c->prev,
                                              c->recvbuf + i * c->chunk_bytes, chunk_len(c, i), (uint32_t)i);
      if (st < 0) return st;
      c->recvs_posted++;
      moved = 1;
    }
    while (c->next >= 0 && c->sends_posted < c->nchunks && c->sends_posted < c->sends_done + w &&
           (c->prev < 0 || c->sends_posted < c->recvs_done)) {
      size_t i = c->sends_posted;
      chorus_status_t st = chorus__sched_post(t, &c->s, &c->send_xfers[i % w], 1, c->next,
                                              c->src + i * c->chunk_bytes, chunk_len(c, i), (uint32_t)i);
      if (st < 0) return st;
      c->sends_posted++;
      moved = 1;
    }
    if (c->copy_pending) { /* after the first sends, so it overlaps them */
      chorus__algo_copy(c->recvbuf, c->src, c->total_bytes);
      c->copy_pending = 0;
      moved = 1;
    }
    while (c->recvs_done < c->recvs_posted && chorus__algo_done(&c->recv_xfers[c->recvs_done % w])) {
      c->recvs_done++;
      moved = 1;
    }
    while (c->sends_done < c->sends_posted && chorus__algo_done(&c->send_xfers[c->sends_done % w])) {
      c->sends_done++;
      moved = 1;
    }
  } while (moved);
  int recvd = c->prev < 0 || c->recvs_done == c->nchunks;
  int sent = c->next < 0 || c->sends_done == c->nchunks;
  return recvd && sent && !c->copy_pending ? CHORUS_OK : CHORUS_INPROGRESS;
}

chorus_status_t chorus__chain_bcast_start(const chorus_sched_t* s, chain_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  chain_t* c = calloc(1, sizeof(*c));
  if (!c) return CHORUS_ERR_NO_MEMORY;
  int n = s->group.size, v = chorus__mod(s->group.me - s->root, n);
  c->s = *s;
  c->prev = v > 0 ? (s->group.me + n - 1) % n : -1;
  c->next = v < n - 1 ? (s->group.me + 1) % n : -1;
  c->recvbuf = s->recvbuf;
  c->src = v == 0 ? s->sendbuf : s->recvbuf;
  c->copy_pending = v == 0;
  c->total_bytes = s->count * s->elem_bytes;
  c->chunk_bytes = chorus__sched_chunk_elems(s) * s->elem_bytes;
  c->nchunks = chorus__div_up(c->total_bytes, c->chunk_bytes);
  *out = c;
  return CHORUS_OK;
}

size_t chorus__chain_bcast_chunks_done(const chain_t* c) { return c->prev < 0 ? c->sends_done : c->recvs_done; }

void chorus__chain_bcast_free(chain_t* c) { free(c); }

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t chain_broadcast_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  s.chunk_bytes = chorus__chain_chunk_bytes(s.count * s.elem_bytes, s.chunk_bytes);
  chain_t* c = NULL;
  chorus_status_t st = chorus__chain_bcast_start(&s, &c);
  t->state = c;
  return st;
}

static chorus_status_t chain_broadcast_progress(chorus_task_t* t) {
  chorus_status_t st = chorus__chain_bcast_step(t, t->state);
  t->step = chorus__chain_bcast_chunks_done(t->state);
  return st;
}

static void chain_broadcast_fini(chorus_task_t* t) {
  chorus__chain_bcast_free(t->state);
  t->state = NULL;
}

static double chain_broadcast_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  return chorus__chain_cost_us(t, cx);
}

const chorus_algo_t chorus__algo_chain_broadcast = {
    .name = "chain",
    .desc = "pipelined chain root -> next -> ..., every link carries the data once: (n-2+C) chunk steps",
    .coll = CH_COLL_BROADCAST,
    .supported = NULL,
    .cost_us = chain_broadcast_cost_us,
    .init = chain_broadcast_init,
    .progress = chain_broadcast_progress,
    .fini = chain_broadcast_fini,
};
