/*
 * shm/reduce.c - memory-semantics reduce for ranks that share one host: the allreduce
 * schedule (shm/allreduce.c) without the copy-out on ranks other than the root.
 *   1. copy-in: every rank stages its chunk             ARRIVED = id
 *   2. reduce:  rank r combines slice r in its slot     REDUCED = id (non-roots: DONE = id)
 *   3. root:    copies every reduced slice out          DONE = id
 * Cost: 3 flag waits per chunk + about 3 S / memory bandwidth.
 * Two ranks take one phase instead (progress_two): the other rank stages its chunk and the root
 * combines both inputs straight into its receive buffer, one flag wait per chunk; the root
 * makes one pass over the data where the three phases make it copy in, combine half and copy
 * out (2 ranks, 16 MiB: 1.35x a point-to-point chain's time with three phases).
 *
 * On registered memory: rank r reduces slice r from every send buffer straight into the root's
 * receive buffer.
 */
#include "algo/algos.h"
#include "algo/shm/shm.h"

static int supported(const chorus_task_t* t) {
  return chorus__conn_shm_avail(t) && chorus__algo_reduce_supported(t);
}

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t bytes = t->args.count * t->dtype_size;
  if (t->nranks == 2) return chorus__shm_cost_us(cx, 1, chorus__shm_nchunks(t, bytes, 1), 2.0 * (double)bytes);
  return chorus__shm_cost_us(cx, 3, chorus__shm_nchunks(t, bytes, 0), 3.0 * (double)bytes);
}

static chorus_status_t init(chorus_task_t* t) {
  size_t bytes = t->args.count * t->dtype_size;
  int root = t->rank == t->args.root;
  size_t touched = root ? chorus__touched_bytes(t->args.sendbuf, bytes, t->args.recvbuf, bytes) : 0;
  if (chorus__conn_zc_eligible(t, t->args.sendbuf, bytes, root ? t->args.recvbuf : NULL, root ? bytes : 0))
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  return chorus__shm_op_init(t, t->args.count, chorus__shm_chunk_elems(t, bytes, t->nranks == 2), touched, bytes);
}

static chorus_status_t zero_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t off, len, es = t->dtype_size;
  chorus__shm_slice(t->args.count, t->nranks, t->rank, &off, &len);
  if (!len) return CHORUS_OK;
  char* src[t->nranks];
  for (int q = 0; q < t->nranks; q++) src[q] = chorus__conn_zc_send(t, q) + off * es;
  chorus__shm_zc_reduce_slice(t, s, src, chorus__conn_zc_recv(t, t->args.root) + off * es, NULL, len);
  return CHORUS_OK;
}

/* Two ranks: the other rank stages each chunk in the places of its slots (shm.h's two-rank
 * pipeline; ARRIVED = id, and DONE = id as it reads nothing); the root combines rank 0's input
 * and rank 1's, in that order, into its receive buffer and publishes DONE = id, which frees
 * the chunk's place. */
static chorus_status_t progress_two(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t es = t->dtype_size;
  int root = t->rank == t->args.root, peer = 1 - t->rank;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, t->args.count);
    const char* mine = (const char*)t->args.sendbuf + first * es;
    if (!root) {
      CHORUS_SHM_WAIT(chorus__shm_pipe_place_free(t, s, &st), st);
      chorus__shm_stage_copy(chorus__shm_pipe_place(t, s, t->rank), mine, m * es);
      chorus__conn_shm_publish(t, SHM_ARRIVED, id);
    } else {
      CHORUS_SHM_WAIT(chorus__shm_reached(t, s, peer, SHM_ARRIVED, id, &st), st);
      const char* theirs = chorus__shm_pipe_place(t, s, peer);
      chorus__shm_combine_two(t, s, (char*)t->args.recvbuf + first * es, t->rank == 0 ? mine : theirs,
                              t->rank == 0 ? theirs : mine, m);
    }
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    chorus__shm_advance(t, s, 0);
  }
  /* The other rank returns once the root has combined its last chunk: one flag wait, during
   * which the signature check catches a rank that runs another call (two ranks that both take
   * the other for the root would otherwise both return at once, nothing reduced). */
  if (!root && s->nchunks) CHORUS_SHM_WAIT(chorus__shm_reached(t, s, peer, SHM_DONE, s->base + s->nchunks, &st), st);
  return CHORUS_OK;
}

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  if (t->nranks == 2) return progress_two(t, s);
  size_t es = t->dtype_size;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, t->args.count);
    switch (s->stage) {
      case 0:
        CHORUS_SHM_WAIT(chorus__shm_stage_in(t, s, (const char*)t->args.sendbuf + first * es, m * es, &st), st);
        break;
      case 1:
        CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
        chorus__shm_reduce_my_slice(t, s, which, NULL, m);
        chorus__conn_shm_publish(t, SHM_REDUCED, id);
        if (t->rank == t->args.root) {
          chorus__shm_advance(t, s, 2);
          break;
        }
        chorus__conn_shm_publish(t, SHM_DONE, id);
        s->k++;
        chorus__shm_advance(t, s, 0);
        break;
      default:
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

const chorus_algo_t chorus__algo_shm_reduce = {
    .name = "shm",
    .desc = "same-host memory semantics: stage once, reduce one slice per rank in place, the root copies out",
    .coll = CH_COLL_REDUCE,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
