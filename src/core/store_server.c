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

/* How long a store whose job cannot form stays up once nobody is connected (store.h). */
#define STORE_LINGER_NS (2000ull * 1000000ull)

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
  int said_done;
} client_t;

typedef struct chorus_store_server {
  int listen_fd; /* -1 for a state made by chorus__store_server_new */
  uint8_t secret[CHORUS_SECRET_BYTES];
  kv_t* kv;
  size_t nkv, kv_cap;
  client_t* clients;
  size_t nclients;
  int done_count;
  int done_target; /* 0 until the first DONE says how many ranks there are */
  uint64_t last_client_ns; /* when a client was last seen connected */
} server_t; /* chorus_store_server_t in store.h */

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
    if (s->nkv >= CHORUS_STORE_MAX_KEYS) {
      free(copy);
      return CHORUS_ERR_NO_MEMORY; /* bounded: a client holding the secret cannot exhaust memory */
    }
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

static int serve_wait(server_t* s, client_t* c, uint64_t now);

/* Answers the GETs that wait for key (just set). */
static void wake_waiters(server_t* s, const char* key) {
  uint64_t now = chorus__now_ns();
  for (size_t i = 0; i < s->nclients; i++)
    if (s->clients[i].wait_key && strcmp(s->clients[i].wait_key, key) == 0) serve_wait(s, &s->clients[i], now);
}

static void set_and_wake(server_t* s, const char* key, const char* val) {
  kv_set(s, key, val, strlen(val));
  wake_waiters(s, key);
}

/* Every rank said DONE: the listener closes before anyone hears it (CHORUS_STORE_ALL_DONE_KEY),
 * so that no rank, back from its creation, can reach this store again: the same process may
 * serve the next store on the same address (chorus_comm_init_env once more) at once. */
static void release_all_done(server_t* s) {
  if (s->listen_fd >= 0) close(s->listen_fd);
  s->listen_fd = -1;
  set_and_wake(s, CHORUS_STORE_ALL_DONE_KEY, "done");
}

static void drop_client(server_t* s, size_t i) {
  /* A rank gone without DONE will never say it: the others wait no longer for everyone. */
  if (s->clients[i].authed && !s->clients[i].said_done && !kv_find(s, CHORUS_STORE_ALL_DONE_KEY))
    set_and_wake(s, CHORUS_STORE_ALL_DONE_KEY, "lost");
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

int chorus__store_parse(const char* in, size_t in_len, int authed,
                        const uint8_t secret[CHORUS_SECRET_BYTES], chorus_store_msg_t* msg) {
  msg->is_hello = !authed;
  msg->reject = NULL;
  msg->key[0] = '\0';
  msg->val = NULL;
  msg->vallen = 0;
  msg->nbytes = 0;
  if (!authed) {
    chorus_store_hello_t h;
    if (in_len < sizeof(h)) return 0;
    memcpy(&h, in, sizeof(h));
    if (h.magic != CHORUS_STORE_MAGIC) msg->reject = "not a Chorus client (bad magic)";
    else if (h.version != CHORUS_STORE_VERSION) msg->reject = "other protocol version";
    else if (memcmp(h.secret, secret, CHORUS_SECRET_BYTES) != 0) msg->reject = "wrong secret";
    msg->nbytes = sizeof(h);
    return 1;
  }
  chorus_store_req_t* req = &msg->req;
  if (in_len < sizeof(*req)) return 0;
  memcpy(req, in, sizeof(*req));
  /* The header is checked before any length in it is trusted. */
  if (req->keylen > CHORUS_STORE_MAX_KEY || (req->op == STORE_OP_SET && req->arg > CHORUS_STORE_MAX_VALUE) ||
      req->op < STORE_OP_SET || req->op > STORE_OP_DONE)
    return -1;
  size_t vallen = req->op == STORE_OP_SET ? (size_t)req->arg : 0;
  size_t total = sizeof(*req) + req->keylen + vallen;
  if (in_len < total) return 0;
  memcpy(msg->key, in + sizeof(*req), req->keylen);
  msg->key[req->keylen] = '\0';
  msg->val = in + sizeof(*req) + req->keylen;
  msg->vallen = vallen;
  msg->nbytes = total;
  return 1;
}

/* Answers the hello; -1 when the client is refused (and must be dropped). */
static int serve_hello(client_t* c, const chorus_store_msg_t* m) {
  int32_t answer = m->reject ? CHORUS_ERR_PROTOCOL : CHORUS_OK;
  if (m->reject) CH_WARN(-1, "bootstrap store rejected a client: %s", m->reject);
  chorus__sock_write_all(c->fd, &answer, sizeof(answer), chorus__now_ns() + CHORUS_NS_PER_SEC);
  if (m->reject) return -1;
  c->authed = 1;
  return 0;
}

/* Executes one request; -1 when the reply could not be written. */
static int serve_request(server_t* s, client_t* c, const chorus_store_msg_t* m) {
  const char* key = m->key;
  int rc = 0;
  switch (m->req.op) {
    case STORE_OP_SET:
      rc = reply(c, kv_set(s, key, m->val, m->vallen), 0, NULL, 0);
      wake_waiters(s, key);
      break;
    case STORE_OP_GET:
      c->wait_key = strdup(key);
      c->wait_deadline_ns = chorus__now_ns() + m->req.arg * 1000000ull;
      rc = serve_wait(s, c, chorus__now_ns());
      break;
    case STORE_OP_ADD: {
      kv_t* e = kv_find(s, key);
      int64_t v = 0;
      if (e && e->len == sizeof(int64_t)) memcpy(&v, e->val, sizeof(v));
      v = (int64_t)((uint64_t)v + m->req.arg); /* wraps, like the integer reductions */
      chorus_status_t st = kv_set(s, key, &v, sizeof(v));
      rc = reply(c, st, (uint64_t)v, NULL, 0);
      break;
    }
    case STORE_OP_DONE:
      s->done_count++;
      c->said_done = 1;
      if ((int)m->req.arg > s->done_target) s->done_target = (int)m->req.arg;
      rc = reply(c, CHORUS_OK, 0, NULL, 0);
      if (s->done_count >= s->done_target) release_all_done(s);
      break;
  }
  return rc;
}

/* Consumes complete messages from c->in. Returns -1 when the client must be dropped. */
static int serve_input(server_t* s, client_t* c) {
  for (;;) {
    if (c->wait_key) return 0; /* one outstanding request per client */
    chorus_store_msg_t m;
    int got = chorus__store_parse(c->in, c->in_len, c->authed, s->secret, &m);
    if (got < 0) {
      CH_WARN(-1, "bootstrap store dropped a client that sent a malformed request (op %u)", m.req.op);
      return -1;
    }
    if (got == 0) return 0;
    if (m.is_hello && serve_hello(c, &m) < 0) return -1;
    int rc = m.is_hello ? 0 : serve_request(s, c, &m);
    memmove(c->in, c->in + m.nbytes, c->in_len - m.nbytes);
    c->in_len -= m.nbytes;
    if (rc < 0) return -1;
  }
}

/* What one poll round does for a client after reading it: answer its waiting GET if the key
 * appeared or the deadline passed, then serve what it sent meanwhile. -1: drop it. */
static int serve_pending(server_t* s, client_t* c, uint64_t now) {
  if (serve_wait(s, c, now) < 0) return -1;
  if (!c->wait_key && serve_input(s, c) < 0) return -1;
  return 0;
}

/* Keeps at least 64 KiB free in c->in. -1 when the input would outgrow the bound: about two
 * largest requests (a waiting GET lets a client queue more than one). */
static int make_room(client_t* c) {
  if (c->in_cap - c->in_len >= 65536) return 0;
  size_t cap = c->in_cap ? c->in_cap * 2 : 65536;
  if (cap > CHORUS_STORE_MAX_VALUE + 4096 + c->in_cap) return -1;
  char* grown = realloc(c->in, cap);
  if (!grown) return -1;
  c->in = grown;
  c->in_cap = cap;
  return 0;
}

static int read_client(server_t* s, client_t* c) {
  for (;;) {
    if (make_room(c) < 0) return -1;
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
    /* Replies go out as a header and then a value: with Nagle on, the value waited for the
     * client's delayed ACK of the header (40 ms, three times in every communicator's creation). */
    chorus__sock_tune(fd);
    client_t* grown = realloc(s->clients, (s->nclients + 1) * sizeof(client_t));
    if (!grown) {
      close(fd);
      return;
    }
    s->clients = grown;
    s->clients[s->nclients++] = (client_t){.fd = fd};
  }
}

/* The store's work is over once some rank said DONE (the job got past joining, or gave up)
 * and no rank is connected any more: ranks stay connected from publishing until they hear that
 * everyone said DONE (CHORUS_STORE_ALL_DONE_KEY), and a rank that joins after the others gave up
 * would fail anyway. While the listener is open, a connection whose hello has not arrived yet
 * may be a rank (of a job that failed: it should read why in the store, not find it gone);
 * once every rank said DONE, only ranks hold the store open. */
static int store_finished(server_t* s, uint64_t now) {
  if (s->done_count == 0) return 0;
  if (s->listen_fd >= 0) { /* not every rank said DONE */
    if (s->nclients) return 0;
    /* A job that cannot form (CHORUS_STORE_LINGER_KEY): ranks slower to start still read why. */
    return !kv_find(s, CHORUS_STORE_LINGER_KEY) || now - s->last_client_ns >= STORE_LINGER_NS;
  }
  for (size_t i = 0; i < s->nclients; i++)
    if (s->clients[i].authed) return 0;
  return 1;
}

static int live_servers;

int chorus__store_servers_live(void) { return __atomic_load_n(&live_servers, __ATOMIC_ACQUIRE); }

static void* server_main(void* arg) {
  server_t* s = arg;
  pthread_setname_np(pthread_self(), "chorus-store");
  struct pollfd* pfds = NULL;
  s->last_client_ns = chorus__now_ns();
  while (!store_finished(s, chorus__now_ns())) {
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
      if (!bad) bad = serve_pending(s, &s->clients[ci], now) < 0;
      if (bad) drop_client(s, ci);
    }
    if (pfds[0].revents & POLLIN) accept_clients(s);
    if (s->nclients) s->last_client_ns = chorus__now_ns();
  }
  CH_DEBUG(STORE, -1, "bootstrap store exits after %d clients finished", s->done_count);
  free(pfds);
  chorus__store_server_free(s);
  __atomic_sub_fetch(&live_servers, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* ---- the state without socket or thread (store.h: for the fuzz targets) ---- */

chorus_store_server_t* chorus__store_server_new(const uint8_t secret[CHORUS_SECRET_BYTES]) {
  server_t* s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->listen_fd = -1;
  memcpy(s->secret, secret, CHORUS_SECRET_BYTES);
  return s;
}

int chorus__store_server_add_client(chorus_store_server_t* s, int fd) {
  client_t* grown = realloc(s->clients, (s->nclients + 1) * sizeof(client_t));
  if (!grown) return -1;
  s->clients = grown;
  s->clients[s->nclients++] = (client_t){.fd = fd};
  return 0;
}

size_t chorus__store_server_nclients(const chorus_store_server_t* s) { return s->nclients; }

int chorus__store_server_feed(chorus_store_server_t* s, size_t i, const void* bytes, size_t len) {
  if (i >= s->nclients) return -1;
  client_t* c = &s->clients[i];
  const char* next = bytes;
  int bad = 0;
  while (len && !bad) { /* the steps read_client takes when recv returns all it can */
    if (make_room(c) < 0) {
      bad = 1;
      break;
    }
    size_t n = (len < c->in_cap - c->in_len ? len : c->in_cap - c->in_len);
    memcpy(c->in + c->in_len, next, n);
    c->in_len += n;
    next += n;
    len -= n;
    bad = serve_input(s, c) < 0;
  }
  if (!bad) bad = serve_pending(s, c, chorus__now_ns()) < 0;
  if (bad) drop_client(s, i);
  return bad ? -1 : 0;
}

void chorus__store_server_free(chorus_store_server_t* s) {
  while (s->nclients) drop_client(s, s->nclients - 1);
  if (s->listen_fd >= 0) close(s->listen_fd);
  for (size_t i = 0; i < s->nkv; i++) {
    free(s->kv[i].key);
    free(s->kv[i].val);
  }
  free(s->kv);
  free(s->clients);
  free(s);
}

chorus_status_t chorus__store_server_start(const char* ip, int port,
                                           const uint8_t secret[CHORUS_SECRET_BYTES], char* bound,
                                           size_t boundlen, char* err, size_t errlen) {
  server_t* s = calloc(1, sizeof(*s));
  if (!s) return CHORUS_ERR_NO_MEMORY;
  memcpy(s->secret, secret, CHORUS_SECRET_BYTES);
  chorus_status_t st = chorus__sock_listen(ip, port, NULL, &s->listen_fd, bound, boundlen, err, errlen);
  if (st < 0) {
    free(s);
    return st;
  }
  chorus__sock_set_nonblock(s->listen_fd, 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t tid;
  __atomic_add_fetch(&live_servers, 1, __ATOMIC_RELEASE);
  int rc = pthread_create(&tid, &attr, server_main, s);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    __atomic_sub_fetch(&live_servers, 1, __ATOMIC_RELEASE);
    snprintf(err, errlen, "cannot start the store thread: %s", strerror(rc));
    close(s->listen_fd);
    free(s);
    return CHORUS_ERR_SYSTEM;
  }
  return CHORUS_OK;
}
