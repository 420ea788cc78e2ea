/*
 * transport.c - the data path shared by every stream (TCP socket or shared ring): frames in
 * posting order per stream, a 48-byte header (frame.h) then the payload, written in one call
 * and received straight into the destination buffer once the header has been validated.
 * Messages to a TCP peer with several sockets are cut into parts of at least
 * CHORUS_STRIPE_PART_BYTES, one per socket in use (stripe_socks), as many as fit (a message
 * smaller than two parts travels whole on the first socket).
 * Status frames (frame.h) ride on the TCP sockets between data frames: a rank that timed out
 * asks its peers, which answer from their progress passes; they never count as progress. The
 * status exchange itself is in status.c, the waiting in wait.c; both reach the streams through
 * stream.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/log.h"
#include "transport/stream.h"

chorus_status_t chorus__transport_create(chorus_transport_t* tp, int rank, int nranks,
                                         uint64_t comm_id) {
  memset(tp, 0, sizeof(*tp));
  tp->rank = rank;
  tp->nranks = nranks;
  tp->comm_id = comm_id;
  tp->epfd = epoll_create1(EPOLL_CLOEXEC);
  tp->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  tp->peers = calloc((size_t)nranks, sizeof(chorus_peer_t));
  tp->status = calloc((size_t)nranks, sizeof(chorus_rank_status_t));
  if (tp->epfd < 0 || tp->wakefd < 0 || !tp->peers || !tp->status) {
    snprintf(tp->err, sizeof(tp->err), "cannot create the epoll set: %s", strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = NULL};
  epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->wakefd, &ev);
  tp->peers[rank].is_self = 1;
  tp->gave_up_from = -1;
  tp->err_peer = -1;
  return CHORUS_OK;
}

/* ---- stream I/O dispatch ---- */

static ssize_t stream_writev(chorus_transport_t* tp, chorus_stream_t* s, const struct iovec* iov, int niov) {
  if (!s->is_shm) return chorus__tcp_writev(s, iov, niov);
  if (s->peer_closed) return -EPIPE;
  size_t n = chorus__shm_ring_write(s->tx_ring, tp->shm.ring_bytes, iov, niov);
  if (n) chorus__shm_bell_ring(s->peer_bell, s->peer_wakefd);
  return (ssize_t)n;
}

static ssize_t stream_read(chorus_transport_t* tp, chorus_stream_t* s, void* buf, size_t len) {
  if (!s->is_shm) {
    return chorus__tcp_read(s, buf, len);
  }
  size_t n = chorus__shm_ring_read(s->rx_ring, tp->shm.ring_bytes, buf, len);
  if (n) {
    chorus__shm_bell_ring(s->peer_bell, s->peer_wakefd); /* the writer may wait for space */
    return (ssize_t)n;
  }
  return s->peer_closed ? -EPIPE : 0;
}

/* ---- data path ---- */

void chorus__part_range(size_t nbytes, int n, int i, size_t* off, size_t* len) {
  size_t base = nbytes / (size_t)n, rem = nbytes % (size_t)n;
  *off = (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
  *len = base + ((size_t)i < rem ? 1 : 0);
}

/* The part of x that stream s carries. */
void chorus__stream_part(const chorus_stream_t* s, const chorus_xfer_t* x, size_t nbytes, size_t* off, size_t* len) {
  chorus__part_range(nbytes, x->nparts, x->nparts > 1 ? s->index : 0, off, len);
}

static void part_done(chorus_xfer_t* x) {
  if (++x->parts_done == x->nparts) __atomic_store_n(&x->done, 1, __ATOMIC_RELEASE);
}

static chorus_status_t stream_error(chorus_transport_t* tp, const chorus_stream_t* s,
                                    const char* what, int err) {
  const chorus_peer_t* p = &tp->peers[s->peer];
  int closed = err == EPIPE;
  int remote = closed || err == ECONNRESET || err == ETIMEDOUT || err == EHOSTUNREACH;
  snprintf(tp->err, sizeof(tp->err), "%s connection to rank %d (host %s, %s) %s%s%s",
           s->is_shm ? "shared-memory" : "TCP", s->peer, p->host, p->addr,
           closed ? "was closed by the peer (it exited or failed)" : what, closed ? "" : ": ",
           closed ? "" : strerror(err));
  tp->err_peer = s->peer;
  return remote ? CHORUS_ERR_REMOTE : CHORUS_ERR_SYSTEM;
}

/* ---- control frames: status frames on the TCP socket (between data frames of a TCP stream),
 * CTS frames in the stream itself (between data frames) ---- */

static int data_boundary(const chorus_stream_t* s) { return !s->tx_hdr_off && !s->tx_off; }
int chorus__stream_tx_at_boundary(const chorus_stream_t* s) { return s->is_shm || (data_boundary(s) && !s->cts_off); }
static int cts_writable(const chorus_stream_t* s) { return data_boundary(s) && (s->is_shm || !s->ctl_off); }

/* Writes queued control frames. A failure only marks the peer closed: the data path, if it
 * needs the peer, reports the error; control frames alone never fail an operation. */
void chorus__stream_ctl_flush(chorus_stream_t* s) {
  while (s->ctl_count && chorus__stream_tx_at_boundary(s)) {
    char* h = (char*)&s->ctl[s->ctl_head];
    struct iovec iov = {h + s->ctl_off, sizeof(chorus_frame_hdr_t) - s->ctl_off};
    ssize_t n = chorus__tcp_writev(s, &iov, 1);
    if (n < 0) {
      s->peer_closed = 1;
      s->ctl_count = s->ctl_off = 0; /* the stream is lost anyway */
      return;
    }
    if (n == 0) return;
    s->ctl_off += (size_t)n;
    if (s->ctl_off < sizeof(chorus_frame_hdr_t)) continue;
    s->ctl_off = 0;
    s->ctl_head = (s->ctl_head + 1) % s->ctl_cap;
    s->ctl_count--;
  }
}

chorus_status_t chorus__stream_cts_flush(chorus_transport_t* tp, chorus_stream_t* s) {
  while (s->cts_count && cts_writable(s)) {
    if (!s->cts_off) {
      memset(&s->cts_hdr, 0, sizeof(s->cts_hdr));
      s->cts_hdr.magic = CHORUS_FRAME_CTS_MAGIC;
      s->cts_hdr.version = CHORUS_PROTO_VERSION;
      s->cts_hdr.comm_id = tp->comm_id;
      s->cts_hdr.seq = s->cts[s->cts_head];
    }
    struct iovec iov = {(char*)&s->cts_hdr + s->cts_off, sizeof(s->cts_hdr) - s->cts_off};
    ssize_t n = stream_writev(tp, s, &iov, 1);
    if (n < 0) return stream_error(tp, s, "failed while sending", (int)-n);
    if (n == 0) return CHORUS_OK;
    s->cts_off += (size_t)n;
    if (s->cts_off < sizeof(s->cts_hdr)) continue;
    s->cts_off = 0;
    s->cts_head = (s->cts_head + 1) % s->cts_cap;
    s->cts_count--;
  }
  return CHORUS_OK;
}

chorus_status_t chorus__stream_queue_cts(chorus_transport_t* tp, int peer, uint64_t seq) {
  chorus_stream_t* s = &tp->peers[peer].socks[0];
  if (s->cts_count == s->cts_cap) {
    size_t cap = s->cts_cap ? s->cts_cap * 2 : 8;
    uint64_t* q = malloc(cap * sizeof(*q));
    if (!q) return CHORUS_ERR_NO_MEMORY;
    for (size_t i = 0; i < s->cts_count; i++) q[i] = s->cts[(s->cts_head + i) % s->cts_cap];
    free(s->cts);
    s->cts = q;
    s->cts_head = 0;
    s->cts_cap = cap;
  }
  s->cts[(s->cts_head + s->cts_count) % s->cts_cap] = seq;
  s->cts_count++;
  return chorus__stream_cts_flush(tp, s);
}

int chorus__stream_tx_iov(const chorus_stream_t* s, const chorus_xfer_t* x, struct iovec iov[2], size_t* len) {
  size_t off;
  chorus__stream_part(s, x, x->wire_bytes, &off, len);
  int niov = 0;
  if (s->tx_hdr_off < sizeof(x->hdr))
    iov[niov++] = (struct iovec){(char*)&x->hdr + s->tx_hdr_off, sizeof(x->hdr) - s->tx_hdr_off};
  if (s->tx_off < *len) iov[niov++] = (struct iovec){x->buf + off + s->tx_off, *len - s->tx_off};
  return niov;
}

int chorus__stream_tx_advance(chorus_stream_t* s, const chorus_xfer_t* x, size_t sent, size_t len) {
  size_t hdr_left = sizeof(x->hdr) - s->tx_hdr_off, to_hdr = sent < hdr_left ? sent : hdr_left;
  s->tx_hdr_off += to_hdr;
  s->tx_off += sent - to_hdr;
  return s->tx_hdr_off == sizeof(x->hdr) && s->tx_off == len;
}

chorus_status_t chorus__stream_send(chorus_transport_t* tp, chorus_stream_t* s, int* moved) {
  chorus_xfer_t* x;
  for (;;) {
    if (data_boundary(s)) {
      if (s->ctl_count && !s->is_shm) chorus__stream_ctl_flush(s);
      chorus_status_t st = s->cts_count ? chorus__stream_cts_flush(tp, s) : CHORUS_OK;
      if (st < 0) return st;
      if ((s->ctl_off && !s->is_shm) || s->cts_off) return CHORUS_OK; /* half a control frame out: data must wait */
    }
    if ((x = chorus__xq_head(&s->sendq)) == NULL) break;
    size_t len;
    struct iovec iov[2];
    int niov = chorus__stream_tx_iov(s, x, iov, &len);
    ssize_t n = stream_writev(tp, s, iov, niov);
    if (n < 0) return stream_error(tp, s, "failed while sending", (int)-n);
    if (n == 0) return CHORUS_OK;
    (*moved)++;
    if (!chorus__stream_tx_advance(s, x, (size_t)n, len)) continue;
    chorus__xq_pop(&s->sendq);
    s->tx_hdr_off = s->tx_off = 0;
    if (x->rdv == 1) chorus__match_rts_sent(tp, x); /* the header was the whole frame */
    else part_done(x);
  }
  return CHORUS_OK;
}

/* Tells the peer that sent a mismatched frame what this rank runs (its own signature), so it
 * reports the mismatch too. Best effort, and only at a frame boundary of this stream, where a
 * header cannot cut into a frame already on its way. */
static void send_abort(chorus_transport_t* tp, chorus_stream_t* s, const chorus_frame_hdr_t* mine) {
  if (!data_boundary(s) || s->ctl_off || s->cts_off) return;
  chorus_frame_hdr_t abort_hdr = *mine;
  abort_hdr.magic = CHORUS_FRAME_ABORT_MAGIC;
  struct iovec iov = {&abort_hdr, sizeof(abort_hdr)};
  if (stream_writev(tp, s, &iov, 1) != (ssize_t)sizeof(abort_hdr)) {
    /* A partial write would leave half a header: the peer then reports a protocol error or a
     * closed link instead, which is still an error on its side. */
  }
}

/* A status frame from the stream's peer: validated, recorded, answered when it asks. */
static chorus_status_t handle_status(chorus_transport_t* tp, chorus_stream_t* s, const chorus_frame_hdr_t* h) {
  const char* why = chorus__status_check(tp, s->peer, h);
  if (why) {
    snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): a malformed status frame: %s", s->peer,
             tp->peers[s->peer].host, why);
    tp->err_peer = s->peer;
    return CHORUS_ERR_PROTOCOL;
  }
  int subject = (int)(h->tag & CHORUS_STATUS_RANK_MASK), second = (h->tag & CHORUS_STATUS_SECONDHAND) != 0;
  if (h->tag & CHORUS_STATUS_GAVE_UP) {
    if (tp->gave_up_from < 0) {
      tp->gave_up = *h;
      tp->gave_up_from = s->peer;
    }
    tp->status[s->peer].gave_up = 1; /* for a verdict still being gathered */
    tp->status[s->peer].gave_up_hdr = *h;
    return CHORUS_OK;
  }
  chorus_rank_status_t* rs = &tp->status[subject];
  if (!second || rs->have < 2) {
    rs->hdr = *h;
    rs->have = second ? 1 : 2;
    rs->via = s->peer;
  }
  if (h->tag & CHORUS_STATUS_ASK) {
    CH_INFO(COLL, tp->rank, "rank %d (host %s) timed out and asks for this rank's status", s->peer,
            tp->peers[s->peer].host);
    if (tp->status_answer) tp->status_answer(tp->status_ctx, s->peer);
  }
  return CHORUS_OK;
}

/* An abort frame (the peer found mismatched calls and tells this rank what it runs) met where
 * no receive waits for it: taken as that peer's give-up, so that it neither waits for a
 * receive nor hides the frames behind it. */
static void abort_as_give_up(chorus_transport_t* tp, const chorus_stream_t* s) {
  const chorus_frame_hdr_t* a = &s->rx_hdr;
  if (a->version != CHORUS_PROTO_VERSION || a->comm_id != tp->comm_id) return;
  chorus_frame_hdr_t g;
  memset(&g, 0, sizeof(g));
  g.magic = CHORUS_FRAME_STATUS_MAGIC;
  g.version = CHORUS_PROTO_VERSION;
  g.comm_id = tp->comm_id;
  g.tag = (uint32_t)s->peer | CHORUS_STATUS_GAVE_UP;
  g.root = -1;
  g.nbytes = CHORUS_GAVE_UP_NBYTES(CHORUS_ERR_MISMATCH, 0, -1, 0);
  if (a->coll != CH_COLL_SEND) { /* point-to-point numbers are per pair */
    g.seq = a->seq + 1;
    g.coll = a->coll;
    g.dtype = a->dtype;
    g.op = a->op;
    g.count = a->count;
  }
  if (tp->gave_up_from < 0) {
    tp->gave_up = g;
    tp->gave_up_from = s->peer;
  }
  tp->status[s->peer].gave_up = 1;
  tp->status[s->peer].gave_up_hdr = g;
}

/* A CTS from the stream's peer: its DATA may go. */
static chorus_status_t handle_cts(chorus_transport_t* tp, chorus_stream_t* s, const chorus_frame_hdr_t* h) {
  if (h->version != CHORUS_PROTO_VERSION || h->comm_id != tp->comm_id) {
    snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): a CTS frame of another %s", s->peer,
             tp->peers[s->peer].host, h->version != CHORUS_PROTO_VERSION ? "protocol version" : "communicator");
    tp->err_peer = s->peer;
    return CHORUS_ERR_PROTOCOL;
  }
  return chorus__match_cts(tp, s->peer, h);
}

/* Reads the next frame header; status and CTS frames met on the way are handled and skipped,
 * and so are abort frames while no receive is posted. 1 when a data frame's header (or an abort
 * frame for the receive at the head) is complete in s->rx_hdr (possibly read earlier, before its
 * receive was posted). */
int chorus__stream_read_header(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st) {
  for (;;) {
    while (s->rx_hdr_off < sizeof(s->rx_hdr)) {
      ssize_t n = stream_read(tp, s, (char*)&s->rx_hdr + s->rx_hdr_off, sizeof(s->rx_hdr) - s->rx_hdr_off);
      if (n < 0) *st = stream_error(tp, s, "failed while receiving", (int)-n);
      if (n <= 0) return 0;
      s->rx_hdr_off += (size_t)n;
    }
    if (s->rx_hdr.magic == CHORUS_FRAME_ABORT_MAGIC && !s->recvq.count) {
      abort_as_give_up(tp, s);
      s->rx_hdr_off = 0;
      continue;
    }
    uint32_t magic = s->rx_hdr.magic;
    if (magic != CHORUS_FRAME_STATUS_MAGIC && magic != CHORUS_FRAME_CTS_MAGIC) return 1;
    s->rx_hdr_off = 0;
    *st = magic == CHORUS_FRAME_CTS_MAGIC ? handle_cts(tp, s, &s->rx_hdr) : handle_status(tp, s, &s->rx_hdr);
    if (*st < 0) return 0;
  }
}

static int is_p2p_frame(const chorus_frame_hdr_t* h) {
  return h->magic == CHORUS_FRAME_MAGIC &&
         (h->coll == CHORUS_FRAME_MSG || h->coll == CHORUS_FRAME_RTS || h->coll == CHORUS_FRAME_DATA);
}

/* A collective frame with its receive posted: checked against it, then routed into it. */
static int route_to_receive(chorus_transport_t* tp, chorus_stream_t* s, chorus_xfer_t* x, chorus_status_t* st) {
  char why[CHORUS_FRAME_WHY_LEN];
  *st = chorus__frame_check(&s->rx_hdr, &x->hdr, why, sizeof(why));
  if (*st == CHORUS_ERR_MISMATCH && s->rx_hdr.magic == CHORUS_FRAME_MAGIC) send_abort(tp, s, &x->hdr);
  if (*st < 0) {
    snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): %s", s->peer, tp->peers[s->peer].host, why);
    tp->err_peer = s->peer;
    return 0;
  }
  size_t off, len;
  chorus__stream_part(s, x, x->nbytes, &off, &len);
  s->rx = (chorus_rx_route_t){x, NULL, x->buf + off, len, len};
  return 1;
}

/* A collective frame without its receive: left in the stream (read later straight into the
 * receive), unless a frame this rank needs now may be behind it: a point-to-point frame it waits
 * for from this peer (match.h), the status frame that answers its question after a timeout, or
 * the give-up frame of a peer that closed its side. Then it is read ahead into library memory,
 * within the unexpected-message bound. */
static int route_ahead(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st) {
  const chorus_frame_hdr_t* h = &s->rx_hdr;
  chorus_match_t* m = &tp->match;
  int wanted = chorus__match_wants(m, s->peer) || tp->gathering || tp->stalled || s->peer_closed;
  if (h->magic != CHORUS_FRAME_MAGIC || !wanted) return 0;
  /* The variable-size collectives are numbered after the point-to-point kinds. */
  int bad_kind = h->coll >= CH_COLL_COUNT || chorus__coll_is_p2p((chorus_coll_t)h->coll);
  if (h->version != CHORUS_PROTO_VERSION || h->comm_id != tp->comm_id || bad_kind) {
    char d[CHORUS_FRAME_DESC_LEN];
    chorus__frame_describe(h, d, sizeof(d));
    snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): a frame of another %s: %s", s->peer,
             tp->peers[s->peer].host, bad_kind ? "kind" : "communicator or version", d);
    tp->err_peer = s->peer;
    *st = CHORUS_ERR_PROTOCOL;
    return 0;
  }
  size_t off, len;
  int nparts = chorus__stream_nparts(tp, s->peer, h->nbytes);
  chorus__part_range(h->nbytes, nparts, nparts > 1 ? s->index : 0, &off, &len);
  if (m->unexp_bytes + len > m->unexp_limit) return 0;
  chorus_unexp_t* u = chorus__unexp_new(m, s->peer, h, CHORUS_U_COLL, len);
  if (!u) {
    snprintf(tp->err, sizeof(tp->err), "out of memory reading ahead %zu bytes from rank %d", len, s->peer);
    *st = CHORUS_ERR_NO_MEMORY;
    return 0;
  }
  u->filling = 1;
  u->prev = s->early_tail;
  if (s->early_tail) s->early_tail->next = u;
  else s->early_head = u;
  s->early_tail = u;
  s->rx = (chorus_rx_route_t){NULL, u, u->data, len, len};
  return 1;
}

/* Where the frame whose header is in s->rx_hdr goes: 1 routed (s->rx), 0 stays in the stream. */
static int route_frame(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st) {
  if (is_p2p_frame(&s->rx_hdr)) return chorus__match_route(tp, s, st);
  chorus_xfer_t* x = chorus__xq_head(&s->recvq);
  return x ? route_to_receive(tp, s, x, st) : route_ahead(tp, s, st);
}

/* Bytes past what the destination keeps (a truncated message) are read and dropped. */
static ssize_t read_dropped(chorus_transport_t* tp, chorus_stream_t* s, size_t len) {
  char scratch[4096];
  return stream_read(tp, s, scratch, len < sizeof(scratch) ? len : sizeof(scratch));
}

/* Reads the routed frame's payload. 1 when it is all in, 0 when the stream is empty. */
static int read_payload(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st, int* moved) {
  const chorus_rx_route_t* r = &s->rx;
  while (s->rx_off < r->len) {
    ssize_t n = s->rx_off < r->keep ? stream_read(tp, s, r->dst + s->rx_off, r->keep - s->rx_off)
                                    : read_dropped(tp, s, r->len - s->rx_off);
    if (n < 0) *st = stream_error(tp, s, "failed while receiving", (int)-n);
    if (n <= 0) return 0;
    s->rx_off += (size_t)n;
    (*moved)++;
  }
  return 1;
}

/* A read-ahead collective frame is complete; a receive that took it meanwhile gets it now. */
static void early_filled(chorus_transport_t* tp, chorus_unexp_t* u) {
  u->filling = 0;
  chorus_xfer_t* x = u->claim;
  if (!x) return;
  if (u->bytes) memcpy(x->buf + u->claim_off, u->data, u->bytes);
  chorus__unexp_free(&tp->match, u);
  part_done(x);
}

static void frame_done(chorus_transport_t* tp, chorus_stream_t* s) {
  chorus_rx_route_t r = s->rx;
  s->rx_hdr_off = s->rx_off = 0;
  s->rx_routed = 0;
  memset(&s->rx, 0, sizeof(s->rx));
  if (r.u && r.u->kind == CHORUS_U_COLL) {
    early_filled(tp, r.u);
  } else if (r.x && !r.x->p2p) {
    chorus__xq_pop(&s->recvq);
    part_done(r.x);
  } else {
    chorus__match_frame_done(tp, &r);
  }
}

/* Whether this rank needs the stream's next bytes: a frame half read, a collective receive,
 * or a point-to-point frame from this very peer. */
static int stream_needed(const chorus_transport_t* tp, const chorus_stream_t* s) {
  return s->rx_routed || s->recvq.count || chorus__match_wants_peer(&tp->match, s->peer);
}

/* Whether anything may take the stream's next bytes: what it needs, or, while the peer has not
 * ended its side, a receive from any source, a rank gathering status answers after a timeout
 * or standing still (a peer's question may wait behind its frames), or the last words of a
 * peer that closed its side (route_ahead reads past frames for them). */
int chorus__stream_wanted(const chorus_transport_t* tp, const chorus_stream_t* s) {
  int control = tp->gathering || tp->stalled || s->peer_closed;
  return stream_needed(tp, s) || ((tp->match.any_posted || control) && !s->rx_ended);
}

chorus_status_t chorus__stream_recv(chorus_transport_t* tp, chorus_stream_t* s, int* moved) {
  while (chorus__stream_wanted(tp, s)) {
    chorus_status_t st = CHORUS_OK;
    if (!s->rx_routed) {
      if (!chorus__stream_read_header(tp, s, &st)) {
        /* A peer that closed its side after its last frame is an error only for what needs it:
         * a receive from any source just hears nothing more from it. */
        if (st == CHORUS_ERR_REMOTE && !stream_needed(tp, s)) {
          s->rx_ended = 1;
          tp->err[0] = '\0';
          tp->err_peer = -1;
          return CHORUS_OK;
        }
        return st;
      }
      int routed = route_frame(tp, s, &st);
      if (st < 0) return st;
      if (!routed) return CHORUS_OK; /* it waits in the stream for its receive */
      s->rx_routed = 1;
      (*moved)++;
    }
    if (!read_payload(tp, s, &st, moved)) return st;
    frame_done(tp, s);
  }
  return CHORUS_OK;
}

/* A collective receive posted while frames read ahead wait on this stream: the oldest is its. */
static chorus_status_t take_early(chorus_transport_t* tp, chorus_stream_t* s, chorus_xfer_t* x) {
  chorus_unexp_t* u = s->early_head;
  char why[CHORUS_FRAME_WHY_LEN];
  chorus_status_t st = chorus__frame_check(&u->hdr, &x->hdr, why, sizeof(why));
  if (st < 0) { /* left in the list: freed with the stream after the failure */
    if (st == CHORUS_ERR_MISMATCH) send_abort(tp, s, &x->hdr);
    snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): %s", s->peer, tp->peers[s->peer].host, why);
    tp->err_peer = s->peer;
    return st;
  }
  s->early_head = u->next;
  if (s->early_head) s->early_head->prev = NULL;
  else s->early_tail = NULL;
  u->next = u->prev = NULL;
  size_t off, len;
  chorus__stream_part(s, x, x->nbytes, &off, &len);
  u->claim = x; /* a claimed entry is in no list: the stream's route holds it until it is in */
  u->claim_off = off;
  if (!u->filling) early_filled(tp, u);
  return CHORUS_OK;
}


/* A peer that gave up said so (its give-up frame) just before closing its sockets: read what
 * it sent last before its stream's error is reported, so that the error can say why. The
 * stream's own error stays the one reported. */
static void read_last_words(chorus_transport_t* tp, chorus_stream_t* s) {
  char err[sizeof(tp->err)];
  int err_peer = tp->err_peer, moved = 0;
  memcpy(err, tp->err, sizeof(err));
  s->peer_closed = 1; /* past frames nobody asked for yet (route_ahead) */
  chorus__tcp_edge_rx(s); /* read whatever is there, edge or not */
  if (s->is_shm) (void)chorus__stream_ctl_read(tp, s);
  else (void)chorus__stream_recv(tp, s, &moved);
  memcpy(tp->err, err, sizeof(err));
  tp->err_peer = err_peer;
}

int chorus__stream_nparts(const chorus_transport_t* tp, int peer, size_t nbytes) {
  const chorus_peer_t* p = &tp->peers[peer];
  int socks = p->nsocks < tp->stripe_socks ? p->nsocks : tp->stripe_socks;
  if (socks <= 1 || p->socks[0].is_shm) return 1;
  size_t fit = nbytes / CHORUS_STRIPE_PART_BYTES;
  return fit < 2 ? 1 : fit < (size_t)socks ? (int)fit : socks;
}

chorus_status_t chorus__stream_post_parts(chorus_transport_t* tp, chorus_xfer_t* x, int nparts) {
  chorus_peer_t* p = &tp->peers[x->peer];
  x->nparts = nparts;
  for (int i = 0; i < x->nparts; i++) {
    chorus_stream_t* s = &p->socks[i];
    if (!x->is_send && s->early_head) {
      chorus_status_t st = take_early(tp, s, x);
      if (st < 0) return st;
      continue;
    }
    chorus_xfer_queue_t* q = x->is_send ? &s->sendq : &s->recvq;
    if (chorus__xq_push(q, x)) return CHORUS_ERR_NO_MEMORY;
    /* Start at once when it is first in line: the latency path is one write. */
    if (q->count == 1) {
      int moved = 0;
      chorus_status_t st = x->is_send ? chorus__stream_send(tp, s, &moved) : chorus__stream_recv(tp, s, &moved);
      if (st < 0) read_last_words(tp, s);
      if (st < 0) return st;
    }
  }
  return CHORUS_OK;
}

chorus_status_t chorus__stream_post(chorus_transport_t* tp, chorus_xfer_t* x) {
  return chorus__stream_post_parts(tp, x, chorus__stream_nparts(tp, x->peer, x->nbytes));
}

/* Reads control frames from a shared-memory stream's socket, where nothing else travels. */
chorus_status_t chorus__stream_ctl_read(chorus_transport_t* tp, chorus_stream_t* s) {
  for (;;) {
    ssize_t n = chorus__tcp_read(s, (char*)&s->ctl_rx_hdr + s->ctl_rx_off, sizeof(s->ctl_rx_hdr) - s->ctl_rx_off);
    if (n <= 0) {
      if (n < 0) {
        s->peer_closed = 1; /* the shared-memory data path reports it when it matters */
        chorus__tcp_rx_idle(s);
      }
      return CHORUS_OK;
    }
    s->ctl_rx_off += (size_t)n;
    if (s->ctl_rx_off < sizeof(s->ctl_rx_hdr)) continue;
    s->ctl_rx_off = 0;
    if (s->ctl_rx_hdr.magic != CHORUS_FRAME_STATUS_MAGIC) {
      snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): received bytes that are not a Chorus status frame "
               "(magic 0x%08x) on the socket of a shared-memory peer", s->peer, tp->peers[s->peer].host,
               s->ctl_rx_hdr.magic);
      tp->err_peer = s->peer;
      return CHORUS_ERR_PROTOCOL;
    }
    chorus_status_t st = handle_status(tp, s, &s->ctl_rx_hdr);
    if (st < 0) return st;
  }
}

/* Bytes arrived where nothing waits for them: read up to the next data frame's header (kept
 * for its receive), handling the control frames before it. A closed socket is only noted
 * here; only a malformed control frame is an error. */
static chorus_status_t stream_idle_read(chorus_transport_t* tp, chorus_stream_t* s) {
  if (s->is_shm) return chorus__stream_ctl_read(tp, s);
  if (s->rx_routed || s->rx_hdr_off == sizeof(s->rx_hdr)) return CHORUS_OK;
  chorus_status_t st = CHORUS_OK;
  chorus__stream_read_header(tp, s, &st);
  if (st == CHORUS_ERR_PROTOCOL) return st;
  if (st < 0) {
    s->peer_closed = 1;
    chorus__tcp_rx_idle(s);
  }
  return CHORUS_OK;
}

/* Whether a TCP socket has work that waits for an epoll edge: a read of a wanted stream found it
 * empty, or a write found it full, and no edge was collected since. */
static int waits_for_edge(const chorus_transport_t* tp) {
  for (int p = 0; p < tp->nranks; p++) {
    const chorus_peer_t* peer = &tp->peers[p];
    for (int i = 0; i < peer->nsocks; i++) {
      const chorus_stream_t* s = &peer->socks[i];
      if (s->is_shm) continue;
      if ((s->sendq.count || s->cts_count || s->ctl_count) && !chorus__tcp_tx_ready(s)) return 1;
      if (!chorus__tcp_rx_ready(s) && chorus__stream_wanted(tp, s)) return 1;
    }
  }
  return 0;
}

chorus_status_t chorus__transport_progress(chorus_transport_t* tp, int* moved) {
  /* One epoll_wait tells every socket's news; the reads and writes below skip the others. */
  if (waits_for_edge(tp)) chorus__transport_collect_events(tp, 0);
  for (int p = 0; p < tp->nranks; p++) {
    chorus_peer_t* peer = &tp->peers[p];
    for (int i = 0; i < peer->nsocks; i++) {
      chorus_stream_t* s = &peer->socks[i];
      chorus_status_t st = CHORUS_OK;
      if (s->sendq.count || s->cts_count || (s->ctl_count && !s->is_shm)) st = chorus__stream_send(tp, s, moved);
      if (s->ctl_count && s->is_shm) chorus__stream_ctl_flush(s);
      if (st >= 0 && chorus__stream_wanted(tp, s)) st = chorus__stream_recv(tp, s, moved);
      if (st >= 0 && chorus__tcp_rx_ready(s)) st = stream_idle_read(tp, s);
      if (st < 0) read_last_words(tp, s);
      if (st < 0) return st;
    }
  }
  return CHORUS_OK;
}

/* ---- teardown ---- */

/* Frees what the stream holds of frames received ahead, and forgets the frame in progress. A
 * claimed buffer is in no list: only the stream's route holds it. */
static void drop_received(chorus_transport_t* tp, chorus_stream_t* s) {
  if (s->rx_routed && s->rx.u && s->rx.u->claim) chorus__unexp_free(&tp->match, s->rx.u);
  while (s->early_head) {
    chorus_unexp_t* u = s->early_head;
    s->early_head = u->next;
    chorus__unexp_free(&tp->match, u);
  }
  s->early_tail = NULL;
  s->rx_routed = 0;
  memset(&s->rx, 0, sizeof(s->rx));
}

void chorus__transport_shutdown(chorus_transport_t* tp) {
  if (!tp->peers) return;
  for (int p = 0; p < tp->nranks; p++) {
    chorus_peer_t* peer = &tp->peers[p];
    peer->self_sendq.count = peer->self_recvq.count = 0;
    for (int i = 0; i < peer->nsocks; i++) {
      chorus_stream_t* s = &peer->socks[i];
      s->sendq.count = s->recvq.count = 0;
      s->tx_hdr_off = s->tx_off = s->rx_hdr_off = s->rx_off = 0;
      drop_received(tp, s);
      chorus__tcp_rx_idle(s);
      s->rx_stage_off = s->rx_stage_len = 0;
      s->ctl_count = s->ctl_off = s->ctl_rx_off = 0;
      s->cts_count = s->cts_off = 0;
      if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
    }
  }
  chorus__match_reset(tp);
}

void chorus__transport_destroy(chorus_transport_t* tp) {
  if (tp->peers) {
    for (int p = 0; p < tp->nranks; p++) {
      chorus_peer_t* peer = &tp->peers[p];
      for (int i = 0; i < peer->nsocks; i++) {
        if (peer->socks[i].fd >= 0) close(peer->socks[i].fd);
        chorus__xq_free(&peer->socks[i].sendq);
        chorus__xq_free(&peer->socks[i].recvq);
        drop_received(tp, &peer->socks[i]);
        free(peer->socks[i].ctl);
        free(peer->socks[i].cts);
        free(peer->socks[i].rx_stage);
      }
      free(peer->socks);
      chorus__xq_free(&peer->self_sendq);
      chorus__xq_free(&peer->self_recvq);
    }
    free(tp->peers);
    tp->peers = NULL;
  }
  chorus__match_free(tp);
  free(tp->status);
  tp->status = NULL;
  while (tp->windows) {
    chorus_window_t* w = tp->windows;
    tp->windows = w->next;
    chorus__window_destroy(w);
  }
  for (int i = 0; tp->local_wakefd && i < tp->shm.nlocal; i++)
    if (tp->local_wakefd[i] >= 0) close(tp->local_wakefd[i]);
  free(tp->local_wakefd);
  tp->local_wakefd = NULL;
  chorus__shm_detach(&tp->shm);
  tp->my_bell = NULL;
  tp->my_ctl = NULL;
  if (tp->epfd >= 0) close(tp->epfd);
  if (tp->wakefd >= 0) close(tp->wakefd);
  tp->epfd = tp->wakefd = -1;
}
