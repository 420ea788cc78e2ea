/*
 * task.h - one collective (or point-to-point) operation in flight: its arguments, the algorithm
 * chosen for it, the algorithm's resumable state and the engine's bookkeeping. Built by
 * src/coll, advanced by the algorithm's progress function, driven by src/core/progress.c.
 */
#ifndef CHORUS_TASK_H
#define CHORUS_TASK_H

#include <stdint.h>

#include "chorus.h"
#include "reduce/codec.h"

/* The operation kinds. The order is part of the wire format (frame header `coll`): new kinds
 * go at the end. */
#define CHORUS_COLL_MAP(XX)              \
  XX(ALLREDUCE, "allreduce")             \
  XX(BROADCAST, "broadcast")             \
  XX(REDUCE, "reduce")                   \
  XX(ALLGATHER, "allgather")             \
  XX(REDUCE_SCATTER, "reduce_scatter")   \
  XX(ALLTOALL, "alltoall")               \
  XX(GATHER, "gather")                   \
  XX(SCATTER, "scatter")                 \
  XX(BARRIER, "barrier")                 \
  XX(SEND, "send")                       \
  XX(RECV, "recv")                       \
  XX(SENDRECV, "sendrecv")               \
  XX(ALLGATHERV, "allgatherv")           \
  XX(REDUCE_SCATTERV, "reduce_scatterv") \
  XX(ALLTOALLV, "alltoallv")             \
  XX(GATHERV, "gatherv")                 \
  XX(SCATTERV, "scatterv")

typedef enum {
#define CHORUS_XX_(name, str) CH_COLL_##name,
  CHORUS_COLL_MAP(CHORUS_XX_)
#undef CHORUS_XX_
  CH_COLL_COUNT
} chorus_coll_t;

const char* chorus__coll_name(chorus_coll_t coll); /* "allreduce"; "?" when out of range */
int chorus__coll_from_name(const char* name);      /* -1 when unknown */

/* Point-to-point calls number their messages per pair of ranks; the others, per communicator. */
static inline int chorus__coll_is_p2p(chorus_coll_t c) {
  return c == CH_COLL_SEND || c == CH_COLL_RECV || c == CH_COLL_SENDRECV;
}

/* Collectives that reduce (take an op) and that have a root. */
static inline int chorus__coll_reduces(chorus_coll_t c) {
  return c == CH_COLL_ALLREDUCE || c == CH_COLL_REDUCE || c == CH_COLL_REDUCE_SCATTER ||
         c == CH_COLL_REDUCE_SCATTERV;
}
static inline int chorus__coll_rooted(chorus_coll_t c) {
  return c == CH_COLL_BROADCAST || c == CH_COLL_REDUCE || c == CH_COLL_GATHER || c == CH_COLL_SCATTER ||
         c == CH_COLL_GATHERV || c == CH_COLL_SCATTERV;
}

/* Variable-size collectives: every rank's block has its own count (and place). */
static inline int chorus__coll_is_v(chorus_coll_t c) {
  return c == CH_COLL_ALLGATHERV || c == CH_COLL_REDUCE_SCATTERV || c == CH_COLL_ALLTOALLV ||
         c == CH_COLL_GATHERV || c == CH_COLL_SCATTERV;
}

/* The arguments of one call, as the user gave them. */
typedef struct {
  chorus_coll_t coll;
  const void* sendbuf;
  void* recvbuf;
  /* allreduce, broadcast, reduce: elements of the whole buffer; allgather, gather: elements
   * each rank sends; reduce_scatter, scatter: elements each rank receives; alltoall: elements
   * per peer block; send, recv: message elements; sendrecv: elements sent. Variable-size
   * calls: as given, the scalar count argument (allgatherv, gatherv: sendcount; scatterv:
   * recvcount; 0 for the others); once checked, the elements of the call as this rank sees it:
   * allgatherv, reduce_scatterv: the sum of recvcounts (the same on every rank); alltoallv:
   * the sum of sendcounts; gatherv: sendcount; scatterv: recvcount. */
  size_t count;
  size_t recvcount; /* sendrecv: elements received */
  chorus_dtype_t dtype;
  chorus_op_t op;
  /* broadcast/reduce/gather/scatter/gatherv/scatterv: root; send, sendrecv: destination; recv:
   * source (or CHORUS_ANY_SOURCE) */
  int root;
  int peer; /* sendrecv: source */
  int tag;  /* send, recv, sendrecv: the message tag (recv: or CHORUS_ANY_TAG) */
  /* Variable-size calls: per-rank counts and displacements, in elements, indexed by rank
   * (allgatherv, gatherv: recvcounts, rdispls; reduce_scatterv: recvcounts, rdispls = their
   * prefix sums, where the input blocks lie; scatterv: sendcounts, sdispls; alltoallv: all
   * four). As the user gave them (displacements may be NULL: blocks back to back) until the
   * call is checked; then the task's own copies, displacements filled in, valid while the task
   * lives (task.vec). Arrays a rank does not use (a non-root's) are NULL. */
  const size_t* sendcounts;
  const size_t* sdispls;
  const size_t* recvcounts;
  const size_t* rdispls;
  /* allgatherv, reduce_scatterv: a hash of recvcounts, which every rank sees whole: their
   * frames carry it, so ranks that disagree on any count fail with ERR_MISMATCH. */
  uint64_t vsig;
  /* A collective fused from a group's calls (coll/group.c): a hash of the group's shape (its
   * calls' kinds and counts), 0 otherwise. Part of the signature, in place of the root of the
   * collectives that have none, so that ranks whose groups differ get ERR_MISMATCH. */
  uint32_t shape;
  /* chorus_allreduce_ex: the call's own compression (zip_given) instead of the communicator's,
   * and its error-feedback residual (NULL: none). */
  int zip_given;
  chorus_compression_opts_t zip;
  struct chorus_residual* residual;
} chorus_coll_args_t;

struct chorus_comm;
struct chorus_algo;
struct chorus_req;

/* One member of a fused group operation (coll/group.c): elements [off, off + count) of the
 * fused vector are this call's own buffers. */
typedef struct {
  const void* send;
  void* recv;
  size_t off, count;
} chorus_seg_t;

/* Words of an operation's signature: sequence number + 1, kind|dtype|op|root, count, algorithm
 * hash, recvcount|variant. */
#define CHORUS_SIG_WORDS 5

/* A same-host task's zero-copy variant (chorus_task_t.variant): none, registered memory, or
 * single-copy reads (process_vm_readv). */
enum { CHORUS_VARIANT_STAGED = 0, CHORUS_VARIANT_ZC = 1, CHORUS_VARIANT_CMA = 2 };

typedef struct chorus_task {
  chorus_coll_args_t args;
  struct chorus_comm* comm;
  const struct chorus_algo* algo;

  int rank;           /* the caller's rank in comm */
  int nranks;         /* comm size */
  const struct chorus_topo_s* topo; /* the communicator's topology (core/topo.h) */
  const struct chorus_cost_ctx_s* cost; /* its cost model (algo.h), for two-level algorithms' choices */
  /* Gradient compression of this call (coll/compress.c; kind NONE for most calls), and whether
   * it applies at every level (else only across hosts). Part of the signature (op byte). */
  chorus_codec_t codec;
  int codec_scope_all;
  float* residual; /* the error-feedback values of args.residual when the call is compressed */
  const char* sub_algo; /* CHORUS_ALGO's inner engine for this call ("rhd" of "hier/rhd"), or NULL */
  size_t dtype_size;  /* bytes per element */
  /* Whether this rank's host has a CPU for each of its ranks (the same on all of them): then a
   * same-host wait may poll a moment before handing back to the engine (otherwise the peer it
   * waits for may need this CPU), and a two-rank allreduce cuts smaller chunks. */
  int cpu_per_rank;
  /* The unit engines cut messages into: CHORUS_BUFF_SIZE (a multiple of 64 bytes), times the
   * sockets per TCP peer when messages to TCP peers are striped (a whole unit per socket), up to
   * 64 MiB (comm.c). */
  size_t chunk_bytes;
  /* CHORUS_BUFF_SIZE itself: what two-level algorithms cut a call into pipeline chunks by (their
   * chunks' time inside a host does not change with the sockets between hosts). */
  size_t pipe_unit_bytes;

  /* Sequence numbers stamped on frames: collectives use the communicator's sequence number for
   * both; point-to-point uses the per-pair counters of the send and receive directions. */
  uint64_t seq;
  uint64_t send_seq;
  uint64_t recv_seq;

  /* Free for the algorithm's resumable state machine. Zero when init is called. */
  int phase;
  size_t step;
  void* state; /* allocated by algo->init, released by algo->fini */
  /* Room for a small state, so that a small call allocates nothing (algorithms may point
   * state here instead of allocating). */
  _Alignas(16) unsigned char state_space[64];
  /* Zero-copy: CHORUS_VARIANT_ZC (registered memory, set by chorus__conn_zc_eligible; zc: send
   * window, send offset, recv window, offset) or CHORUS_VARIANT_CMA (single-copy reads, set by
   * chorus__conn_cma_use; zc: send and receive addresses); part of the signature, so ranks that
   * disagree get ERR_MISMATCH. */
  uint32_t variant;
  uint64_t zc[4];
  /* Its signature as published in the host's control block (computed once, when it starts). */
  uint64_t sig[CHORUS_SIG_WORDS];
  unsigned polls; /* flag polls that found nothing new (mismatch checks are spaced out) */

  /* Point-to-point results, set by the algorithm when it completes: the message received
   * (source, tag, elements), and local_fail when the task failed alone (a truncated message, a
   * dtype mismatch): the engine then ends it without breaking the communicator. */
  int got_src, got_tag;
  size_t got_count;
  int local_fail;

  /* Called by the engine when the task starts (a fused group operation packs its members'
   * inputs then, so they are still in cache when it runs), and when it ends, before its status
   * is published (the fused operation unpacks its result and completes its members'
   * requests). mu held. */
  /* A fused allreduce's members, in order, covering [0, args.count) without gaps (none of
   * zero count); NULL otherwise. Only an algorithm with takes_segments reads them. */
  const chorus_seg_t* segs;
  size_t nsegs;
  /* A fused group operation: the bytes of the caller's buffers that every call of its kind in
   * the group touches, in all the pieces (coll/group.c). An algorithm that writes the members
   * where they are (segs) judges by them whether the outputs stay cached, as they are all
   * written together (0: not fused). */
  size_t group_bytes;
  void (*on_start)(struct chorus_task* t);
  void (*on_done)(struct chorus_task* t, chorus_status_t st);
  void* on_done_arg;

  /* Engine bookkeeping (src/core/progress.c); algorithms do not touch these. */
  chorus_status_t status;    /* INPROGRESS until the task ends */
  struct chorus_task* next;  /* queue link (collectives), list link (point-to-point) */
  struct chorus_task* prev;
  struct chorus_req* req;    /* the request that reports completion */
  uint64_t post_ns;          /* when posted */
  uint64_t start_ns;         /* when the algorithm started */
  uint64_t last_progress_ns; /* last time any of its transfers moved */
  int blocking;              /* posted by a blocking call */
  int spins_long;            /* of at most cost->spin_bytes: its waits poll comm->spin_small_us */
  double predicted_us;       /* the cost model's time for its algorithm (coll/select.c; 0: none) */
  int caller_drives;         /* posted by chorus_group_end, whose caller drives it: the
                                background thread is not woken for it */
  int internal;              /* the library's own call: no CHORUS_ALGO rule, recorder or trace */
  void* vec;                 /* the copies args' count and displacement arrays point into */
  uint64_t rec_index;        /* its entry in the flight recorder */
} chorus_task_t;

/* The header's and signature's op byte: the op, and the codec in the high nibble, so that ranks
 * whose compression settings differ get ERR_MISMATCH. */
static inline uint8_t chorus__task_op_byte(const chorus_task_t* t) {
  return (uint8_t)((unsigned)t->args.op | (unsigned)t->codec.kind << 4);
}

/* The header's and signature's root field: the root, or for a fused collective without one,
 * its group shape. */
static inline int32_t chorus__task_root_word(const chorus_task_t* t) {
  return chorus__coll_rooted(t->args.coll) ? t->args.root : (int32_t)t->args.shape;
}

/* Bytes of the caller's buffers one rank reads and writes over a call: in_bytes from in and
 * out_bytes into out, counted once where they overlap (in place: the span of both, whichever
 * holds the other). Whether they can stay in the caches decides how the memory-semantics
 * collectives store (algo/shm/shm.h). */
static inline size_t chorus__touched_bytes(const void* in, size_t in_bytes, const void* out, size_t out_bytes) {
  uintptr_t i = (uintptr_t)in, o = (uintptr_t)out;
  if (!in) return out_bytes;
  if (!out || i >= o + out_bytes || o >= i + in_bytes) return out_bytes + in_bytes;
  uintptr_t lo = i < o ? i : o, hi = i + in_bytes > o + out_bytes ? i + in_bytes : o + out_bytes;
  return (size_t)(hi - lo);
}

/* Scratch memory of at least `bytes` for an algorithm's state (core/scratch.c), taken in its
 * init or progress and given back by its end: the communicator keeps blocks for its next calls.
 * NULL when out of memory. */
void* chorus__task_scratch(chorus_task_t* t, size_t bytes);
void chorus__task_scratch_free(chorus_task_t* t, void* block);
/* The same from a communicator (mu held): a kept block of at least `bytes` (64-byte aligned),
 * else a new one (NULL when out of memory); given back, it is kept for the next calls (or
 * freed). comm NULL: plain allocation. */
void* chorus__scratch_take(chorus_comm_t* comm, size_t bytes);
void chorus__scratch_give(chorus_comm_t* comm, void* block);

#endif /* CHORUS_TASK_H */
