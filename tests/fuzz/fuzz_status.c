/*
 * fuzz_status.c - libFuzzer target for the status-frame check (chorus__status_check in
 * src/transport/transport.c). After a timeout, ranks exchange status frames (frame.h:
 * CHORUS_FRAME_STATUS_MAGIC) to build a verdict, a rank whose communicator broke sends give-up
 * frames (CHORUS_STATUS_GAVE_UP), and every one received passes this check before its subject
 * rank is used as an index (into tp->peers here, tp->status by the caller).
 * The input chooses the communicator (size, this rank, the sender, a host per rank from a small
 * set, so that some ranks share the sender's host and some do not) and overlays the 48-byte
 * header, which starts as a valid first-hand status from the sender. The verdict (accepted or
 * not) is compared with an oracle written here from the rules in frame.h; a refusal must give
 * a non-empty reason. The peer table is allocated exactly and tp->status is left NULL, so ASan
 * sees a subject used as an index before it is validated; the check is pure, so tp and the
 * peer table must be unchanged afterwards.
 *
 * Input: [0] nranks = 2 + [0] % 15 (a status frame needs a sender other than this rank),
 * [1] this rank = [1] % nranks, [2] the sender = the ([2] % (nranks - 1) + 1)-th rank after this
 * one, [3, 7) host bits (LE; rank r is on host (bits >> 2r) & 3), [7, 55) over the header.
 * Missing bytes count as 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/task.h"
#include "transport/frame.h"
#include "transport/transport.h"

#define MAX_RANKS 16 /* nranks 2..16 */
#define PREFIX_BYTES 7
#define HDR_BYTES sizeof(chorus_frame_hdr_t)
#define NHOSTS 4

static const uint64_t kCommId = 0x5a7e5ca1ab1e0c0dull;

/* Host ids as bootstrap publishes them: one is a prefix of another (a comparison bounded by
 * the shorter length would call them equal) and one fills the field (CHORUS_ADDR_LEN - 1). */
static const char* const kHosts[NHOSTS] = {
    "node-a",
    "node-b",
    "node-ab",
    "node-c.rack12.datacenter-west.example.internal.cluster.local.x1",
};
_Static_assert(sizeof("node-c.rack12.datacenter-west.example.internal.cluster.local.x1") == CHORUS_ADDR_LEN,
               "the long host id must fill the host field");

typedef struct {
  int nranks, rank, sender;
  int host_of[MAX_RANKS];
} setup_t;

static uint8_t byte_at(const uint8_t* data, size_t size, size_t i) { return i < size ? data[i] : 0; }

static setup_t derive_setup(const uint8_t* data, size_t size) {
  setup_t s;
  s.nranks = 2 + byte_at(data, size, 0) % (MAX_RANKS - 1);
  s.rank = byte_at(data, size, 1) % s.nranks;
  s.sender = (s.rank + 1 + byte_at(data, size, 2) % (s.nranks - 1)) % s.nranks;
  uint32_t bits = 0;
  for (int i = 0; i < 4; i++) bits |= (uint32_t)byte_at(data, size, 3 + (size_t)i) << (8 * i);
  for (int r = 0; r < s.nranks; r++) s.host_of[r] = (int)((bits >> (2 * r)) & 3);
  return s;
}

/* What `sender` sends about itself: 12 collectives posted, 11 completed, the 12th (an
 * allreduce) in flight. */
static chorus_frame_hdr_t first_hand_status(int sender) {
  chorus_frame_hdr_t h;
  memset(&h, 0, sizeof(h)); /* padding too: the input overlays raw bytes */
  h.magic = CHORUS_FRAME_STATUS_MAGIC;
  h.version = CHORUS_PROTO_VERSION;
  h.coll = CH_COLL_ALLREDUCE;
  h.dtype = CHORUS_FLOAT32;
  h.op = CHORUS_SUM;
  h.root = 0;
  h.tag = (uint32_t)sender | CHORUS_STATUS_IN_CALL;
  h.comm_id = kCommId;
  h.seq = 12;
  h.count = 1024;
  h.nbytes = 11;
  return h;
}

/* Rank `rank` of a communicator whose ranks live on s->host_of[]: the peer table holds exactly
 * nranks entries (no sockets: the check needs none). */
static chorus_peer_t* make_transport(chorus_transport_t* tp, const setup_t* s) {
  memset(tp, 0, sizeof(*tp));
  tp->rank = s->rank;
  tp->nranks = s->nranks;
  tp->comm_id = kCommId;
  tp->epfd = tp->wakefd = -1;
  tp->peers = calloc((size_t)s->nranks, sizeof(chorus_peer_t));
  if (!tp->peers) return NULL;
  for (int r = 0; r < s->nranks; r++) {
    tp->peers[r].is_self = r == s->rank;
    snprintf(tp->peers[r].host, sizeof(tp->peers[r].host), "%s", kHosts[s->host_of[r]]);
    snprintf(tp->peers[r].addr, sizeof(tp->peers[r].addr), "10.0.%d.%d:%d", s->host_of[r], r + 1, 40000 + r);
  }
  return tp->peers;
}

/* The verdict frame.h prescribes (1: accepted). Hosts are compared by their index in kHosts,
 * not by name. */
static int oracle_accepts(const setup_t* s, const chorus_frame_hdr_t* h) {
  if (h->magic != CHORUS_FRAME_STATUS_MAGIC) return 0;
  if (h->version != CHORUS_PROTO_VERSION) return 0;
  if (h->comm_id != kCommId) return 0;
  const uint32_t known = CHORUS_STATUS_ASK | CHORUS_STATUS_SECONDHAND | CHORUS_STATUS_IN_CALL | CHORUS_STATUS_GAVE_UP;
  uint32_t subject = h->tag & CHORUS_STATUS_RANK_MASK, flags = h->tag & ~CHORUS_STATUS_RANK_MASK;
  if ((flags | known) != known) return 0;
  if (subject >= (uint32_t)s->nranks) return 0;
  int subj = (int)subject;
  if (flags & CHORUS_STATUS_GAVE_UP) {
    /* A give-up frame: the sender about itself, no other flag, blaming no rank (-1) or one of
     * the communicator, with an error status (CHORUS_ERR_INVALID_ARG .. CHORUS_ERR_TRUNCATED, the
     * last in chorus.h's list),
     * passing on no rank (-1) or another rank of the communicator as the one that gave up first. */
    int status = -(int)(h->nbytes & 0xff), origin = (int)((h->nbytes >> 16) & 0xffff) - 1;
    return flags == CHORUS_STATUS_GAVE_UP && subj == s->sender && h->root >= -1 && h->root < s->nranks &&
           status <= CHORUS_ERR_INVALID_ARG && status >= CHORUS_ERR_TRUNCATED && origin < s->nranks &&
           origin != s->sender;
  }
  if ((flags & CHORUS_STATUS_SECONDHAND) == 0) {
    /* First hand: the sender about itself; it cannot have completed more than it posted. */
    return subj == s->sender && h->nbytes <= h->seq;
  }
  /* Second hand: read from the shared-memory signature of another rank of the sender's host
   * (never this rank's own), so it cannot say whether that rank asked or is inside a call.
   * nbytes is the age of its heartbeat, any value (a reading of another process's clock). */
  if (flags & (CHORUS_STATUS_ASK | CHORUS_STATUS_IN_CALL)) return 0;
  if (subj == s->sender || subj == s->rank) return 0;
  return s->host_of[subj] == s->host_of[s->sender];
}

static void die(const char* what, const setup_t* s, const chorus_frame_hdr_t* h, const char* got) {
  fprintf(stderr,
          "fuzz_status: %s: nranks %d, rank %d, sender %d (host %d), tag 0x%08x (subject %u, flags 0x%02x), "
          "seq %llu, nbytes %llu, magic 0x%08x, version %u, comm 0x%016llx; check said %s%s%s\n",
          what, s->nranks, s->rank, s->sender, s->host_of[s->sender], h->tag, h->tag & CHORUS_STATUS_RANK_MASK,
          h->tag >> 24, (unsigned long long)h->seq, (unsigned long long)h->nbytes, h->magic, h->version,
          (unsigned long long)h->comm_id, got ? "\"" : "", got ? got : "(accepted)", got ? "\"" : "");
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  setup_t s = derive_setup(data, size);
  chorus_frame_hdr_t h = first_hand_status(s.sender);
  if (size > PREFIX_BYTES) {
    size_t n = size - PREFIX_BYTES;
    memcpy(&h, data + PREFIX_BYTES, n < HDR_BYTES ? n : HDR_BYTES);
  }

  chorus_transport_t tp;
  if (!make_transport(&tp, &s)) return 0;
  chorus_transport_t tp_before;
  memcpy(&tp_before, &tp, sizeof(tp));
  size_t peers_bytes = (size_t)s.nranks * sizeof(chorus_peer_t);
  chorus_peer_t* peers_before = malloc(peers_bytes);
  if (!peers_before) {
    free(tp.peers);
    return 0;
  }
  memcpy(peers_before, tp.peers, peers_bytes);
  chorus_frame_hdr_t h_before = h;

  const char* why = chorus__status_check(&tp, s.sender, &h);
  int want = oracle_accepts(&s, &h);
  if ((why == NULL) != want) die("chorus__status_check disagrees with the oracle", &s, &h, why);
  if (why && why[0] == '\0') die("a refusal without a reason", &s, &h, why);
  if (memcmp(&tp, &tp_before, sizeof(tp)) != 0 || memcmp(tp.peers, peers_before, peers_bytes) != 0 ||
      memcmp(&h, &h_before, sizeof(h)) != 0)
    die("the check changed the transport or the frame", &s, &h, why);

  free(peers_before);
  free(tp.peers);
  return 0;
}
