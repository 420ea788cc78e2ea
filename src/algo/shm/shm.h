/*
 * shm.h - what the memory-semantics algorithms share. They run when every rank of the
 * communicator is on one host and maps the host's segment: each rank owns two slots there
 * (double buffering: chunk ids alternate between them) and publishes per-chunk progress in
 * flags the others poll. No messages, no per-pair copies: a chunk is copied into the owner's
 * slot once, combined in place by whoever owns each slice, and copied out once.
 *
 * Flag protocol, for chunk id i in slot (i & 1), on every rank and in every collective:
 *   ARRIVED = i  this rank's input for chunk i is in its slot;
 *   REDUCED = i  this rank's slice of chunk i is combined (reductions only);
 *   DONE    = i  this rank read everything it needed of chunk i.
 * Before writing a slot for chunk i a rank waits for DONE >= i - 2 on every rank, so nobody still
 * reads the chunk that last used the slot. Ids grow across operations, so the rule also holds
 * between one collective and the next.
 */
#ifndef CHORUS_ALGO_SHM_H
#define CHORUS_ALGO_SHM_H

#include <stdlib.h>

#include "algo/common.h"

enum { SHM_ARRIVED = 0, SHM_REDUCED = 1, SHM_DONE = 2 };

typedef struct {
  uint64_t base;      /* chunk k has id base + k + 1 */
  size_t nchunks;
  size_t chunk_elems; /* elements per chunk (per block for the blocked collectives) */
  size_t k;           /* the chunk in progress */
  int stage;
  chorus_reduce_fn reduce;
} chorus_shm_op_t;

static inline uint64_t chorus__shm_id(const chorus_shm_op_t* s) { return s->base + s->k + 1; }

/* 1 when every other rank's flag f is at least want; 0 otherwise (and *st < 0 on failure). */
static inline int chorus__shm_all_reached(chorus_task_t* t, int f, uint64_t want, chorus_status_t* st) {
  for (int r = 0; r < t->nranks; r++)
    if (r != t->rank && !chorus__conn_shm_reached(t, r, f, want, st)) return 0;
  return 1;
}

/* 1 when one rank's flag f is at least want (0 and maybe *st < 0 otherwise). */
static inline int chorus__shm_reached(chorus_task_t* t, int r, int f, uint64_t want, chorus_status_t* st) {
  return r == t->rank || chorus__conn_shm_reached(t, r, f, want, st);
}

/* Whether the slot for the current chunk may be written: no rank still reads its last use. */
static inline int chorus__shm_slot_free(chorus_task_t* t, const chorus_shm_op_t* s, chorus_status_t* st) {
  uint64_t id = chorus__shm_id(s);
  return id <= 2 || chorus__shm_all_reached(t, SHM_DONE, id - 2, st);
}

/* Slice r of m elements split over n ranks as evenly as possible. */
static inline void chorus__shm_slice(size_t m, int n, int r, size_t* off, size_t* len) {
  size_t base = m / (size_t)n, rem = m % (size_t)n;
  *off = (size_t)r * base + ((size_t)r < rem ? (size_t)r : rem);
  *len = base + ((size_t)r < rem ? 1 : 0);
}

/* Allocates the op state, cutting `elems` elements into chunks of at most chunk_elems, and
 * reserves the chunk ids. Every rank computes the same chunking, so ids agree. */
static inline chorus_status_t chorus__shm_op_init(chorus_task_t* t, size_t elems, size_t chunk_elems) {
  chorus_shm_op_t* s = calloc(1, sizeof(*s));
  if (!s) return CHORUS_ERR_NO_MEMORY;
  s->chunk_elems = chunk_elems ? chunk_elems : 1;
  s->nchunks = chorus__div_up(elems, s->chunk_elems);
  s->base = chorus__conn_shm_next_ids(t, s->nchunks);
  s->reduce = chorus__algo_reduce_fn(t->args.dtype, t->args.op);
  t->state = s;
  return CHORUS_OK;
}

static inline void chorus__shm_op_fini(chorus_task_t* t) {
  free(t->state);
  t->state = NULL;
}

/* Elements of chunk k (the last one may be short). */
static inline size_t chorus__shm_chunk_len(const chorus_shm_op_t* s, size_t elems) {
  size_t first = s->k * s->chunk_elems;
  return elems - first < s->chunk_elems ? elems - first : s->chunk_elems;
}

/* Moves to the next stage (the engine counts a phase change as activity for the timeout). */
static inline void chorus__shm_advance(chorus_task_t* t, chorus_shm_op_t* s, int stage) {
  s->stage = stage;
  t->phase++;
}

/* Cost: one flag round trip (~1 us through shared cache lines) per stage and chunk, plus the
 * bytes each rank copies at memory speed (~10 GB/s = 10000 bytes/us on these machines). */
static inline double chorus__shm_cost_us(double stages_per_chunk, size_t nchunks, double bytes_moved) {
  return stages_per_chunk * (double)(nchunks ? nchunks : 1) * 1.0 + bytes_moved / 10000.0;
}

#define CHORUS_SHM_WAIT(cond, st)             \
  do {                                        \
    if (!(cond)) return (st) < 0 ? (st) : CHORUS_INPROGRESS; \
  } while (0)

#endif /* CHORUS_ALGO_SHM_H */
