/*
 * shm/alltoall.c - memory-semantics alltoall for ranks that share one host.
 *
 * Per chunk of at most a slot's n-th of every block (elements [first, first + m) of each):
 *   1. copy-in:  rank r copies piece q of its send buffer into place q of its slot   ARRIVED = id
 *   2. copy-out: rank r copies place r of every other rank's slot into its block q   DONE = id
 * Bytes per rank: n B written into the slot, n B read and written out (B = block bytes). Cost:
 * 2 flag waits per chunk + about 2 n B / memory bandwidth. In place it works as is: a rank
 * stages every piece of a chunk before it overwrites any of them.
 *
 * Only calls of up to STAGED_MAX_BYTES; above, the pairwise exchange. Single-copy reads
 * (process_vm_readv) of blocks of 512 KiB-32 MiB, which this file had until 2026-12-06, were
 * level with the pairwise exchange at 1-2 MiB blocks and 1.2-1.4x slower from 4 MiB blocks (2
 * ranks, 15 rounds, 16:58): the kernel's copy ran at 2-6 GB/s on the test machines, memcpy at
 * 14-37.
 */
#include <string.h>

#include "algo/algos.h"
#include "algo/shm/ll.h"
#include "algo/shm/shm.h"

/* Elements of each block a chunk takes: an n-th of the slot each. */
static size_t chunk_elems(const chorus_task_t* t) {
  size_t per_block = chorus__conn_shm_slot_bytes(t) / (size_t)t->nranks / t->dtype_size;
  return per_block ? per_block : 1;
}

/* Staged, only calls of up to STAGED_MAX_BYTES (all blocks): with 4 ranks on 2 cores the
 * pairwise exchange took 0.9x its time at 256 KiB and 1 MiB, 0.8x at 2 and 16 MiB (in several
 * chunks every chunk waits for all ranks twice); 1.05x at 64 KiB, 0.65x below. Slots hold at
 * least 64 KiB (CHORUS_SHM_SLOT_SIZE's floor), so such a call is one chunk. */
#define STAGED_MAX_BYTES (64u * 1024u)

static int supported(const chorus_task_t* t) {
  return chorus__conn_shm_avail(t) && t->args.count * t->dtype_size * (size_t)t->nranks <= STAGED_MAX_BYTES;
}

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double all = (double)t->nranks * (double)(t->args.count * t->dtype_size);
  return chorus__shm_cost_us(cx, 2, chorus__div_up(t->args.count, chunk_elems(t)), 2.0 * all);
}

static chorus_status_t init(chorus_task_t* t) {
  size_t all = t->args.count * t->dtype_size * (size_t)t->nranks;
  size_t touched = chorus__touched_bytes(t->args.sendbuf, all, t->args.recvbuf, all);
  t->variant = CHORUS_VARIANT_STAGED;
  return chorus__shm_op_init(t, t->args.count, chunk_elems(t), touched, all);
}

/* Copies piece q of the chunk (m elements of each block from element first) into place q. */
static int stage_in(chorus_task_t* t, chorus_shm_op_t* s, size_t first, size_t m, chorus_status_t* st) {
  if (!chorus__shm_slot_free(t, s, st)) return 0;
  uint64_t id = chorus__shm_id(s);
  size_t es = t->dtype_size;
  char* slot = chorus__shm_op_slot(t, s, s->me, (int)(id & 1));
  const char* in = t->args.sendbuf;
  for (int q = 0; q < t->nranks; q++)
    memcpy(slot + (size_t)q * m * es, in + ((size_t)q * t->args.count + first) * es, m * es);
  chorus__conn_shm_publish(t, SHM_ARRIVED, id);
  chorus__shm_advance(t, s, 1);
  return 1;
}

/* All blocks together up to all of the LL buffers' 1 KiB: through them (ll.h). 2 ranks,
 * alternating 5 rounds (2026-12-06), against the slots that took 512 B and 1 KiB before:
 * 0.75-0.89x their time. */
static chorus_status_t progress_ll(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t block = t->args.count * t->dtype_size, all = block * (size_t)t->nranks;
  size_t mine = (size_t)t->rank * block;
  chorus_status_t st = chorus__ll_exchange(t, s, t->args.sendbuf, all, mine, block);
  if (st != CHORUS_OK) return st;
  unsigned char* out = t->args.recvbuf;
  const unsigned char* in = t->args.sendbuf;
  for (int q = 0; q < t->nranks; q++) {
    unsigned char* dst = out + (size_t)q * block;
    if (q != t->rank) {
      chorus__ll_read(t, q, chorus__shm_id(s), mine, block, dst);
    } else if (dst != in + (size_t)q * block) { /* else in place */
      memcpy(dst, in + (size_t)q * block, block);
    }
  }
  chorus__ll_done(t, s, all);
  return CHORUS_OK;
}

static chorus_status_t progress(chorus_task_t* t) {
  chorus_shm_op_t* s = t->state;
  size_t es = t->dtype_size, count = t->args.count;
  if (s->nchunks == 1 && count * es * (size_t)t->nranks <= CHORUS_SHM_LL_MAX_BYTES && t->nranks >= 2)
    return progress_ll(t, s);
  char* out = t->args.recvbuf;
  const char* in = t->args.sendbuf;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, count);
    if (s->stage == 0) {
      CHORUS_SHM_WAIT(stage_in(t, s, first, m, &st), st);
      continue;
    }
    CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
    for (int q = 0; q < t->nranks; q++) {
      char* dst = out + ((size_t)q * count + first) * es;
      if (q != t->rank)
        chorus__shm_copy_out(s, dst, chorus__shm_op_slot(t, s, q, which) + (size_t)t->rank * m * es, m * es);
      else if (dst != in + ((size_t)q * count + first) * es) /* else in place */
        chorus__shm_copy_out(s, dst, in + ((size_t)q * count + first) * es, m * es);
    }
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    chorus__shm_advance(t, s, 0);
  }
  return CHORUS_OK;
}

const chorus_algo_t chorus__algo_shm_alltoall = {
    .name = "shm",
    .desc = "same-host memory semantics: every rank stages its blocks once, each rank copies its block out of "
            "every slot (calls of up to 64 KiB)",
    .coll = CH_COLL_ALLTOALL,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
