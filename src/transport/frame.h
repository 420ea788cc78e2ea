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
/* A status frame: sent by a rank whose operation timed out (with CHORUS_STATUS_ASK) and in
 * answer by its peers, so that the rank can name who never posted the operation. Control
 * frames travel on the TCP socket: between two data frames of a TCP stream, or alone on the
 * otherwise idle socket of a shared-memory peer. They never count as progress. Fields:
 * tag = subject rank | CHORUS_STATUS_* flags; seq = collectives the subject has posted (first
 * hand) or started (second hand); nbytes = collectives it has completed (first hand), or
 * milliseconds since its progress engine last ran, from its shared-memory heartbeat (second
 * hand; 0 when unknown); coll, dtype, op, root, count = its last collective (number seq - 1)
 * when seq > 0. */
#define CHORUS_FRAME_STATUS_MAGIC 0x43485354u /* "CHST" */
#define CHORUS_STATUS_RANK_MASK 0x00ffffffu
#define CHORUS_STATUS_ASK 0x01000000u        /* the sender timed out: answer with your status */
#define CHORUS_STATUS_SECONDHAND 0x02000000u /* about another rank of the sender's host, read
                                                from the shared-memory signature it publishes */
#define CHORUS_STATUS_IN_CALL 0x04000000u    /* the subject has an operation in flight */
/* A give-up frame (first hand): the sender's communicator broke (a timeout, a failed peer, a
 * mismatch, chorus_comm_abort), so no later collective can complete; sent to every peer just
 * before its sockets close, so that ranks waiting on something else (a host-mate's flag, a
 * third rank) learn it at once instead of at their own timeout. seq = 1 + the sequence number
 * of the collective it gave up on (0: none in flight); coll, dtype, op, count: that call; root
 * = the rank its verdict blames (-1: none); nbytes = -status | verdict kind << 8 | (origin + 1)
 * << 16 | the blamed rank's standing time in ms << 32 (CHORUS_GAVE_UP_* below). A rank that
 * gives up because a peer did passes on that peer's status and verdict, and names the rank that
 * gave up first as the origin (0: the sender itself, or a rank past 65534). */
#define CHORUS_STATUS_GAVE_UP 0x08000000u
#define CHORUS_GAVE_UP_STATUS(nbytes) (-(int)((nbytes) & 0xff))
#define CHORUS_GAVE_UP_KIND(nbytes) ((int)(((nbytes) >> 8) & 0xff))
#define CHORUS_GAVE_UP_ORIGIN(nbytes) ((int)(((nbytes) >> 16) & 0xffff) - 1)
#define CHORUS_GAVE_UP_STOOD_MS(nbytes) ((uint32_t)((nbytes) >> 32))
#define CHORUS_GAVE_UP_NBYTES(status, kind, origin, stood_ms)                                     \
  ((uint64_t)(uint8_t)(-(status)) | (uint64_t)(uint8_t)(kind) << 8 |                              \
   (uint64_t)((origin) >= 0 && (origin) < 0xffff ? (origin) + 1 : 0) << 16 | (uint64_t)(uint32_t)(stood_ms) << 32)
#define CHORUS_PROTO_VERSION 1

/* Point-to-point frames (match.c) are told from collective frames by their kind (`coll`):
 * collectives use their chorus_coll_t (any but the point-to-point kinds CHORUS_FRAME_MSG = SEND,
 * RECV and SENDRECV: the variable-size ones are numbered after those); a point-to-point message is
 * either one MSG frame (header and payload: small messages), or an RTS frame (header only: "a
 * message of nbytes waits") answered by a CTS control frame from the receiver once it has
 * matched a receive, and then a DATA frame with the payload (large messages: they never wait
 * in the receiver's memory). seq is the sender's message number for the pair (DATA and CTS
 * name the RTS they follow by it), tag the user's tag, count and dtype the message's. */
#define CHORUS_FRAME_MSG 9   /* = CH_COLL_SEND, the kind every point-to-point frame had */
#define CHORUS_FRAME_RTS 32
#define CHORUS_FRAME_DATA 33
/* Clear to send: the receiver of an RTS (seq = its message number) is ready for the DATA.
 * Written between data frames of a stream, like the status frames of a TCP stream. */
#define CHORUS_FRAME_CTS_MAGIC 0x43484354u /* "CHCT" */

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
  /* The call's count argument; the variable-size calls carry what the two ends must agree
   * on: allgatherv, reduce_scatterv: a hash of the counts vector (every rank sees it whole);
   * alltoallv: the elements the sender expects back from the receiver (which checks it against
   * what it sends, as the sender's nbytes against what it expects); gatherv, scatterv: the
   * message's elements (0 in the empty frames that confirm a block). */
  uint64_t count;
  uint64_t nbytes; /* total bytes of this message (over all its stripes) */
} chorus_frame_hdr_t;

_Static_assert(sizeof(chorus_frame_hdr_t) == 48, "frame header must stay 48 bytes");

/* Bytes that always hold a header's description, NUL included. The longest is a collective's:
 * 30 bytes of fixed text, the count (at most 34 characters: "<20 digits> expected back"),
 * three names printed with at most 15 characters each (%.15s), two 20-digit 64-bit numbers, a
 * 10-digit tag and an 11-character root: 170 characters. */
#define CHORUS_FRAME_DESC_LEN 176
/* Bytes that always hold chorus__frame_check's sentence, NUL included: 60 bytes of fixed text
 * around two descriptions of at most CHORUS_FRAME_DESC_LEN - 1 characters each. */
#define CHORUS_FRAME_WHY_LEN (2 * CHORUS_FRAME_DESC_LEN + 64)

/* Compares a received header with the one this rank expects. Returns OK, ERR_PROTOCOL (not a
 * Chorus frame, other version or communicator) or ERR_MISMATCH, with a sentence in why; a why of
 * CHORUS_FRAME_WHY_LEN bytes holds every sentence whole (a smaller one gets it truncated). */
chorus_status_t chorus__frame_check(const chorus_frame_hdr_t* got, const chorus_frame_hdr_t* want,
                                    char* why, size_t whylen);

/* A header's op byte in words: "sum", or "sum+int8" when the call is compressed (task.h). At
 * most 15 characters; out of at least 24 bytes. */
void chorus__frame_op_desc(uint8_t op_byte, char* out, size_t outlen);

/* "allreduce #12 (count 1024, float32, sum, root 0, tag 3, 4096 bytes)"; whole in an out of
 * CHORUS_FRAME_DESC_LEN bytes. */
void chorus__frame_describe(const chorus_frame_hdr_t* h, char* out, size_t outlen);

#endif /* CHORUS_FRAME_H */
