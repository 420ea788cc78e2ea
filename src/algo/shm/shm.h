/*
 * shm.h - what the memory-semantics algorithms share. They run when every rank of the
 * communicator is on one host and maps the host's segment: each rank owns two slots there
 * (double buffering: chunk ids alternate between them) and publishes per-chunk progress in
 * flags the others poll. No messages, no per-pair copies: a chunk is copied into the owner's
 * slot once, combined in place by whoever owns each slice, and copied out once (or, with
 * zero-copy and single-copy reads, read straight from the owner's buffer).
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
#include "core/cache.h"

enum { SHM_ARRIVED = 0, SHM_REDUCED = 1, SHM_DONE = 2 };

typedef struct {
  uint64_t base;      /* chunk k has id base + k + 1 */
  size_t nchunks;
  size_t chunk_elems; /* elements per chunk (per block for the blocked collectives) */
  size_t k;           /* the chunk in progress */
  int stage;
  int stream_out;     /* copies into the caller's output bypass the cache (see shm_op_setup) */
  int n, me;          /* the ranks of the host taking part (local indexes 0..n-1), and mine */
  size_t slot_off;    /* where the op's data starts in each slot (chorus__shm_op_rotate) */
  chorus_reduce_fn reduce;
} chorus_shm_op_t;

static inline uint64_t chorus__shm_id(const chorus_shm_op_t* s) { return s->base + s->k + 1; }

/* 1 when every other rank's flag f is at least want; 0 otherwise (and *st < 0 on failure). */
static inline int chorus__shm_all_reached(chorus_task_t* t, const chorus_shm_op_t* s, int f, uint64_t want,
                                          chorus_status_t* st) {
  for (int r = 0; r < s->n; r++)
    if (r != s->me && !chorus__conn_shm_reached(t, r, f, want, st)) return 0;
  return 1;
}

/* 1 when local rank r's flag f is at least want (0 and maybe *st < 0 otherwise). */
static inline int chorus__shm_reached(chorus_task_t* t, const chorus_shm_op_t* s, int r, int f, uint64_t want,
                                      chorus_status_t* st) {
  return r == s->me || chorus__conn_shm_reached(t, r, f, want, st);
}

/* Whether what this rank keeps by the current id's parity (a slot, LL lines) may be written: no
 * rank still reads its last use, two ids ago. */
static inline int chorus__shm_parity_free(chorus_task_t* t, const chorus_shm_op_t* s, chorus_status_t* st) {
  uint64_t id = chorus__shm_id(s);
  return id <= 2 || chorus__shm_all_reached(t, s, SHM_DONE, id - 2, st);
}

/* Whether the slot for the current chunk may be written: the parity rule, and no place that a
 * two-rank pipeline's writer left unread (chorus__shm_place_free). From here on the slots
 * serve as two halves. */
static inline int chorus__shm_slot_free(chorus_task_t* t, const chorus_shm_op_t* s, chorus_status_t* st) {
  chorus_shm_slots_use_t* use = chorus__conn_shm_slots_use(t);
  if (use->unread_until) {
    if (!chorus__shm_reached(t, s, use->reader, SHM_DONE, use->unread_until, st)) return 0;
    use->unread_until = 0;
  }
  use->place_bytes = 0;
  return chorus__shm_parity_free(t, s, st);
}

/* The copy-in stage: once no rank reads the current chunk's slot any more, copies `bytes` from
 * src into this rank's slot, publishes ARRIVED and moves to stage 1. 0 while it must wait (and
 * *st < 0 on failure). */
static inline int chorus__shm_stage_in(chorus_task_t* t, chorus_shm_op_t* s, const void* src, size_t bytes,
                                       chorus_status_t* st);

/* Copies of at most this many bytes into a slot ask for all of its lines first (below). */
#define CHORUS_SHM_CLAIM_MAX_BYTES (16u * 1024u)

/* Copies n bytes into this rank's slot or place (never overlapping src). The peers read those
 * lines the last time the slot served, so each is shared with their caches and a copy that
 * walks them in order waits for one upgrade after the other; a small copy asks for them all at
 * once first (chorus__prefetch_range_for_write), so that the misses overlap. 2 ranks, 4 KiB
 * allgathers (2 KiB blocks through the slots), alternating launches: 1.18-1.21 us a call
 * against 0.96-1.01 (2026-12-07). */
static inline void chorus__shm_stage_copy(void* slot, const void* src, size_t n) {
  if (n <= CHORUS_SHM_CLAIM_MAX_BYTES) chorus__prefetch_range_for_write(slot, n);
  memcpy(slot, src, n);
}

/* Slice r of m elements split over n ranks as evenly as possible. */
static inline void chorus__shm_slice(size_t m, int n, int r, size_t* off, size_t* len) {
  size_t base = m / (size_t)n, rem = m % (size_t)n;
  *off = (size_t)r * base + ((size_t)r < rem ? (size_t)r : rem);
  *len = base + ((size_t)r < rem ? 1 : 0);
}

/* Sets up an op of the host's ranks 0..n-1 (this rank is `me`), cutting `elems` elements into
 * chunks of at most chunk_elems, and reserves the chunk ids. Every rank of the host computes the
 * same chunking, so ids agree. touched_bytes: what the call reads and writes of the caller's
 * buffers on this rank (chorus__touched_bytes; 0: no output there), or its whole group's when
 * it is a fused piece. From CHORUS_SHM_STREAM_BYTES on (by default where the ranks' buffers no
 * longer fit the last-level cache together: core/cache.c), copies into the output use streaming
 * stores (reduce/copy.c): it does not stay cached anyway, and a plain store would first read
 * every line it writes; below, memcpy measured faster. */
static inline void chorus__shm_op_setup(chorus_task_t* t, chorus_shm_op_t* s, int n, int me, size_t elems,
                                        size_t chunk_elems, size_t touched_bytes, chorus_reduce_fn reduce) {
  memset(s, 0, sizeof(*s));
  s->chunk_elems = chunk_elems ? chunk_elems : 1;
  s->nchunks = chorus__div_up(elems, s->chunk_elems);
  s->base = chorus__conn_shm_next_ids(t, s->nchunks);
  s->reduce = reduce;
  s->n = n;
  s->me = me;
  size_t stream_from = chorus__conn_shm_stream_bytes(t);
  /* A fused piece that writes its members where they are (t->segs) writes with its whole group; a
   * packed one writes a pack that is read back at once. */
  if (touched_bytes && t->segs && t->group_bytes > touched_bytes) touched_bytes = t->group_bytes;
  s->stream_out = stream_from && touched_bytes >= stream_from;
}

/* Elements per chunk of a call of `bytes` (the same on every rank of the host): one slot's worth,
 * or for a two-rank pipeline (one rank writes each chunk, the other reads it: the two-rank
 * broadcast and reduce) at least CHORUS_SHM_PIPE_CHUNKS chunks of whole cache lines, of at least
 * CHORUS_SHM_PIPE_MIN_BYTES and at most a quarter slot (8 places in the two slots, below). In one
 * chunk the reader starts only once the writer has copied all of it; in several, the two work on
 * successive chunks at once (2 ranks, 1 MiB reduce: 162-182 us against 225-261 in one chunk; a
 * 16 MiB broadcast in place, 1.3-1.4 ms in quarter slots against 1.5-1.6 in whole ones). Where
 * every rank both writes and reads or ranks outnumber cores, chunks this small only add flag
 * waits: 4 ranks on 2 cores, 256 KiB reduce, 280-360 us against 82-92; 2-rank allreduce, 64 KiB,
 * 15 against 9-10 (its chunks of 512 KiB are another matter: allreduce.c, TWO_RANK_CHUNK_BYTES;
 * so are allgather's large blocks, in 256 KiB chunks through the places: allgather.c). */
#define CHORUS_SHM_PIPE_CHUNKS 8u
#define CHORUS_SHM_PIPE_MIN_BYTES (16u * 1024u)

static inline size_t chorus__shm_chunk_elems(const chorus_task_t* t, size_t bytes, int two_rank_pipeline) {
  size_t slot = chorus__conn_shm_slot_bytes(t); /* >= 64 KiB (CHORUS_SHM_SLOT_SIZE's floor) */
  if (!two_rank_pipeline) return slot / t->dtype_size;
  size_t chunk = (chorus__div_up(bytes, CHORUS_SHM_PIPE_CHUNKS) + 63u) & ~(size_t)63u;
  if (chunk < CHORUS_SHM_PIPE_MIN_BYTES) chunk = CHORUS_SHM_PIPE_MIN_BYTES;
  return chorus__min_sz(chunk, slot / 4) / t->dtype_size;
}

/* A two-rank pipeline's writer (and every rank of an allgather of large blocks: allgather.c) uses
 * its two slots as one ring of D = 2 slot / chunk places (the chunk of id i at place
 * (i - 1) mod D), so that it runs up to D chunks ahead of the readers as a point-to-point
 * message runs ahead through the rings: with only the two slots' places, the
 * writer of a 1 MiB broadcast in 8 chunks waited for the reader at every other chunk (100-136
 * us in place, against 74-86 for a message). Places follow the id, not the chunk's index in its
 * op, so that calls back to back write other lines than the reader just read: writing the lines
 * the other core holds costs an invalidation each, and with every call at place 0, 16-64 KiB
 * broadcasts took 1.1-1.3x a message's time (now 0.9-1.07x). Chunk k may be written once every
 * rank has read chunk k - D of the op (the same place) and every chunk of the operations before
 * it (DONE >= base): those may have used the slots as two halves, or as places of another size;
 * where this rank's writes since its last write by halves were all places of this size, the
 * rule of chunk k - D holds across operations too (chorus_shm_slots_use_t), so that a writer
 * of calls back to back need not wait for the reader's end of the call before. A writer
 * returns only once its last chunk is read, so that the operations after it find the places
 * free, or records what is still unread (unread_until), which the next write by halves waits
 * for (the two-rank reduce's other rank: reduce.c). */
static inline size_t chorus__shm_pipe_places(const chorus_task_t* t, const chorus_shm_op_t* s) {
  size_t places = 2 * chorus__conn_shm_slot_bytes(t) / (s->chunk_elems * t->dtype_size);
  return places ? places : 1;
}

/* Where the chunk of id `id` lies in local rank owner's slots. */
static inline char* chorus__shm_place(const chorus_task_t* t, const chorus_shm_op_t* s, int owner, uint64_t id) {
  size_t place = (size_t)((id - 1) % chorus__shm_pipe_places(t, s));
  return chorus__conn_shm_slot(t, owner, 0) + place * s->chunk_elems * t->dtype_size;
}

static inline char* chorus__shm_pipe_place(const chorus_task_t* t, const chorus_shm_op_t* s, int owner) {
  return chorus__shm_place(t, s, owner, chorus__shm_id(s));
}

/* Whether chunk k of op s may be written to its place (the rule above). */
static inline int chorus__shm_place_free(chorus_task_t* t, const chorus_shm_op_t* s, size_t k, chorus_status_t* st) {
  size_t places = chorus__shm_pipe_places(t, s), place_bytes = s->chunk_elems * t->dtype_size;
  uint64_t id = s->base + k + 1;
  chorus_shm_slots_use_t* use = chorus__conn_shm_slots_use(t);
  uint64_t want = s->base;
  if (k >= places || use->place_bytes == place_bytes) want = id > places ? id - places : 0;
  if (want && !chorus__shm_all_reached(t, s, SHM_DONE, want, st)) return 0;
  use->place_bytes = place_bytes;
  return 1;
}

static inline int chorus__shm_pipe_place_free(chorus_task_t* t, const chorus_shm_op_t* s, chorus_status_t* st) {
  return chorus__shm_place_free(t, s, s->k, st);
}

/* Where op s's current chunk lies in local rank owner's slot `which`. */
static inline char* chorus__shm_op_slot(const chorus_task_t* t, const chorus_shm_op_t* s, int owner, int which) {
  return chorus__conn_shm_slot(t, owner, which) + s->slot_off;
}

/* Lines a rank writes that another core has just read cost an invalidation each, so an op of
 * one chunk that fills only `footprint` bytes of each slot puts its data at a place that moves
 * from one use of the slot to the next, through the whole slot (places of footprint bytes,
 * rounded up to CHORUS_SHM_ROTATE_ALIGN), as the rings of point-to-point messages do: by then
 * the readers' copies have left their caches. Every rank derives the place from the op's first
 * id, so they agree; the slot's free test covers the whole slot, so any place is free when it
 * is. The others stay at 0: ops of several chunks (they fill their slots), and those whose
 * footprint is under 16 KiB (fresh lines cost more than the invalidations they save: 2 ranks, 1
 * KiB allreduce, 0.87 -> 2.05 us) or over 128 KiB (their places outgrow the private caches: 256
 * KiB allreduce, 30 -> 35 us), or over half a slot. */
#define CHORUS_SHM_ROTATE_ALIGN 256u
#define CHORUS_SHM_ROTATE_MIN_BYTES (16u * 1024u)
#define CHORUS_SHM_ROTATE_MAX_BYTES (128u * 1024u)
static inline void chorus__shm_op_rotate(const chorus_task_t* t, chorus_shm_op_t* s, size_t footprint) {
  size_t slot = chorus__conn_shm_slot_bytes(t);
  size_t step = (footprint + CHORUS_SHM_ROTATE_ALIGN - 1) & ~(size_t)(CHORUS_SHM_ROTATE_ALIGN - 1);
  s->slot_off = 0;
  if (s->nchunks != 1 || footprint < CHORUS_SHM_ROTATE_MIN_BYTES || footprint > CHORUS_SHM_ROTATE_MAX_BYTES ||
      step > slot / 2)
    return;
  s->slot_off = (size_t)(((s->base + 1) >> 1) % (slot / step)) * step;
}

/* Chunks of a call of `bytes` (what the cost functions count). */
static inline size_t chorus__shm_nchunks(const chorus_task_t* t, size_t bytes, int two_rank_pipeline) {
  return chorus__div_up(bytes, chorus__shm_chunk_elems(t, bytes, two_rank_pipeline) * t->dtype_size);
}

/* The op of a one-host communicator's call (local indexes are ranks), kept in the task;
 * footprint: the bytes it fills of each slot when it takes one chunk (chorus__shm_op_rotate; 0:
 * it uses no slot). */
static inline chorus_status_t chorus__shm_op_init(chorus_task_t* t, size_t elems, size_t chunk_elems,
                                                  size_t touched_bytes, size_t footprint) {
  _Static_assert(sizeof(chorus_shm_op_t) <= sizeof(t->state_space), "shm op state fits in the task");
  chorus_shm_op_t* s = (chorus_shm_op_t*)t->state_space;
  chorus__shm_op_setup(t, s, t->nranks, t->rank, elems, chunk_elems, touched_bytes,
                       chorus__algo_reduce_fn(t->args.dtype, t->args.op));
  chorus__shm_op_rotate(t, s, footprint);
  t->state = s;
  return CHORUS_OK;
}

/* Copies n bytes into the caller's output (never overlapping src). */
static inline void chorus__shm_copy_out(const chorus_shm_op_t* s, void* dst, const void* src, size_t n) {
  if (s->stream_out) chorus__copy_streaming(dst, src, n);
  else memcpy(dst, src, n);
}

static inline void chorus__shm_op_fini(chorus_task_t* t) {
  t->state = NULL; /* it lives in t->state_space */
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

/* The entry into the call of a rank with nothing to stage (a broadcast's reader, a reduce's
 * root), which the ranks that return early wait for: ARRIVED = the op's first id; the waiter's
 * chorus__shm_reached checks the signature this rank published on entry against its own. Once
 * per op: it moves to stage 1. */
static inline void chorus__shm_announce_entry(chorus_task_t* t, chorus_shm_op_t* s) {
  if (s->k != 0 || s->stage != 0) return;
  chorus__conn_shm_publish(t, SHM_ARRIVED, s->base + 1);
  chorus__shm_advance(t, s, 1);
}

static inline int chorus__shm_stage_in(chorus_task_t* t, chorus_shm_op_t* s, const void* src, size_t bytes,
                                       chorus_status_t* st) {
  if (!chorus__shm_slot_free(t, s, st)) return 0;
  uint64_t id = chorus__shm_id(s);
  chorus__shm_stage_copy(chorus__shm_op_slot(t, s, s->me, (int)(id & 1)), src, bytes);
  chorus__conn_shm_publish(t, SHM_ARRIVED, id);
  chorus__shm_advance(t, s, 1);
  return 1;
}

/* The same for a fused group operation: elements [first, first + m) of its members' inputs. */
static inline int chorus__shm_stage_in_segs(chorus_task_t* t, chorus_shm_op_t* s, size_t first, size_t m,
                                            chorus_status_t* st) {
  if (!chorus__shm_slot_free(t, s, st)) return 0;
  uint64_t id = chorus__shm_id(s);
  chorus__segs_gather(t->segs, t->nsegs, t->dtype_size, chorus__shm_op_slot(t, s, t->rank, (int)(id & 1)), first, m);
  chorus__conn_shm_publish(t, SHM_ARRIVED, id);
  chorus__shm_advance(t, s, 1);
  return 1;
}

/* Copies m elements from src into the receive buffer at element `first`: the caller's buffer,
 * or a fused group operation's members (task.segs). */
static inline void chorus__shm_copy_to_output(chorus_task_t* t, const chorus_shm_op_t* s, size_t first,
                                              const char* src, size_t m) {
  size_t es = t->dtype_size;
  if (!t->segs) {
    chorus__shm_copy_out(s, (char*)t->args.recvbuf + first * es, src, m * es);
    return;
  }
  CHORUS_SEG_FOR_EACH(t, first, m, seg, done, from, n)
  chorus__shm_copy_out(s, (char*)t->segs[seg].recv + from * es, src + done * es, n * es);
}

/* dst = a op b (and avg's division over the call's ranks), with plain stores even where the
 * output no longer stays cached (s->stream_out): combining 16 KiB at a time into a buffer in
 * the L1 cache and streaming it out measured slower at every size (2 ranks, alternating,
 * 2026-12-06, CHORUS_SHM_STREAM_BYTES=0 against the default, which streams from 6 MiB here:
 * allreduce 8 MiB 0.79-1.02 ms against 1.24-1.51, 16 MiB 2.6-2.8 against 3.2-3.8, 64 MiB
 * 12.1-13.5 against 17.5-18.8; reduce 8 MiB 0.54-0.83 against 0.82-0.83, 64 MiB 8.4-11.1
 * against 11.3-15.2). */
static inline void chorus__shm_combine_two(chorus_task_t* t, const chorus_shm_op_t* s, char* dst, const char* a,
                                           const char* b, size_t m) {
  s->reduce(dst, a, b, m);
  if (t->args.op == CHORUS_AVG) chorus__reduce_avg_finish(dst, m, t->args.dtype, t->nranks);
}

/* Combines slice `rank` of chunk `which` (m elements) of this rank's input and every other
 * rank's slot into this rank's slot, in rank order starting with its own; avg divides. `mine`
 * is this rank's input chunk: its send buffer when it staged only the others' slices, NULL when
 * its slot holds the whole chunk. One writer per slice: every rank later copies the same bits. */
static inline void chorus__shm_reduce_my_slice(chorus_task_t* t, chorus_shm_op_t* s, int which, const char* mine,
                                               size_t m) {
  size_t off, len, es = t->dtype_size;
  chorus__shm_slice(m, t->nranks, t->rank, &off, &len);
  if (!len) return;
  char* dst = chorus__shm_op_slot(t, s, t->rank, which) + off * es;
  const char* acc = mine ? mine + off * es : dst;
  for (int q = 0; q < t->nranks; q++) {
    if (q == t->rank) continue;
    s->reduce(dst, acc, chorus__shm_op_slot(t, s, q, which) + off * es, len);
    acc = dst;
  }
  if (acc != dst) memcpy(dst, acc, len * es); /* no other rank */
  if (t->args.op == CHORUS_AVG) chorus__reduce_avg_finish(dst, len, t->args.dtype, t->nranks);
}

/* Copies every rank's reduced slice of chunk `which` (m elements starting at element `first`)
 * into the receive buffer. */
static inline void chorus__shm_copy_slices_out(chorus_task_t* t, const chorus_shm_op_t* s, int which, size_t first,
                                               size_t m) {
  size_t es = t->dtype_size;
  for (int q = 0; q < t->nranks; q++) {
    size_t off, len;
    chorus__shm_slice(m, t->nranks, q, &off, &len);
    if (len) chorus__shm_copy_to_output(t, s, first + off, chorus__shm_op_slot(t, s, q, which) + off * es, len);
  }
}

/* Cost: one flag hand-over per stage and chunk, plus the bytes each rank copies at memory speed
 * (CHORUS_COST_COPY_BYTES_PER_US, algo.h). A flag is one cache line where a message over
 * the shared rings is a framed write and a doorbell: the 2-rank 8-byte allreduce takes 0.42 us
 * against a measured message alpha of 1.6 us, so a stage is priced at a quarter of the
 * intra-host alpha (kept above 0.05 us). */
static inline double chorus__shm_cost_us(const chorus_cost_ctx_t* cx, double stages_per_chunk, size_t nchunks,
                                         double bytes_moved) {
  double stage_us = cx->intra.alpha_us / 4.0 > 0.05 ? cx->intra.alpha_us / 4.0 : 0.05;
  if (cx->handover_us > stage_us) stage_us = cx->handover_us; /* ranks that share cores */
  return stages_per_chunk * (double)(nchunks ? nchunks : 1) * stage_us + bytes_moved / CHORUS_COST_COPY_BYTES_PER_US;
}

/* Zero-copy on registered memory (every rank's buffers mapped in every process), or single-copy
 * reads of the peers' buffers (process_vm_readv): one id.
 *   publish buffer locations, ARRIVED = id;  wait for every ARRIVED;  work();  DONE = id;
 *   wait for every DONE, so that no rank returns (and reuses its buffers) while others still
 *   read or write them. */
typedef chorus_status_t (*chorus_shm_zc_work_fn)(chorus_task_t* t, chorus_shm_op_t* s);

/* Bytes a zero-copy kernel handles at a time, so that what it reads is still in cache when it
 * writes the result to its peers. */
#define CHORUS_SHM_ZC_BLOCK_BYTES (64u * 1024u)

#define CHORUS_SHM_WAIT(cond, st)             \
  do {                                        \
    if (!(cond)) return (st) < 0 ? (st) : CHORUS_INPROGRESS; \
  } while (0)

static inline chorus_status_t chorus__shm_zc_progress(chorus_task_t* t, chorus_shm_zc_work_fn work) {
  chorus_shm_op_t* s = t->state;
  uint64_t id = chorus__shm_id(s);
  chorus_status_t st = CHORUS_OK;
  if (s->stage == 0) {
    chorus__conn_zc_publish(t);
    chorus__conn_shm_publish(t, SHM_ARRIVED, id);
    chorus__shm_advance(t, s, 1);
  }
  if (s->stage == 1) {
    CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
    st = work(t, s);
    if (st < 0) return st;
    chorus__conn_shm_publish(t, SHM_DONE, id);
    chorus__shm_advance(t, s, 2);
  }
  CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_DONE, id, &st), st);
  s->k = s->nchunks;
  return CHORUS_OK;
}

/* The work of a blocked collective's single-copy reads (allgather, alltoall): this rank's own
 * block (`own`) into block `me` of the receive buffer (nothing where the two are one), and every
 * other rank q's block, at byte `peer_off` of the buffer q published, into block q; from the
 * next rank on, so that not all read one rank's pages at once. */
static inline chorus_status_t chorus__shm_read_blocks(chorus_task_t* t, chorus_shm_op_t* s, const char* own,
                                                      size_t peer_off) {
  size_t block = t->args.count * t->dtype_size;
  char* out = t->args.recvbuf;
  if (out + (size_t)t->rank * block != own) chorus__shm_copy_out(s, out + (size_t)t->rank * block, own, block);
  for (int i = 1; i < t->nranks; i++) {
    int q = (t->rank + i) % t->nranks;
    chorus_status_t st = chorus__conn_cma_read_send(t, q, peer_off, out + (size_t)q * block, block);
    if (st < 0) return st;
  }
  return CHORUS_OK;
}

/* Reduces slice [off, off + len) elements of every rank's send buffer into dst, in rank order,
 * a cache block at a time; after each block, copies it to each dsts[q] (NULL: skip). */
static inline void chorus__shm_zc_reduce_slice(chorus_task_t* t, chorus_shm_op_t* s, char* const* src,
                                              char* dst, char* const* copies, size_t len) {
  size_t es = t->dtype_size, blk = CHORUS_SHM_ZC_BLOCK_BYTES / es;
  /* In place, dst is one rank's input: combine that one first, before dst is overwritten. One
   * rank writes each slice, so the order only has to be fixed, not the same as elsewhere. */
  int n = t->nranks, order[n], first = 0;
  for (int q = 0; q < n; q++)
    if (src[q] == dst) first = q;
  order[0] = first;
  for (int q = 0, i = 1; q < n; q++)
    if (q != first) order[i++] = q;
  for (size_t b = 0; b < len; b += blk) {
    size_t m = len - b < blk ? len - b : blk, o = b * es;
    s->reduce(dst + o, src[order[0]] + o, src[order[1]] + o, m);
    for (int i = 2; i < n; i++) s->reduce(dst + o, dst + o, src[order[i]] + o, m);
    if (t->args.op == CHORUS_AVG) chorus__reduce_avg_finish(dst + o, m, t->args.dtype, t->nranks);
    for (int q = 0; copies && q < t->nranks; q++)
      if (copies[q] && copies[q] + o != dst + o) memcpy(copies[q] + o, dst + o, m * es);
  }
}

#endif /* CHORUS_ALGO_SHM_H */
