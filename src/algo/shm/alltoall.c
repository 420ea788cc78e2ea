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
 * With single-copy reads (process_vm_readv: every rank of the host can read the others' memory
 * and found the kernel's copy fast enough at creation: transport/shm_setup.c), for blocks of 8
 * KiB and more (16 KiB and more where ranks share CPUs), every rank copies its blocks straight
 * from the others' send buffers (n B per rank). A rank that runs in
 * place first copies its send buffer aside, as the others read it while it overwrites its blocks:
 * every rank chooses alike whatever its layout. Registered memory takes the same paths: mapped
 * reads of an in-place rank's buffer would need that copy too, in memory the others cannot map.
 */
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/shm/ll.h"
#include "algo/shm/shm.h"

/* Blocks of SINGLE_COPY_MIN_BLOCK and more are read straight where the kernel's
 * copy is fast enough (chorus__conn_cma_avail). 2 ranks, out of place, medians of 5 alternating
 * launches, read against what the call took without them (staged up to 64 KiB calls, the
 * pairwise exchange above): on 2026-12-06 evening (the kernel's copy of 1 MiB at 1.8x memcpy's
 * time) 8 KiB blocks 1.95 against 2.92 us, 16 KiB 2.5 against 3.8, 64 KiB 5.8 against 11.3, 256
 * KiB 19.4 against 42.9, 512 KiB 72 against 114, 1-16 MiB 0.78-0.81x the pairwise exchange's
 * time. That afternoon (the kernel's copies at 2-6 GB/s, memcpy at 14-37) they lost: 8 KiB
 * blocks 4.9-5.4 us against 2.0 staged, 16-64 KiB 5.8-12.3 against 5.1-7.4, and from 4 MiB
 * blocks 1.2-1.4x the pairwise exchange's time. Blocks of 128 MiB (where a bound of 32 MiB, from
 * when ranks that shared a CPU read too, stopped them until then): 43.7 against 55.6-61.0 ms out
 * of place, 48.2 against 57.0-57.8 in place. */
#define SINGLE_COPY_MIN_BLOCK (8u * 1024u)

/* Where ranks share CPUs, blocks of SHARED_CPUS_MIN_BLOCK and more are read straight too. 4 ranks
 * on 2 CPUs, medians of 5 alternating launches (2026-12-06 night), read against staged (up to 64
 * KiB calls) or the pairwise exchange, us: 4 KiB blocks 18.1 against 16.4, 8 KiB 16.0 against
 * 13.9, 16 KiB 18.5 against 22.2, 32 KiB 25.6 against 45.2, 64 KiB 42.9 against 71.5; medians of
 * 3, 256 KiB blocks 306 against 402, 1 MiB 1080 against 1328, 16 MiB 34.7 ms against 39.7. */
#define SHARED_CPUS_MIN_BLOCK (16u * 1024u)

/* The op, and where an in-place rank's send buffer is set aside for the single-copy reads (when
 * the call starts, before it publishes: one posted behind another may be writing it until then). */
typedef struct {
  chorus_shm_op_t op; /* first: the shm helpers take the state as their op */
  char* aside;
} alltoall_state_t;

static int single_copy_pays(const chorus_task_t* t, size_t block) {
  if (chorus__conn_cma_avail(t)) return block >= SINGLE_COPY_MIN_BLOCK;
  return block >= SHARED_CPUS_MIN_BLOCK && chorus__conn_cma_any_cpus(t);
}

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
  size_t block = t->args.count * t->dtype_size;
  return chorus__conn_shm_avail(t) && (block * (size_t)t->nranks <= STAGED_MAX_BYTES || single_copy_pays(t, block));
}

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t block = t->args.count * t->dtype_size;
  double all = (double)t->nranks * (double)block;
  if (single_copy_pays(t, block)) return chorus__shm_cost_us(cx, 2, 1, all);
  return chorus__shm_cost_us(cx, 2, chorus__div_up(t->args.count, chunk_elems(t)), 2.0 * all);
}

static chorus_status_t init(chorus_task_t* t) {
  size_t block = t->args.count * t->dtype_size, all = block * (size_t)t->nranks;
  size_t touched = chorus__touched_bytes(t->args.sendbuf, all, t->args.recvbuf, all);
  t->variant = CHORUS_VARIANT_STAGED;
  if (!single_copy_pays(t, block)) return chorus__shm_op_init(t, t->args.count, chunk_elems(t), touched, all);
  alltoall_state_t* a = calloc(1, sizeof(*a));
  if (!a) return CHORUS_ERR_NO_MEMORY;
  const void* send = t->args.sendbuf;
  if (send == t->args.recvbuf) {
    a->aside = chorus__task_scratch(t, all);
    if (!a->aside) {
      free(a);
      return CHORUS_ERR_NO_MEMORY;
    }
    send = a->aside;
  }
  chorus__conn_cma_use(t, send, t->args.recvbuf);
  chorus__shm_op_setup(t, &a->op, t->nranks, t->rank, 1, 1, touched, NULL);
  t->state = a;
  return CHORUS_OK;
}

static void fini(chorus_task_t* t) {
  if (t->state && t->state != (void*)t->state_space) {
    alltoall_state_t* a = t->state;
    chorus__task_scratch_free(t, a->aside);
    free(a);
  }
  t->state = NULL;
}

/* Block q of the receive buffer comes from rank q's send buffer (or what it set aside), its
 * block for this rank. */
static chorus_status_t single_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t mine = (size_t)t->rank * t->args.count * t->dtype_size;
  return chorus__shm_read_blocks(t, s, (const char*)t->args.sendbuf + mine, mine);
}

/* Copies piece q of the chunk (m elements of each block from element first) into place q. */
static int stage_in(chorus_task_t* t, chorus_shm_op_t* s, size_t first, size_t m, chorus_status_t* st) {
  if (!chorus__shm_slot_free(t, s, st)) return 0;
  uint64_t id = chorus__shm_id(s);
  size_t es = t->dtype_size;
  char* slot = chorus__shm_op_slot(t, s, s->me, (int)(id & 1));
  const char* in = t->args.sendbuf;
  for (int q = 0; q < t->nranks; q++)
    chorus__shm_stage_copy(slot + (size_t)q * m * es, in + ((size_t)q * t->args.count + first) * es, m * es);
  chorus__conn_shm_publish(t, SHM_ARRIVED, id);
  chorus__shm_advance(t, s, 1);
  return 1;
}

/* An in-place rank's blocks for the others, copied aside before it publishes where they are. */
static void set_aside(chorus_task_t* t, alltoall_state_t* a) {
  size_t block = t->args.count * t->dtype_size;
  for (int q = 0; q < t->nranks; q++) /* the others read only their blocks */
    if (q != t->rank) memcpy(a->aside + (size_t)q * block, (const char*)t->args.sendbuf + (size_t)q * block, block);
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
  if (t->variant == CHORUS_VARIANT_CMA) {
    alltoall_state_t* a = t->state;
    if (a->aside && a->op.stage == 0) set_aside(t, a); /* stage 0 publishes in this very call */
    return chorus__shm_zc_progress(t, single_copy);
  }
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
            "every slot (calls of up to 64 KiB; blocks of 8 KiB and more, 16 KiB where ranks share CPUs, with a fast "
            "kernel copy: read straight from the others' buffers, process_vm_readv)",
    .coll = CH_COLL_ALLTOALL,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = fini,
};
