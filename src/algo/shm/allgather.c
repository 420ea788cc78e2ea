/*
 * shm/allgather.c - memory-semantics allgather for ranks that share one host.
 *
 * Per chunk of at most one slot of each rank's block:
 *   1. copy-in:  rank r copies its block-chunk into its slot        ARRIVED = id
 *   2. copy-out: rank r copies every other rank's block-chunk out    DONE = id
 * Bytes per rank per chunk: S written + S read, then (n-1) S read and written. Cost: 2 flag
 * waits per chunk + about (n+1) S / memory bandwidth.
 *
 * On registered memory: every rank copies the others' send buffers straight into its receive
 * buffer (one copy of each block).
 */
#include "algo/algos.h"
#include "algo/shm/shm.h"

static int supported(const chorus_task_t* t) { return chorus__conn_shm_avail(t); }

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t bytes = t->args.count * t->dtype_size;
  return chorus__shm_cost_us(cx, 2, chorus__div_up(bytes, chorus__conn_shm_slot_bytes(t)),
                             (double)((size_t)t->nranks + 1) * (double)bytes);
}

static chorus_status_t init(chorus_task_t* t) {
  size_t block = t->args.count * t->dtype_size;
  size_t out = block * (size_t)t->nranks, touched = chorus__touched_bytes(t->args.sendbuf, block, t->args.recvbuf, out);
  if (chorus__conn_zc_eligible(t, t->args.sendbuf, block, t->args.recvbuf, out))
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  return chorus__shm_op_init(t, t->args.count, chorus__conn_shm_slot_bytes(t) / t->dtype_size, touched, block);
}

static void zero_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t block = t->args.count * t->dtype_size;
  for (int q = 0; q < t->nranks && block; q++) {
    char* dst = (char*)t->args.recvbuf + (size_t)q * block;
    const char* src = q == t->rank ? t->args.sendbuf : chorus__conn_zc_send(t, q);
    if (dst != src) chorus__shm_copy_out(s, dst, src, block); /* else in place */
  }
}

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  size_t es = t->dtype_size, block = t->args.count;
  const char* in = t->args.sendbuf;
  char* out = t->args.recvbuf;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, block);
    if (s->stage == 0) {
      CHORUS_SHM_WAIT(chorus__shm_stage_in(t, s, in + first * es, m * es, &st), st);
      continue;
    }
    CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
    for (int q = 0; q < t->nranks; q++) {
      char* dst = out + ((size_t)q * block + first) * es;
      if (q != t->rank) chorus__shm_copy_out(s, dst, chorus__shm_op_slot(t, s, q, which), m * es);
      else if (dst != in + first * es) chorus__shm_copy_out(s, dst, in + first * es, m * es); /* else in place */
    }
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    chorus__shm_advance(t, s, 0);
  }
  return CHORUS_OK;
}

const chorus_algo_t chorus__algo_shm_allgather = {
    .name = "shm",
    .desc = "same-host memory semantics: every rank stages its block once, every rank copies all blocks out",
    .coll = CH_COLL_ALLGATHER,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
