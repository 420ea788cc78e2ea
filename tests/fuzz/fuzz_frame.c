/*
 * fuzz_frame.c - libFuzzer target for the TCP frame header check (chorus__frame_check in
 * src/transport/conn.c), which every received frame passes before any buffer is touched.
 * The input overlays a received header and the expected one (both start as one valid header),
 * then gives the size of the `why` buffer. The verdict is compared with an oracle written here,
 * and `why` lives in a heap block of exactly that size so ASan sees any overflow.
 *
 * Input: [0, 48) bytes over the received header, [48, 96) over the expected one, [96] why size.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/task.h"
#include "transport/frame.h"

#define HDR_BYTES sizeof(chorus_frame_hdr_t)
#define DEFAULT_WHY_BYTES 400 /* what the transport passes */

/* The header a receiver of allreduce #7 on communicator 0x1234... expects. */
static chorus_frame_hdr_t canonical_header(void) {
  chorus_frame_hdr_t h;
  memset(&h, 0, sizeof(h)); /* padding too: the input overlays raw bytes */
  h.magic = CHORUS_FRAME_MAGIC;
  h.version = CHORUS_PROTO_VERSION;
  h.coll = CH_COLL_ALLREDUCE;
  h.dtype = CHORUS_FLOAT32;
  h.op = CHORUS_SUM;
  h.root = 0;
  h.tag = 3;
  h.comm_id = 0x123456789abcdef0ull;
  h.seq = 7;
  h.count = 1024;
  h.nbytes = 4096;
  return h;
}

/* The verdict the wire format (frame.h) prescribes, derived field by field. */
static chorus_status_t oracle(const chorus_frame_hdr_t* got, const chorus_frame_hdr_t* want) {
  /* An abort frame of this communicator and version: the peer found a mismatch and says so. */
  if (got->magic == CHORUS_FRAME_ABORT_MAGIC && got->version == CHORUS_PROTO_VERSION &&
      got->comm_id == want->comm_id)
    return CHORUS_ERR_MISMATCH;
  if (got->magic != CHORUS_FRAME_MAGIC || got->version != CHORUS_PROTO_VERSION ||
      got->comm_id != want->comm_id)
    return CHORUS_ERR_PROTOCOL;
  int same_call = got->coll == want->coll && got->dtype == want->dtype && got->op == want->op &&
                  got->root == want->root && got->tag == want->tag && got->seq == want->seq &&
                  got->count == want->count && got->nbytes == want->nbytes;
  return same_call ? CHORUS_OK : CHORUS_ERR_MISMATCH;
}

static void die(const char* what, int got, int want) {
  fprintf(stderr, "fuzz_frame: %s (got %d, want %d)\n", what, got, want);
  abort();
}

/* `why` must be NUL-terminated inside its buffer and say something on every error. */
static void check_why(const char* why, size_t why_bytes, chorus_status_t st) {
  if (why_bytes == 0) return;
  size_t len = strnlen(why, why_bytes);
  if (len == why_bytes) die("why is not NUL-terminated inside its buffer", (int)len, (int)why_bytes - 1);
  if (st < 0 && why_bytes > 1 && len == 0) die("an error without a reason", (int)st, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  chorus_frame_hdr_t got = canonical_header(), want = canonical_header();
  memcpy(&got, data, size < HDR_BYTES ? size : HDR_BYTES);
  if (size > HDR_BYTES) {
    size_t n = size - HDR_BYTES;
    memcpy(&want, data + HDR_BYTES, n < HDR_BYTES ? n : HDR_BYTES);
  }
  size_t why_bytes = size > 2 * HDR_BYTES ? data[2 * HDR_BYTES] : DEFAULT_WHY_BYTES;

  char* why = malloc(why_bytes ? why_bytes : 1);
  if (!why) return 0;
  if (why_bytes) why[0] = '\0';
  chorus_status_t st = chorus__frame_check(&got, &want, why, why_bytes);
  chorus_status_t expected = oracle(&got, &want);
  if (st != expected) die("chorus__frame_check disagrees with the oracle", (int)st, (int)expected);
  if (st < 0) check_why(why, why_bytes, st);
  free(why);

  /* The description (used in error messages) of any header, with any buffer size. */
  size_t desc_bytes = size > 2 * HDR_BYTES + 1 ? data[2 * HDR_BYTES + 1] : 200;
  char* desc = malloc(desc_bytes ? desc_bytes : 1);
  if (!desc) return 0;
  chorus__frame_describe(&got, desc, desc_bytes);
  if (desc_bytes && strnlen(desc, desc_bytes) == desc_bytes) die("description not terminated", 0, 0);
  free(desc);
  return 0;
}
