/*
 * stream.h - the stream layer of transport.c as the transport's other files use it: status.c,
 * which exchanges status frames and writes give-up frames on the streams, and wait.c, which
 * sleeps until a stream or a doorbell has something. Not for use outside src/transport.
 */
#ifndef CHORUS_TRANSPORT_STREAM_H
#define CHORUS_TRANSPORT_STREAM_H

#include "transport/transport.h"

/* 1 when nothing of a frame is half written on the stream, so that another may follow. */
int chorus__stream_tx_at_boundary(const chorus_stream_t* s);
/* Writes the queued control (status) frames while the stream is at a frame boundary. */
void chorus__stream_ctl_flush(chorus_stream_t* s);
/* Writes the queued clear-to-send frames; < 0 when the stream failed. */
chorus_status_t chorus__stream_cts_flush(chorus_transport_t* tp, chorus_stream_t* s);
/* The byte range of transfer x (nbytes in all) that stream s carries: its part, or the whole. */
void chorus__stream_part(const chorus_stream_t* s, const chorus_xfer_t* x, size_t nbytes, size_t* off,
                         size_t* len);
/* What is left of transfer x's frame on stream s (header, then the stream's part of the
 * payload) as iovecs; returns their number and sets *len to the part's length. */
int chorus__stream_tx_iov(const chorus_stream_t* s, const chorus_xfer_t* x, struct iovec iov[2], size_t* len);
/* Counts `sent` bytes of x's frame written; 1 when the whole frame is out. */
int chorus__stream_tx_advance(chorus_stream_t* s, const chorus_xfer_t* x, size_t sent, size_t len);
/* One round of sending or receiving on a stream; *moved is set when bytes moved; < 0 when the
 * stream failed. */
chorus_status_t chorus__stream_send(chorus_transport_t* tp, chorus_stream_t* s, int* moved);
chorus_status_t chorus__stream_recv(chorus_transport_t* tp, chorus_stream_t* s, int* moved);
/* Whether a TCP stream's bytes read ahead (rx_stage) can move now: they come with no epoll
 * edge, but a header whose frame waits for its receive holds them back until one is posted. */
static inline int chorus__stream_read_ahead_usable(const chorus_stream_t* s) {
  return chorus__tcp_rx_staged(s) && !(s->rx_hdr_off == sizeof(s->rx_hdr) && !s->rx_routed);
}
/* Whether anything may take the stream's next bytes (transport.c says what). */
int chorus__stream_wanted(const chorus_transport_t* tp, const chorus_stream_t* s);
/* Reads the next data frame's header, handling the control frames before it; 1 when it is
 * complete in s->rx_hdr (*st < 0 when the stream failed). */
int chorus__stream_read_header(chorus_transport_t* tp, chorus_stream_t* s, chorus_status_t* st);
/* Reads the control frames on a shared-memory stream's socket (nothing else travels there);
 * < 0 when the stream failed. */
chorus_status_t chorus__stream_ctl_read(chorus_transport_t* tp, chorus_stream_t* s);
/* Waits up to timeout_ms in epoll and marks the streams that became readable or were closed. */
void chorus__transport_collect_events(chorus_transport_t* tp, int timeout_ms);

#endif /* CHORUS_TRANSPORT_STREAM_H */
