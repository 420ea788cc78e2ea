/*
 * transport.h - per-communicator connection state and the calls the engine (src/core) makes
 * on it. Each peer is reached by one transport, chosen once at set-up: `self` for the caller's
 * own rank (memory copy), `tcp` otherwise. A TCP peer has nsocks sockets; every socket keeps
 * FIFO queues of posted sends and receives, so frames on one socket are matched in order.
 * Only the thread that currently drives progress touches this state.
 */
#ifndef CHORUS_TRANSPORT_H
#define CHORUS_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/sock.h"
#include "core/topo.h"
#include "transport/shm.h"
#include "transport/window.h"
#include "transport/conn.h"
#include "transport/match.h"

/* The smallest part a message is striped into over the sockets of a peer: with 4 sockets on a
 * CPU-bound pair of emulated hosts, parts of 64 KiB moved 0.7-0.9x the bytes of one socket,
 * parts of 256 KiB as many. */
#define CHORUS_STRIPE_PART_BYTES (256u * 1024u)

typedef struct {
  chorus_xfer_t** items;
  size_t head, count, cap;
} chorus_xfer_queue_t;

/* One ordered byte stream to a peer: a TCP socket, or the pair of shared rings of a same-host
 * peer (then fd is still that peer's TCP socket, kept for liveness: a dead process closes it). */
typedef struct chorus_stream {
  int fd;
  int peer;
  int index; /* stripe index among the peer's streams */
  int is_shm;
  struct chorus_shm_ring* tx_ring;
  struct chorus_shm_ring* rx_ring;
  chorus_shm_bell_t* peer_bell; /* rung after writing (data) and after reading (space) */
  int peer_wakefd;              /* this process's copy of the peer's wake-up eventfd, or -1 */
  chorus_xfer_queue_t sendq;
  chorus_xfer_queue_t recvq;    /* collective receives, matched in stream order */
  size_t tx_hdr_off, tx_off; /* progress of the head send's frame */
  chorus_frame_hdr_t rx_hdr;
  size_t rx_hdr_off, rx_off; /* progress of the frame being received */
  int rx_routed;             /* rx_hdr is complete and its payload has a destination: rx */
  chorus_rx_route_t rx;
  /* Collective frames read ahead of their receive, because this rank waited for a
   * point-to-point message behind them (match.h): taken by the next receives posted here. */
  struct chorus_unexp *early_head, *early_tail;
  int peer_closed;           /* EPOLLRDHUP/HUP seen on fd */
  int rx_ended;              /* a read found the stream closed after its last frame */
  /* Readiness of fd, so that progress passes skip the reads that would find it empty and the
   * writes that would find it full (one epoll_wait per pass instead of a syscall per socket,
   * and writes that wait for the room an EPOLLOUT edge announces instead of trickling in as
   * acknowledgements free a few kilobytes): epoll edges are counted (wait.c, and a poll() that
   * saw room), and a read that found fd empty (a write that found it full) records the count it
   * started at. Ready while the two differ (reads also while bytes read ahead wait in rx_stage);
   * an edge that comes during the syscall keeps it so.
   * Edges are counted by whichever thread sleeps in epoll: atomic; 64 bits, so that a socket
   * never found full does not read as full when the count wraps (EPOLLOUT comes with every
   * incoming message's edge). */
  uint64_t rx_edges, rx_empty_at;
  uint64_t tx_edges, tx_full_at;
  /* Bytes read from fd ahead of the reader: a read of fewer than CHORUS_TCP_STAGE_BYTES asks the
   * socket for that many here (tcp.c), so that a small frame's header and payload, and often
   * the next frame's header, come in one syscall. Allocated at the first such read. */
  char* rx_stage;
  uint32_t rx_stage_off, rx_stage_len;
  /* Control (status) frames to write on fd: on a TCP stream between data frames, on a
   * shared-memory stream's idle socket at any time. ctl_off: bytes of the first one written. */
  chorus_frame_hdr_t* ctl;
  size_t ctl_head, ctl_count, ctl_cap, ctl_off;
  chorus_frame_hdr_t ctl_rx_hdr; /* shared-memory stream: a control frame being read from fd */
  size_t ctl_rx_off;
  /* CTS frames (frame.h) to write in the stream itself, between data frames: message numbers;
   * cts_off bytes of the first one written (cts_hdr). */
  uint64_t* cts;
  size_t cts_head, cts_count, cts_cap, cts_off;
  chorus_frame_hdr_t cts_hdr;
} chorus_stream_t;

typedef struct {
  int is_self;
  int nsocks;
  chorus_stream_t* socks;
  char host[CHORUS_ADDR_LEN]; /* host id, for error messages */
  char addr[CHORUS_ADDR_LEN]; /* its listening address */
  chorus_xfer_queue_t self_sendq, self_recvq; /* is_self only */
} chorus_peer_t;

/* What this rank learnt about another rank from status frames (frame.h). */
typedef struct {
  chorus_frame_hdr_t hdr; /* the last status frame about the rank */
  int have;               /* 0: nothing; 1: second hand (from rank `via`); 2: from the rank itself */
  int via;
  int gone;               /* its connection closed or failed while this rank asked */
  int gave_up;            /* it sent a give-up frame (gave_up_hdr) */
  chorus_frame_hdr_t gave_up_hdr;
} chorus_rank_status_t;

typedef struct chorus_transport {
  int rank, nranks;
  uint64_t comm_id;
  int epfd;   /* every socket, edge-triggered, plus wakefd */
  int wakefd; /* eventfd: wakes a sleeping progress thread (abort, new work) */
  chorus_peer_t* peers;
  /* How many of a TCP peer's sockets a message is cut over (1..nsocks): all of them once
   * connected, fewer when the link probe found that more flows carry no more (tune.c). Every
   * rank holds the same figure, as both ends of a message count its parts alike. */
  int stripe_socks;
  chorus_shm_seg_t shm;        /* this host's segment; base NULL without shm peers */
  chorus_shm_bell_t* my_bell;  /* this rank's doorbell in it */
  const int* local_ranks;      /* communicator rank of every local index (the host's group) */
  int* local_wakefd;           /* per local index: a copy of that rank's eventfd, or -1 */
  int epoll_wakes;             /* 1 once every local peer can wake this rank out of epoll */
  chorus_shm_ctl_t* my_ctl;    /* this rank's control block in it (its heartbeat) */
  uint64_t beat;               /* the heartbeat value last stamped */
  int shm_all_local;           /* every rank of the communicator maps the segment */
  uint64_t shm_epoch;          /* phases of memory-semantics collectives run so far */
  uint64_t shm_ll_last;        /* id of the last LL operation this rank completed */
  chorus_shm_slots_use_t shm_slots_use; /* how this rank last wrote its slots (algo/shm/shm.h) */
  chorus_window_t* windows;    /* registered memory (chorus_mem_alloc) */
  uint64_t windows_made;       /* windows ever made: the next window's index */
  chorus_rank_status_t* status; /* per rank: what status frames said about it */
  /* Read collective frames ahead of their receives (route_ahead) to reach the control frames
   * behind them: while gathering status answers after a timeout, and while the engine stands
   * still (set by it), when a peer's question may be waiting there. */
  int gathering;
  int stalled;
  chorus_frame_hdr_t gave_up;   /* the first give-up frame received (frame.h) */
  int gave_up_from;             /* its sender, -1 while none came */
  /* Called when a peer asks for this rank's status (it timed out): queues the answer with
   * chorus__transport_send_status. Set by the engine; NULL: the rank does not answer. */
  void (*status_answer)(void* ctx, int asker);
  void* status_ctx;
  chorus_match_t match;        /* point-to-point receives and unexpected messages (match.h) */
  char err[512]; /* the sentence describing the last transport error */
  int err_peer;  /* the peer that error is about, or -1 */
} chorus_transport_t;

/* Settings every rank must share (coll/shared.c), of which each rank publishes a hash apiece. */
#define CHORUS_SHARED_SETTINGS 14

/* Words of a rank's CPU affinity in its peer info: CPU_SETSIZE (1024) bits. */
#define CHORUS_AFFINITY_WORDS 16

/* Peer info exchanged at bootstrap. */
typedef struct {
  char host_id[CHORUS_ADDR_LEN];
  char addr[CHORUS_ADDR_LEN]; /* "ip:port" of the rank's listener */
  int32_t pid;
  int32_t cpus;                /* online CPUs of its machine */
  char machine[CHORUS_ADDR_LEN]; /* its machine: the kernel's boot id, whatever host id it claims */
  int32_t nranks;              /* the size it was started for */
  /* Hashes of the settings every rank must share (chorus__shared_settings_hash). */
  uint64_t shared_settings[CHORUS_SHARED_SETTINGS];
  /* The CPUs it may run on (sched_getaffinity), CPU c at bit c % 64 of word c / 64; all zero:
   * unknown. taskset, cpusets and containers leave fewer than the machine has online. */
  uint64_t affinity[CHORUS_AFFINITY_WORDS];
} chorus_peer_info_t;

/* Connection handshake: what a connecting rank sends first. */
#define CHORUS_HELLO_MAGIC 0x43484857u /* "CHHW" */
typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t sock_index;
  int32_t rank;
  int32_t nranks;
  uint64_t comm_id;
  uint8_t secret[16];
} chorus_hello_t;

/* Checks a hello received by rank tp->rank while it accepts its higher ranks' nsocks sockets
 * each: magic, version, communicator, secret, then rank and socket index (only then used as
 * indices) and that the slot is still free. NULL when accepted, else the reason. Pure. */
const char* chorus__hello_check(const chorus_transport_t* tp, const chorus_hello_t* h,
                                const uint8_t secret[16], int nsocks);

/* Creates the epoll set and the peer table; no connections yet. */
chorus_status_t chorus__transport_create(chorus_transport_t* tp, int rank, int nranks,
                                         uint64_t comm_id);
/* Connects every pair: rank r connects to lower ranks and accepts higher ranks, nsocks sockets
 * each, authenticating with the secret. listen_fd is this rank's listener. cc: the congestion
 * control of every socket ("": the system's), which the listener must have had from before
 * anyone could connect (its connections inherit it); checked on every socket. */
chorus_status_t chorus__transport_connect_all(chorus_transport_t* tp, int listen_fd,
                                              const chorus_peer_info_t* infos, int nsocks, const char* cc,
                                              const uint8_t secret[16], uint64_t deadline_ns);
/* Maps a shared segment with the other ranks of this host (`host`: their ranks in rank order,
 * me = this rank's index) and moves their traffic to it; falls back to TCP (with a warning)
 * when the segment cannot be made. single_copy: CHORUS_SHM_SINGLE_COPY of this rank (0: no
 * reads of peers' memory; 1: where the kernel's copy is timed fast enough; 2: wherever they
 * work); cpu_each: the host's ranks may run on at least as many CPUs as they are (the same on
 * every rank). shm.cma_any_cpus is set where every rank of the host allows and manages the
 * reads, and shm.cma where besides every rank has a CPU. */
chorus_status_t chorus__transport_setup_shm(chorus_transport_t* tp, chorus_group_t host, size_t ring_bytes,
                                            size_t slot_bytes, int single_copy, int cpu_each, uint64_t deadline_ns);
/* Maps this rank's part of the host's segment now rather than on first use (shm.h). */
void chorus__transport_prefault_shm(chorus_transport_t* tp);
/* Moves bytes of every queued transfer until the sockets would block. *moved counts transfers
 * that changed state. Returns < 0 on a transport error (tp->err says what). */
chorus_status_t chorus__transport_progress(chorus_transport_t* tp, int* moved);
/* Before sleeping: arms this rank's doorbell and returns its value (0 without shared memory);
 * the caller then checks for work once more and either disarms or sleeps. */
uint32_t chorus__transport_arm(chorus_transport_t* tp);
void chorus__transport_disarm(chorus_transport_t* tp);
/* Sleeps until a socket has news, the doorbell moves past `seen`, or timeout_ms passes; marks
 * peers that hung up; disarms. */
void chorus__transport_wait(chorus_transport_t* tp, int timeout_ms, uint32_t seen);
void chorus__transport_wake(chorus_transport_t* tp);
/* Stamps this rank's heartbeat (shm.h) from a clock reading the caller has anyway: on every
 * pass of the engine, so a compare and, a few dozen times a second, one store. */
static inline void chorus__transport_beat(chorus_transport_t* tp, uint64_t now_ns) {
  uint64_t beat = now_ns >> CHORUS_SHM_BEAT_SHIFT;
  if (beat == tp->beat || !tp->my_ctl) return;
  tp->beat = beat;
  __atomic_store_n(&tp->my_ctl->beat, beat, __ATOMIC_RELAXED);
}
/* The peer of the oldest pending transfer (for timeout messages); -1 if none. */
int chorus__transport_pending_peer(const chorus_transport_t* tp, int* is_send, size_t* bytes_left);
/* ---- status exchange after a timeout (frame.h: CHORUS_FRAME_STATUS_MAGIC) ---- */
/* Checks a status frame received from rank `sender` (after its magic): version, communicator,
 * flags, subject rank (only then used as an index; a first-hand status is about the sender, a
 * second-hand one about another rank of the sender's host). NULL when valid, else why. Pure. */
const char* chorus__status_check(const chorus_transport_t* tp, int sender, const chorus_frame_hdr_t* h);
/* Queues status frame h to peer on the first of its streams whose data is at a frame boundary
 * (frames queued one after the other arrive in that order), written at once when it can. */
void chorus__transport_send_status(chorus_transport_t* tp, int peer, const chorus_frame_hdr_t* h);
/* After this rank asked its peers (status frames with CHORUS_STATUS_ASK): keeps answering and
 * collecting status frames into tp->status until every peer has sent its own status or is
 * gone, or wait_ms passed. It may move bytes of the transfers in flight: call it only on the
 * way to failing them. */
void chorus__transport_gather_status(chorus_transport_t* tp, int wait_ms);

/* Tells every peer that this rank gives up (give-up frame h, frame.h): written at once on a
 * socket whose outgoing data is at a frame boundary; a peer whose socket is in the middle of a
 * frame learns it from the socket closing (chorus__transport_shutdown, which follows). */
void chorus__transport_give_up(chorus_transport_t* tp, const chorus_frame_hdr_t* h);

/* Drops every queued transfer (after a failure) and shuts the sockets so peers notice. */
void chorus__transport_shutdown(chorus_transport_t* tp);
void chorus__transport_destroy(chorus_transport_t* tp);

/* Posting, used by conn.c: a collective transfer (striped when large), and a point-to-point
 * frame in nparts parts (match.c). */
chorus_status_t chorus__stream_post(chorus_transport_t* tp, chorus_xfer_t* x);
chorus_status_t chorus__stream_post_parts(chorus_transport_t* tp, chorus_xfer_t* x, int nparts);
chorus_status_t chorus__self_post(chorus_transport_t* tp, chorus_xfer_t* x);
/* Parts a message of nbytes to peer is cut into (at most one per socket of a TCP peer, and
 * stripe_socks, each of at least CHORUS_STRIPE_PART_BYTES); the receiver computes the same. */
int chorus__stream_nparts(const chorus_transport_t* tp, int peer, size_t nbytes);
/* Queues a CTS for message number `seq` to peer, written in its first stream between frames. */
chorus_status_t chorus__stream_queue_cts(chorus_transport_t* tp, int peer, uint64_t seq);
/* Byte range of part i of a transfer cut into n parts. */
void chorus__part_range(size_t nbytes, int n, int i, size_t* off, size_t* len);

/* TCP stream I/O (tcp.c): bytes moved, 0 when it would block (or when no edge came since the
 * socket was last found empty / full: no syscall then), -errno on failure (-EPIPE: the peer
 * closed). */
ssize_t chorus__tcp_writev(chorus_stream_t* s, const struct iovec* iov, int niov);
ssize_t chorus__tcp_read(chorus_stream_t* s, void* buf, size_t len);

/* The readiness counters (see chorus_stream_t). */
static inline int chorus__tcp_rx_staged(const chorus_stream_t* s) { return s->rx_stage_off < s->rx_stage_len; }
static inline int chorus__tcp_rx_ready(const chorus_stream_t* s) {
  return chorus__tcp_rx_staged(s) || __atomic_load_n(&s->rx_edges, __ATOMIC_ACQUIRE) != s->rx_empty_at;
}
static inline int chorus__tcp_tx_ready(const chorus_stream_t* s) {
  return __atomic_load_n(&s->tx_edges, __ATOMIC_ACQUIRE) != s->tx_full_at;
}
static inline void chorus__tcp_edge_rx(chorus_stream_t* s) { __atomic_add_fetch(&s->rx_edges, 1, __ATOMIC_RELEASE); }
static inline void chorus__tcp_edge_tx(chorus_stream_t* s) { __atomic_add_fetch(&s->tx_edges, 1, __ATOMIC_RELEASE); }
/* Nothing more to read from fd until the next edge (a closed or shut socket); bytes already
 * read ahead stay readable (a peer's last frames may be among them). */
static inline void chorus__tcp_rx_idle(chorus_stream_t* s) { s->rx_empty_at = __atomic_load_n(&s->rx_edges, __ATOMIC_ACQUIRE); }

/* Queue helpers. */
int chorus__xq_push(chorus_xfer_queue_t* q, chorus_xfer_t* x);
static inline chorus_xfer_t* chorus__xq_head(const chorus_xfer_queue_t* q) {
  return q->count ? q->items[q->head] : NULL;
}
void chorus__xq_pop(chorus_xfer_queue_t* q);
void chorus__xq_free(chorus_xfer_queue_t* q);

#endif /* CHORUS_TRANSPORT_H */
