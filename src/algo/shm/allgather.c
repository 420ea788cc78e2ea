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
 * buffer (one copy of each block). The same with single-copy reads (process_vm_readv) of blocks
 * whose staging costs more than the kernel's page-by-page copy: n S bytes instead of (n + 1) S.
 */
#include "algo/algos.h"
#include "algo/shm/ll.h"
#include "algo/shm/shm.h"

/* Blocks of more than SINGLE_COPY_ABOVE_BLOCK (or of more than two slots, when the slots are set
 * smaller) are read with process_vm_readv instead of staged. The readers wait for the owner to
 * enter and the owner for their reads, a round trip a call that staging does not pay: 2 ranks
 * back to back, alternating (2026-12-06 15:20), staged against read straight, 8 KiB blocks
 * 1.9-2.0 against 4.7-5.5 us, 32 KiB 3.6-4.6 against 6.0-6.3, 128 KiB 10.0-10.6 against
 * 12.8-14.0, 256 KiB 19.4-20.8 against 22.6-27.3, 512 KiB 39-45 against 43-51, 768 KiB level,
 * 1 MiB 177-194 against 72-82 (the staged call's slot filled), 64 MiB 20.3-21.6 ms against
 * 11.9-13.8; with 64 KiB slots, 128 KiB blocks level and 256-512 KiB 1.1-1.4x faster read
 * straight. With 2 ranks per CPU reads lost at 4 KiB and from 32 MiB, so hosts with more ranks
 * than CPUs do not use them (chorus__conn_cma_avail). */
#define SINGLE_COPY_ABOVE_BLOCK (512u * 1024u)

static int single_copy_pays(const chorus_task_t* t, size_t block) {
  return (block > SINGLE_COPY_ABOVE_BLOCK || block > 2 * chorus__conn_shm_slot_bytes(t)) && chorus__conn_cma_avail(t);
}

static int supported(const chorus_task_t* t) { return chorus__conn_shm_avail(t); }

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t bytes = t->args.count * t->dtype_size;
  if (single_copy_pays(t, bytes)) return chorus__shm_cost_us(cx, 2, 1, (double)t->nranks * (double)bytes);
  return chorus__shm_cost_us(cx, 2, chorus__div_up(bytes, chorus__conn_shm_slot_bytes(t)),
                             (double)((size_t)t->nranks + 1) * (double)bytes);
}

static chorus_status_t init(chorus_task_t* t) {
  size_t block = t->args.count * t->dtype_size;
  size_t out = block * (size_t)t->nranks, touched = chorus__touched_bytes(t->args.sendbuf, block, t->args.recvbuf, out);
  if (chorus__conn_zc_eligible(t, t->args.sendbuf, block, t->args.recvbuf, out))
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  if (single_copy_pays(t, block)) {
    chorus__conn_cma_use(t, t->args.sendbuf, t->args.recvbuf);
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  }
  return chorus__shm_op_init(t, t->args.count, chorus__conn_shm_slot_bytes(t) / t->dtype_size, touched, block);
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

/* Each rank reads the others' blocks in turn from the next rank on, so that they do not all
 * read one rank's pages at once. */
static chorus_status_t single_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t block = t->args.count * t->dtype_size;
  char* out = t->args.recvbuf;
  if (out + (size_t)t->rank * block != t->args.sendbuf) /* else in place */
    chorus__shm_copy_out(s, out + (size_t)t->rank * block, t->args.sendbuf, block);
  for (int i = 1; i < t->nranks; i++) {
    int q = (t->rank + i) % t->nranks;
    chorus_status_t st = chorus__conn_cma_read_send(t, q, 0, out + (size_t)q * block, block);
    if (st < 0) return st;
  }
  return CHORUS_OK;
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

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant == CHORUS_VARIANT_CMA) return chorus__shm_zc_progress(t, single_copy);
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  if (s->nchunks == 1 && t->args.count * t->dtype_size <= CHORUS_SHM_LL_MAX_BYTES && t->nranks >= 2)
    return progress_ll(t, s);
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
    .desc = "same-host memory semantics: every rank stages its block once, every rank copies all blocks out "
            "(blocks of more than 512 KiB with a CPU per rank: every rank reads the others' blocks straight from "
            "their buffers, process_vm_readv)",
    .coll = CH_COLL_ALLGATHER,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
