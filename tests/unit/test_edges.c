/*
 * test_edges.c - the TCP streams' readiness counters (transport.h, tcp.c): a read that finds the
 * socket empty, or a short one, stops further reads (no syscall) until an epoll edge is counted;
 * a write that finds the socket full, or a short one, likewise until an EPOLLOUT edge; an edge
 * counted while a socket is still ready keeps it so; the transport's own epoll collection (wait.c)
 * counts the edges the kernel gives, so data that arrives after the socket was found empty is
 * read; a short read that stopped at the peer's FIN leaves the socket ready, so the next read
 * reports the close; small reads are served from bytes read ahead in one syscall, which come
 * before a close; the counters do not wrap into "full" or "empty"; and a sleeper in epoll on another thread wakes for bytes written after a reader found
 * the socket empty (many rounds, nothing lost).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"
#include "transport/stream.h"

/* A connected non-blocking pair: fds[0] is the stream's socket, fds[1] the peer's. */
static void make_pair(int fds[2]) {
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
}

static chorus_stream_t stream_on(int fd) {
  chorus_stream_t s;
  memset(&s, 0, sizeof(s));
  s.fd = fd;
  s.rx_edges = s.tx_edges = 1; /* as tcp.c sets them up: ready until found otherwise */
  return s;
}

TEST(empty_read_waits_for_an_edge) {
  int fds[2];
  make_pair(fds);
  chorus_stream_t s = stream_on(fds[0]);
  char buf[64];
  ASSERT_TRUE(chorus__tcp_rx_ready(&s));
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 0); /* EAGAIN */
  ASSERT_TRUE(!chorus__tcp_rx_ready(&s));
  ASSERT_EQ(write(fds[1], "abc", 3), 3);
  /* Bytes are there, but no edge was counted: the read does not look. */
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 0);
  chorus__tcp_edge_rx(&s);
  ASSERT_TRUE(chorus__tcp_rx_ready(&s));
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 3); /* short: the socket is empty now */
  ASSERT_EQ(memcmp(buf, "abc", 3), 0);
  ASSERT_TRUE(!chorus__tcp_rx_ready(&s));
  close(fds[0]);
  free(s.rx_stage);
  close(fds[1]);
}

TEST(full_read_stays_ready) {
  int fds[2];
  make_pair(fds);
  chorus_stream_t s = stream_on(fds[0]);
  static char block[1 << 16], buf[1 << 15];
  for (size_t i = 0; i < sizeof(block); i++) block[i] = (char)(i * 7 + 1);
  ASSERT_EQ(write(fds[1], block, sizeof(block)), (ssize_t)sizeof(block));
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), (ssize_t)sizeof(buf)); /* all it asked for: more may be queued */
  ASSERT_TRUE(chorus__tcp_rx_ready(&s));
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), (ssize_t)sizeof(buf));
  ASSERT_EQ(memcmp(buf, block + sizeof(buf), sizeof(buf)), 0);
  ASSERT_TRUE(chorus__tcp_rx_ready(&s));
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 0);
  ASSERT_TRUE(!chorus__tcp_rx_ready(&s));
  close(fds[0]);
  close(fds[1]);
  free(s.rx_stage);
}

/* A small read takes what the socket holds into the stream's stage in one syscall: the next
 * small reads are served from there, and the short fill already told that the socket is empty. */
TEST(small_reads_come_from_the_stage) {
  int fds[2];
  make_pair(fds);
  chorus_stream_t s = stream_on(fds[0]);
  char buf[4];
  ASSERT_EQ(write(fds[1], "abcdefghij", 10), 10);
  ASSERT_EQ(chorus__tcp_read(&s, buf, 4), 4);
  ASSERT_EQ(memcmp(buf, "abcd", 4), 0);
  ASSERT_TRUE(chorus__tcp_rx_ready(&s)); /* bytes read ahead: ready without an edge */
  ASSERT_EQ(chorus__tcp_read(&s, buf, 4), 4);
  ASSERT_EQ(memcmp(buf, "efgh", 4), 0);
  ASSERT_EQ(chorus__tcp_read(&s, buf, 4), 2); /* the rest of the stage, nothing more */
  ASSERT_EQ(memcmp(buf, "ij", 2), 0);
  ASSERT_TRUE(!chorus__tcp_rx_ready(&s));
  ASSERT_EQ(write(fds[1], "kl", 2), 2);
  ASSERT_EQ(chorus__tcp_read(&s, buf, 4), 0); /* no edge yet: no syscall */
  chorus__tcp_edge_rx(&s);
  ASSERT_EQ(chorus__tcp_read(&s, buf, 4), 2);
  ASSERT_EQ(memcmp(buf, "kl", 2), 0);
  /* A large read after bytes were staged gets the staged ones first, in order. */
  ASSERT_EQ(write(fds[1], "mnop", 4), 4);
  chorus__tcp_edge_rx(&s);
  ASSERT_EQ(chorus__tcp_read(&s, buf, 1), 1);
  ASSERT_EQ(buf[0], 'm');
  static char big[1 << 16];
  ASSERT_EQ(chorus__tcp_read(&s, big, sizeof(big)), 3);
  ASSERT_EQ(memcmp(big, "nop", 3), 0);
  /* Bytes staged before the peer closed come before the close is reported. */
  ASSERT_EQ(write(fds[1], "qrs", 3), 3);
  close(fds[1]);
  chorus__tcp_edge_rx(&s);
  ASSERT_EQ(chorus__tcp_read(&s, buf, 1), 1);
  ASSERT_EQ(buf[0], 'q');
  ASSERT_EQ(chorus__tcp_read(&s, buf, 4), 2);
  ASSERT_EQ(memcmp(buf, "rs", 2), 0);
  chorus__tcp_edge_rx(&s); /* the FIN's edge */
  ASSERT_EQ(chorus__tcp_read(&s, buf, 4), -EPIPE);
  close(fds[0]);
  free(s.rx_stage);
}

TEST(closed_peer_reads_as_epipe_after_its_edge) {
  int fds[2];
  make_pair(fds);
  chorus_stream_t s = stream_on(fds[0]);
  char buf[8];
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 0);
  close(fds[1]);
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 0); /* no edge yet */
  chorus__tcp_edge_rx(&s);
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), -EPIPE);
  close(fds[0]);
  free(s.rx_stage);
}

TEST(full_write_waits_for_an_edge) {
  int fds[2];
  make_pair(fds);
  int small = 4096;
  ASSERT_EQ(setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
  chorus_stream_t s = stream_on(fds[0]);
  static char block[1 << 16];
  memset(block, 7, sizeof(block));
  size_t written = 0;
  for (int i = 0; i < 1000 && chorus__tcp_tx_ready(&s); i++) {
    struct iovec iov = {block, sizeof(block)};
    ssize_t n = chorus__tcp_writev(&s, &iov, 1);
    ASSERT_TRUE(n >= 0);
    written += (size_t)n;
  }
  ASSERT_TRUE(written > 0);
  ASSERT_TRUE(!chorus__tcp_tx_ready(&s)); /* a short write (or EAGAIN) found it full */
  struct iovec one = {block, 1};
  ASSERT_EQ(chorus__tcp_writev(&s, &one, 1), 0); /* no syscall until an edge */
  /* The peer drains everything: room again, announced by an edge. */
  size_t drained = 0;
  for (;;) {
    ssize_t n = read(fds[1], block, sizeof(block));
    if (n <= 0) break;
    drained += (size_t)n;
  }
  ASSERT_EQ(drained, written);
  chorus__tcp_edge_tx(&s);
  ASSERT_EQ(chorus__tcp_writev(&s, &one, 1), 1);
  ASSERT_TRUE(chorus__tcp_tx_ready(&s)); /* everything asked for went: still ready */
  close(fds[0]);
  close(fds[1]);
}

/* A connected non-blocking TCP pair on loopback: fds[0] the stream's socket, fds[1] the peer's. */
static void make_tcp_pair(int fds[2]) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_TRUE(lfd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(lfd, (struct sockaddr*)&a, sizeof(a)), 0);
  socklen_t alen = sizeof(a);
  ASSERT_EQ(getsockname(lfd, (struct sockaddr*)&a, &alen), 0);
  ASSERT_EQ(listen(lfd, 1), 0);
  fds[1] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_TRUE(fds[1] >= 0);
  ASSERT_EQ(connect(fds[1], (struct sockaddr*)&a, sizeof(a)), 0);
  fds[0] = accept(lfd, NULL, NULL);
  ASSERT_TRUE(fds[0] >= 0);
  ASSERT_EQ(fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK), 0);
  close(lfd);
}

/* The peer's last bytes and its FIN come in one edge: the read that stops short at the FIN must
 * not mark the socket empty (no edge follows), or the close would go unseen until a timeout. */
TEST(short_read_at_the_peers_fin_still_reports_the_close) {
  chorus_transport_t tp;
  ASSERT_EQ(chorus__transport_create(&tp, 0, 1, 44), CHORUS_OK);
  int fds[2];
  make_tcp_pair(fds);
  chorus_stream_t s = stream_on(fds[0]);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &s};
  ASSERT_EQ(epoll_ctl(tp.epfd, EPOLL_CTL_ADD, fds[0], &ev), 0);
  char buf[64];
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 0);
  ASSERT_TRUE(!chorus__tcp_rx_ready(&s));
  ASSERT_EQ(write(fds[1], "0123456789", 10), 10);
  close(fds[1]);
  usleep(20000); /* both have arrived: one report carries them */
  chorus__transport_collect_events(&tp, 1000);
  ASSERT_TRUE(s.peer_closed);
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 10);
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), -EPIPE);
  epoll_ctl(tp.epfd, EPOLL_CTL_DEL, fds[0], NULL);
  close(fds[0]);
  free(s.rx_stage);
  chorus__transport_destroy(&tp);
}

/* Every incoming message's edge also reports EPOLLOUT: a socket that never filled must not read
 * as full when the count passes 2^32 (nor one never found empty as empty). */
TEST(counters_do_not_wrap_into_full_or_empty) {
  int fds[2];
  make_pair(fds);
  chorus_stream_t s = stream_on(fds[0]);
  s.tx_edges = s.rx_edges = 0xffffffffu;
  chorus__tcp_edge_tx(&s);
  chorus__tcp_edge_rx(&s);
  ASSERT_TRUE(chorus__tcp_tx_ready(&s)); /* tx_full_at is still 0: never found full */
  ASSERT_TRUE(chorus__tcp_rx_ready(&s));
  struct iovec one = {(void*)"x", 1};
  ASSERT_EQ(chorus__tcp_writev(&s, &one, 1), 1);
  char c = 0;
  ASSERT_EQ(read(fds[1], &c, 1), 1);
  ASSERT_EQ(c, 'x');
  close(fds[0]);
  free(s.rx_stage);
  close(fds[1]);
}

/* The transport's epoll collection counts the kernel's edges on the streams it registered. */
TEST(collected_epoll_edges_make_a_stream_ready) {
  chorus_transport_t tp;
  ASSERT_EQ(chorus__transport_create(&tp, 0, 1, 42), CHORUS_OK);
  int fds[2];
  make_pair(fds);
  chorus_stream_t s = stream_on(fds[0]);
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &s};
  ASSERT_EQ(epoll_ctl(tp.epfd, EPOLL_CTL_ADD, fds[0], &ev), 0);
  chorus__transport_collect_events(&tp, 0); /* the registration's own report */
  char buf[16];
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 0);
  ASSERT_TRUE(!chorus__tcp_rx_ready(&s));
  ASSERT_EQ(write(fds[1], "hello", 5), 5);
  chorus__transport_collect_events(&tp, 1000);
  ASSERT_TRUE(chorus__tcp_rx_ready(&s));
  ASSERT_EQ(chorus__tcp_read(&s, buf, sizeof(buf)), 5);
  ASSERT_EQ(memcmp(buf, "hello", 5), 0);
  epoll_ctl(tp.epfd, EPOLL_CTL_DEL, fds[0], NULL);
  close(fds[0]);
  free(s.rx_stage);
  close(fds[1]);
  chorus__transport_destroy(&tp);
}

/* A reader finds the socket empty while another thread sleeps in epoll; the writer then writes.
 * The sleeper's edge must reach the reader every round (a lost one would leave the byte unread
 * until the 5 s bound). */
typedef struct {
  chorus_transport_t tp;
  chorus_stream_t s;
  int peer_fd;
  int rounds;
  int stop; /* atomic */
} race_t;

static void* sleeper(void* p) {
  race_t* r = p;
  while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) chorus__transport_collect_events(&r->tp, 5);
  return NULL;
}

TEST(no_edge_is_lost_to_a_sleeping_thread) {
  static race_t r;
  memset(&r, 0, sizeof(r));
  r.rounds = 3000;
  ASSERT_EQ(chorus__transport_create(&r.tp, 0, 1, 43), CHORUS_OK);
  int fds[2];
  make_pair(fds);
  r.s = stream_on(fds[0]);
  r.peer_fd = fds[1];
  struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = &r.s};
  ASSERT_EQ(epoll_ctl(r.tp.epfd, EPOLL_CTL_ADD, fds[0], &ev), 0);
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, sleeper, &r), 0);
  double worst = 0;
  for (int i = 0; i < r.rounds; i++) {
    char c = (char)i, got = 0;
    ASSERT_EQ(write(r.peer_fd, &c, 1), 1);
    double t0 = test_now_sec();
    ssize_t n = 0;
    while ((n = chorus__tcp_read(&r.s, &got, 1)) == 0 && test_now_sec() - t0 < 5.0) {
    }
    ASSERT_EQ(n, 1);
    ASSERT_EQ(got, c);
    double took = test_now_sec() - t0;
    if (took > worst) worst = took;
    ASSERT_EQ(chorus__tcp_read(&r.s, &got, 1), 0); /* found empty: from now on it waits for an edge */
  }
  __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
  ASSERT_EQ(pthread_join(th, NULL), 0);
  printf("  %d rounds, slowest %.1f ms\n", r.rounds, worst * 1e3);
  ASSERT_TRUE(worst < 2.0);
  epoll_ctl(r.tp.epfd, EPOLL_CTL_DEL, fds[0], NULL);
  close(fds[0]);
  free(r.s.rx_stage);
  close(fds[1]);
  chorus__transport_destroy(&r.tp);
}
