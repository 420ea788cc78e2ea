/*
 * conn.h - the message-semantics interface that algorithms use to move bytes between ranks.
 *
 * An algorithm posts transfers with chorus__conn_isend/irecv and later checks
 * chorus__xfer_done(). Posting never blocks. Transfers to one peer leave in posting order and
 * are matched on the receiving side in posting order: the k-th send from A to B within a task
 * lands in B's k-th receive from A. `tag` must be equal on both sides (it is checked, and a
 * difference is reported as a mismatch); use it to number steps/chunks. Sending to or
 * receiving from the caller's own rank is allowed (memory copy).
 *
 * The chorus_xfer_t must stay at the same address until it is done or the task has ended:
 * the transport keeps a pointer to it. Errors (peer death, mismatch, timeout) are not reported
 * here: the engine fails the whole task and never calls the algorithm's progress again.
 */
#ifndef CHORUS_CONN_H
#define CHORUS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "coll/task.h"
#include "transport/frame.h"
#include "transport/shm.h"

typedef struct chorus_xfer {
  /* Transport-private fields; zero-initialise (or let post overwrite) before posting. */
  struct chorus_xfer *next, *prev; /* point-to-point: the list the transfer waits in (match.c) */
  struct chorus_task* task;
  char* buf;
  size_t nbytes;     /* bytes sent; a point-to-point receive's capacity */
  size_t wire_bytes; /* payload bytes of the frame being sent: nbytes, or 0 for an RTS */
  uint64_t seq;
  uint32_t tag;
  int peer;
  int is_send;
  int nparts;       /* >1 when striped over several sockets */
  int parts_done;
  chorus_frame_hdr_t hdr; /* send: the header to write; recv: the header expected */
  /* Point-to-point (match.c): matched by source and tag, not in stream order. */
  int p2p;
  int any_tag;       /* receive: any tag (peer is CHORUS_ANY_SOURCE for any source) */
  int rdv;           /* send: 0 eager (one MSG frame), 1 RTS out and waiting for CTS, 2 DATA */
  int got_src;       /* receive, once matched: the message's source, tag and bytes, and */
  uint32_t got_tag;  /* xst: OK, ERR_TRUNCATED (longer than nbytes: the first nbytes kept) */
  size_t got_bytes;  /* or ERR_MISMATCH (another dtype: nothing kept) */
  chorus_status_t xst;
  volatile int done; /* set to 1 by the transport when the transfer completed */
} chorus_xfer_t;

chorus_status_t chorus__conn_isend(chorus_task_t* t, int peer, const void* buf, size_t nbytes,
                                   uint32_t tag, chorus_xfer_t* x);
chorus_status_t chorus__conn_irecv(chorus_task_t* t, int peer, void* buf, size_t nbytes,
                                   uint32_t tag, chorus_xfer_t* x);

/* As chorus__conn_isend (is_send = 1) or chorus__conn_irecv, with the frame's count word given
 * instead of the call's count: what the two ends must agree on besides the message's size
 * (alltoallv, gatherv and scatterv say per message what they are; frame.h). */
chorus_status_t chorus__conn_post_word(chorus_task_t* t, int is_send, int peer, void* buf, size_t nbytes,
                                       uint32_t tag, uint64_t word, chorus_xfer_t* x);
/* Point-to-point messages of the user's calls: matched on the receiving side by source and tag
 * (in order within a tag), independently of collectives and of each other. A receive takes
 * peer = CHORUS_ANY_SOURCE and/or tag = CHORUS_ANY_TAG (chorus.h); capacity bytes. After done,
 * x->got_* and x->xst say what arrived. */
chorus_status_t chorus__conn_p2p_send(chorus_task_t* t, int peer, const void* buf, size_t nbytes,
                                      int tag, chorus_xfer_t* x);
chorus_status_t chorus__conn_p2p_recv(chorus_task_t* t, int peer, void* buf, size_t capacity,
                                      int tag, chorus_xfer_t* x);

static inline int chorus__xfer_done(const chorus_xfer_t* x) {
  return __atomic_load_n(&x->done, __ATOMIC_ACQUIRE);
}

/* ---- memory semantics: a shared area per host ----
 * Each host's ranks map one segment (transport/shm.h). Every call below names a rank of this
 * host by its local index: its index among the host's ranks in rank order (core/topo.h), which
 * is its communicator rank when the communicator lives on one host. Local rank l owns a control
 * block (flags only it writes; the signature of the operation it runs) and two slots of
 * chorus__conn_shm_slot_bytes() bytes that every rank of the host can read and write (slot 1
 * follows slot 0: together one area of twice the slot size). Flag
 * values are ids from chorus__conn_shm_next_ids(): every rank of a host draws the same ids in
 * the same order, since every rank runs the same operations, and the phases of a two-level
 * operation run in a fixed order on every rank of the host. */
/* 1 when every rank of the communicator maps this host's segment (the one-host algorithms). */
int chorus__conn_shm_avail(const chorus_task_t* t);
/* 1 when every rank of this host maps its segment (several hosts may have one each); then
 * *nlocal and *me are the host's rank count and this rank's local index. */
int chorus__conn_shm_host(const chorus_task_t* t, int* nlocal, int* me);
chorus_shm_ctl_t* chorus__conn_shm_ctl(const chorus_task_t* t, int local);
char* chorus__conn_shm_slot(const chorus_task_t* t, int local, int which);
size_t chorus__conn_shm_slot_bytes(const chorus_task_t* t);
/* The slot size the settings give every host (CHORUS_SHM_SLOT_SIZE, resolved; 0 under
 * CHORUS_SHM_DISABLE), whether or not this host has a segment: what prices across hosts must
 * use, since ranks that price alike select alike and a host of one rank (or one whose segment
 * failed) has no slots. */
size_t chorus__conn_shm_slot_setting(const chorus_task_t* t);
/* CHORUS_SHM_STREAM_BYTES, resolved: calls touching this many bytes of a rank's buffers or more
 * write their output past the cache (0: never). */
size_t chorus__conn_shm_stream_bytes(const chorus_task_t* t);
/* Reserves n consecutive ids; returns the one before the first (ids are base+1 .. base+n). */
uint64_t chorus__conn_shm_next_ids(chorus_task_t* t, uint64_t n);
/* Wakes every rank of the host that sleeps on its doorbell (call after publishing a flag). */
void chorus__conn_shm_signal(chorus_task_t* t);
/* 1 when local rank l's flag[f] >= want. Fails the task with ERR_REMOTE when it died first, and
 * with ERR_MISMATCH when it runs another operation under this sequence number. */
int chorus__conn_shm_reached(chorus_task_t* t, int local, int f, uint64_t want, chorus_status_t* st);
/* 0 and *st < 0 when local rank l can no longer take part (it died, or runs another operation
 * under this sequence number: checked now and then); 1 otherwise. For waits on other than flags. */
int chorus__conn_shm_peer_ok(chorus_task_t* t, int local, chorus_status_t* st);
/* ERR_MISMATCH, with both calls named when the local rank's signature still shows its call. */
chorus_status_t chorus__conn_shm_mismatch(chorus_task_t* t, int local);
/* A local rank's LL buffer for operations of parity `which` (see shm.h); the id of the last LL
 * operation this rank completed (read and written by the LL algorithms). */
uint64_t* chorus__conn_shm_ll(const chorus_task_t* t, int local, int which);
uint64_t* chorus__conn_shm_ll_last(const chorus_task_t* t);
/* How this rank last wrote its slots (read and written by algo/shm/shm.h). */
chorus_shm_slots_use_t* chorus__conn_shm_slots_use(const chorus_task_t* t);
/* Publishes flag f = value for this rank (release) and signals. */
void chorus__conn_shm_publish(chorus_task_t* t, int f, uint64_t value);
/* Zero-copy: 1 when this rank's buffers for the task (NULL/0 for one it does not use) lie in
 * registered memory; sets t->variant and t->zc. */
int chorus__conn_zc_eligible(chorus_task_t* t, const void* send, size_t send_bytes, const void* recv,
                             size_t recv_bytes);
/* Publishes this rank's buffer locations (before it publishes ARRIVED). */
void chorus__conn_zc_publish(chorus_task_t* t);
/* A local rank's send / receive buffer of the task, mapped in this process (after its ARRIVED). */
char* chorus__conn_zc_send(chorus_task_t* t, int local);
char* chorus__conn_zc_recv(chorus_task_t* t, int local);
/* Single-copy reads of buffers that are not registered (process_vm_readv): 1 when the
 * communicator is one host's, every rank can read every other's memory and may run on a CPU of
 * its own, and CHORUS_SHM_SINGLE_COPY allows it on every rank (at 1, only where every process
 * timed the kernel's copy at most 2.5x memcpy's: transport/shm_setup.c); alike on all of them
 * (agreed at set-up). */
int chorus__conn_cma_avail(const chorus_task_t* t);
/* The same whether or not every rank has a CPU of its own. */
int chorus__conn_cma_any_cpus(const chorus_task_t* t);
/* Takes the single-copy variant for the task (t->variant CHORUS_VARIANT_CMA): t->zc holds this
 * rank's send and receive buffer addresses, published like the registered ones. */
void chorus__conn_cma_use(chorus_task_t* t, const void* send, void* recv);
/* Copies len bytes at offset off of local rank l's send buffer into dst (after l's ARRIVED);
 * ERR_REMOTE when l's process is gone, ERR_SYSTEM when the kernel refuses otherwise, with the
 * reason in the transport's error. */
chorus_status_t chorus__conn_cma_read_send(chorus_task_t* t, int local, size_t off, void* dst, size_t len);
struct chorus_transport;

/* The rank a verdict blames first (-1: none), how (CHORUS_BLAME_*), and for a rank that stood
 * still, for how long. Carried in give-up frames (frame.h), so every rank can name it. */
enum { CHORUS_BLAME_NEVER = 1, CHORUS_BLAME_STUCK, CHORUS_BLAME_SILENT_POSTED, CHORUS_BLAME_SILENT, CHORUS_BLAME_GONE };
typedef struct {
  int rank;
  int kind;
  uint32_t stood_ms;
  /* Set when this rank breaks because a peer gave up: the rank that gave up first and its
   * status, passed on in this rank's own give-up frame. */
  int origin;
  chorus_status_t origin_status;
} chorus_blame_t;

/* After a timeout of t (a collective): a sentence naming the ranks that never posted it, that
 * posted it and then stood still (their heartbeat, shm.h), that do not answer or are gone, and
 * those that wait too. On one host it is read from shared memory; otherwise this rank asks
 * every peer for its status (status frames, frame.h) and waits for the answers up to a second;
 * ranks of a peer's host that do not answer are described by that peer from what they publish
 * in its host's segment. mu held. */
void chorus__conn_verdict(chorus_task_t* t, char* out, size_t outlen, chorus_blame_t* blame);
/* After a peer gave up on t with ERR_MISMATCH: 1 when that rank shares this host's segment and
 * its published signature shows how the calls differ, written to the transport's error
 * sentence (which then names both calls and, e.g., registered memory on one side only). */
int chorus__conn_explain_mismatch(chorus_task_t* t, int rank);
/* The give-up frame this rank sends when its communicator breaks with st while it runs t (NULL:
 * between operations), blaming `blame`. */
void chorus__conn_give_up_frame(const chorus_task_t* t, uint64_t comm_id, int rank, chorus_status_t st,
                                const chorus_blame_t* blame, chorus_frame_hdr_t* h);
/* The give-up frame received (tp->gave_up from tp->gave_up_from) as a sentence: "rank 0 (host
 * h0) gave up on allreduce #8 (CHORUS_ERR_TIMEOUT); its verdict: rank 3 (host h1) never posted
 * allreduce #8"; and the rank it blames, for this rank's own give-up frame. */
void chorus__conn_describe_give_up(const struct chorus_transport* tp, char* out, size_t outlen, chorus_blame_t* blame);
/* The transport's status_answer hook (ctx: the communicator): sends `asker` this rank's
 * status, then that of the other ranks of its host as they publish it. mu held. */
void chorus__conn_status_answer(void* ctx, int asker);
/* Called by the engine when a task starts: publishes its signature. */
void chorus__conn_publish_signature(chorus_task_t* t);

#endif /* CHORUS_CONN_H */
