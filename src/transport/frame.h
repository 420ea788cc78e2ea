/*
 * frame.h - the header that starts every TCP frame. It carries the communicator id and the
 * signature of the operation (kind, sequence number, dtype, op, root, count, tag, total bytes)
 * so that the receiver validates it before it touches any buffer and detects mismatched calls
 * at no extra round trip. Fixed size, host byte order (all ranks of a job share one ABI).
 */
#ifndef CHORUS_FRAME_H
#define CHORUS_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#define CHORUS_FRAME_MAGIC 0x43484652u /* "CHFR" */
/* Sent instead of a frame by a rank that found mismatched calls, carrying its own operation's
 * signature, so that the peer too reports ERR_MISMATCH with both calls (not a closed link). */
#define CHORUS_FRAME_ABORT_MAGIC 0x43484142u /* "CHAB" */
#define CHORUS_PROTO_VERSION 1

typedef struct {
  uint32_t magic;
  uint8_t version;
  uint8_t coll;  /* chorus_coll_t of the sender's call */
  uint8_t dtype;
  uint8_t op;
  int32_t root;
  uint32_t tag;
  uint64_t comm_id;
  uint64_t seq;
  uint64_t count;  /* the call's count argument */
  uint64_t nbytes; /* total bytes of this message (over all its stripes) */
} chorus_frame_hdr_t;

_Static_assert(sizeof(chorus_frame_hdr_t) == 48, "frame header must stay 48 bytes");

/* Compares a received header with the one this rank expects. Returns OK, ERR_PROTOCOL (not a
 * Chorus frame, other version or communicator) or ERR_MISMATCH, with a sentence in why. */
chorus_status_t chorus__frame_check(const chorus_frame_hdr_t* got, const chorus_frame_hdr_t* want,
                                    char* why, size_t whylen);

/* "allreduce #12 (count 1024, float32, sum, root 0, tag 3, 4096 bytes)" */
void chorus__frame_describe(const chorus_frame_hdr_t* h, char* out, size_t outlen);

#endif /* CHORUS_FRAME_H */
