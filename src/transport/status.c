/*
 * status.c - status frames on the streams (frame.h): checking a received one, queueing one for
 * a peer, gathering every peer's answer after a timeout, and a rank's last words when it gives
 * up (the frames its TCP streams are in the middle of are finished first, so that the give-up
 * frame arrives whole). What the answers mean is verdict.c's business.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "transport/stream.h"

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
    if (chorus__stream_tx_at_boundary(&p->socks[i])) {
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
  chorus__stream_ctl_flush(s);
}

/* How long a rank that gives up may spend telling its peers: finishing the frames its TCP
 * streams are in the middle of (peers that wait for them drain them at once) and writing the
 * give-up frames, for all peers together. */
#define GIVE_UP_FLUSH_MS 100

/* Waits up to the deadline for room on the stream's socket; 0 when it passed. */
static int wait_writable(chorus_stream_t* s, uint64_t deadline_ns) {
  uint64_t now = chorus__now_ns();
  if (now >= deadline_ns) return 0;
  struct pollfd pfd = {.fd = s->fd, .events = POLLOUT};
  if (poll(&pfd, 1, (int)((deadline_ns - now) / 1000000) + 1) <= 0 || !(pfd.revents & POLLOUT)) return 0;
  chorus__tcp_edge_tx(s); /* the write that follows must not wait for an epoll edge */
  return 1;
}

/* Writes the rest of the frame (data or control) a TCP stream is in the middle of, so that a
 * frame can follow; its bytes are the real ones, so the peer may even complete a receive with
 * them. 1 when the stream is at a frame boundary. */
static int finish_frame(chorus_transport_t* tp, chorus_stream_t* s, uint64_t deadline_ns) {
  while (s->ctl_off || s->cts_off) {
    if (s->ctl_off) chorus__stream_ctl_flush(s);
    else if (chorus__stream_cts_flush(tp, s) < 0) return 0;
    if ((s->ctl_off || s->cts_off) && (s->peer_closed || !wait_writable(s, deadline_ns))) return 0;
  }
  chorus_xfer_t* x = chorus__xq_head(&s->sendq);
  while (!chorus__stream_tx_at_boundary(s) && x) {
    size_t len;
    struct iovec iov[2];
    int niov = chorus__stream_tx_iov(s, x, iov, &len);
    ssize_t n = niov ? chorus__tcp_writev(s, iov, niov) : 0;
    if (n < 0) return 0;
    if (chorus__stream_tx_advance(s, x, (size_t)n, len)) {
      chorus__xq_pop(&s->sendq); /* the transfer fails with the communicator: nothing more to do */
      s->tx_hdr_off = s->tx_off = 0;
      break;
    }
    if (n == 0 && !wait_writable(s, deadline_ns)) return 0;
  }
  return chorus__stream_tx_at_boundary(s);
}

void chorus__transport_give_up(chorus_transport_t* tp, const chorus_frame_hdr_t* h) {
  uint64_t deadline = chorus__now_ns() + (uint64_t)GIVE_UP_FLUSH_MS * 1000000ull;
  for (int p = 0; p < tp->nranks; p++) {
    chorus_peer_t* peer = &tp->peers[p];
    for (int i = 0; i < peer->nsocks; i++) {
      chorus_stream_t* s = &peer->socks[i];
      if (s->fd < 0 || s->peer_closed || !finish_frame(tp, s, deadline)) continue;
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
    chorus__stream_ctl_flush(s);
    st = chorus__stream_ctl_read(tp, s);
    return st < 0 ? st : s->peer_closed ? CHORUS_ERR_REMOTE : CHORUS_OK;
  }
  st = chorus__stream_send(tp, s, &moved);
  if (st >= 0 && chorus__stream_wanted(tp, s)) st = chorus__stream_recv(tp, s, &moved);
  if (st >= 0 && !s->rx_routed && s->rx_hdr_off < sizeof(s->rx_hdr)) chorus__stream_read_header(tp, s, &st);
  return st;
}

void chorus__transport_gather_status(chorus_transport_t* tp, int wait_ms) {
  uint64_t deadline = chorus__now_ns() + (uint64_t)wait_ms * 1000000ull;
  tp->gathering = 1; /* answers may sit behind data frames not yet asked for */
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
    chorus__transport_collect_events(tp, left_ms < 10 ? (int)left_ms : 10);
  }
  tp->gathering = 0;
  tp->err[0] = '\0'; /* failures met here are reported per rank, not as the operation's error */
}
