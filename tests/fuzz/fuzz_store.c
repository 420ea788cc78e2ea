/*
 * fuzz_store.c - libFuzzer target for the bootstrap store server's request handling
 * (src/core/store_server.c). Two layers: the pure parser (chorus__store_parse) against an
 * oracle written here from the wire format in store.h, and whole sessions of up to 4 clients
 * whose byte streams go through the server's own per-client buffering and request handling
 * (chorus__store_server_feed), replies going to socketpairs that are drained. It must never
 * crash, leak, read out of bounds, or hold more memory than the bound checked here.
 *
 * Session input: records [client selector][length, 2 bytes LE][bytes]; selector bits 0-1 pick
 * the client (a new one when it does not exist yet), bit 6 sends a valid hello first.
 */
#include <errno.h>
#include <fcntl.h>
#include <sanitizer/allocator_interface.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/store.h"

#define MAX_CLIENTS 4
#define SELECT_HELLO 0x40
#define REPLY_SOCKBUF_BYTES (8 << 20)
/* A client's unconsumed input may reach 2 MiB (store_server.c make_room) before it is dropped. */
#define CLIENT_INPUT_BOUND_BYTES ((size_t)2 << 20)

static const uint8_t kSecret[CHORUS_SECRET_BYTES] = {0xc5, 0x01, 0x7e, 0x22, 0x90, 0x3b, 0x4f, 0x11,
                                                     0xa8, 0x66, 0x0d, 0xe2, 0x57, 0x39, 0xbb, 0x04};

static void die(const char* what, long long got, long long want) {
  fprintf(stderr, "fuzz_store: %s (got %lld, want %lld)\n", what, got, want);
  abort();
}

/* ---- layer 1: the parser against the oracle ---- */

static uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static void check_hello_parse(const uint8_t* in, size_t len, int got, const chorus_store_msg_t* m) {
  if (len < sizeof(chorus_store_hello_t)) {
    if (got != 0) die("short hello not reported as incomplete", got, 0);
    return;
  }
  if (got != 1 || !m->is_hello || m->nbytes != sizeof(chorus_store_hello_t))
    die("complete hello not parsed", got, 1);
  int valid = load_u32(in) == CHORUS_STORE_MAGIC && (in[4] | in[5] << 8) == CHORUS_STORE_VERSION &&
              memcmp(in + 8, kSecret, CHORUS_SECRET_BYTES) == 0;
  if (valid != (m->reject == NULL)) die("hello verdict wrong", m->reject == NULL, valid);
}

static void check_request_parse(const uint8_t* in, size_t len, int got, const chorus_store_msg_t* m) {
  const size_t hdr = sizeof(chorus_store_req_t);
  if (len < hdr) {
    if (got != 0) die("short request header not reported as incomplete", got, 0);
    return;
  }
  uint8_t op = in[0];
  uint32_t keylen = load_u32(in + 4);
  uint64_t arg = load_u64(in + 8);
  int malformed = keylen > CHORUS_STORE_MAX_KEY || op < STORE_OP_SET || op > STORE_OP_DONE ||
                  (op == STORE_OP_SET && arg > CHORUS_STORE_MAX_VALUE);
  if (malformed) {
    if (got != -1) die("malformed request accepted", got, -1);
    return;
  }
  size_t vallen = op == STORE_OP_SET ? (size_t)arg : 0;
  size_t total = hdr + keylen + vallen;
  if (len < total) {
    if (got != 0) die("partial request not reported as incomplete", got, 0);
    return;
  }
  if (got != 1) die("complete request not parsed", got, 1);
  if (m->nbytes != total || m->vallen != vallen) die("request length wrong", (long long)m->nbytes, (long long)total);
  if (m->req.op != op || m->req.keylen != keylen || m->req.arg != arg) die("request header wrong", m->req.op, op);
  if (m->key[keylen] != '\0' || strncmp(m->key, (const char*)in + hdr, keylen) != 0)
    die("key wrong", (long long)strlen(m->key), keylen);
  if (m->val != (const char*)in + hdr + keylen) die("value pointer wrong", 0, 0);
}

static void fuzz_parser(const uint8_t* data, size_t size) {
  for (int authed = 0; authed <= 1; authed++) {
    chorus_store_msg_t m;
    int got = chorus__store_parse((const char*)data, size, authed, kSecret, &m);
    if (authed) check_request_parse(data, size, got, &m);
    else check_hello_parse(data, size, got, &m);
  }
}

/* ---- layer 2: sessions through the server's state ---- */

typedef struct {
  chorus_store_server_t* server;
  int peer_fd[MAX_CLIENTS]; /* our end of each client's socketpair, in the server's order */
  size_t nclients;
} session_t;

static int add_client(session_t* ss) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  /* Replies must never fill the socket inside one feed: the server would wait 5 s for room. */
  int bytes = REPLY_SOCKBUF_BYTES;
  if (setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof(bytes)) != 0)
    setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  fcntl(sv[1], F_SETFL, O_NONBLOCK);
  if (chorus__store_server_add_client(ss->server, sv[0]) != 0) {
    close(sv[0]);
    close(sv[1]);
    return -1;
  }
  ss->peer_fd[ss->nclients++] = sv[1];
  return 0;
}

static size_t drain(int fd) {
  static char sink[1 << 16];
  size_t total = 0;
  ssize_t n;
  while ((n = read(fd, sink, sizeof(sink))) > 0) total += (size_t)n;
  return total;
}

/* Feeds one chunk; mirrors the server's drop (the last client moves into the freed index). */
static int feed(session_t* ss, size_t i, const void* bytes, size_t len) {
  int rc = chorus__store_server_feed(ss->server, i, bytes, len);
  if (chorus__store_server_nclients(ss->server) != ss->nclients - (rc < 0))
    die("client count after feed", (long long)chorus__store_server_nclients(ss->server),
        (long long)(ss->nclients - (rc < 0)));
  for (size_t c = 0; c < ss->nclients; c++) drain(ss->peer_fd[c]);
  if (rc < 0) {
    close(ss->peer_fd[i]);
    ss->peer_fd[i] = ss->peer_fd[--ss->nclients];
  }
  return rc;
}

static chorus_store_hello_t valid_hello(void) {
  chorus_store_hello_t h = {.magic = CHORUS_STORE_MAGIC, .version = CHORUS_STORE_VERSION};
  memcpy(h.secret, kSecret, sizeof(h.secret));
  return h;
}

static void end_session(session_t* ss) {
  chorus__store_server_free(ss->server); /* closes the server's ends */
  for (size_t c = 0; c < ss->nclients; c++) close(ss->peer_fd[c]);
}

static void fuzz_session(const uint8_t* data, size_t size) {
  session_t ss = {.server = chorus__store_server_new(kSecret)};
  if (!ss.server) return;
  size_t base_bytes = __sanitizer_get_current_allocated_bytes();
  /* Input buffers, plus keys and values (each copied from the input, with table overhead). */
  size_t bound_bytes = MAX_CLIENTS * CLIENT_INPUT_BOUND_BYTES + 64 * size + (64 << 10);
  chorus_store_hello_t hello = valid_hello();
  size_t off = 0;
  while (off + 3 <= size) {
    uint8_t sel = data[off];
    size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
    off += 3;
    if (len > size - off) len = size - off;
    size_t i = sel & (MAX_CLIENTS - 1);
    if (i >= ss.nclients) {
      if (add_client(&ss) != 0) break;
      i = ss.nclients - 1;
    }
    int alive = !(sel & SELECT_HELLO) || feed(&ss, i, &hello, sizeof(hello)) == 0;
    if (alive && len) feed(&ss, i, data + off, len);
    off += len;
    size_t held = __sanitizer_get_current_allocated_bytes() - base_bytes;
    if (held > bound_bytes) die("the server holds more memory than its bound", (long long)held, (long long)bound_bytes);
  }
  end_session(&ss);
}

/* ---- a start-up self-check: the harness really reaches the server's behaviour ---- */

static void put_request(char* out, size_t* len, uint8_t op, const char* key, uint64_t arg) {
  chorus_store_req_t r = {.op = op, .keylen = (uint32_t)strlen(key), .arg = arg};
  memcpy(out + *len, &r, sizeof(r));
  memcpy(out + *len + sizeof(r), key, r.keylen);
  *len += sizeof(r) + r.keylen;
}

/* Reads exactly n reply bytes (the server answered synchronously inside feed). */
static void expect_reply(int fd, void* out, size_t n, const char* what) {
  ssize_t got = read(fd, out, n);
  if (got != (ssize_t)n) die(what, (long long)got, (long long)n);
}

static void self_check_protocol(void) {
  session_t ss = {.server = chorus__store_server_new(kSecret)};
  if (!ss.server || add_client(&ss) != 0) die("cannot set up the self-check", 0, 0);
  char msg[512];
  size_t len = 0;
  chorus_store_hello_t hello = valid_hello();
  memcpy(msg, &hello, sizeof(hello));
  len = sizeof(hello);
  put_request(msg, &len, STORE_OP_SET, "k", 5);
  memcpy(msg + len, "hello", 5);
  len += 5;
  put_request(msg, &len, STORE_OP_GET, "k", 1000);
  put_request(msg, &len, STORE_OP_ADD, "n", 41);
  int rc = chorus__store_server_feed(ss.server, 0, msg, len);
  if (rc != 0) die("valid session dropped", rc, 0);
  int32_t answer;
  chorus_store_resp_t resp;
  char value[5];
  expect_reply(ss.peer_fd[0], &answer, sizeof(answer), "hello answer");
  if (answer != CHORUS_OK) die("hello refused", answer, CHORUS_OK);
  expect_reply(ss.peer_fd[0], &resp, sizeof(resp), "SET reply");
  if (resp.status != CHORUS_OK) die("SET failed", resp.status, CHORUS_OK);
  expect_reply(ss.peer_fd[0], &resp, sizeof(resp), "GET reply");
  expect_reply(ss.peer_fd[0], value, sizeof(value), "GET value");
  if (resp.status != CHORUS_OK || resp.arg != 5 || memcmp(value, "hello", 5) != 0) die("GET wrong", resp.status, 0);
  expect_reply(ss.peer_fd[0], &resp, sizeof(resp), "ADD reply");
  if (resp.status != CHORUS_OK || resp.arg != 41) die("ADD wrong", (long long)resp.arg, 41);
  end_session(&ss);
}

/* A client whose GET waits and that keeps sending is dropped once its input outgrows the
 * bound, rather than growing the server without limit. */
static void self_check_bound(void) {
  session_t ss = {.server = chorus__store_server_new(kSecret)};
  if (!ss.server || add_client(&ss) != 0) die("cannot set up the self-check", 0, 0);
  char msg[256];
  size_t len = 0;
  chorus_store_hello_t hello = valid_hello();
  memcpy(msg, &hello, sizeof(hello));
  len = sizeof(hello);
  put_request(msg, &len, STORE_OP_GET, "never-set", 600000);
  if (feed(&ss, 0, msg, len) != 0) die("waiting GET dropped", 0, 0);
  static char junk[1 << 16];
  put_request(junk, &(size_t){0}, STORE_OP_DONE, "", 1); /* well-formed, queued behind the GET */
  size_t sent = 0, limit = 8 * CLIENT_INPUT_BOUND_BYTES;
  while (sent < limit && feed(&ss, 0, junk, sizeof(junk)) == 0) sent += sizeof(junk);
  if (sent >= limit) die("a client's queued input grew without bound", (long long)sent, (long long)CLIENT_INPUT_BOUND_BYTES);
  if (sent + sizeof(junk) < CLIENT_INPUT_BOUND_BYTES / 2) die("client dropped too early", (long long)sent, 0);
  end_session(&ss);
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  self_check_protocol();
  self_check_bound();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_parser(data, size);
  fuzz_session(data, size);
  return 0;
}
