/*
 * transport.c - the data path shared by every stream (TCP socket or shared ring): frames in
 * posting order per stream, a 48-byte header (frame.h) then the payload, written in one call
 * and received straight into the destination buffer once the header has been validated.
 * Messages of CHORUS_STRIPE_MIN_BYTES and more to a TCP peer are cut into one part per socket.
 * Waiting: epoll over the sockets, or, when only same-host peers are pending, this rank's
 * futex doorbell; with both pending, epoll, where same-host peers wake it through its eventfd
 * (they hold copies: shm_setup.c), so neither kind of event waits for the other. Status frames (frame.h) ride on the TCP sockets: a rank that timed out asks
 * its peers, which answer from their progress passes; they never count as progress.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "transport/transport.h"

/* While shared-memory transfers wait, a rank sleeps on its doorbell at most this long before it
 * looks at the sockets for peers that hung up. */
#define SHM_LIVENESS_MS 20

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
    ssize_t n = chorus__tcp_read(s, buf, len);
    if (n == 0) s->rx_ready = 0; /* empty now: the next byte brings an epoll edge */
    return n;
  }
  size_t n = chorus__shm_ring_read(s->rx_ring, tp->shm.ring_bytes, buf, len);
  if (n) {
    chorus__shm_bell_ring(s->peer_bell, s->peer_wakefd); /* the writer may wait for space */
    return (ssize_t)n;
  }
  return s->peer_closed ? -EPIPE : 0;
}

static void collect_events(chorus_transport_t* tp, int timeout_ms);

/* ---- data path ---- */

/* Byte range of part `i` of a transfer cut into `n` parts. */
static void part_range(size_t nbytes, int n, int i, size_t* off, size_t* len) {
  size_t base = nbytes / (size_t)n, rem = nbytes % (size_t)n;
  *off = (size_t)i * base + ((size_t)i < rem ? (size_t)i : rem);
  *len = base + ((size_t)i < rem ? 1 : 0);
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
  return remote ? CHORUS_ERR_REMOTE : CHORUS_ERR_SYSTEM;
}

/* ---- control frames: written on the TCP socket, between data frames of a TCP stream ---- */

static int tx_at_boundary(const chorus_stream_t* s) { return s->is_shm || (!s->tx_hdr_off && !s->tx_off); }

/* Writes queued control frames. A failure only marks the peer closed: the data path, if it
 * needs the peer, reports the error; control frames alone never fail an operation. */
static void ctl_flush(chorus_stream_t* s) {
  while (s->ctl_count && tx_at_boundary(s)) {
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

static chorus_status_t stream_send(chorus_transport_t* tp, chorus_stream_t* s, int* moved) {
  chorus_xfer_t* x;
  for (;;) {
    if (s->ctl_count && !s->is_shm && tx_at_boundary(s)) {
      ctl_flush(s);
      if (s->ctl_off) return CHORUS_OK; /* half a control frame out: data must wait */
    }
    if ((x = chorus__xq_head(&s->sendq)) == NULL) break;
    size_t off, len;
    part_range(x->nbytes, x->nparts, x->nparts > 1 ? s->index : 0, &off, &len);
    struct iovec iov[2];
    int niov = 0;
    if (s->tx_hdr_off < sizeof(x->hdr))
      iov[niov++] = (struct iovec){(char*)&x->hdr + s->tx_hdr_off, sizeof(x->hdr) - s->tx_hdr_off};
    if (s->tx_off < len) iov[niov++] = (struct iovec){x->buf + off + s->tx_off, len - s->tx_off};
    ssize_t n = stream_writev(tp, s, iov, niov);
    if (n < 0) return stream_error(tp, s, "failed while sending", (int)-n);
    if (n == 0) return CHORUS_OK;
    size_t sent = (size_t)n, hdr_left = sizeof(x->hdr) - s->tx_hdr_off;
    size_t to_hdr = sent < hdr_left ? sent : hdr_left;
    s->tx_hdr_off += to_hdr;
    s->tx_off += sent - to_hdr;
    (*moved)++;
    if (s->tx_hdr_off < sizeof(x->hdr) || s->tx_off < len) continue;
    chorus__xq_pop(&s->sendq);
    s->tx_hdr_off = s->tx_off = 0;
    part_done(x);
  }
  return CHORUS_OK;
}

/* Tells the peer that sent a mismatched frame what this rank runs (its own signature), so it
 * reports the mismatch too. Best effort, and only at a frame boundary of this stream, where a
 * header cannot cut into a frame already on its way. */
static void send_abort(chorus_transport_t* tp, chorus_stream_t* s, const chorus_frame_hdr_t* mine) {
  if (s->tx_hdr_off || s->tx_off || s->ctl_off) return;
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

/* Reads the next frame header; status frames met on the way are handled and skipped, and so
 * are abort frames while no receive is posted. 1 when a data frame's header (or an abort frame
 * for the receive at the head) is complete in s->rx_hdr (possibly read earlier, before its
 * receive was posted). */
static int read_header(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st) {
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
    if (s->rx_hdr.magic != CHORUS_FRAME_STATUS_MAGIC) return 1;
    s->rx_hdr_off = 0;
    *st = handle_status(tp, s, &s->rx_hdr);
    if (*st < 0) return 0;
  }
}

/* Reads and validates the header of the next frame. 1 when it is complete and matches. */
static int recv_header(chorus_transport_t* tp, chorus_stream_t* s, chorus_xfer_t* x, chorus_status_t* st, int* moved) {
  if (!read_header(tp, s, st)) return 0;
  (*moved)++;
  char why[CHORUS_FRAME_WHY_LEN];
  *st = chorus__frame_check(&s->rx_hdr, &x->hdr, why, sizeof(why));
  if (*st == CHORUS_ERR_MISMATCH && s->rx_hdr.magic == CHORUS_FRAME_MAGIC) send_abort(tp, s, &x->hdr);
  if (*st < 0) {
    snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): %s", s->peer, tp->peers[s->peer].host, why);
    return 0;
  }
  s->rx_checked = 1;
  return 1;
}

static chorus_status_t stream_recv(chorus_transport_t* tp, chorus_stream_t* s, int* moved) {
  chorus_xfer_t* x;
  while ((x = chorus__xq_head(&s->recvq)) != NULL) {
    size_t off, len;
    part_range(x->nbytes, x->nparts, x->nparts > 1 ? s->index : 0, &off, &len);
    chorus_status_t st = CHORUS_OK;
    if (!s->rx_checked && !recv_header(tp, s, x, &st, moved)) return st;
    while (s->rx_off < len) {
      ssize_t n = stream_read(tp, s, x->buf + off + s->rx_off, len - s->rx_off);
      if (n < 0) return stream_error(tp, s, "failed while receiving", (int)-n);
      if (n == 0) return CHORUS_OK;
      s->rx_off += (size_t)n;
      (*moved)++;
    }
    chorus__xq_pop(&s->recvq);
    s->rx_hdr_off = s->rx_off = 0;
    s->rx_checked = 0;
    part_done(x);
  }
  return CHORUS_OK;
}

chorus_status_t chorus__stream_post(chorus_transport_t* tp, chorus_xfer_t* x) {
  chorus_peer_t* p = &tp->peers[x->peer];
  int stripe = x->nbytes >= CHORUS_STRIPE_MIN_BYTES && p->nsocks > 1 && !p->socks[0].is_shm;
  x->nparts = stripe ? p->nsocks : 1;
  for (int i = 0; i < x->nparts; i++) {
    chorus_stream_t* s = &p->socks[i];
    chorus_xfer_queue_t* q = x->is_send ? &s->sendq : &s->recvq;
    if (chorus__xq_push(q, x)) return CHORUS_ERR_NO_MEMORY;
    /* Start at once when it is first in line: the latency path is one write. */
    if (q->count == 1) {
      int moved = 0;
      chorus_status_t st = x->is_send ? stream_send(tp, s, &moved) : stream_recv(tp, s, &moved);
      if (st < 0) return st;
    }
  }
  return CHORUS_OK;
}

/* Reads control frames from a shared-memory stream's socket, where nothing else travels. */
static chorus_status_t ctl_read(chorus_transport_t* tp, chorus_stream_t* s) {
  for (;;) {
    ssize_t n = chorus__tcp_read(s, (char*)&s->ctl_rx_hdr + s->ctl_rx_off, sizeof(s->ctl_rx_hdr) - s->ctl_rx_off);
    if (n <= 0) {
      s->rx_ready = 0;
      if (n < 0) s->peer_closed = 1; /* the shared-memory data path reports it when it matters */
      return CHORUS_OK;
    }
    s->ctl_rx_off += (size_t)n;
    if (s->ctl_rx_off < sizeof(s->ctl_rx_hdr)) continue;
    s->ctl_rx_off = 0;
    if (s->ctl_rx_hdr.magic != CHORUS_FRAME_STATUS_MAGIC) {
      snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): received bytes that are not a Chorus status frame "
               "(magic 0x%08x) on the socket of a shared-memory peer", s->peer, tp->peers[s->peer].host,
               s->ctl_rx_hdr.magic);
      return CHORUS_ERR_PROTOCOL;
    }
    chorus_status_t st = handle_status(tp, s, &s->ctl_rx_hdr);
    if (st < 0) return st;
  }
}

/* Bytes arrived where no receive is posted: read up to the next data frame's header (kept
 * for its receive), handling the status frames before it. A closed socket is only noted
 * here; only a malformed status frame is an error. */
static chorus_status_t stream_idle_read(chorus_transport_t* tp, chorus_stream_t* s) {
  if (s->is_shm) return ctl_read(tp, s);
  if (s->recvq.count || s->rx_hdr_off == sizeof(s->rx_hdr)) return CHORUS_OK;
  chorus_status_t st = CHORUS_OK;
  read_header(tp, s, &st);
  if (st == CHORUS_ERR_PROTOCOL) return st;
  if (st < 0) {
    s->peer_closed = 1;
    s->rx_ready = 0;
  }
  return CHORUS_OK;
}

chorus_status_t chorus__transport_progress(chorus_transport_t* tp, int* moved) {
  for (int p = 0; p < tp->nranks; p++) {
    chorus_peer_t* peer = &tp->peers[p];
    for (int i = 0; i < peer->nsocks; i++) {
      chorus_stream_t* s = &peer->socks[i];
      chorus_status_t st = CHORUS_OK;
      if (s->sendq.count || (s->ctl_count && !s->is_shm)) st = stream_send(tp, s, moved);
      if (s->ctl_count && s->is_shm) ctl_flush(s);
      if (st >= 0 && s->recvq.count) st = stream_recv(tp, s, moved);
      if (st >= 0 && s->rx_ready) st = stream_idle_read(tp, s);
      /* A shared-memory peer that gave up said so on its socket just before closing it: read
       * that first, so the error can say why (a TCP stream delivers it in order anyway). */
      if (st < 0 && s->is_shm) (void)ctl_read(tp, s);
      if (st < 0) return st;
    }
  }
  return CHORUS_OK;
}

/* ---- status exchange ---- */

const char* chorus__status_check(const chorus_transport_t* tp, int sender, const chorus_frame_hdr_t* h) {
  if (h->magic != CHORUS_FRAME_STATUS_MAGIC) return "not a status frame";
  if (h->version != CHORUS_PROTO_VERSION) return "another protocol version";
  if (h->comm_id != tp->comm_id) return "another communicator";
  uint32_t flags = h->tag & ~CHORUS_STATUS_RANK_MASK, subject = h->tag & CHORUS_STATUS_RANK_MASK;
  if (flags & ~(CHORUS_STATUS_ASK | CHORUS_STATUS_SECONDHAND | CHORUS_STATUS_IN_CALL | CHORUS_STATUS_GAVE_UP))
    return "unknown flags";
  /* Only now is the subject trusted as an index. */
  if (subject >= (uint32_t)tp->nranks) return "impossible rank";
  if (flags & CHORUS_STATUS_GAVE_UP) {
    if (flags != CHORUS_STATUS_GAVE_UP || (int)subject != sender) return "a give-up frame not about its sender";
    if (h->root < -1 || h->root >= tp->nranks) return "a give-up frame blaming an impossible rank";
    int origin = CHORUS_GAVE_UP_ORIGIN(h->nbytes);
    if (origin >= tp->nranks || origin == sender) return "a give-up frame passing on an impossible rank";
    int status = CHORUS_GAVE_UP_STATUS(h->nbytes);
    if (status >= 0 || strcmp(chorus_status_name((chorus_status_t)status), "CHORUS_UNKNOWN_STATUS") == 0)
      return "a give-up frame with an unknown status";
    return NULL;
  }
  if (!(flags & CHORUS_STATUS_SECONDHAND)) {
    if ((int)subject != sender) return "a first-hand status about another rank";
    if (h->nbytes > h->seq) return "more collectives completed than posted";
    return NULL;
  }
  if (flags & (CHORUS_STATUS_ASK | CHORUS_STATUS_IN_CALL)) return "a second-hand status with first-hand flags";
  if ((int)subject == sender || (int)subject == tp->rank ||
      strcmp(tp->peers[subject].host, tp->peers[sender].host) != 0)
    return "a second-hand status about a rank not on the sender's host";
  return NULL;
}

void chorus__transport_send_status(chorus_transport_t* tp, int peer, const chorus_frame_hdr_t* h) {
  chorus_peer_t* p = &tp->peers[peer];
  if (p->is_self || !p->nsocks) return;
  /* A stream whose data is at a frame boundary, so that the frame leaves now; else the first. */
  chorus_stream_t* s = &p->socks[0];
  for (int i = 0; i < p->nsocks; i++)
    if (tx_at_boundary(&p->socks[i])) {
      s = &p->socks[i];
      break;
    }
  if (s->fd < 0) return;
  if (s->ctl_count == s->ctl_cap) {
    size_t cap = s->ctl_cap ? s->ctl_cap * 2 : 4;
    if (cap > 2 * (size_t)tp->nranks + 4) return; /* a peer that keeps asking gets no more */
    chorus_frame_hdr_t* q = malloc(cap * sizeof(*q));
    if (!q) return;
    for (size_t i = 0; i < s->ctl_count; i++) q[i] = s->ctl[(s->ctl_head + i) % s->ctl_cap];
    free(s->ctl);
    s->ctl = q;
    s->ctl_head = 0;
    s->ctl_cap = cap;
  }
  s->ctl[(s->ctl_head + s->ctl_count) % s->ctl_cap] = *h;
  s->ctl_count++;
  ctl_flush(s);
}

/* How long a rank that gives up may spend telling its peers: finishing the frames its TCP
 * streams are in the middle of (peers that wait for them drain them at once) and writing the
 * give-up frames, for all peers together. */
#define GIVE_UP_FLUSH_MS 100

/* Waits up to the deadline for room on the stream's socket; 0 when it passed. */
static int wait_writable(const chorus_stream_t* s, uint64_t deadline_ns) {
  uint64_t now = chorus__now_ns();
  if (now >= deadline_ns) return 0;
  struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
  return poll(&pfd, 1, (int)((deadline_ns - now) / 1000000) + 1) > 0 && (pfd.revents & POLLOUT);
}

/* Writes the rest of the frame (data or control) a TCP stream is in the middle of, so that a
 * frame can follow; its bytes are the real ones, so the peer may even complete a receive with
 * them. 1 when the stream is at a frame boundary. */
static int finish_frame(chorus_stream_t* s, uint64_t deadline_ns) {
  while (s->ctl_off) {
    ctl_flush(s);
    if (s->ctl_off && (s->peer_closed || !wait_writable(s, deadline_ns))) return 0;
  }
  chorus_xfer_t* x = chorus__xq_head(&s->sendq);
  while (!tx_at_boundary(s) && x) {
    size_t off, len;
    part_range(x->nbytes, x->nparts, x->nparts > 1 ? s->index : 0, &off, &len);
    struct iovec iov[2];
    int niov = 0;
    if (s->tx_hdr_off < sizeof(x->hdr))
      iov[niov++] = (struct iovec){(char*)&x->hdr + s->tx_hdr_off, sizeof(x->hdr) - s->tx_hdr_off};
    if (s->tx_off < len) iov[niov++] = (struct iovec){x->buf + off + s->tx_off, len - s->tx_off};
    ssize_t n = niov ? chorus__tcp_writev(s, iov, niov) : 0;
    if (n < 0) return 0;
    size_t sent = (size_t)n, hdr_left = sizeof(x->hdr) - s->tx_hdr_off, to_hdr = sent < hdr_left ? sent : hdr_left;
    s->tx_hdr_off += to_hdr;
    s->tx_off += sent - to_hdr;
    if (s->tx_hdr_off == sizeof(x->hdr) && s->tx_off == len) {
      chorus__xq_pop(&s->sendq);
      s->tx_hdr_off = s->tx_off = 0;
      part_done(x);
      break;
    }
    if (n == 0 && !wait_writable(s, deadline_ns)) return 0;
  }
  return tx_at_boundary(s);
}

void chorus__transport_give_up(chorus_transport_t* tp, const chorus_frame_hdr_t* h) {
  uint64_t deadline = chorus__now_ns() + (uint64_t)GIVE_UP_FLUSH_MS * 1000000ull;
  for (int p = 0; p < tp->nranks; p++) {
    chorus_peer_t* peer = &tp->peers[p];
    for (int i = 0; i < peer->nsocks; i++) {
      chorus_stream_t* s = &peer->socks[i];
      if (s->fd < 0 || s->peer_closed || (!s->is_shm && !finish_frame(s, deadline))) continue;
      size_t off = 0;
      while (off < sizeof(*h)) {
        struct iovec iov = {(char*)h + off, sizeof(*h) - off};
        ssize_t n = chorus__tcp_writev(s, &iov, 1);
        if (n < 0 || (n == 0 && !wait_writable(s, deadline))) break;
        off += (size_t)n;
      }
      break; /* one stream per peer */
    }
  }
}

/* One round of a gathering rank's I/O on a stream: data and control frames out, status frames
 * in (through the data path of a TCP stream, which may complete receives on the way). < 0
 * when the stream failed. */
static chorus_status_t gather_io(chorus_transport_t* tp, chorus_stream_t* s) {
  int moved = 0;
  chorus_status_t st = CHORUS_OK;
  if (s->is_shm) {
    ctl_flush(s);
    st = ctl_read(tp, s);
    return st < 0 ? st : s->peer_closed ? CHORUS_ERR_REMOTE : CHORUS_OK;
  }
  st = stream_send(tp, s, &moved);
  if (st >= 0 && s->recvq.count) st = stream_recv(tp, s, &moved);
  if (st >= 0 && !s->recvq.count && s->rx_hdr_off < sizeof(s->rx_hdr)) read_header(tp, s, &st);
  return st;
}

void chorus__transport_gather_status(chorus_transport_t* tp, int wait_ms) {
  uint64_t deadline = chorus__now_ns() + (uint64_t)wait_ms * 1000000ull;
  for (;;) {
    int waiting = 0;
    for (int p = 0; p < tp->nranks; p++) {
      chorus_peer_t* peer = &tp->peers[p];
      chorus_rank_status_t* rs = &tp->status[p];
      for (int i = 0; i < peer->nsocks && !rs->gone; i++)
        if (gather_io(tp, &peer->socks[i]) < 0) rs->gone = 1;
      if (p != tp->rank && rs->have < 2 && !rs->gone) waiting++;
    }
    uint64_t now = chorus__now_ns();
    chorus__transport_beat(tp, now); /* a rank gathering verdicts is not stopped */
    if (!waiting || now >= deadline) break;
    uint64_t left_ms = (deadline - now) / 1000000 + 1;
    collect_events(tp, left_ms < 10 ? (int)left_ms : 10);
  }
  tp->err[0] = '\0'; /* failures met here are reported per rank, not as the operation's error */
}

/* ---- waiting ---- */

/* Which kinds of streams have transfers waiting; whether a shared one could move now. */
static void pending_kinds(const chorus_transport_t* tp, int* tcp, int* shm, int* shm_ready) {
  *tcp = *shm = *shm_ready = 0;
  for (int p = 0; p < tp->nranks; p++) {
    const chorus_peer_t* peer = &tp->peers[p];
    for (int i = 0; i < peer->nsocks; i++) {
      const chorus_stream_t* s = &peer->socks[i];
      if (!s->sendq.count && !s->recvq.count) continue;
      if (!s->is_shm) {
        *tcp = 1;
        continue;
      }
      *shm = 1;
      if (s->recvq.count && (!chorus__shm_ring_empty(s->rx_ring) || s->peer_closed)) *shm_ready = 1;
      if (s->sendq.count && (chorus__shm_ring_space(s->tx_ring, tp->shm.ring_bytes) || s->peer_closed))
        *shm_ready = 1;
    }
  }
}

static void collect_events(chorus_transport_t* tp, int timeout_ms) {
  struct epoll_event evs[64];
  int n = epoll_wait(tp->epfd, evs, 64, timeout_ms);
  for (int i = 0; i < n; i++) {
    chorus_stream_t* s = evs[i].data.ptr;
    if (!s) {
      uint64_t v;
      while (read(tp->wakefd, &v, sizeof(v)) > 0) {
      }
    } else {
      if (evs[i].events & EPOLLIN) s->rx_ready = 1;
      if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) s->peer_closed = 1;
    }
  }
}

uint32_t chorus__transport_arm(chorus_transport_t* tp) {
  return tp->my_bell ? chorus__shm_bell_arm(tp->my_bell) : 0;
}

void chorus__transport_disarm(chorus_transport_t* tp) {
  if (tp->my_bell) chorus__shm_bell_disarm(tp->my_bell);
}

/* 1 when every local peer holds a copy of this rank's eventfd (they say so in their bells
 * once they took them, at creation). */
static int local_peers_wake_epoll(chorus_transport_t* tp) {
  if (tp->epoll_wakes) return 1;
  for (int i = 0; i < tp->shm.nlocal; i++)
    if (i != tp->shm.my_local && !__atomic_load_n(&chorus__shm_bell(&tp->shm, i)->wakes_all, __ATOMIC_ACQUIRE))
      return 0;
  tp->epoll_wakes = 1;
  return 1;
}

void chorus__transport_wait(chorus_transport_t* tp, int timeout_ms, uint32_t seen) {
  int tcp, shm, shm_ready;
  pending_kinds(tp, &tcp, &shm, &shm_ready);
  if (!tp->my_bell) {
    collect_events(tp, timeout_ms);
    return;
  }
  if (tcp) {
    /* Sockets, and maybe shared memory (rings, or flags of a memory-semantics phase that this
     * function cannot see): epoll, with the doorbell switched to wake it there. */
    if (local_peers_wake_epoll(tp)) {
      int ms = shm_ready || !chorus__shm_bell_arm_epoll(tp->my_bell, seen) ? 0 : timeout_ms;
      collect_events(tp, ms);
    } else { /* no way to be woken from epoll: look at shared memory every millisecond */
      collect_events(tp, timeout_ms < 1 ? timeout_ms : 1);
    }
    chorus__transport_disarm(tp);
    return;
  }
  /* Shared-memory transfers, or a memory-semantics collective polling flags: the doorbell. */
  if (!shm_ready) {
    int ms = timeout_ms < SHM_LIVENESS_MS ? timeout_ms : SHM_LIVENESS_MS;
    chorus__shm_bell_wait(tp->my_bell, seen, ms);
  }
  chorus__transport_disarm(tp);
  collect_events(tp, 0); /* peers that died close their sockets */
}

void chorus__transport_wake(chorus_transport_t* tp) {
  uint64_t one = 1;
  if (tp->wakefd >= 0 && write(tp->wakefd, &one, sizeof(one)) < 0) {
    /* The counter is saturated: a wake-up is already pending. */
  }
  if (tp->my_bell) chorus__shm_bell_ring(tp->my_bell, -1); /* in epoll, the write above wakes it */
}

int chorus__transport_pending_peer(const chorus_transport_t* tp, int* is_send, size_t* bytes_left) {
  for (int pass = 0; pass < 2; pass++) /* receives first: they are what a rank waits for */
    for (int p = 0; p < tp->nranks; p++) {
      const chorus_peer_t* peer = &tp->peers[p];
      for (int i = 0; i < peer->nsocks; i++) {
        const chorus_xfer_queue_t* q = pass == 0 ? &peer->socks[i].recvq : &peer->socks[i].sendq;
        const chorus_xfer_t* x = chorus__xq_head(q);
        if (!x) continue;
        *is_send = pass;
        size_t off, len;
        part_range(x->nbytes, x->nparts, x->nparts > 1 ? i : 0, &off, &len);
        *bytes_left = len - (pass == 0 ? peer->socks[i].rx_off : peer->socks[i].tx_off);
        return p;
      }
      if (peer->is_self) {
        const chorus_xfer_queue_t* q = pass == 0 ? &peer->self_recvq : &peer->self_sendq;
        const chorus_xfer_t* x = chorus__xq_head(q);
        if (x) {
          *is_send = pass;
          *bytes_left = x->nbytes;
          return p;
        }
      }
    }
  return -1;
}

/* ---- teardown ---- */

void chorus__transport_shutdown(chorus_transport_t* tp) {
  if (!tp->peers) return;
  for (int p = 0; p < tp->nranks; p++) {
    chorus_peer_t* peer = &tp->peers[p];
    peer->self_sendq.count = peer->self_recvq.count = 0;
    for (int i = 0; i < peer->nsocks; i++) {
      chorus_stream_t* s = &peer->socks[i];
      s->sendq.count = s->recvq.count = 0;
      s->tx_hdr_off = s->tx_off = s->rx_hdr_off = s->rx_off = 0;
      s->rx_checked = s->rx_ready = 0;
      s->ctl_count = s->ctl_off = s->ctl_rx_off = 0;
      if (s->fd >= 0) shutdown(s->fd, SHUT_RDWR);
    }
  }
}

void chorus__transport_destroy(chorus_transport_t* tp) {
  if (tp->peers) {
    for (int p = 0; p < tp->nranks; p++) {
      chorus_peer_t* peer = &tp->peers[p];
      for (int i = 0; i < peer->nsocks; i++) {
        if (peer->socks[i].fd >= 0) close(peer->socks[i].fd);
        chorus__xq_free(&peer->socks[i].sendq);
        chorus__xq_free(&peer->socks[i].recvq);
        free(peer->socks[i].ctl);
      }
      free(peer->socks);
      chorus__xq_free(&peer->self_sendq);
      chorus__xq_free(&peer->self_recvq);
    }
    free(tp->peers);
    tp->peers = NULL;
  }
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
