/*
 * shm/allreduce.c - memory-semantics allreduce for ranks that share one host (see shm.h).
 *
 * Per chunk of at most one slot (S bytes), on every rank r of n:
 *   1. copy-in:  r copies its input chunk into its slot          ARRIVED = id
 *   2. reduce:   r combines slice r (S/n) of every rank's slot
 *                into its own slot, in rank order; avg divides    REDUCED = id
 *   3. copy-out: r copies slice q from rank q's slot, for all q   DONE = id
 * Bytes per rank per chunk: S written + S read (copy-in), S read + S/n written (reduce),
 * S read + S written (copy-out); no rank ever waits for a message. Every slice is combined by
 * exactly one rank, so every rank ends with the same bits.
 * Cost: 3 flag waits per chunk + about 4 S / memory bandwidth. Vectors of at most 32 KiB take
 * one phase instead: every rank reduces all slots itself (1 flag wait, n S read).
 *
 * On registered memory (zero copy): rank r reduces slice r straight from every rank's send
 * buffer and writes the result into every rank's receive buffer: N read and N written per rank,
 * nothing staged.
 */
#include "algo/algos.h"
#include "algo/shm/shm.h"

/* Up to this size every rank reduces the whole vector itself (one phase instead of three). */
#define SMALL_BYTES (32u * 1024u)

static int supported(const chorus_task_t* t) {
  return chorus__conn_shm_avail(t) && chorus__algo_reduce_supported(t);
}

static double cost_us(const chorus_task_t* t, const chorus_link_model_t* link) {
  (void)link;
  size_t bytes = t->args.count * t->dtype_size, slot = chorus__conn_shm_slot_bytes(t);
  return chorus__shm_cost_us(3, chorus__div_up(bytes, slot), 4.0 * (double)bytes);
}

static chorus_status_t init(chorus_task_t* t) {
  size_t bytes = t->args.count * t->dtype_size;
  if (chorus__conn_zc_eligible(t, t->args.sendbuf, bytes, t->args.recvbuf, bytes)) return chorus__shm_op_init(t, 1, 1);
  return chorus__shm_op_init(t, t->args.count, chorus__conn_shm_slot_bytes(t) / t->dtype_size);
}

static void zero_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t off, len, es = t->dtype_size;
  chorus__shm_slice(t->args.count, t->nranks, t->rank, &off, &len);
  if (!len) return;
  char *src[t->nranks], *dst[t->nranks];
  for (int q = 0; q < t->nranks; q++) {
    src[q] = chorus__conn_zc_send(t, q) + off * es;
    dst[q] = chorus__conn_zc_recv(t, q) + off * es;
  }
  chorus__shm_zc_reduce_slice(t, s, src, (char*)t->args.recvbuf + off * es, dst, len);
}

/* Small vectors: one phase. Every rank combines the whole chunk from every slot, in rank order,
 * straight into its receive buffer: the same operations on the same bits everywhere, so the
 * results stay identical, and only one flag wait (ARRIVED) is on the critical path. */
static chorus_status_t progress_small(chorus_task_t* t, chorus_shm_op_t* s) {
  uint64_t id = chorus__shm_id(s);
  int which = (int)(id & 1);
  size_t m = t->args.count, es = t->dtype_size;
  chorus_status_t st = CHORUS_OK;
  if (s->stage == 0) {
    CHORUS_SHM_WAIT(chorus__shm_stage_in(t, s, t->args.sendbuf, m * es, &st), st);
  }
  CHORUS_SHM_WAIT(chorus__shm_all_reached(t, SHM_ARRIVED, id, &st), st);
  char* dst = t->args.recvbuf;
  s->reduce(dst, chorus__conn_shm_slot(t, 0, which), chorus__conn_shm_slot(t, 1, which), m);
  for (int q = 2; q < t->nranks; q++) s->reduce(dst, dst, chorus__conn_shm_slot(t, q, which), m);
  if (t->args.op == CHORUS_AVG) chorus__reduce_avg_finish(dst, m, t->args.dtype, t->nranks);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  s->k = s->nchunks;
  return CHORUS_OK;
}

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  if (s->nchunks == 1 && t->args.count * t->dtype_size <= SMALL_BYTES) return progress_small(t, s);
  size_t es = t->dtype_size;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, t->args.count);
    switch (s->stage) {
      case 0: /* copy-in, once nobody reads this slot's previous chunk */
        CHORUS_SHM_WAIT(chorus__shm_stage_in(t, s, (const char*)t->args.sendbuf + first * es, m * es, &st), st);
        break;
      case 1: /* reduce my slice once every input is there */
        CHORUS_SHM_WAIT(chorus__shm_all_reached(t, SHM_ARRIVED, id, &st), st);
        chorus__shm_reduce_my_slice(t, s, which, m);
        chorus__conn_shm_publish(t, SHM_REDUCED, id);
        chorus__shm_advance(t, s, 2);
        break;
      default: /* copy every reduced slice out */
        CHORUS_SHM_WAIT(chorus__shm_all_reached(t, SHM_REDUCED, id, &st), st);
        chorus__shm_copy_slices_out(t, which, first, m);
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
    .desc = "same-host memory semantics: copy into a shared slot, reduce one slice per rank in place, copy out",
    .coll = CH_COLL_ALLREDUCE,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
