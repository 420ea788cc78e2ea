/*
 * sock.h - socket helpers shared by the store, the bootstrap and the TCP transport: address
 * parsing, interface selection (CHORUS_SOCKET_IFNAME syntax), listening, connecting with
 * retry and backoff, and deadline-bounded full reads/writes for set-up traffic.
 */
#ifndef CHORUS_SOCK_H
#define CHORUS_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "chorus.h"

#define CHORUS_ADDR_LEN 64 /* "ip:port" text, NUL included */

/* Picks the address to advertise: the first interface that matches CHORUS_SOCKET_IFNAME
 * (prefix list "eth,ib", exclusion "^docker,lo", exact "=eth0"); with no setting, the first
 * non-loopback, non-docker interface that is up, else loopback. */
chorus_status_t chorus__sock_pick_ip(const char* ifname_spec, char* ip, size_t iplen, char* err,
                                     size_t errlen);

/* Resolves "host:port" (IPv4 name or address). */
chorus_status_t chorus__sock_resolve(const char* hostport, struct sockaddr_storage* sa,
                                     socklen_t* salen, char* err, size_t errlen);

/* Listens on ip:port (port 0: any); returns the fd and the bound "ip:port". cc (NULL or "": the
 * system's): the congestion control of the connections it accepts, set before it listens. */
chorus_status_t chorus__sock_listen(const char* ip, int port, const char* cc, int* fd, char* bound,
                                    size_t boundlen, char* err, size_t errlen);

/* Connects, retrying refused/unreachable attempts with backoff (1 ms doubling to 100 ms) until
 * deadline_ns or max_tries. Returns a blocking fd with TCP_NODELAY set, and congestion control
 * cc unless NULL or "" (set before connecting: chorus__sock_set_cc). */
chorus_status_t chorus__sock_connect(const char* hostport, uint64_t deadline_ns, int max_tries, const char* cc,
                                     int* fd, char* err, size_t errlen);

/* Blocking full transfer bounded by deadline_ns (poll-based). ERR_TIMEOUT, ERR_REMOTE on EOF
 * or reset, ERR_SYSTEM otherwise. */
chorus_status_t chorus__sock_write_all(int fd, const void* buf, size_t len, uint64_t deadline_ns);
chorus_status_t chorus__sock_read_all(int fd, void* buf, size_t len, uint64_t deadline_ns);

int chorus__sock_set_nonblock(int fd, int on);
void chorus__sock_tune(int fd); /* TCP_NODELAY, larger buffers */

/* Sets fd's TCP congestion control to `name` and reads it back. ERR_INVALID_ARG, with the
 * kernel's reason and the names it offers in err, when it refuses. fd < 0: checks the name on a
 * scratch socket. Set it before the connection exists (on a listener, for the connections it
 * accepts): a connection that started under bbr keeps the kernel's pacing after a change. */
chorus_status_t chorus__sock_set_cc(int fd, const char* name, char* err, size_t errlen);
/* fd's congestion control into buf (NUL-terminated); getsockopt's result. */
int chorus__sock_get_cc(int fd, char* buf, size_t len);

/* The local IPv4 address the kernel would use to reach hostport (no packet is sent). */
chorus_status_t chorus__sock_route_ip(const char* hostport, char* ip, size_t iplen, char* err,
                                      size_t errlen);
#endif /* CHORUS_SOCK_H */
