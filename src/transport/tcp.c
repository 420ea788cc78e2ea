/*
 * tcp.c - TCP set-up and I/O: a full mesh of authenticated, non-blocking, TCP_NODELAY
 * sockets (nsocks per peer, registered edge-triggered in the transport's epoll set), and the
 * two stream operations the shared data path (transport.c) calls on a socket.
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

static chorus_status_t alloc_sockets(chorus_transport_t* tp, int nsocks) {
  for (int p = 0; p < tp->nranks; p++) {
    if (p == tp->rank) continue;
    tp->peers[p].nsocks = nsocks;
    tp->peers[p].socks = calloc((size_t)nsocks, sizeof(chorus_stream_t));
    if (!tp->peers[p].socks) return CHORUS_ERR_NO_MEMORY;
    for (int i = 0; i < nsocks; i++) {
      tp->peers[p].socks[i].fd = -1;
      tp->peers[p].socks[i].peer = p;
      tp->peers[p].socks[i].index = i;
      tp->peers[p].socks[i].rx_edges = tp->peers[p].socks[i].tx_edges = 1; /* ready until found otherwise */
    }
  }
  return CHORUS_OK;
}

/* Dials every lower rank and sends the hello; replies are read after the accept phase, so no
 * rank ever waits on a rank that is itself waiting. */
static chorus_status_t dial_lower(chorus_transport_t* tp, const chorus_peer_info_t* infos, const char* cc,
                                  const chorus_hello_t* hello_tmpl, uint64_t deadline_ns) {
  for (int p = 0; p < tp->rank; p++) {
    for (int i = 0; i < tp->peers[p].nsocks; i++) {
      int fd = -1;
      char why[256];
      chorus_status_t st = chorus__sock_connect(infos[p].addr, deadline_ns, 1 << 30, cc, &fd, why, sizeof(why));
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

const char* chorus__hello_check(const chorus_transport_t* tp, const chorus_hello_t* h,
                                const uint8_t secret[16], int nsocks) {
  if (h->magic != CHORUS_HELLO_MAGIC) return "not a Chorus peer (bad magic)";
  if (h->version != CHORUS_PROTO_VERSION) return "other protocol version";
  if (h->comm_id != tp->comm_id) return "another communicator";
  if (memcmp(h->secret, secret, 16) != 0) return "wrong secret";
  /* Only now are rank and sock_index trusted as indices. */
  if (h->nranks != tp->nranks || h->rank <= tp->rank || h->rank >= tp->nranks) return "impossible rank";
  if (h->sock_index >= nsocks) return "impossible socket index";
  if (tp->peers[h->rank].socks[h->sock_index].fd >= 0) return "duplicate connection";
  return NULL;
}

/* Validates one incoming hello; returns the slot it fills or NULL (and logs why). */
static chorus_stream_t* check_hello(chorus_transport_t* tp, const chorus_hello_t* h,
                                      const uint8_t secret[16], int nsocks) {
  const char* why = chorus__hello_check(tp, h, secret, nsocks);
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
    chorus_stream_t* slot = NULL;
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

/* Every socket reports congestion control cc: what the kernel did with the listener's setting is
 * checked, not assumed. */
static chorus_status_t check_cc(chorus_transport_t* tp, const char* cc) {
  int nsocks = 0;
  for (int p = 0; p < tp->nranks; p++)
    for (int i = 0; i < tp->peers[p].nsocks; i++) {
      int fd = tp->peers[p].socks[i].fd;
      char got[32];
      if (fd < 0) continue;
      int rc = chorus__sock_get_cc(fd, got, sizeof(got));
      if (rc != 0 || strcmp(got, cc) != 0) {
        snprintf(tp->err, sizeof(tp->err), "CHORUS_SOCKET_CC=\"%s\": rank %d's socket %d to rank %d %s%s%s", cc,
                 tp->rank, i, p, rc ? "cannot be read (" : "runs \"", rc ? strerror(errno) : got, rc ? ")" : "\"");
        tp->err_peer = p;
        return CHORUS_ERR_SYSTEM;
      }
      nsocks++;
    }
  CH_INFO(INIT, tp->rank, "TCP congestion control %s on its %d socket(s) to other ranks (CHORUS_SOCKET_CC)", cc, nsocks);
  return CHORUS_OK;
}

chorus_status_t chorus__transport_connect_all(chorus_transport_t* tp, int listen_fd,
                                              const chorus_peer_info_t* infos, int nsocks, const char* cc,
                                              const uint8_t secret[16], uint64_t deadline_ns) {
  chorus_status_t st = alloc_sockets(tp, nsocks);
  if (st < 0) return st;
  tp->stripe_socks = nsocks;
  for (int p = 0; p < tp->nranks; p++) {
    snprintf(tp->peers[p].host, sizeof(tp->peers[p].host), "%s", infos[p].host_id);
    snprintf(tp->peers[p].addr, sizeof(tp->peers[p].addr), "%s", infos[p].addr);
  }
  chorus_hello_t hello = {.magic = CHORUS_HELLO_MAGIC, .version = CHORUS_PROTO_VERSION,
                          .rank = tp->rank, .nranks = tp->nranks, .comm_id = tp->comm_id};
  memcpy(hello.secret, secret, 16);
  st = dial_lower(tp, infos, cc, &hello, deadline_ns);
  if (st >= 0) st = accept_higher(tp, listen_fd, nsocks, secret, deadline_ns);
  if (st >= 0) st = read_replies(tp, infos, deadline_ns);
  if (st >= 0 && cc[0]) st = check_cc(tp, cc);
  if (st < 0) return st;
  for (int p = 0; p < tp->nranks; p++)
    for (int i = 0; i < tp->peers[p].nsocks; i++) {
      chorus_stream_t* s = &tp->peers[p].socks[i];
      chorus__sock_set_nonblock(s->fd, 1);
      struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = s};
      if (epoll_ctl(tp->epfd, EPOLL_CTL_ADD, s->fd, &ev) != 0) {
        snprintf(tp->err, sizeof(tp->err), "epoll_ctl failed: %s", strerror(errno));
        return CHORUS_ERR_SYSTEM;
      }
    }
  return CHORUS_OK;
}

/* ---- stream I/O ---- */

/* Bytes written, 0 when the socket would block, -errno on failure. A short write means the
 * send buffer is full: the kernel then announces room with an EPOLLOUT edge once half of what
 * it holds has gone, so the next write is a large one. */
ssize_t chorus__tcp_writev(chorus_stream_t* s, const struct iovec* iov, int niov) {
  uint64_t edges = __atomic_load_n(&s->tx_edges, __ATOMIC_ACQUIRE);
  if (edges == s->tx_full_at) return 0;
  size_t want = 0;
  for (int i = 0; i < niov; i++) want += iov[i].iov_len;
  struct msghdr msg = {.msg_iov = (struct iovec*)iov, .msg_iovlen = (size_t)niov};
  for (;;) {
    ssize_t n = sendmsg(s->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      if ((size_t)n < want) s->tx_full_at = edges;
      return n;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    s->tx_full_at = edges;
    return 0;
  }
}

/* Reads of fewer bytes go through the stream's stage: a frame header (48 bytes) asks the socket
 * for this many, which brings a small message's payload along (a 4 KiB frame in one syscall
 * instead of a header, a payload and a read that finds the socket empty). Larger reads go
 * straight to their destination; at most this much of a large payload is copied once more.
 * Every TCP stream that reads a small frame keeps one: 32 MiB for 4096 peers. */
#define CHORUS_TCP_STAGE_BYTES (8u * 1024u)

/* One recv into buf: bytes, 0 when the socket is empty, -EPIPE when the peer closed, -errno on
 * failure. A short read emptied the socket (TCP returns less only when nothing more is
 * queued): the next byte to arrive brings an EPOLLIN edge. Not so when it stopped at the peer's
 * FIN or at a reset whose edge was already counted: no edge follows, and the next read must make
 * the syscall that reports it (peer_closed is set before such an edge is counted, wait.c). */
static ssize_t socket_read(chorus_stream_t* s, void* buf, size_t len, uint64_t edges) {
  for (;;) {
    ssize_t n = recv(s->fd, buf, len, MSG_DONTWAIT);
    if (n > 0) {
      if ((size_t)n < len && !__atomic_load_n(&s->peer_closed, __ATOMIC_ACQUIRE)) s->rx_empty_at = edges;
      return n;
    }
    if (n == 0) return -EPIPE;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -errno;
    s->rx_empty_at = edges;
    return 0;
  }
}

/* Bytes read, 0 when nothing is there yet, -EPIPE when the peer closed (after every byte it
 * sent), -errno on failure. */
ssize_t chorus__tcp_read(chorus_stream_t* s, void* buf, size_t len) {
  if (!chorus__tcp_rx_staged(s)) {
    uint64_t edges = __atomic_load_n(&s->rx_edges, __ATOMIC_ACQUIRE);
    if (edges == s->rx_empty_at) return 0;
    if (len >= CHORUS_TCP_STAGE_BYTES) return socket_read(s, buf, len, edges);
    if (!s->rx_stage) s->rx_stage = malloc(CHORUS_TCP_STAGE_BYTES);
    if (!s->rx_stage) return socket_read(s, buf, len, edges); /* slower, still correct */
    ssize_t n = socket_read(s, s->rx_stage, CHORUS_TCP_STAGE_BYTES, edges);
    if (n <= 0) return n;
    s->rx_stage_off = 0;
    s->rx_stage_len = (uint32_t)n;
  }
  size_t avail = s->rx_stage_len - s->rx_stage_off, n = len < avail ? len : avail;
  memcpy(buf, s->rx_stage + s->rx_stage_off, n);
  s->rx_stage_off += (uint32_t)n;
  return (ssize_t)n;
}
