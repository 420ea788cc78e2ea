/*
 * store.h - the bootstrap key-value store: set / get (waits for the key) / add, served over TCP
 * by one process (the maker of the unique id, or rank 0 under chorus_comm_init_env). Every
 * connection first presents the magic, protocol version and the shared secret. The server
 * closes its listener once `nranks` clients have said they are done, and stops once they left.
 */
#ifndef CHORUS_STORE_H
#define CHORUS_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#define CHORUS_SECRET_BYTES 16
#define CHORUS_STORE_MAX_VALUE (1u << 20)
#define CHORUS_STORE_MAX_KEY 256
#define CHORUS_STORE_MAX_KEYS 65536 /* entries the server holds at most */

typedef struct chorus_store chorus_store_t;

/* Server threads of this process still serving (each ends once its job is done with it). */
int chorus__store_servers_live(void);

/* Starts a server thread listening on ip:port (port 0 picks one); writes the bound address. */
chorus_status_t chorus__store_server_start(const char* ip, int port,
                                           const uint8_t secret[CHORUS_SECRET_BYTES], char* bound,
                                           size_t boundlen, char* err, size_t errlen);

/* Connects (retrying until deadline_ns / max_tries) and authenticates. */
chorus_status_t chorus__store_connect(const char* addr, const uint8_t secret[CHORUS_SECRET_BYTES],
                                      uint64_t deadline_ns, int max_tries, chorus_store_t** out,
                                      char* err, size_t errlen);
chorus_status_t chorus__store_set(chorus_store_t* s, const char* key, const void* val, size_t len);
/* Waits until key exists (bounded by timeout_ms); *val is malloc'ed, caller frees. */
chorus_status_t chorus__store_get(chorus_store_t* s, const char* key, void** val, size_t* len,
                                  int timeout_ms);
chorus_status_t chorus__store_add(chorus_store_t* s, const char* key, int64_t delta,
                                  int64_t* result);
/* Tells the server this client is finished; after `nranks` such calls the server closes its
 * listener, sets CHORUS_STORE_ALL_DONE_KEY, and exits once its clients have left. */
chorus_status_t chorus__store_done(chorus_store_t* s, int nranks);
/* The key the server sets once `nranks` clients said DONE ("done"; its listener is closed by
 * then), or once a client left without DONE ("lost"): a GET of it waits for every rank. */
#define CHORUS_STORE_ALL_DONE_KEY "chorus/all_done"
/* Set by a rank that found the job cannot form (it left the reason for the others): once some
 * rank said DONE and nobody is connected, the server still waits 2 s for ranks slower to start,
 * which then read the reason instead of finding the store gone. */
#define CHORUS_STORE_LINGER_KEY "chorus/linger"
void chorus__store_close(chorus_store_t* s);
const char* chorus__store_error(const chorus_store_t* s);

/* Wire format, shared by client and server. */
#define CHORUS_STORE_MAGIC 0x43485354u /* "CHST" */
#define CHORUS_STORE_VERSION 1
enum { STORE_OP_SET = 1, STORE_OP_GET = 2, STORE_OP_ADD = 3, STORE_OP_DONE = 4 };

typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint8_t secret[CHORUS_SECRET_BYTES];
} chorus_store_hello_t;

typedef struct {
  uint8_t op;
  uint8_t reserved[3];
  uint32_t keylen;
  uint64_t arg; /* SET: value bytes; GET: timeout ms; ADD: delta; DONE: nranks */
} chorus_store_req_t;

typedef struct {
  int32_t status; /* chorus_status_t */
  uint32_t reserved;
  uint64_t arg;   /* GET: value bytes; ADD: new value */
} chorus_store_resp_t;

/* ---- the server's per-client protocol, exposed for the fuzz targets (tests/fuzz) ---- */

/* One message at the start of a client's unconsumed input. */
typedef struct {
  int is_hello;           /* the connection's first message (the client was not authed) */
  const char* reject;     /* hello: why it is refused, NULL when accepted */
  chorus_store_req_t req; /* request: its fixed header */
  char key[CHORUS_STORE_MAX_KEY + 1]; /* request: the key, NUL-terminated */
  const char* val;        /* SET: the value, pointing into the input */
  size_t vallen;          /* SET: value bytes; 0 otherwise */
  size_t nbytes;          /* input bytes the message occupies */
} chorus_store_msg_t;

/* Parses the first message of in[0 .. in_len): the hello when !authed, else a request. Pure (no
 * allocation, no I/O); never reads past in_len. Returns 1 when *msg holds a complete message,
 * 0 when more bytes are needed, -1 for a malformed request (the server drops such a client). */
int chorus__store_parse(const char* in, size_t in_len, int authed,
                        const uint8_t secret[CHORUS_SECRET_BYTES], chorus_store_msg_t* msg);

/* The server's state without its socket and thread: clients are added with an fd that
 * replies are written to, and their input is fed as the poll loop would have read it. */
typedef struct chorus_store_server chorus_store_server_t;
chorus_store_server_t* chorus__store_server_new(const uint8_t secret[CHORUS_SECRET_BYTES]);
/* Adds a client answering on fd (the state closes fd when it drops the client). 0 or -1. */
int chorus__store_server_add_client(chorus_store_server_t* s, int fd);
size_t chorus__store_server_nclients(const chorus_store_server_t* s);
/* Appends bytes to client i's input in the server's read-buffer steps (with its size bound),
 * serving complete requests as they arrive, then serves waits as one poll round does. Returns 0,
 * or -1 when the server dropped the client (its fd is closed; the last client takes index i). */
int chorus__store_server_feed(chorus_store_server_t* s, size_t i, const void* bytes, size_t len);
/* Drops every client (closing their fds) and frees every key and value. */
void chorus__store_server_free(chorus_store_server_t* s);

#endif /* CHORUS_STORE_H */
