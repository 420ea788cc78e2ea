/* sock.c - socket helpers: see sock.h. */
#include "core/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/sysfile.h"

int chorus__sock_set_nonblock(int fd, int on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0) return -1;
  return fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void chorus__sock_tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int chorus__sock_get_cc(int fd, char* buf, size_t len) {
  socklen_t n = (socklen_t)(len - 1);
  memset(buf, 0, len);
  return getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, buf, &n);
}

chorus_status_t chorus__sock_set_cc(int fd, const char* name, char* err, size_t errlen) {
  int scratch = fd < 0;
  if (scratch) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket failed: %s", strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  char got[32] = "";
  int rc = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name));
  int refused = rc != 0;
  if (rc == 0) rc = chorus__sock_get_cc(fd, got, sizeof(got));
  int set_errno = errno;
  if (scratch) close(fd);
  if (rc == 0 && strcmp(got, name) == 0) return CHORUS_OK;
  /* Unprivileged processes may pick only the allowed ones; root any available one. */
  char available[256], allowed[256];
  chorus__first_line("/proc/sys/net/ipv4/tcp_available_congestion_control", available, sizeof(available));
  chorus__first_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof(allowed));
  char why[96];
  if (refused) snprintf(why, sizeof(why), "the kernel refused it (%s)", strerror(set_errno));
  else if (rc != 0) snprintf(why, sizeof(why), "it could not be read back (%s)", strerror(set_errno));
  else snprintf(why, sizeof(why), "the socket runs \"%s\" instead", got);
  snprintf(err, errlen, "CHORUS_SOCKET_CC=\"%s\": %s; available: %s; allowed without CAP_NET_ADMIN: %s", name, why,
           available[0] ? available : "?", allowed[0] ? allowed : "?");
  return CHORUS_ERR_INVALID_ARG;
}

/* Does interface `name` match one comma-separated entry of `list` (prefix or exact match)? */
static int if_in_list(const char* name, const char* list, int exact) {
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", list);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0) return 1;
  }
  return 0;
}

static int if_matches(const char* name, const char* spec) {
  if (!spec[0]) /* no choice made: skip loopback and the bridges and links of containers and VMs */
    return strcmp(name, "lo") != 0 && !if_in_list(name, "docker,veth,virbr,br-", 0);
  if (spec[0] == '^') {
    int exact = (spec[1] == '=');
    return !if_in_list(name, spec + 1 + exact, exact);
  }
  int exact = (spec[0] == '=');
  return if_in_list(name, spec + exact, exact);
}

chorus_status_t chorus__sock_pick_ip(const char* spec, char* ip, size_t iplen, char* err,
                                     size_t errlen) {
  struct ifaddrs* ifs = NULL;
  if (getifaddrs(&ifs) != 0) {
    snprintf(err, errlen, "getifaddrs failed: %s", strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  int found = 0;
  for (struct ifaddrs* i = ifs; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    if (!if_matches(i->ifa_name, spec)) continue;
    inet_ntop(AF_INET, &((struct sockaddr_in*)i->ifa_addr)->sin_addr, ip, (socklen_t)iplen);
    found = 1;
  }
  freeifaddrs(ifs);
  if (found) return CHORUS_OK;
  if (!spec[0]) { /* a machine with loopback only */
    snprintf(ip, iplen, "127.0.0.1");
    return CHORUS_OK;
  }
  snprintf(err, errlen, "no IPv4 interface that is up matches CHORUS_SOCKET_IFNAME=%s", spec);
  return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__sock_resolve(const char* hostport, struct sockaddr_storage* sa,
                                     socklen_t* salen, char* err, size_t errlen) {
  char host[CHORUS_ADDR_LEN];
  const char* colon = strrchr(hostport, ':');
  if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof(host)) {
    snprintf(err, errlen, "address \"%s\" is not host:port", hostport);
    return CHORUS_ERR_INVALID_ARG;
  }
  memcpy(host, hostport, (size_t)(colon - hostport));
  host[colon - hostport] = '\0';
  char* end = NULL;
  long port = strtol(colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) {
    snprintf(err, errlen, "address \"%s\" has an invalid port", hostport);
    return CHORUS_ERR_INVALID_ARG;
  }
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || !res) {
    snprintf(err, errlen, "cannot resolve host \"%s\": %s", host, gai_strerror(rc));
    return CHORUS_ERR_INVALID_ARG;
  }
  memcpy(sa, res->ai_addr, res->ai_addrlen);
  *salen = res->ai_addrlen;
  ((struct sockaddr_in*)sa)->sin_port = htons((uint16_t)port);
  freeaddrinfo(res);
  return CHORUS_OK;
}

chorus_status_t chorus__sock_listen(const char* ip, int port, const char* cc, int* fd_out, char* bound,
                                    size_t boundlen, char* err, size_t errlen) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket failed: %s", strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  chorus_status_t st;
  if (cc && cc[0] && (st = chorus__sock_set_cc(fd, cc, err, errlen)) < 0) { /* connections inherit it */
    close(fd);
    return st;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
    snprintf(err, errlen, "\"%s\" is not an IPv4 address", ip);
    close(fd);
    return CHORUS_ERR_INVALID_ARG;
  }
  if (bind(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0 || listen(fd, 1024) != 0) {
    snprintf(err, errlen, "cannot listen on %s:%d: %s", ip, port, strerror(errno));
    close(fd);
    return CHORUS_ERR_SYSTEM;
  }
  socklen_t len = sizeof(sa);
  getsockname(fd, (struct sockaddr*)&sa, &len);
  if (bound) snprintf(bound, boundlen, "%s:%d", ip, ntohs(sa.sin_port));
  *fd_out = fd;
  return CHORUS_OK;
}

/* Ranks start together, and rank 0's store is up a few ms to a few hundred ms later (a Python
 * rank imports torch first): a refused attempt costs a SYN and a reset, so retry every 100 ms
 * at most. Doubling to 1 s made a rank connect up to 1 s after the store was up. */
#define CONNECT_BACKOFF_MAX_NS (100ull * 1000000ull)

static void sleep_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / CHORUS_NS_PER_SEC), (long)(ns % CHORUS_NS_PER_SEC)};
  nanosleep(&ts, NULL);
}

chorus_status_t chorus__sock_connect(const char* hostport, uint64_t deadline_ns, int max_tries, const char* cc,
                                     int* fd_out, char* err, size_t errlen) {
  struct sockaddr_storage sa;
  socklen_t salen;
  chorus_status_t st = chorus__sock_resolve(hostport, &sa, &salen, err, errlen);
  if (st < 0) return st;
  uint64_t backoff_ns = 1000000;
  int last_errno = 0;
  for (int attempt = 0; attempt <= max_tries; attempt++) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      snprintf(err, errlen, "socket failed: %s", strerror(errno));
      return CHORUS_ERR_SYSTEM;
    }
    if (cc && cc[0] && (st = chorus__sock_set_cc(fd, cc, err, errlen)) < 0) {
      close(fd);
      return st;
    }
    if (connect(fd, (struct sockaddr*)&sa, salen) == 0) {
      chorus__sock_tune(fd);
      *fd_out = fd;
      return CHORUS_OK;
    }
    last_errno = errno;
    close(fd);
    uint64_t now = chorus__now_ns();
    if (now >= deadline_ns) break;
    uint64_t wait = backoff_ns < deadline_ns - now ? backoff_ns : deadline_ns - now;
    sleep_ns(wait);
    backoff_ns = backoff_ns * 2 > CONNECT_BACKOFF_MAX_NS ? CONNECT_BACKOFF_MAX_NS : backoff_ns * 2;
  }
  snprintf(err, errlen, "cannot connect to %s: %s (gave up after the connect timeout / retry count)",
           hostport, strerror(last_errno));
  return CHORUS_ERR_TIMEOUT;
}

/* Waits for `events` on fd until deadline_ns. */
static chorus_status_t wait_fd(int fd, short events, uint64_t deadline_ns) {
  for (;;) {
    uint64_t now = chorus__now_ns();
    if (now >= deadline_ns) return CHORUS_ERR_TIMEOUT;
    uint64_t left_ms = (deadline_ns - now) / 1000000 + 1;
    struct pollfd p = {.fd = fd, .events = events};
    int rc = poll(&p, 1, left_ms > 1000 ? 1000 : (int)left_ms);
    if (rc > 0) return CHORUS_OK;
    if (rc < 0 && errno != EINTR) return CHORUS_ERR_SYSTEM;
  }
}

chorus_status_t chorus__sock_write_all(int fd, const void* buf, size_t len, uint64_t deadline_ns) {
  const char* p = buf;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      chorus_status_t st = wait_fd(fd, POLLOUT, deadline_ns);
      if (st < 0) return st;
      continue;
    }
    return (errno == EPIPE || errno == ECONNRESET) ? CHORUS_ERR_REMOTE : CHORUS_ERR_SYSTEM;
  }
  return CHORUS_OK;
}

chorus_status_t chorus__sock_read_all(int fd, void* buf, size_t len, uint64_t deadline_ns) {
  char* p = buf;
  while (len > 0) {
    ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= (size_t)n;
      continue;
    }
    if (n == 0) return CHORUS_ERR_REMOTE;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      chorus_status_t st = wait_fd(fd, POLLIN, deadline_ns);
      if (st < 0) return st;
      continue;
    }
    return errno == ECONNRESET ? CHORUS_ERR_REMOTE : CHORUS_ERR_SYSTEM;
  }
  return CHORUS_OK;
}

chorus_status_t chorus__sock_route_ip(const char* hostport, char* ip, size_t iplen, char* err,
                                      size_t errlen) {
  struct sockaddr_storage sa;
  socklen_t salen;
  chorus_status_t st = chorus__sock_resolve(hostport, &sa, &salen, err, errlen);
  if (st < 0) return st;
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr*)&sa, salen) != 0) {
    snprintf(err, errlen, "no route to %s: %s", hostport, strerror(errno));
    if (fd >= 0) close(fd);
    return CHORUS_ERR_SYSTEM;
  }
  struct sockaddr_in local;
  socklen_t len = sizeof(local);
  getsockname(fd, (struct sockaddr*)&local, &len);
  close(fd);
  inet_ntop(AF_INET, &local.sin_addr, ip, (socklen_t)iplen);
  return CHORUS_OK;
}
