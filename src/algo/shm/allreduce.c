/*
 * shm/allreduce.c - memory-semantics allreduce for ranks that share one host (see shm.h).
 *
 * Per chunk (S bytes: a slot, or 512 KiB on two ranks with a CPU each), on every rank r of n:
 *   1. copy-in:  r copies the slices the others reduce into its slot  ARRIVED = id
 *   2. reduce:   r combines slice r (S/n) of its own input and every
 *                other rank's slot into its slot, in rank order
 *                starting with its own; avg divides                   REDUCED = id
 *   3. copy-out: r copies slice q from rank q's slot, for all q       DONE = id
 * Bytes per rank per chunk: (n-1) S/n read and written (copy-in), S read + S/n written
 * (reduce), S read + S written (copy-out); no rank ever waits for a message. Every slice is
 * combined by exactly one rank, so every rank ends with the same bits. Cost: 3 flag waits per
 * chunk + about 4 S / memory bandwidth. Two ranks (with a CPU each, or up to 16 MiB), and
 * vectors of at most 32 KiB, take one phase instead: every rank combines all inputs itself (1 flag wait, n S read; see
 * progress_one_phase). Vectors of at most 256 bytes travel in the LL lines (ll.h).
 *
 * On registered memory (zero copy): rank r reduces slice r straight from every rank's send
 * buffer and writes the result into every rank's receive buffer: N read and N written per rank,
 * nothing staged.
 *
 * A fused group operation (task.segs) is read from and written to its members' own buffers:
 * the copy-in gathers them into the slot and the results go straight to them, so the group
 * packs and unpacks nothing (two passes over the data fewer on each side).
 */
#include "algo/algos.h"
#include "algo/shm/ll.h"
#include "algo/shm/shm.h"

/* Up to this size every rank reduces the whole vector itself (one phase instead of three). */
#define SMALL_BYTES (32u * 1024u)

/* Two ranks with a CPU each cut the vector into chunks of at most this many bytes, not whole
 * slots: 2 ranks, alternating, 2026-12-06, the default 1 MiB slots against 512 KiB chunks: 1 MiB
 * allreduce 169-188 -> 78-85 us, 4 MiB 726-866 -> 375-390, 16 and 64 MiB 1.3x faster (256 KiB
 * chunks alike, 128 KiB slower from 4 MiB on). Other collectives, and 4 ranks on 2 CPUs, are as
 * fast or faster with whole slots. */
#define TWO_RANK_CHUNK_BYTES (512u * 1024u)

static size_t chunk_bytes(const chorus_task_t* t) {
  size_t slot = chorus__conn_shm_slot_bytes(t);
  return t->nranks == 2 && t->cpu_per_rank ? chorus__min_sz(slot, TWO_RANK_CHUNK_BYTES) : slot;
}

/* Two ranks with a CPU each take one phase at every size: where each reducing half the vector
 * in three phases would read as many remote bytes, it waits three times per chunk, and the two
 * ranks, held in step, measured slower (2 ranks, alternating, 2026-12-06, plain stores: 32 MiB
 * 6.2-6.4 ms in one phase against 7.1-9.5 in three, 64 MiB 12.1-13.5 against 17.5-20.2, where
 * the flat ring took 12.8-14.5). Two ranks that share a CPU keep the bound measured before
 * (TWO_RANK_SHARED_ONE_PHASE_MAX_BYTES): both reducing the whole vector there is twice the
 * work on the one core. From three ranks on one phase would read (n - 1) S remote bytes
 * against 2 S (n - 1) / n. */
#define TWO_RANK_SHARED_ONE_PHASE_MAX_BYTES (16u * 1024u * 1024u)

static int one_phase(const chorus_task_t* t, size_t nchunks) {
  size_t bytes = t->args.count * t->dtype_size;
  if (t->nranks == 2) return t->cpu_per_rank || bytes <= TWO_RANK_SHARED_ONE_PHASE_MAX_BYTES;
  return nchunks == 1 && bytes <= SMALL_BYTES;
}

static int supported(const chorus_task_t* t) {
  return chorus__conn_shm_avail(t) && chorus__algo_reduce_supported(t);
}

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t bytes = t->args.count * t->dtype_size, nchunks = chorus__div_up(bytes, chunk_bytes(t));
  if (t->nranks == 2 && one_phase(t, nchunks)) return chorus__shm_cost_us(cx, 1, nchunks, 3.0 * (double)bytes);
  return chorus__shm_cost_us(cx, 3, nchunks, 4.0 * (double)bytes);
}

static chorus_status_t init(chorus_task_t* t) {
  size_t bytes = t->args.count * t->dtype_size;
  size_t touched = chorus__touched_bytes(t->args.sendbuf, bytes, t->args.recvbuf, bytes);
  if (!t->segs && chorus__conn_zc_eligible(t, t->args.sendbuf, bytes, t->args.recvbuf, bytes))
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  return chorus__shm_op_init(t, t->args.count, chunk_bytes(t) / t->dtype_size, touched, bytes);
}

static chorus_status_t zero_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t off, len, es = t->dtype_size;
  chorus__shm_slice(t->args.count, t->nranks, t->rank, &off, &len);
  if (!len) return CHORUS_OK;
  char *src[t->nranks], *dst[t->nranks];
  for (int q = 0; q < t->nranks; q++) {
    src[q] = chorus__conn_zc_send(t, q) + off * es;
    dst[q] = chorus__conn_zc_recv(t, q) + off * es;
  }
  chorus__shm_zc_reduce_slice(t, s, src, (char*)t->args.recvbuf + off * es, dst, len);
  return CHORUS_OK;
}

/* One phase, chunk by chunk: every rank copies its chunk into its slot, then combines the
 * whole chunk from every rank's input, in rank order, straight into its receive buffer (ranks 0
 * and 1 read their own input from the send buffer: the same bits as their slot). The same operations
 * on the same bits everywhere, so the results stay identical, and one flag wait per chunk.
 * Taken for small vectors (any number of ranks) and on two ranks (one_phase), where it reads
 * as many remote bytes as the three phases (S per chunk) and waits once per chunk instead of
 * three times (one_phase). */
/* dst = the combination of m elements of every input: in0, in1, then the slots of ranks 2.. at
 * element `at` of chunk `which`. */
static void combine_all(chorus_task_t* t, chorus_shm_op_t* s, char* dst, const char* in0, const char* in1, int which,
                        size_t at, size_t m) {
  if (t->nranks == 2) {
    chorus__shm_combine_two(t, s, dst, in0, in1, m);
    return;
  }
  s->reduce(dst, in0, in1, m);
  for (int q = 2; q < t->nranks; q++) s->reduce(dst, dst, chorus__shm_op_slot(t, s, q, which) + at * t->dtype_size, m);
  if (t->args.op == CHORUS_AVG) chorus__reduce_avg_finish(dst, m, t->args.dtype, t->nranks);
}

static chorus_status_t progress_one_phase(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t es = t->dtype_size;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, t->args.count);
    /* A fused group's inputs are read from the slots only (its members are not contiguous). */
    const char* mine = t->segs ? NULL : (const char*)t->args.sendbuf + first * es;
    if (s->stage == 0) {
      if (t->segs) CHORUS_SHM_WAIT(chorus__shm_stage_in_segs(t, s, first, m, &st), st);
      else CHORUS_SHM_WAIT(chorus__shm_stage_in(t, s, mine, m * es, &st), st);
    }
    CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
    const char* in0 = t->rank == 0 && mine ? mine : chorus__shm_op_slot(t, s, 0, which);
    const char* in1 = t->rank == 1 && mine ? mine : chorus__shm_op_slot(t, s, 1, which);
    /* In place, dst is `mine`: element-wise kernels may read and write it in one call, but a
     * later call could not read it any more, so from rank 2 on every input comes from a slot. */
    if (!t->segs) {
      combine_all(t, s, (char*)t->args.recvbuf + first * es, in0, in1, which, 0, m);
    } else {
      CHORUS_SEG_FOR_EACH(t, first, m, seg, done, from, n)
      combine_all(t, s, (char*)t->segs[seg].recv + from * es, in0 + done * es, in1 + done * es, which, done, n);
    }
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    chorus__shm_advance(t, s, 0);
  }
  return CHORUS_OK;
}

/* ---- LL: vectors of at most ALLREDUCE_LL_MAX_BYTES (ll.h) ---- */

/* Of the LL buffers' 1 KiB, up to 512 B: 2 ranks, alternating 5 rounds (2026-12-06), 512 B
 * level with the slot (0.86 against 0.89 us), 1 KiB 1.36x its time. */
#define ALLREDUCE_LL_MAX_BYTES 512u

/* Every rank combines all inputs in rank order, as progress_one_phase does. */
static chorus_status_t progress_ll(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t m = t->args.count, bytes = m * t->dtype_size;
  chorus_status_t st = chorus__ll_exchange(t, s, t->args.sendbuf, bytes, 0, bytes);
  if (st != CHORUS_OK) return st;
  chorus__ll_combine(t, s, 0, t->args.recvbuf, m, NULL);
  chorus__ll_done(t, s, bytes);
  return CHORUS_OK;
}

/* ---- three phases ---- */

/* The copy-in: the slices the other ranks reduce, not this rank's own, which it reads from its
 * send buffer when it reduces (as a ring sends only what the next rank needs: (n - 1) S / n
 * copied instead of S). A fused group stages everything (its inputs are not one vector). */
static int stage_in_others(chorus_task_t* t, chorus_shm_op_t* s, const char* src, size_t m, chorus_status_t* st) {
  if (!chorus__shm_slot_free(t, s, st)) return 0;
  uint64_t id = chorus__shm_id(s);
  char* slot = chorus__shm_op_slot(t, s, s->me, (int)(id & 1));
  size_t off, len, es = t->dtype_size;
  chorus__shm_slice(m, t->nranks, t->rank, &off, &len);
  if (off) chorus__shm_stage_copy(slot, src, off * es);
  if (off + len < m) chorus__shm_stage_copy(slot + (off + len) * es, src + (off + len) * es, (m - off - len) * es);
  chorus__conn_shm_publish(t, SHM_ARRIVED, id);
  chorus__shm_advance(t, s, 1);
  return 1;
}

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  if (s->nchunks == 1 && t->args.count * t->dtype_size <= ALLREDUCE_LL_MAX_BYTES && t->nranks >= 2 && !t->segs)
    return progress_ll(t, s);
  if (one_phase(t, s->nchunks))
    return progress_one_phase(t, s);
  size_t es = t->dtype_size;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, t->args.count);
    switch (s->stage) {
      case 0: /* copy-in, once nobody reads this slot's previous chunk */
        if (t->segs) CHORUS_SHM_WAIT(chorus__shm_stage_in_segs(t, s, first, m, &st), st);
        else CHORUS_SHM_WAIT(stage_in_others(t, s, (const char*)t->args.sendbuf + first * es, m, &st), st);
        break;
      case 1: /* reduce my slice once every input is there */
        CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
        chorus__shm_reduce_my_slice(t, s, which, t->segs ? NULL : (const char*)t->args.sendbuf + first * es, m);
        chorus__conn_shm_publish(t, SHM_REDUCED, id);
        chorus__shm_advance(t, s, 2);
        break;
      default: /* copy every reduced slice out */
        CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_REDUCED, id, &st), st);
        chorus__shm_copy_slices_out(t, s, which, first, m);
        chorus__conn_shm_publish(t, SHM_DONE, id);
        s->k++;
        chorus__shm_advance(t, s, 0);
        break;
    }
  }
  return CHORUS_OK;
}

const chorus_algo_t chorus__algo_shm_allreduce = {
    .name = "shm",
    .desc = "same-host memory semantics: copy the slices the others reduce into a shared slot, reduce one slice per rank (its own from the send buffer), copy out (2 ranks, in chunks of 512 KiB when each has a CPU, or up to 32 KiB: every rank reduces all slots, one phase; 2 ranks sharing a CPU above 16 MiB: three phases)",
    .coll = CH_COLL_ALLREDUCE,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
    .takes_segments = 1,
};
