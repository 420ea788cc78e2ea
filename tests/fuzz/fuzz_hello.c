/*
 * fuzz_hello.c - libFuzzer target for the connection handshake check (chorus__hello_check in
 * src/transport/tcp.c), which a rank runs on every incoming connection while it accepts its
 * higher ranks. A stranger must be refused without crashing the listener: the check must not
 * use the rank or socket index it received as an index before validating them. The peer table
 * is allocated exactly (lower ranks get no socket array at all) so ASan sees a bad index.
 *
 * Input: [0] this rank, [1] ranks above it, [2] sockets per peer, [3] slots already connected;
 * then a sequence of 40-byte hellos, each overlaid on a valid one. Each accepted hello fills its
 * slot, as accept_higher does, so later duplicates must be refused.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/transport.h"

#define MAX_RANK 6
#define MAX_ABOVE 6
#define MAX_SOCKS 4
#define HELLO_BYTES sizeof(chorus_hello_t)

static const uint64_t kCommId = 0x0badc0ffee123457ull;
static const uint8_t kSecret[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

static void die(const char* what, const char* got, const char* want) {
  fprintf(stderr, "fuzz_hello: %s: got \"%s\", want \"%s\"\n", what, got ? got : "(accepted)",
          want ? want : "(accepted)");
  abort();
}

/* A transport of rank `rank` of `nranks` with nsocks sockets per higher peer; `connected` has
 * one bit per (higher peer, socket) slot already taken. */
static int make_transport(chorus_transport_t* tp, int rank, int nranks, int nsocks, uint32_t connected) {
  memset(tp, 0, sizeof(*tp));
  tp->rank = rank;
  tp->nranks = nranks;
  tp->comm_id = kCommId;
  tp->peers = calloc((size_t)nranks, sizeof(chorus_peer_t));
  if (!tp->peers) return -1;
  int bit = 0;
  for (int p = rank + 1; p < nranks; p++) {
    tp->peers[p].nsocks = nsocks;
    tp->peers[p].socks = malloc((size_t)nsocks * sizeof(chorus_stream_t));
    if (!tp->peers[p].socks) return -1;
    for (int i = 0; i < nsocks; i++, bit++) {
      memset(&tp->peers[p].socks[i], 0, sizeof(chorus_stream_t));
      tp->peers[p].socks[i].fd = (connected >> (bit % 32)) & 1 ? 100 + bit : -1;
    }
  }
  return 0;
}

static void free_transport(chorus_transport_t* tp) {
  for (int p = 0; tp->peers && p < tp->nranks; p++) free(tp->peers[p].socks);
  free(tp->peers);
}

/* The verdict DESIGN.md and transport.h prescribe, in the order the reasons are checked. */
static const char* oracle(const chorus_transport_t* tp, const chorus_hello_t* h, int nsocks) {
  if (h->magic != CHORUS_HELLO_MAGIC) return "not a Chorus peer (bad magic)";
  if (h->version != CHORUS_PROTO_VERSION) return "other protocol version";
  if (h->comm_id != kCommId) return "another communicator";
  if (memcmp(h->secret, kSecret, sizeof(kSecret)) != 0) return "wrong secret";
  if (h->nranks != tp->nranks || h->rank <= tp->rank || h->rank >= tp->nranks) return "impossible rank";
  if ((int)h->sock_index >= nsocks) return "impossible socket index";
  if (tp->peers[h->rank].socks[h->sock_index].fd >= 0) return "duplicate connection";
  return NULL;
}

static int same_verdict(const char* a, const char* b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  int rank = data[0] % (MAX_RANK + 1);
  int nranks = rank + 1 + data[1] % (MAX_ABOVE + 1);
  int nsocks = 1 + data[2] % MAX_SOCKS;
  chorus_transport_t tp;
  if (make_transport(&tp, rank, nranks, nsocks, data[3] * 0x01010101u) == 0) {
    chorus_hello_t valid = {.magic = CHORUS_HELLO_MAGIC, .version = CHORUS_PROTO_VERSION,
                            .sock_index = 0, .rank = rank + 1, .nranks = nranks, .comm_id = kCommId};
    memcpy(valid.secret, kSecret, sizeof(kSecret));
    int accepted = 0;
    for (size_t off = 4; off < size; off += HELLO_BYTES) {
      chorus_hello_t h = valid;
      size_t n = size - off < HELLO_BYTES ? size - off : HELLO_BYTES;
      memcpy(&h, data + off, n);
      const char* want = oracle(&tp, &h, nsocks);
      const char* got = chorus__hello_check(&tp, &h, kSecret, nsocks);
      if (!same_verdict(got, want)) die("chorus__hello_check disagrees with the oracle", got, want);
      if (!got) tp.peers[h.rank].socks[h.sock_index].fd = 1000 + accepted++; /* as accept_higher */
    }
  }
  free_transport(&tp);
  return 0;
}
