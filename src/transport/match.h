/*
 * match.h - point-to-point matching: which receive a message goes to.
 *
 * Collective frames of a stream are matched in stream order (the k-th collective frame from a
 * peer lands in the k-th collective receive posted for it): both sides run collectives in the
 * same order. Point-to-point messages cannot be: receives may be posted in any order, for any
 * tag, from any source, while collectives run. So the transport reads each frame's header and
 * routes it by kind (frame.h): collective frames to the stream's receive queue, point-to-point
 * frames here, where they meet the posted receives (MPI's rules: the earliest posted receive
 * whose source and tag accept the message; messages of one pair and tag matched in sending
 * order) or wait as unexpected messages for a receive posted later.
 *
 * Why this design (an unexpected-message queue, eager small messages, rendezvous for large
 * ones, one byte stream per peer) rather than a second stream per peer for point-to-point:
 * it keeps the connection set-up and the shared-memory layout as they are, and a frame that
 * waits blocks only when nothing behind it is needed. Memory stays bounded:
 * - a message of at most CHORUS_P2P_EAGER_BYTES travels at once (one MSG frame); if no receive
 *   is posted, its payload is read into library memory (an unexpected message);
 * - a larger one sends only its header (RTS); the receiver answers CTS once a receive takes it,
 *   then the payload (DATA) goes straight into the user's buffer: an unexpected large message
 *   costs a header, never its size;
 * - a collective frame whose receive is not posted yet stays in the stream (its payload is read
 *   later straight into the receive buffer, as before), except when this rank waits for a
 *   point-to-point frame from that peer (a posted receive, a CTS, a DATA) which may be behind
 *   it: then it is read ahead into library memory and taken by the collective's receive later;
 * - unexpected messages and read-ahead frames together hold at most CHORUS_P2P_UNEXPECTED_BYTES;
 *   past that, frames stay in the stream (back-pressure on the sender) until receives are
 *   posted, so a program that needs more buffering than that may wait until its timeout.
 * Sends to oneself wait, without a copy, for their receive.
 */
#ifndef CHORUS_MATCH_H
#define CHORUS_MATCH_H

#include <stddef.h>
#include <stdint.h>

#include "transport/conn.h"
#include "transport/frame.h"

/* A message that arrived before its receive (kind U_MSG, U_RTS, U_SELF), or a collective
 * frame read ahead of its receive (U_COLL, in the stream's early list). */
enum { CHORUS_U_MSG, CHORUS_U_RTS, CHORUS_U_SELF, CHORUS_U_COLL };

typedef struct chorus_unexp {
  struct chorus_unexp *next, *prev;
  chorus_frame_hdr_t hdr;
  int peer;
  int kind;
  int filling;            /* the payload is still being read from the stream */
  chorus_xfer_t* claim;   /* the receive that took it while filling: gets it when complete */
  size_t claim_off;       /* where in claim's buffer (a collective part) */
  chorus_xfer_t* self_send; /* U_SELF: the send, completed when a receive takes it */
  size_t bytes;           /* payload bytes held, counted in unexp_bytes */
  _Alignas(16) char data[];
} chorus_unexp_t;

typedef struct {
  chorus_xfer_t *posted_head, *posted_tail; /* receives not yet matched, in posting order */
  chorus_unexp_t *unexp_head, *unexp_tail;  /* unexpected messages, in arrival order */
  chorus_xfer_t** await_cts;  /* per peer: sends whose RTS is out, waiting for CTS */
  chorus_xfer_t** await_data; /* per peer: receives that sent CTS, waiting for DATA */
  int* want;                  /* per peer: receives naming it, CTS and DATA awaited from it */
  int any_posted;             /* posted receives from CHORUS_ANY_SOURCE */
  size_t unexp_bytes;         /* payload held by unexpected messages and read-ahead frames */
  size_t unexp_limit;         /* CHORUS_P2P_UNEXPECTED_BYTES */
  size_t eager_bytes;         /* CHORUS_P2P_EAGER_BYTES */
} chorus_match_t;

/* Where the payload of the frame being received goes: bytes [0, keep) to dst, the rest (up to
 * len) read and dropped (a truncated point-to-point message); then x gets one part done, or
 * the unexpected message u is complete. */
typedef struct {
  chorus_xfer_t* x;
  struct chorus_unexp* u;
  char* dst;
  size_t keep, len;
} chorus_rx_route_t;

struct chorus_transport;
struct chorus_stream;

chorus_status_t chorus__match_init(struct chorus_transport* tp, size_t eager_bytes, size_t unexp_limit);
/* Forgets every receive and message (after a failure: their tasks are failed by the engine). */
void chorus__match_reset(struct chorus_transport* tp);
void chorus__match_free(struct chorus_transport* tp);

/* 1 when this rank waits for a point-to-point frame from peer: frames from it that no receive
 * takes yet must be read ahead rather than block the stream. */
static inline int chorus__match_wants(const chorus_match_t* m, int peer) {
  return m->any_posted || (m->want && m->want[peer]);
}
/* The same without receives from any source: frames this rank waits for from peer itself. */
static inline int chorus__match_wants_peer(const chorus_match_t* m, int peer) {
  return m->want && m->want[peer];
}

/* Posting (conn.c): x is filled in (buffer, peer or ANY, tag, header). */
chorus_status_t chorus__match_post_send(struct chorus_transport* tp, chorus_xfer_t* x);
chorus_status_t chorus__match_post_recv(struct chorus_transport* tp, chorus_xfer_t* x);

/* Stream side (transport.c). A point-to-point frame's header is complete in s->rx_hdr: sets
 * s->rx (1), or leaves it in the stream for later (0), or fails (< 0, tp->err says why). */
int chorus__match_route(struct chorus_transport* tp, struct chorus_stream* s, chorus_status_t* st);
/* The payload of a routed frame is in. */
void chorus__match_frame_done(struct chorus_transport* tp, const chorus_rx_route_t* r);
/* An RTS frame of x was written: x waits for the CTS. */
void chorus__match_rts_sent(struct chorus_transport* tp, chorus_xfer_t* x);
/* A CTS frame arrived from peer: its DATA goes out. < 0 for a CTS that names no waiting send. */
chorus_status_t chorus__match_cts(struct chorus_transport* tp, int peer, const chorus_frame_hdr_t* h);

/* Read-ahead buffers (collective frames and unexpected messages): NULL when out of memory. */
chorus_unexp_t* chorus__unexp_new(chorus_match_t* m, int peer, const chorus_frame_hdr_t* h, int kind, size_t bytes);
void chorus__unexp_free(chorus_match_t* m, chorus_unexp_t* u);

#endif /* CHORUS_MATCH_H */
