/*
 * shm/allgather.c - memory-semantics allgather for ranks that share one host.
 *
 * Per chunk of each rank's block (the whole block up to WHOLE_MAX_BYTES, else CHUNK_BYTES):
 *   1. copy-in:  rank r copies its block-chunk into its slots       ARRIVED = id
 *   2. copy-out: rank r copies every other rank's block-chunk out    DONE = id
 * Bytes per rank per chunk: S written + S read, then (n-1) S read and written. Cost: 2 flag
 * waits per chunk + about (n+1) S / memory bandwidth. A block of one chunk takes slot (id & 1);
 * blocks of several run their copies-in ahead through the places of both slots (shm.h).
 *
 * On registered memory: every rank copies the others' send buffers straight into its receive
 * buffer (one copy of each block). The same with single-copy reads (process_vm_readv) of blocks
 * of 8 KiB and more, where the host's kernel copy was measured fast enough at creation
 * (transport/shm_setup.c): n S bytes instead of (n + 1) S.
 */
#include "algo/algos.h"
#include "algo/shm/ll.h"
#include "algo/shm/shm.h"

/* Blocks of more than WHOLE_MAX_BYTES (or half a slot) go in chunks of a quarter of the default
 * slot: a rank copies a chunk out of a peer's slot while it is still in the peer's or the shared
 * cache, and the slots' places let it stage the next ones meanwhile. In whole 1 MiB slots a chunk was written out to
 * memory before it was read back: 2 ranks, alternating (2026-12-06 16:30), 1 MiB blocks 190-250
 * us against 91-120 in 256 KiB chunks through two places (the point-to-point ring: 90-103), and
 * 86-93 through eight; 4 MiB blocks 913-1016 against 473-500 and 368-465; 128 and 64 KiB chunks
 * were no faster. Smaller blocks stay whole: 4 ranks, 512 KiB blocks, 182-209 us in one chunk,
 * 204-227 in two. Larger slots (CHORUS_SHM_SLOT_SIZE) do not make larger whole blocks: a whole
 * block of 1 MiB was the slow case above. */
#define CHUNK_BYTES (256u * 1024u)
#define WHOLE_MAX_BYTES (2u * CHUNK_BYTES)

/* Blocks of SINGLE_COPY_MIN_BLOCK and more are read straight from the others' send buffers where
 * the kernel's copy is fast enough (chorus__conn_cma_avail). 2 ranks, out of place, medians of 5
 * alternating launches, read against staged: on 2026-12-06 evening (the kernel's copy of 1 MiB
 * at 1.8x memcpy's time) 8 KiB blocks 1.83 against 2.39 us, 32 KiB 4.4 against 8.2, 128 KiB
 * 10.8 against 18.6, 256 KiB 21.7 against 39.2, 512 KiB 71 against 89 (whole), 1 MiB 188
 * against 219 (in chunks), 16 MiB 3.1 against 4.1 ms; 4 KiB blocks level. That afternoon (the kernel's
 * copies at 2-6 GB/s, memcpy at 14-37) they lost at every size: 8 KiB blocks 4.7-5.5 against
 * 1.9-2.0 us, 512 KiB 43-51 against 39-45, 1 MiB 124-132 against 86-93; so did they on
 * 2026-11-30. On 2026-12-05 they won from 8 KiB blocks as this evening. */
#define SINGLE_COPY_MIN_BLOCK (8u * 1024u)

static int single_copy_pays(const chorus_task_t* t, size_t block) {
  return block >= SINGLE_COPY_MIN_BLOCK && chorus__conn_cma_avail(t);
}

static size_t chunk_elems(const chorus_task_t* t) {
  size_t slot = chorus__conn_shm_slot_bytes(t);
  if (t->args.count * t->dtype_size <= chorus__min_sz(slot / 2, WHOLE_MAX_BYTES)) return slot / t->dtype_size;
  return chorus__min_sz(CHUNK_BYTES, slot) / t->dtype_size;
}

static int supported(const chorus_task_t* t) { return chorus__conn_shm_avail(t); }

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t bytes = t->args.count * t->dtype_size;
  if (single_copy_pays(t, bytes)) return chorus__shm_cost_us(cx, 2, 1, (double)t->nranks * (double)bytes);
  return chorus__shm_cost_us(cx, 2, chorus__div_up(t->args.count, chunk_elems(t)),
                             (double)((size_t)t->nranks + 1) * (double)bytes);
}

/* The staged copies into the output use plain stores (no touched bytes given), unlike those of
 * the other collectives beyond CHORUS_SHM_STREAM_BYTES (shm.h), so that the output stays cached
 * for the caller where it fits: the chunks come from the cache, and streaming stores bought
 * nothing. With the two slots alone they were slower from 4 MiB on (2 ranks, 8 MiB: 710-770 us
 * against 450-530; 4 ranks, 4 MiB: 0.70-0.84 ms against 0.51-0.77); through the places (below),
 * level within the noise from 2 to 64 MiB on 2 and 4 ranks (2026-12-06, alternating). */
static chorus_status_t init(chorus_task_t* t) {
  size_t block = t->args.count * t->dtype_size;
  size_t out = block * (size_t)t->nranks, touched = chorus__touched_bytes(t->args.sendbuf, block, t->args.recvbuf, out);
  if (chorus__conn_zc_eligible(t, t->args.sendbuf, block, t->args.recvbuf, out))
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  if (single_copy_pays(t, block)) {
    chorus__conn_cma_use(t, t->args.sendbuf, t->args.recvbuf);
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  }
  return chorus__shm_op_init(t, t->args.count, chunk_elems(t), 0, block);
}

static chorus_status_t zero_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t block = t->args.count * t->dtype_size;
  for (int q = 0; q < t->nranks && block; q++) {
    char* dst = (char*)t->args.recvbuf + (size_t)q * block;
    const char* src = q == t->rank ? t->args.sendbuf : chorus__conn_zc_send(t, q);
    if (dst != src) chorus__shm_copy_out(s, dst, src, block); /* else in place */
  }
  return CHORUS_OK;
}

/* Every peer's send buffer is its block. */
static chorus_status_t single_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  return chorus__shm_read_blocks(t, s, t->args.sendbuf, 0);
}

/* Blocks of up to all of the LL buffers' 1 KiB: through them (ll.h). 2 ranks, alternating 5
 * rounds (2026-12-06), against the slots that took 512 B and 1 KiB blocks before: 0.79-0.81x
 * their time. */
static chorus_status_t progress_ll(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t block = t->args.count * t->dtype_size;
  chorus_status_t st = chorus__ll_exchange(t, s, t->args.sendbuf, block, 0, block);
  if (st != CHORUS_OK) return st;
  unsigned char* out = t->args.recvbuf;
  for (int q = 0; q < t->nranks; q++) {
    unsigned char* dst = out + (size_t)q * block;
    if (q != t->rank) chorus__ll_read(t, q, chorus__shm_id(s), 0, block, dst);
    else if (dst != (const unsigned char*)t->args.sendbuf) memcpy(dst, t->args.sendbuf, block); /* else in place */
  }
  chorus__ll_done(t, s, block);
  return CHORUS_OK;
}

/* Copies chunk `id` (m elements from element `first` of every block) into the output: the
 * others' from their places (in_places) or their slot of the id's parity, this rank's from its
 * send buffer (nothing in place, where the two are one). */
static void copy_chunk_out(chorus_task_t* t, const chorus_shm_op_t* s, uint64_t id, size_t first, size_t m,
                           int in_places) {
  size_t es = t->dtype_size;
  const char* mine = (const char*)t->args.sendbuf + first * es;
  for (int q = 0; q < t->nranks; q++) {
    char* dst = (char*)t->args.recvbuf + ((size_t)q * t->args.count + first) * es;
    const char* src = q == t->rank ? mine
                      : in_places  ? chorus__shm_place(t, s, q, id)
                                   : chorus__shm_op_slot(t, s, q, (int)(id & 1));
    if (dst != src) chorus__shm_copy_out(s, dst, src, m * es);
  }
}

/* Stages this rank's chunks ahead of the one it copies out (s->k), into free places
 * (chorus__shm_place_free), as far as there are places: s->stage counts the chunks staged past
 * s->k. */
static void stage_ahead(chorus_task_t* t, chorus_shm_op_t* s, chorus_status_t* st) {
  size_t places = chorus__shm_pipe_places(t, s), es = t->dtype_size;
  while (s->k + (size_t)s->stage < s->nchunks && (size_t)s->stage < places) {
    size_t j = s->k + (size_t)s->stage, first = j * s->chunk_elems;
    uint64_t id = s->base + j + 1;
    if (!chorus__shm_place_free(t, s, j, st)) return;
    size_t m = chorus__min_sz(t->args.count - first, s->chunk_elems);
    chorus__shm_stage_copy(chorus__shm_place(t, s, s->me, id), (const char*)t->args.sendbuf + first * es, m * es);
    chorus__conn_shm_publish(t, SHM_ARRIVED, id);
    s->stage++;
    t->phase++;
  }
}

/* Blocks of several chunks. Staging runs up to D chunks ahead of the copies out, through the D
 * places of the two slots, so that a rank that is ahead does not wait for the others at every
 * chunk. Only ranks all past the last chunk return: the next op may write any of the places. */
static chorus_status_t progress_chunks(chorus_task_t* t, chorus_shm_op_t* s) {
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    stage_ahead(t, s, &st);
    if (st < 0) return st;
    CHORUS_SHM_WAIT(s->stage > 0, st);
    uint64_t id = chorus__shm_id(s);
    CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
    copy_chunk_out(t, s, id, s->k * s->chunk_elems, chorus__shm_chunk_len(s, t->args.count), 1);
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    s->stage--;
    t->phase++;
  }
  CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_DONE, s->base + s->nchunks, &st), st);
  return CHORUS_OK;
}

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant == CHORUS_VARIANT_CMA) return chorus__shm_zc_progress(t, single_copy);
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  size_t es = t->dtype_size, block = t->args.count;
  if (s->nchunks == 0) return CHORUS_OK; /* no elements: no id of its own to publish */
  if (s->nchunks == 1 && block * es <= CHORUS_SHM_LL_MAX_BYTES && t->nranks >= 2) return progress_ll(t, s);
  if (s->nchunks > 1) return progress_chunks(t, s);
  chorus_status_t st = CHORUS_OK;
  if (s->stage == 0) CHORUS_SHM_WAIT(chorus__shm_stage_in(t, s, t->args.sendbuf, block * es, &st), st);
  uint64_t id = chorus__shm_id(s);
  CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
  copy_chunk_out(t, s, id, 0, block, 0);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  s->k++;
  return CHORUS_OK;
}

const chorus_algo_t chorus__algo_shm_allgather = {
    .name = "shm",
    .desc = "same-host memory semantics: every rank stages its block once, every rank copies all blocks out (blocks "
            "of more than 512 KiB, or half a slot, in 256 KiB chunks staged ahead through the places of both "
            "slots; registered memory, and blocks of 8 KiB and more where the kernel's copy is fast: straight "
            "from the others' buffers)",
    .coll = CH_COLL_ALLGATHER,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
