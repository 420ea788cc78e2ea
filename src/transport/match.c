/*
 * match.c - point-to-point matching (the rules and the reasons are in match.h): posted
 * receives, unexpected messages, the rendezvous of large messages (RTS, CTS, DATA) and sends
 * to oneself. Only the thread that drives progress touches it (comm->mu held).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

_Static_assert(CH_COLL_SEND == CHORUS_FRAME_MSG, "point-to-point frames keep the kind they always had");
_Static_assert(CH_COLL_COUNT < CHORUS_FRAME_RTS, "frame kinds must not overlap operation kinds");

chorus_status_t chorus__match_init(chorus_transport_t* tp, size_t eager_bytes, size_t unexp_limit) {
  chorus_match_t* m = &tp->match;
  m->eager_bytes = eager_bytes;
  m->unexp_limit = unexp_limit;
  m->await_cts = calloc((size_t)tp->nranks, sizeof(*m->await_cts));
  m->await_data = calloc((size_t)tp->nranks, sizeof(*m->await_data));
  m->want = calloc((size_t)tp->nranks, sizeof(*m->want));
  if (!m->await_cts || !m->await_data || !m->want) {
    snprintf(tp->err, sizeof(tp->err), "out of memory");
    return CHORUS_ERR_NO_MEMORY;
  }
  return CHORUS_OK;
}

chorus_unexp_t* chorus__unexp_new(chorus_match_t* m, int peer, const chorus_frame_hdr_t* h, int kind, size_t bytes) {
  chorus_unexp_t* u = malloc(sizeof(*u) + bytes);
  if (!u) return NULL;
  memset(u, 0, sizeof(*u));
  u->hdr = *h;
  u->peer = peer;
  u->kind = kind;
  u->bytes = bytes;
  m->unexp_bytes += bytes;
  return u;
}

void chorus__unexp_free(chorus_match_t* m, chorus_unexp_t* u) {
  m->unexp_bytes -= u->bytes;
  free(u);
}

void chorus__match_reset(chorus_transport_t* tp) {
  chorus_match_t* m = &tp->match;
  while (m->unexp_head) {
    chorus_unexp_t* u = m->unexp_head;
    m->unexp_head = u->next;
    chorus__unexp_free(m, u);
  }
  m->unexp_tail = NULL;
  m->posted_head = m->posted_tail = NULL;
  for (int p = 0; m->want && p < tp->nranks; p++) {
    m->await_cts[p] = m->await_data[p] = NULL;
    m->want[p] = 0;
  }
  m->any_posted = 0;
}

void chorus__match_free(chorus_transport_t* tp) {
  chorus__match_reset(tp);
  chorus_match_t* m = &tp->match;
  free(m->await_cts);
  free(m->await_data);
  free(m->want);
  m->await_cts = m->await_data = NULL;
  m->want = NULL;
}

/* ---- lists ---- */

static void list_push(chorus_xfer_t** head, chorus_xfer_t** tail, chorus_xfer_t* x) {
  x->next = NULL;
  x->prev = *tail;
  if (*tail) (*tail)->next = x;
  else *head = x;
  *tail = x;
}

static void list_unlink(chorus_xfer_t** head, chorus_xfer_t** tail, chorus_xfer_t* x) {
  if (x->prev) x->prev->next = x->next;
  else *head = x->next;
  if (x->next) x->next->prev = x->prev;
  else if (tail) *tail = x->prev;
  x->next = x->prev = NULL;
}

/* The per-peer waiting lists have no tail: pushed at the head, searched by message number. */
static void await_push(chorus_match_t* m, chorus_xfer_t** lists, int peer, chorus_xfer_t* x) {
  x->prev = NULL;
  x->next = lists[peer];
  if (x->next) x->next->prev = x;
  lists[peer] = x;
  m->want[peer]++;
}

static chorus_xfer_t* await_take(chorus_match_t* m, chorus_xfer_t** lists, int peer, uint64_t seq) {
  chorus_xfer_t* x = lists[peer];
  while (x && x->seq != seq) x = x->next;
  if (!x) return NULL;
  list_unlink(&lists[peer], NULL, x);
  m->want[peer]--;
  return x;
}

static void unexp_push(chorus_match_t* m, chorus_unexp_t* u) {
  u->next = NULL;
  u->prev = m->unexp_tail;
  if (m->unexp_tail) m->unexp_tail->next = u;
  else m->unexp_head = u;
  m->unexp_tail = u;
}

static void unexp_unlink(chorus_match_t* m, chorus_unexp_t* u) {
  if (u->prev) u->prev->next = u->next;
  else m->unexp_head = u->next;
  if (u->next) u->next->prev = u->prev;
  else m->unexp_tail = u->prev;
  u->next = u->prev = NULL;
}

/* ---- matching ---- */

static int accepts(const chorus_xfer_t* r, int src, uint32_t tag) {
  return (r->peer == CHORUS_ANY_SOURCE || r->peer == src) && (r->any_tag || r->tag == tag);
}

/* The earliest posted receive that takes a message from src with tag, unlinked; or NULL. */
static chorus_xfer_t* take_posted(chorus_match_t* m, int src, uint32_t tag) {
  chorus_xfer_t* x = m->posted_head;
  while (x && !accepts(x, src, tag)) x = x->next;
  if (!x) return NULL;
  list_unlink(&m->posted_head, &m->posted_tail, x);
  if (x->peer == CHORUS_ANY_SOURCE) m->any_posted--;
  else m->want[x->peer]--;
  return x;
}

static void complete(chorus_xfer_t* x) { __atomic_store_n(&x->done, 1, __ATOMIC_RELEASE); }

/* Receive x takes the message h from src: what arrived, and how much of it x keeps. */
static size_t take_message(chorus_xfer_t* x, int src, const chorus_frame_hdr_t* h) {
  x->got_src = src;
  x->got_tag = h->tag;
  x->got_bytes = h->nbytes;
  x->seq = h->seq;
  x->parts_done = 0;
  x->nparts = 1;
  if (h->dtype != x->hdr.dtype) {
    x->xst = CHORUS_ERR_MISMATCH;
    return 0;
  }
  x->xst = h->nbytes > x->nbytes ? CHORUS_ERR_TRUNCATED : CHORUS_OK;
  return h->nbytes < x->nbytes ? h->nbytes : x->nbytes;
}

/* Receive x takes a large message (its RTS h from peer): CTS to the sender, then x waits for
 * the DATA, in as many parts as the sender cuts it into. */
static chorus_status_t rendezvous(chorus_transport_t* tp, chorus_xfer_t* x, int peer, const chorus_frame_hdr_t* h) {
  take_message(x, peer, h);
  x->nparts = chorus__stream_nparts(tp, peer, h->nbytes);
  x->rdv = 2;
  await_push(&tp->match, tp->match.await_data, peer, x);
  return chorus__stream_queue_cts(tp, peer, h->seq);
}

/* A send to oneself meets receive r: one copy, both complete. */
static void self_deliver(chorus_xfer_t* send, chorus_xfer_t* r) {
  size_t keep = take_message(r, send->peer, &send->hdr);
  if (keep) memcpy(r->buf, send->buf, keep);
  complete(send);
  complete(r);
}

chorus_status_t chorus__match_post_send(chorus_transport_t* tp, chorus_xfer_t* x) {
  chorus_match_t* m = &tp->match;
  if (tp->peers[x->peer].is_self) {
    chorus_xfer_t* r = take_posted(m, x->peer, x->tag);
    if (r) {
      self_deliver(x, r);
      return CHORUS_OK;
    }
    chorus_unexp_t* u = chorus__unexp_new(m, x->peer, &x->hdr, CHORUS_U_SELF, 0);
    if (!u) return CHORUS_ERR_NO_MEMORY;
    u->self_send = x;
    unexp_push(m, u);
    return CHORUS_OK;
  }
  int eager = x->nbytes <= m->eager_bytes;
  x->hdr.coll = eager ? CHORUS_FRAME_MSG : CHORUS_FRAME_RTS;
  x->wire_bytes = eager ? x->nbytes : 0;
  x->rdv = !eager;
  /* Matching frames (MSG, RTS) travel on the peer's first stream, so that they arrive in
   * sending order whatever the number of sockets; only DATA is striped. */
  return chorus__stream_post_parts(tp, x, 1);
}

void chorus__match_rts_sent(chorus_transport_t* tp, chorus_xfer_t* x) {
  await_push(&tp->match, tp->match.await_cts, x->peer, x);
}

chorus_status_t chorus__match_cts(chorus_transport_t* tp, int peer, const chorus_frame_hdr_t* h) {
  chorus_xfer_t* x = await_take(&tp->match, tp->match.await_cts, peer, h->seq);
  if (!x) {
    snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): a CTS for message #%llu, which this rank never "
             "offered", peer, tp->peers[peer].host, (unsigned long long)h->seq);
    tp->err_peer = peer;
    return CHORUS_ERR_PROTOCOL;
  }
  x->rdv = 2;
  x->hdr.coll = CHORUS_FRAME_DATA;
  x->wire_bytes = x->nbytes;
  x->parts_done = 0;
  return chorus__stream_post_parts(tp, x, chorus__stream_nparts(tp, peer, x->nbytes));
}

/* Copies an unexpected message that is in into receive r (which accepted it). */
static void deliver(chorus_xfer_t* r, const chorus_unexp_t* u) {
  size_t keep = r->xst == CHORUS_ERR_MISMATCH ? 0 : (u->bytes < r->nbytes ? u->bytes : r->nbytes);
  if (keep) memcpy(r->buf, u->data, keep);
  complete(r);
}

chorus_status_t chorus__match_post_recv(chorus_transport_t* tp, chorus_xfer_t* x) {
  chorus_match_t* m = &tp->match;
  chorus_unexp_t* u = m->unexp_head;
  while (u && !accepts(x, u->peer, u->hdr.tag)) u = u->next;
  if (!u) {
    list_push(&m->posted_head, &m->posted_tail, x);
    if (x->peer == CHORUS_ANY_SOURCE) m->any_posted++;
    else m->want[x->peer]++;
    return CHORUS_OK;
  }
  unexp_unlink(m, u);
  chorus_status_t st = CHORUS_OK;
  switch (u->kind) {
    case CHORUS_U_MSG:
      take_message(x, u->peer, &u->hdr);
      if (u->filling) { /* still arriving: the stream hands it over when it is in */
        u->claim = x;
        return CHORUS_OK;
      }
      deliver(x, u);
      break;
    case CHORUS_U_RTS: st = rendezvous(tp, x, u->peer, &u->hdr); break;
    default: self_deliver(u->self_send, x); break;
  }
  chorus__unexp_free(m, u);
  return st;
}

/* ---- frames from a stream ---- */

static chorus_status_t frame_error(chorus_transport_t* tp, const chorus_stream_t* s, const char* why) {
  char d[CHORUS_FRAME_DESC_LEN];
  chorus__frame_describe(&s->rx_hdr, d, sizeof(d));
  snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): %s: %s", s->peer, tp->peers[s->peer].host, why, d);
  tp->err_peer = s->peer;
  return CHORUS_ERR_PROTOCOL;
}

/* Checks a point-to-point header before any of it is trusted. */
static const char* check_p2p_header(const chorus_transport_t* tp, const chorus_stream_t* s, const chorus_frame_hdr_t* h) {
  if (h->version != CHORUS_PROTO_VERSION) return "a frame of another protocol version";
  if (h->comm_id != tp->comm_id) return "a frame of another communicator";
  size_t esize = chorus_dtype_size((chorus_dtype_t)h->dtype);
  if (!esize || h->count > UINT64_MAX / esize || h->count * esize != h->nbytes) return "a malformed message header";
  if (h->tag > (uint32_t)CHORUS_TAG_MAX) return "a message with an impossible tag";
  if (h->coll != CHORUS_FRAME_DATA && s->index != 0) return "a message header off the peer's first stream";
  return NULL;
}

/* A MSG frame: into its receive when one is posted, else read into an unexpected message
 * (within the bound; past it, it waits in the stream). */
static int route_msg(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st) {
  chorus_match_t* m = &tp->match;
  const chorus_frame_hdr_t* h = &s->rx_hdr;
  chorus_xfer_t* x = take_posted(m, s->peer, h->tag);
  if (x) {
    size_t keep = take_message(x, s->peer, h);
    s->rx = (chorus_rx_route_t){x, NULL, x->buf, keep, h->nbytes};
    return 1;
  }
  if (m->unexp_bytes + h->nbytes > m->unexp_limit) return 0;
  chorus_unexp_t* u = chorus__unexp_new(m, s->peer, h, CHORUS_U_MSG, h->nbytes);
  if (!u) {
    snprintf(tp->err, sizeof(tp->err), "out of memory holding a message of %llu bytes from rank %d",
             (unsigned long long)h->nbytes, s->peer);
    *st = CHORUS_ERR_NO_MEMORY;
    return 0;
  }
  u->filling = 1;
  unexp_push(m, u);
  s->rx = (chorus_rx_route_t){NULL, u, u->data, h->nbytes, h->nbytes};
  return 1;
}

/* An RTS frame (header only): its receive answers CTS now, or it waits as unexpected. */
static int route_rts(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st) {
  chorus_match_t* m = &tp->match;
  const chorus_frame_hdr_t* h = &s->rx_hdr;
  chorus_xfer_t* x = take_posted(m, s->peer, h->tag);
  if (x) {
    *st = rendezvous(tp, x, s->peer, h);
  } else {
    chorus_unexp_t* u = chorus__unexp_new(m, s->peer, h, CHORUS_U_RTS, 0);
    if (!u) {
      snprintf(tp->err, sizeof(tp->err), "out of memory");
      *st = CHORUS_ERR_NO_MEMORY;
      return 0;
    }
    unexp_push(m, u);
  }
  s->rx = (chorus_rx_route_t){NULL, NULL, NULL, 0, 0};
  return *st >= 0;
}

/* A DATA frame (one part of it on this stream): into the receive that sent the CTS. */
static int route_data(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st) {
  const chorus_frame_hdr_t* h = &s->rx_hdr;
  chorus_xfer_t* x = tp->match.await_data[s->peer];
  while (x && x->seq != h->seq) x = x->next;
  if (!x || h->nbytes != x->got_bytes) {
    *st = frame_error(tp, s, x ? "DATA of another length than its RTS" : "DATA that no CTS asked for");
    return 0;
  }
  size_t off, len;
  chorus__part_range(h->nbytes, x->nparts, x->nparts > 1 ? s->index : 0, &off, &len);
  size_t room = x->xst == CHORUS_ERR_MISMATCH || off >= x->nbytes ? 0 : x->nbytes - off;
  s->rx = (chorus_rx_route_t){x, NULL, x->buf + off, len < room ? len : room, len};
  return 1;
}

int chorus__match_route(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st) {
  const char* why = check_p2p_header(tp, s, &s->rx_hdr);
  if (why) {
    *st = frame_error(tp, s, why);
    return 0;
  }
  switch (s->rx_hdr.coll) {
    case CHORUS_FRAME_MSG: return route_msg(tp, s, st);
    case CHORUS_FRAME_RTS: return route_rts(tp, s, st);
    default: return route_data(tp, s, st);
  }
}

void chorus__match_frame_done(chorus_transport_t* tp, const chorus_rx_route_t* r) {
  chorus_match_t* m = &tp->match;
  if (r->u) { /* an unexpected message is in: a receive that took it meanwhile gets it now */
    chorus_unexp_t* u = r->u;
    u->filling = 0;
    if (u->claim) {
      deliver(u->claim, u);
      chorus__unexp_free(m, u);
    }
    return;
  }
  chorus_xfer_t* x = r->x;
  if (!x) return; /* an RTS: nothing followed its header */
  if (++x->parts_done < x->nparts) return;
  if (x->rdv == 2) {
    list_unlink(&m->await_data[x->got_src], NULL, x);
    m->want[x->got_src]--;
  }
  complete(x);
}
