/* store_client.c - the client side of the bootstrap store (see store.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/sock.h"
#include "core/store.h"

struct chorus_store {
  int fd;
  char addr[CHORUS_ADDR_LEN];
  char err[256];
};

/* Bound on one request/response exchange that does not wait for a key. */
#define STORE_IO_TIMEOUT_NS (30ull * CHORUS_NS_PER_SEC)

chorus_status_t chorus__store_connect(const char* addr, const uint8_t secret[CHORUS_SECRET_BYTES],
                                      uint64_t deadline_ns, int max_tries, chorus_store_t** out,
                                      char* err, size_t errlen) {
  int fd = -1;
  char why[200];
  chorus_status_t st = chorus__sock_connect(addr, deadline_ns, max_tries, NULL, &fd, why, sizeof(why));
  if (st < 0) {
    snprintf(err, errlen, "cannot reach the bootstrap store: %s", why);
    return st;
  }
  chorus_store_hello_t hello = {.magic = CHORUS_STORE_MAGIC, .version = CHORUS_STORE_VERSION};
  memcpy(hello.secret, secret, CHORUS_SECRET_BYTES);
  int32_t answer = CHORUS_ERR_INTERNAL;
  st = chorus__sock_write_all(fd, &hello, sizeof(hello), deadline_ns);
  if (st >= 0) st = chorus__sock_read_all(fd, &answer, sizeof(answer), deadline_ns);
  if (st >= 0 && answer != CHORUS_OK) st = (chorus_status_t)answer;
  if (st < 0) {
    snprintf(err, errlen, "the bootstrap store at %s refused the connection (%s): wrong secret or version?",
             addr, chorus_status_name(st));
    close(fd);
    return st < 0 ? st : CHORUS_ERR_PROTOCOL;
  }
  chorus_store_t* s = calloc(1, sizeof(*s));
  if (!s) {
    close(fd);
    return CHORUS_ERR_NO_MEMORY;
  }
  s->fd = fd;
  snprintf(s->addr, sizeof(s->addr), "%s", addr);
  *out = s;
  return CHORUS_OK;
}

/* Sends one request and reads its response header; io_deadline bounds the whole exchange. */
static chorus_status_t store_call(chorus_store_t* s, uint8_t op, const char* key, uint64_t arg,
                                  const void* val, size_t vallen, chorus_store_resp_t* resp,
                                  uint64_t io_deadline) {
  size_t keylen = key ? strlen(key) : 0;
  if (keylen > CHORUS_STORE_MAX_KEY || vallen > CHORUS_STORE_MAX_VALUE) return CHORUS_ERR_INVALID_ARG;
  chorus_store_req_t req = {.op = op, .keylen = (uint32_t)keylen, .arg = arg};
  chorus_status_t st = chorus__sock_write_all(s->fd, &req, sizeof(req), io_deadline);
  if (st >= 0 && keylen) st = chorus__sock_write_all(s->fd, key, keylen, io_deadline);
  if (st >= 0 && vallen) st = chorus__sock_write_all(s->fd, val, vallen, io_deadline);
  if (st >= 0) st = chorus__sock_read_all(s->fd, resp, sizeof(*resp), io_deadline);
  if (st < 0) {
    snprintf(s->err, sizeof(s->err), "lost the bootstrap store at %s (%s) during %s \"%s\"",
             s->addr, chorus_status_name(st), op == STORE_OP_GET ? "get" : "request", key ? key : "");
    return st;
  }
  return (chorus_status_t)resp->status;
}

chorus_status_t chorus__store_set(chorus_store_t* s, const char* key, const void* val, size_t len) {
  chorus_store_resp_t resp;
  return store_call(s, STORE_OP_SET, key, len, val, len, &resp,
                    chorus__now_ns() + STORE_IO_TIMEOUT_NS);
}

chorus_status_t chorus__store_get(chorus_store_t* s, const char* key, void** val, size_t* len,
                                  int timeout_ms) {
  chorus_store_resp_t resp;
  uint64_t deadline = chorus__now_ns() + (uint64_t)timeout_ms * 1000000ull + STORE_IO_TIMEOUT_NS;
  chorus_status_t st = store_call(s, STORE_OP_GET, key, (uint64_t)timeout_ms, NULL, 0, &resp, deadline);
  if (st == CHORUS_ERR_TIMEOUT && s->err[0] == '\0')
    snprintf(s->err, sizeof(s->err), "key \"%s\" did not appear in the store at %s within %d ms",
             key, s->addr, timeout_ms);
  if (st < 0) return st;
  if (resp.arg > CHORUS_STORE_MAX_VALUE) return CHORUS_ERR_PROTOCOL;
  void* buf = malloc(resp.arg ? resp.arg : 1);
  if (!buf) return CHORUS_ERR_NO_MEMORY;
  st = chorus__sock_read_all(s->fd, buf, resp.arg, deadline);
  if (st < 0) {
    free(buf);
    return st;
  }
  *val = buf;
  *len = resp.arg;
  return CHORUS_OK;
}

chorus_status_t chorus__store_add(chorus_store_t* s, const char* key, int64_t delta,
                                  int64_t* result) {
  chorus_store_resp_t resp;
  chorus_status_t st = store_call(s, STORE_OP_ADD, key, (uint64_t)delta, NULL, 0, &resp,
                                  chorus__now_ns() + STORE_IO_TIMEOUT_NS);
  if (st >= 0 && result) *result = (int64_t)resp.arg;
  return st;
}

chorus_status_t chorus__store_done(chorus_store_t* s, int nranks) {
  chorus_store_resp_t resp;
  return store_call(s, STORE_OP_DONE, NULL, (uint64_t)nranks, NULL, 0, &resp,
                    chorus__now_ns() + STORE_IO_TIMEOUT_NS);
}

void chorus__store_close(chorus_store_t* s) {
  if (!s) return;
  close(s->fd);
  free(s);
}

const char* chorus__store_error(const chorus_store_t* s) { return s->err; }
