/*
 * shm/reduce_scatter.c - memory-semantics reduce-scatter for ranks that share one host.
 *
 * The send buffer holds n blocks; chunk k covers the same element range of every block, sized
 * so that the n block-chunks fill one slot (S/n elements-worth each). Per chunk:
 *   1. copy-in: rank r copies the block-chunks of the other ranks into
 *               its slot (its own stays in its send buffer)             ARRIVED = id
 *   2. reduce:  rank r combines block r of every rank, in rank order,
 *               straight into its receive buffer; avg divides            DONE = id
 * Bytes per rank per chunk: (n-1) S/n written and read, then S read + S/n written. Cost: 2 flag
 * waits per chunk + the bytes staged and combined, (2n - 1) S/n, at memory speed, counted as the
 * family counts them (shm.h, chorus__shm_cost_us: what is written to a slot and what is read to
 * combine). Priced at 3 S, two ranks' calls of 32 KiB - 64 MiB went to the ring at 1.3-1.45x
 * their time whenever the intra-host probe read above 1700 B/us. In place, a rank from 2 on
 * stages its own block too: its receive buffer is that block, written by the first
 * combination.
 *
 * On registered memory: rank r reduces block r straight from every rank's send buffer into its
 * receive buffer (N read, N/n written per rank).
 */
#include "algo/algos.h"
#include "algo/shm/ll.h"
#include "algo/shm/shm.h"

static size_t chunk_elems(const chorus_task_t* t) {
  return chorus__conn_shm_slot_bytes(t) / ((size_t)t->nranks * t->dtype_size);
}

static int supported(const chorus_task_t* t) {
  return chorus__conn_shm_avail(t) && chorus__algo_reduce_supported(t) && chunk_elems(t) > 0;
}

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t block = t->args.count, chunk = chunk_elems(t);
  return chorus__shm_cost_us(cx, 2, chorus__div_up(block, chunk ? chunk : 1),
                             (2.0 * t->nranks - 1.0) * (double)(block * t->dtype_size));
}

static chorus_status_t init(chorus_task_t* t) {
  size_t block = t->args.count * t->dtype_size;
  size_t touched = chorus__touched_bytes(t->args.sendbuf, block * (size_t)t->nranks, t->args.recvbuf, block);
  if (chorus__conn_zc_eligible(t, t->args.sendbuf, block * (size_t)t->nranks, t->args.recvbuf, block))
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  return chorus__shm_op_init(t, t->args.count, chunk_elems(t), touched, block * (size_t)t->nranks);
}

static chorus_status_t zero_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t block = t->args.count * t->dtype_size;
  if (!block) return CHORUS_OK;
  char* src[t->nranks];
  for (int q = 0; q < t->nranks; q++) src[q] = chorus__conn_zc_send(t, q) + (size_t)t->rank * block;
  chorus__shm_zc_reduce_slice(t, s, src, t->args.recvbuf, NULL, t->args.count);
  return CHORUS_OK;
}

/* Whether this rank combines its own block straight from its send buffer, so that it need not
 * stage it: yes unless the receive buffer overlaps that block (in place) and the block is not
 * among the first two combined, which would overwrite it before it is read. */
static int own_block_unstaged(const chorus_task_t* t) {
  size_t block = t->args.count * t->dtype_size;
  const char* own = (const char*)t->args.sendbuf + (size_t)t->rank * block;
  const char* out = t->args.recvbuf;
  return t->rank < 2 || out + block <= own || own + block <= out;
}

/* Rank q's part of this rank's block in the current chunk: in q's slot at byte `off`, or, for
 * this rank's own unstaged block, at `own` in its send buffer. */
static const char* block_input(const chorus_task_t* t, const chorus_shm_op_t* s, int q, int which, size_t off,
                               const char* own, int unstaged) {
  return q == t->rank && unstaged ? own : chorus__shm_op_slot(t, s, q, which) + off;
}

/* Of the LL buffers' 1 KiB, all blocks together up to 512 B: 2 ranks, alternating 5 rounds
 * (2026-12-06), 512 B 0.87x the slot's time, 1 KiB 1.19x. */
#define REDUCE_SCATTER_LL_MAX_BYTES 512u

/* All blocks together at most REDUCE_SCATTER_LL_MAX_BYTES: through the LL buffers (ll.h); every
 * rank waits for and combines only its block of every rank's LL lines, in rank order. */
static chorus_status_t progress_ll(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t m = t->args.count, block = m * t->dtype_size, all = block * (size_t)t->nranks, mine = (size_t)t->rank * block;
  chorus_status_t st = chorus__ll_exchange(t, s, t->args.sendbuf, all, mine, block);
  if (st != CHORUS_OK) return st;
  chorus__ll_combine(t, s, mine, t->args.recvbuf, m, NULL);
  chorus__ll_done(t, s, all);
  return CHORUS_OK;
}

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  if (s->nchunks == 1 && t->args.count * t->dtype_size * (size_t)t->nranks <= REDUCE_SCATTER_LL_MAX_BYTES && t->nranks >= 2)
    return progress_ll(t, s);
  size_t es = t->dtype_size, block = t->args.count;
  int unstaged = own_block_unstaged(t);
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, block);
    const char* own = (const char*)t->args.sendbuf + ((size_t)t->rank * block + first) * es;
    if (s->stage == 0) {
      CHORUS_SHM_WAIT(chorus__shm_slot_free(t, s, &st), st);
      char* slot = chorus__shm_op_slot(t, s, t->rank, which);
      for (int q = 0; q < t->nranks; q++)
        if (q != t->rank || !unstaged)
          chorus__shm_stage_copy(slot + (size_t)q * m * es,
                                 (const char*)t->args.sendbuf + ((size_t)q * block + first) * es, m * es);
      chorus__conn_shm_publish(t, SHM_ARRIVED, id);
      chorus__shm_advance(t, s, 1);
      continue;
    }
    CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
    char* dst = (char*)t->args.recvbuf + first * es;
    size_t mine = (size_t)t->rank * m * es;
    s->reduce(dst, block_input(t, s, 0, which, mine, own, unstaged), block_input(t, s, 1, which, mine, own, unstaged),
              m);
    for (int q = 2; q < t->nranks; q++) s->reduce(dst, dst, block_input(t, s, q, which, mine, own, unstaged), m);
    if (t->args.op == CHORUS_AVG) chorus__reduce_avg_finish(dst, m, t->args.dtype, t->nranks);
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    chorus__shm_advance(t, s, 0);
  }
  return CHORUS_OK;
}

const chorus_algo_t chorus__algo_shm_reduce_scatter = {
    .name = "shm",
    .desc = "same-host memory semantics: every rank stages the others' blocks once, each rank reduces its own block from all slots and its send buffer",
    .coll = CH_COLL_REDUCE_SCATTER,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
