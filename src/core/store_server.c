/*
 * store_server.c - the bootstrap store server: one detached thread, poll() over the listener
 * and its clients, non-blocking reads into a per-client buffer so that a slow, silent or
 * hostile client cannot stall the others. GETs for missing keys wait (per client) until the
 * key is set or their deadline passes. The thread exits when enough clients said DONE.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/sock.h"
#include "core/store.h"

typedef struct {
  char* key;
  void* val;
  size_t len;
} kv_t;

typedef struct {
  int fd;
  int authed;
  char* in; /* bytes received and not yet consumed */
  size_t in_len, in_cap;
  char* wait_key; /* a GET waiting for this key */
  uint64_t wait_deadline_ns;
} client_t;

typedef struct {
  int listen_fd;
  uint8_t secret[CHORUS_SECRET_BYTES];
  kv_t* kv;
  size_t nkv, kv_cap;
  client_t* clients;
  size_t nclients;
  int done_count;
  int done_target; /* 0 until the first DONE says how many ranks there are */
} server_t;

static kv_t* kv_find(server_t* s, const char* key) {
  for (size_t i = 0; i < s->nkv; i++)
    if (strcmp(s->kv[i].key, key) == 0) return &s->kv[i];
  return NULL;
}

static chorus_status_t kv_set(server_t* s, const char* key, const void* val, size_t len) {
  void* copy = malloc(len ? len : 1);
  if (!copy) return CHORUS_ERR_NO_MEMORY;
  memcpy(copy, val, len);
  kv_t* e = kv_find(s, key);
  if (!e) {
    if (s->nkv == s->kv_cap) {
      size_t cap = s->kv_cap ? s->kv_cap * 2 : 64;
      kv_t* grown = realloc(s->kv, cap * sizeof(kv_t));
      if (!grown) {
        free(copy);
        return CHORUS_ERR_NO_MEMORY;
      }
      s->kv = grown;
      s->kv_cap = cap;
    }
    e = &s->kv[s->nkv++];
    e->key = strdup(key);
    e->val = NULL;
  }
  free(e->val);
  e->val = copy;
  e->len = len;
  return CHORUS_OK;
}

/* Responses are small and the client is waiting for them: a short bounded write. */
static int reply(client_t* c, chorus_status_t st, uint64_t arg, const void* val, size_t len) {
  chorus_store_resp_t r = {.status = st, .arg = arg};
  uint64_t deadline = chorus__now_ns() + 5 * CHORUS_NS_PER_SEC;
  if (chorus__sock_write_all(c->fd, &r, sizeof(r), deadline) < 0) return -1;
  if (len && chorus__sock_write_all(c->fd, val, len, deadline) < 0) return -1;
  return 0;
}

static void drop_client(server_t* s, size_t i) {
  close(s->clients[i].fd);
  free(s->clients[i].in);
  free(s->clients[i].wait_key);
  s->clients[i] = s->clients[--s->nclients];
}

/* Answers a waiting GET if its key exists or its deadline passed. Returns -1 to drop. */
static int serve_wait(server_t* s, client_t* c, uint64_t now) {
  if (!c->wait_key) return 0;
  kv_t* e = kv_find(s, c->wait_key);
  int rc = 0;
  if (e)
    rc = reply(c, CHORUS_OK, e->len, e->val, e->len);
  else if (now >= c->wait_deadline_ns)
    rc = reply(c, CHORUS_ERR_TIMEOUT, 0, NULL, 0);
  else
    return 0;
  free(c->wait_key);
  c->wait_key = NULL;
  return rc;
}

/* Consumes complete messages from c->in. Returns -1 when the client must be dropped. */
static int serve_input(server_t* s, client_t* c) {
  for (;;) {
    if (c->wait_key) return 0; /* one outstanding request per client */
    if (!c->authed) {
      if (c->in_len < sizeof(chorus_store_hello_t)) return 0;
      chorus_store_hello_t h;
      memcpy(&h, c->in, sizeof(h));
      int ok = h.magic == CHORUS_STORE_MAGIC && h.version == CHORUS_STORE_VERSION &&
               memcmp(h.secret, s->secret, CHORUS_SECRET_BYTES) == 0;
      int32_t answer = ok ? CHORUS_OK : CHORUS_ERR_PROTOCOL;
      if (!ok)
        CH_WARN(-1, "bootstrap store rejected a client: %s",
                h.magic != CHORUS_STORE_MAGIC ? "not a Chorus client (bad magic)"
                : h.version != CHORUS_STORE_VERSION ? "other protocol version" : "wrong secret");
      chorus__sock_write_all(c->fd, &answer, sizeof(answer), chorus__now_ns() + CHORUS_NS_PER_SEC);
      if (!ok) return -1;
      c->authed = 1;
      memmove(c->in, c->in + sizeof(h), c->in_len - sizeof(h));
      c->in_len -= sizeof(h);
      continue;
    }
    if (c->in_len < sizeof(chorus_store_req_t)) return 0;
    chorus_store_req_t req;
    memcpy(&req, c->in, sizeof(req));
    if (req.keylen > CHORUS_STORE_MAX_KEY || (req.op == STORE_OP_SET && req.arg > CHORUS_STORE_MAX_VALUE) ||
        req.op < STORE_OP_SET || req.op > STORE_OP_DONE) {
      CH_WARN(-1, "bootstrap store dropped a client that sent a malformed request (op %u)", req.op);
      return -1;
    }
    size_t vallen = req.op == STORE_OP_SET ? (size_t)req.arg : 0;
    size_t total = sizeof(req) + req.keylen + vallen;
    if (c->in_len < total) return 0;
    char key[CHORUS_STORE_MAX_KEY + 1];
    memcpy(key, c->in + sizeof(req), req.keylen);
    key[req.keylen] = '\0';
    const char* val = c->in + sizeof(req) + req.keylen;
    int rc = 0;
    switch (req.op) {
      case STORE_OP_SET:
        rc = reply(c, kv_set(s, key, val, vallen), 0, NULL, 0);
        for (size_t i = 0; i < s->nclients; i++) /* wake waiters of this key */
          if (s->clients[i].wait_key && strcmp(s->clients[i].wait_key, key) == 0)
            serve_wait(s, &s->clients[i], chorus__now_ns());
        break;
      case STORE_OP_GET:
        c->wait_key = strdup(key);
        c->wait_deadline_ns = chorus__now_ns() + req.arg * 1000000ull;
        rc = serve_wait(s, c, chorus__now_ns());
        break;
      case STORE_OP_ADD: {
        kv_t* e = kv_find(s, key);
        int64_t v = 0;
        if (e && e->len == sizeof(int64_t)) memcpy(&v, e->val, sizeof(v));
        v += (int64_t)req.arg;
        chorus_status_t st = kv_set(s, key, &v, sizeof(v));
        rc = reply(c, st, (uint64_t)v, NULL, 0);
        break;
      }
      case STORE_OP_DONE:
        s->done_count++;
        if ((int)req.arg > s->done_target) s->done_target = (int)req.arg;
        rc = reply(c, CHORUS_OK, 0, NULL, 0);
        break;
    }
    memmove(c->in, c->in + total, c->in_len - total);
    c->in_len -= total;
    if (rc < 0) return -1;
  }
}

static int read_client(server_t* s, client_t* c) {
  for (;;) {
    if (c->in_cap - c->in_len < 65536) {
      size_t cap = c->in_cap ? c->in_cap * 2 : 65536;
      if (cap > CHORUS_STORE_MAX_VALUE + 4096 + c->in_cap) return -1;
      char* grown = realloc(c->in, cap);
      if (!grown) return -1;
      c->in = grown;
      c->in_cap = cap;
    }
    ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
    if (n > 0) {
      c->in_len += (size_t)n;
      if (serve_input(s, c) < 0) return -1;
      continue;
    }
    if (n == 0) return -1;
    return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? 0 : -1;
  }
}

static void accept_clients(server_t* s) {
  for (;;) {
    int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    client_t* grown = realloc(s->clients, (s->nclients + 1) * sizeof(client_t));
    if (!grown) {
      close(fd);
      return;
    }
    s->clients = grown;
    s->clients[s->nclients++] = (client_t){.fd = fd};
  }
}

static void* server_main(void* arg) {
  server_t* s = arg;
  struct pollfd* pfds = NULL;
  while (!(s->done_target > 0 && s->done_count >= s->done_target)) {
    struct pollfd* grown = realloc(pfds, (s->nclients + 1) * sizeof(*pfds));
    if (!grown) break;
    pfds = grown;
    pfds[0] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
    for (size_t i = 0; i < s->nclients; i++) pfds[i + 1] = (struct pollfd){.fd = s->clients[i].fd, .events = POLLIN};
    size_t npoll = s->nclients + 1;
    int rc = poll(pfds, npoll, 100);
    if (rc < 0 && errno != EINTR) break;
    uint64_t now = chorus__now_ns();
    /* Walk backwards: drop_client moves the last client into the freed slot. */
    for (size_t i = npoll - 1; i >= 1; i--) {
      size_t ci = i - 1;
      if (ci >= s->nclients) continue;
      int bad = 0;
      if (pfds[i].revents) bad = read_client(s, &s->clients[ci]) < 0;
      if (!bad) bad = serve_wait(s, &s->clients[ci], now) < 0;
      if (!bad && !s->clients[ci].wait_key) bad = serve_input(s, &s->clients[ci]) < 0;
      if (bad) drop_client(s, ci);
    }
    if (pfds[0].revents & POLLIN) accept_clients(s);
  }
  CH_DEBUG(STORE, -1, "bootstrap store exits after %d clients finished", s->done_count);
  while (s->nclients) drop_client(s, s->nclients - 1);
  close(s->listen_fd);
  for (size_t i = 0; i < s->nkv; i++) {
    free(s->kv[i].key);
    free(s->kv[i].val);
  }
  free(s->kv);
  free(s->clients);
  free(pfds);
  free(s);
  return NULL;
}

chorus_status_t chorus__store_server_start(const char* ip, int port,
                                           const uint8_t secret[CHORUS_SECRET_BYTES], char* bound,
                                           size_t boundlen, char* err, size_t errlen) {
  server_t* s = calloc(1, sizeof(*s));
  if (!s) return CHORUS_ERR_NO_MEMORY;
  memcpy(s->secret, secret, CHORUS_SECRET_BYTES);
  chorus_status_t st = chorus__sock_listen(ip, port, &s->listen_fd, bound, boundlen, err, errlen);
  if (st < 0) {
    free(s);
    return st;
  }
  chorus__sock_set_nonblock(s->listen_fd, 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t tid;
  int rc = pthread_create(&tid, &attr, server_main, s);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start the store thread: %s", strerror(rc));
    close(s->listen_fd);
    free(s);
    return CHORUS_ERR_SYSTEM;
  }
  return CHORUS_OK;
}
