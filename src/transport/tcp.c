/*
 * tcp.c - the TCP transport: a full mesh of authenticated, non-blocking, TCP_NODELAY sockets
 * (nsocks per peer), driven by one edge-triggered epoll set. Each socket carries frames in
 * posting order: a 48-byte header (frame.h) then the payload, written with one sendmsg and
 * received straight into the destination buffer after the header has been validated.
 * Messages of CHORUS_STRIPE_MIN_BYTES and more are cut into one part per socket.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "transport/transport.h"

/* ---- set-up ---- */

chorus_status_t chorus__transport_create(chorus_transport_t* tp, int rank, int nranks,
                                         uint64_t comm_id) {
  memset(tp, 0, sizeof(*tp));
  tp->rank = rank;
  tp->nranks = nranks;
  tp->comm_id = comm_id;
  tp->epfd = epoll_create1(EPOLL_CLOEXEC);
  tp->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  tp->peers = calloc((size_t)nranks, sizeof(chorus_peer_t));
  if (tp->epfd < 0 || tp->wakefd < 0 || !tp->peers) {
    snprintf(tp->err, sizeof(tp->err), "cannot create the epoll set: %s", strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.ptr = NULL};
  epoll_ctl(tp->epfd, EPOLL_CTL_ADD, tp->wakefd, &ev);
  tp->peers[rank].is_self = 1;
  return CHORUS_OK;
}

static chorus_status_t alloc_sockets(chorus_transport_t* tp, int nsocks) {
  for (int p = 0; p < tp->nranks; p++) {
    if (p == tp->rank) continue;
    tp->peers[p].nsocks = nsocks;
    tp->peers[p].socks = calloc((size_t)nsocks, sizeof(chorus_tcp_sock_t));
    if (!tp->peers[p].socks) return CHORUS_ERR_NO_MEMORY;
    for (int i = 0; i < nsocks; i++) {
      tp->peers[p].socks[i].fd = -1;
      tp->peers[p].socks[i].peer = p;
      tp->peers[p].socks[i].index = i;
    }
  }
  return CHORUS_OK;
}

/* Dials every lower rank and sends the hello; replies are read after the accept phase, so no
 * rank ever waits on a rank that is itself waiting. */
static chorus_status_t dial_lower(chorus_transport_t* tp, const chorus_peer_info_t* infos,
                                  const chorus_hello_t* hello_tmpl, uint64_t deadline_ns) {
  for (int p = 0; p < tp->rank; p++) {
    for (int i = 0; i < tp->peers[p].nsocks; i++) {
      int fd = -1;
      char why[256];
      chorus_status_t st = chorus__sock_connect(infos[p].addr, deadline_ns, 1 << 30, &fd, why, sizeof(why));
      if (st < 0) {
        snprintf(tp->err, sizeof(tp->err), "rank %d cannot connect to rank %d (host %s): %s",
                 tp->rank, p, infos[p].host_id, why);
        return st;
      }
      chorus_hello_t hello = *hello_tmpl;
      hello.sock_index = (uint16_t)i;
      tp->peers[p].socks[i].fd = fd;
      st = chorus__sock_write_all(fd, &hello, sizeof(hello), deadline_ns);
      if (st < 0) {
        snprintf(tp->err, sizeof(tp->err), "rank %d lost its new connection to rank %d (%s)",
                 tp->rank, p, chorus_status_name(st));
        return st;
      }
    }
  }
  return CHORUS_OK;
}

/* Validates one incoming hello; returns the slot it fills or NULL (and logs why). */
static chorus_tcp_sock_t* check_hello(chorus_transport_t* tp, const chorus_hello_t* h,
                                      const uint8_t secret[16], int nsocks) {
  const char* why = NULL;
  if (h->magic != CHORUS_HELLO_MAGIC) why = "not a Chorus peer (bad magic)";
  else if (h->version != CHORUS_PROTO_VERSION) why = "other protocol version";
  else if (h->comm_id != tp->comm_id) why = "another communicator";
  else if (memcmp(h->secret, secret, 16) != 0) why = "wrong secret";
  else if (h->nranks != tp->nranks || h->rank <= tp->rank || h->rank >= tp->nranks) why = "impossible rank";
  else if (h->sock_index >= nsocks) why = "impossible socket index";
  else if (tp->peers[h->rank].socks[h->sock_index].fd >= 0) why = "duplicate connection";
  if (why) {
    CH_WARN(tp->rank, "rejected an incoming connection: %s", why);
    return NULL;
  }
  return &tp->peers[h->rank].socks[h->sock_index];
}

static chorus_status_t accept_higher(chorus_transport_t* tp, int listen_fd, int nsocks,
                                     const uint8_t secret[16], uint64_t deadline_ns) {
  int expected = (tp->nranks - 1 - tp->rank) * nsocks;
  for (int got = 0; got < expected;) {
    uint64_t now = chorus__now_ns();
    if (now >= deadline_ns) break;
    struct pollfd pfd = {.fd = listen_fd, .events = POLLIN};
    int left_ms = (int)((deadline_ns - now) / 1000000) + 1;
    if (poll(&pfd, 1, left_ms > 1000 ? 1000 : left_ms) <= 0) continue;
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) continue;
    chorus_hello_t h;
    /* A silent stranger may hold us for at most a few seconds. */
    uint64_t hello_deadline = chorus__now_ns() + 5 * CHORUS_NS_PER_SEC;
    if (hello_deadline > deadline_ns) hello_deadline = deadline_ns;
    chorus_tcp_sock_t* slot = NULL;
    if (chorus__sock_read_all(fd, &h, sizeof(h), hello_deadline) == CHORUS_OK)
      slot = check_hello(tp, &h, secret, nsocks);
    else
      CH_WARN(tp->rank, "dropped an incoming connection that sent no complete hello");
    int32_t answer = slot ? CHORUS_OK : CHORUS_ERR_PROTOCOL;
    chorus__sock_write_all(fd, &answer, sizeof(answer), hello_deadline);
    if (!slot) {
      close(fd);
      continue;
    }
    chorus__sock_tune(fd);
    slot->fd = fd;
    got++;
  }
  /* Name the ranks that never arrived. */
  char missing[256] = "";
  size_t len = 0;
  for (int p = tp->rank + 1; p < tp->nranks; p++)
    for (int i = 0; i < nsocks; i++)
      if (tp->peers[p].socks[i].fd < 0 && len + 16 < sizeof(missing)) {
        len += (size_t)snprintf(missing + len, sizeof(missing) - len, "%s%d", len ? ", " : "", p);
        break;
      }
  if (len) {
    snprintf(tp->err, sizeof(tp->err), "rank %d: ranks %s never connected within the connect timeout",
             tp->rank, missing);
    return CHORUS_ERR_TIMEOUT;
  }
  return CHORUS_OK;
}

static chorus_status_t read_replies(chorus_transport_t* tp, const chorus_peer_info_t* infos,
                                    uint64_t deadline_ns) {
  for (int p = 0; p < tp->rank; p++)
    for (int i = 0; i < tp->peers[p].nsocks; i++) {
      int32_t answer = CHORUS_ERR_INTERNAL;
      chorus_status_t st = chorus__sock_read_all(tp->peers[p].socks[i].fd, &answer, sizeof(answer), deadline_ns);
      if (st < 0 || answer != CHORUS_OK) {
        snprintf(tp->err, sizeof(tp->err), "rank %d (host %s) refused or dropped the connection of rank %d (%s)",
                 p, infos[p].host_id, tp->rank, chorus_status_name(st < 0 ? st : (chorus_status_t)answer));
        return st < 0 ? st : CHORUS_ERR_PROTOCOL;
      }
    }
  return CHORUS_OK;
}

chorus_status_t chorus__transport_connect_all(chorus_transport_t* tp, int listen_fd,
                                              const chorus_peer_info_t* infos, int nsocks,
                                              const uint8_t secret[16], uint64_t deadline_ns) {
  chorus_status_t st = alloc_sockets(tp, nsocks);
  if (st < 0) return st;
  for (int p = 0; p < tp->nranks; p++) {
    snprintf(tp->peers[p].host, sizeof(tp->peers[p].host), "%s", infos[p].host_id);
    snprintf(tp->peers[p].addr, sizeof(tp->peers[p].addr), "%s", infos[p].addr);
  }
  chorus_hello_t hello = {.magic = CHORUS_HELLO_MAGIC, .version = CHORUS_PROTO_VERSION,
                          .rank = tp->rank, .nranks = tp->nranks, .comm_id = tp->comm_id};
  memcpy(hello.secret, secret, 16);
  st = dial_lower(tp, infos, &hello, deadline_ns);
  if (st >= 0) st = accept_higher(tp, listen_fd, nsocks, secret, deadline_ns);
  if (st >= 0) st = read_replies(tp, infos, deadline_ns);
  if (st < 0) return st;
  for (int p = 0; p < tp->nranks; p++)
    for (int i = 0; i < tp->peers[p].nsocks; i++) {
      chorus_tcp_sock_t* s = &tp->peers[p].socks[i];
      chorus__sock_set_nonblock(s->fd, 1);
      struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = s};
      if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
        snprintf(tp->err, sizeof(tp->err), "epoll_ctl failed: %s", strerror(errno));
        return CHORUS_ERR_SYSTEM;
      }
    }
  return CHORUS_OK;
}

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

static chorus_status_t sock_error(chorus_transport_t* tp, const chorus_tcp_sock_t* s,
                                  const char* what, int err) {
  const chorus_peer_t* p = &tp->peers[s->peer];
  int remote = (err == 0 || err == EPIPE || err == ECONNRESET || err == ETIMEDOUT || err == EHOSTUNREACH);
  snprintf(tp->err, sizeof(tp->err), "connection to rank %d (host %s, %s) %s%s%s", s->peer, p->host,
           p->addr, what, err ? ": " : "", err ? strerror(err) : "");
  return remote ? CHORUS_ERR_REMOTE : CHORUS_ERR_SYSTEM;
}

static chorus_status_t sock_send(chorus_transport_t* tp, chorus_tcp_sock_t* s, int* moved) {
  chorus_xfer_t* x;
  while ((x = chorus__xq_head(&s->sendq)) != NULL) {
    size_t off, len;
    part_range(x->nbytes, x->nparts, x->nparts > 1 ? s->index : 0, &off, &len);
    struct iovec iov[2];
    int niov = 0;
    if (s->tx_hdr_off < sizeof(x->hdr))
      iov[niov++] = (struct iovec){(char*)&x->hdr + s->tx_hdr_off, sizeof(x->hdr) - s->tx_hdr_off};
    if (s->tx_off < len) iov[niov++] = (struct iovec){x->buf + off + s->tx_off, len - s->tx_off};
    if (niov) {
      struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
      ssize_t n = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return CHORUS_OK;
        if (errno == EINTR) continue;
        return sock_error(tp, s, "failed while sending", errno);
      }
      size_t sent = (size_t)n, hdr_left = sizeof(x->hdr) - s->tx_hdr_off;
      size_t to_hdr = sent < hdr_left ? sent : hdr_left;
      s->tx_hdr_off += to_hdr;
      s->tx_off += sent - to_hdr;
      (*moved)++;
      if (s->tx_hdr_off < sizeof(x->hdr) || s->tx_off < len) continue;
    }
    chorus__xq_pop(&s->sendq);
    s->tx_hdr_off = s->tx_off = 0;
    part_done(x);
  }
  return CHORUS_OK;
}

static chorus_status_t sock_recv(chorus_transport_t* tp, chorus_tcp_sock_t* s, int* moved) {
  chorus_xfer_t* x;
  while ((x = chorus__xq_head(&s->recvq)) != NULL) {
    size_t off, len;
    part_range(x->nbytes, x->nparts, x->nparts > 1 ? s->index : 0, &off, &len);
    char* dst;
    size_t want;
    if (!s->rx_checked) {
      dst = (char*)&s->rx_hdr + s->rx_hdr_off;
      want = sizeof(s->rx_hdr) - s->rx_hdr_off;
    } else {
      dst = x->buf + off + s->rx_off;
      want = len - s->rx_off;
    }
    if (want) {
      ssize_t n = recv(s->fd, dst, want, MSG_DONTWAIT);
      if (n == 0) return sock_error(tp, s, "was closed by the peer (it exited or failed)", 0);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return CHORUS_OK;
        if (errno == EINTR) continue;
        return sock_error(tp, s, "failed while receiving", errno);
      }
      (*moved)++;
      if (!s->rx_checked) {
        s->rx_hdr_off += (size_t)n;
        if (s->rx_hdr_off < sizeof(s->rx_hdr)) continue;
        char why[400];
        chorus_status_t st = chorus__frame_check(&s->rx_hdr, &x->hdr, why, sizeof(why));
        if (st < 0) {
          snprintf(tp->err, sizeof(tp->err), "from rank %d (host %s): %s", s->peer,
                   tp->peers[s->peer].host, why);
          return st;
        }
        s->rx_checked = 1;
        continue;
      }
      s->rx_off += (size_t)n;
      if (s->rx_off < len) continue;
    } else if (!s->rx_checked) {
      continue;
    }
    chorus__xq_pop(&s->recvq);
    s->rx_hdr_off = s->rx_off = 0;
    s->rx_checked = 0;
    part_done(x);
  }
  return CHORUS_OK;
}

chorus_status_t chorus__tcp_post(chorus_transport_t* tp, chorus_xfer_t* x) {
  chorus_peer_t* p = &tp->peers[x->peer];
  x->nparts = (x->nbytes >= CHORUS_STRIPE_MIN_BYTES && p->nsocks > 1) ? p->nsocks : 1;
  for (int i = 0; i < x->nparts; i++) {
    chorus_tcp_sock_t* s = &p->socks[i];
    chorus_xfer_queue_t* q = x->is_send ? &s->sendq : &s->recvq;
    if (chorus__xq_push(q, x)) return CHORUS_ERR_NO_MEMORY;
    /* Start at once when it is first in line: the latency path is one sendmsg. */
    if (q->count == 1) {
      int moved = 0;
      chorus_status_t st = x->is_send ? sock_send(tp, s, &moved) : sock_recv(tp, s, &moved);
      if (st < 0) return st;
    }
  }
  return CHORUS_OK;
}

chorus_status_t chorus__transport_progress(chorus_transport_t* tp, int* moved) {
  for (int p = 0; p < tp->nranks; p++) {
    chorus_peer_t* peer = &tp->peers[p];
    for (int i = 0; i < peer->nsocks; i++) {
      chorus_tcp_sock_t* s = &peer->socks[i];
      chorus_status_t st = CHORUS_OK;
      if (s->sendq.count) st = sock_send(tp, s, moved);
      if (st >= 0 && s->recvq.count) st = sock_recv(tp, s, moved);
      if (st < 0) return st;
    }
  }
  return CHORUS_OK;
}

void chorus__transport_wait(chorus_transport_t* tp, int timeout_ms) {
  struct epoll_event evs[64];
  int n = epoll_wait(tp->epfd, evs, 64, timeout_ms);
  for (int i = 0; i < n; i++) {
    chorus_tcp_sock_t* s = evs[i].data.ptr;
    if (!s) {
      uint64_t v;
      while (read(tp->wakefd, &v, sizeof(v)) > 0) {
      }
    } else if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
      s->peer_closed = 1;
    }
  }
}

void chorus__transport_wake(chorus_transport_t* tp) {
  uint64_t one = 1;
  if (tp->wakefd >= 0 && write(tp->wakefd, &one, sizeof(one)) < 0) {
    /* The counter is saturated: a wake-up is already pending. */
  }
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

void chorus__transport_shutdown(chorus_transport_t* tp) {
  if (!tp->peers) return;
  for (int p = 0; p < tp->nranks; p++) {
    chorus_peer_t* peer = &tp->peers[p];
    peer->self_sendq.count = peer->self_recvq.count = 0;
    for (int i = 0; i < peer->nsocks; i++) {
      chorus_tcp_sock_t* s = &peer->socks[i];
      s->sendq.count = s->recvq.count = 0;
      s->tx_hdr_off = s->tx_off = s->rx_hdr_off = s->rx_off = 0;
      s->rx_checked = 0;
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
      }
      free(peer->socks);
      chorus__xq_free(&peer->self_sendq);
      chorus__xq_free(&peer->self_recvq);
    }
    free(tp->peers);
    tp->peers = NULL;
  }
  if (tp->epfd >= 0) close(tp->epfd);
  if (tp->wakefd >= 0) close(tp->wakefd);
  tp->epfd = tp->wakefd = -1;
}
