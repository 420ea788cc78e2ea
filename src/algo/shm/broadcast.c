/*
 * shm/broadcast.c - memory-semantics broadcast for ranks that share one host.
 *
 * Per chunk of at most one slot: the root copies the chunk into its slot (ARRIVED = id, and
 * DONE = id since it reads nothing); every other rank copies it out of the root's slot
 * (DONE = id). Bytes: S written at the root, S read and written per other rank, all in
 * parallel. Cost: 1 flag wait per chunk + about 2 S / memory bandwidth.
 * Two ranks are a pipeline above STAGED_MAX_BYTES (shm.h: the other rank copies chunk k out
 * while the root copies chunks k + 1 .. into the places of its slots); below, one chunk. The root
 * copies into its own receive buffer only after its last chunk is out, so that the other rank
 * never waits for it.
 *
 * Payloads of at most BCAST_LL_MAX_BYTES travel in the root's LL lines (ll.h): the others see
 * data and its arrival in the same cache lines (at most two).
 *
 * A root that staged its chunks in the slots of their ids' parity (every call but a two-rank
 * pipeline) does not wait for the others' copies: it returns once every other rank has entered
 * the call (ARRIVED = the op's first id, published on entry), as an eager MPI send returns once
 * its data is out. Its slots and LL lines are written again only after the readers' DONE >=
 * id - 2 (the slot rule of shm.h), so the root runs at most one call ahead; waiting for their
 * entry keeps the signature check at the call (two ranks that both think they are root would
 * otherwise both return at once, having received nothing). Waiting for every copy instead made
 * a 2-rank 8-byte broadcast a round trip: 0.18x Open MPI's time, whose root returns at once
 * (docs/compare.md, run 9). A pipeline's places run across both slots, outside that rule: its
 * root still returns only once its last chunk is read (shm.h, chorus__shm_pipe_places).
 *
 * On registered memory (the root's send buffer, the others' receive buffers): every rank
 * copies straight from the root's send buffer; so do they, with process_vm_readv (single-copy
 * reads), for calls of more than 4 KiB up to 1 MiB where the kernel's copy was measured fast
 * enough (below). There the root waits for every copy, since they read its buffer.
 */
#include "algo/algos.h"
#include "algo/shm/ll.h"
#include "algo/shm/shm.h"

/* Up to STAGED_MAX_BYTES (and one slot) a call is staged whole, in one chunk, and the root
 * returns once the others have entered (see the top of the file): back to back, the root stages
 * call i + 1 while the others copy call i out. 2 ranks, 2026-12-06, against the two-rank
 * pipeline or single-copy reads that took these sizes before: back to back, 32 KiB 4.6-5.0 ->
 * 1.7-1.9 us, 64 KiB 6.4-6.6 -> 2.7-2.8, 128 KiB 8.9-9.0 -> 4.7-5.0, 256 KiB 12.6-13.2 ->
 * 8.2-8.9, 512 KiB 22-26 -> 16 (staging 1 MiB whole took 116-121 us against the pipeline's 39-41);
 * each call alone (-B 1), 32-64 KiB 6.0-8.0 -> 3.3-5.8 us, 128-512 KiB level within the noise. */
#define STAGED_MAX_BYTES (512u * 1024u)

/* Where the host's ranks read each other's memory with process_vm_readv and found the kernel's
 * copy fast enough at creation (transport/shm_setup.c), the other ranks read calls of more than
 * SINGLE_COPY_MIN_BYTES up to SINGLE_COPY_MAX_BYTES straight from the root's buffer: one copy
 * instead of the root's into its slot and theirs out of it. 2 ranks, medians of 6 alternating
 * launches (2026-12-06 evening, docs/sweep.md), read against staged, us: 32 KiB 2.5 - 4.3 alone
 * (-B 1), 2.5 - 2.7 back to back; 128 KiB 6.7 - 15.6 and 6.6 - 9.2; 512 KiB 23 - 59 and 24 - 43;
 * at 16 KiB 1.7 - 2.7 alone but 1.7 - 1.5 back to back, which kept calls up to 16 KiB staged
 * until 2026-12-07, when the reads took 12-16 KiB from 1.42-1.74 us to 1.19-1.28 back to back
 * and from 2.7-2.9 to 1.25-1.37 alone, 8 KiB from 2.03-2.09 to 1.11-1.19 alone (level back to
 * back), 6 KiB from 1.69-1.70 to 1.04-1.09 alone (0.90-0.93 against 0.96-1.06 back to back);
 * at 4 KiB the staged call stays ahead back to back (0.73-0.80 against 0.99-1.05). At 1 MiB
 * the reads took 120 us in place against the two-rank pipeline's 78-81 while the root slept
 * through its wait for them; since waits spin for about the call's predicted time
 * (chorus__engine_spin_ns, core/progress.c) they take 48-55 against 65-71 in place, 58-61
 * against 86-91 out of place (2026-12-07, docs/compare.md run 23). At 2 MiB the two are level
 * (165-170 us) and from 4 MiB the pipeline leads (330-340 against 350-380). */
#define SINGLE_COPY_MIN_BYTES (4u * 1024u)
#define SINGLE_COPY_MAX_BYTES (1024u * 1024u)

static int single_copy_pays(const chorus_task_t* t, size_t bytes) {
  return bytes > SINGLE_COPY_MIN_BYTES && bytes <= SINGLE_COPY_MAX_BYTES && chorus__conn_cma_avail(t);
}

static int staged_whole(const chorus_task_t* t, size_t bytes) {
  return bytes <= STAGED_MAX_BYTES && bytes <= chorus__conn_shm_slot_bytes(t);
}

/* Two ranks past the staged sizes: the root writes chunk k + 1 while the other copies chunk k. */
static int pipelined(const chorus_task_t* t, size_t bytes) { return t->nranks == 2 && !staged_whole(t, bytes); }

static int supported(const chorus_task_t* t) { return chorus__conn_shm_avail(t); }

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t bytes = t->args.count * t->dtype_size;
  if (single_copy_pays(t, bytes)) return chorus__shm_cost_us(cx, 2, 1, (double)bytes);
  return chorus__shm_cost_us(cx, 1, chorus__shm_nchunks(t, bytes, pipelined(t, bytes)), 2.0 * (double)bytes);
}

static chorus_status_t init(chorus_task_t* t) {
  size_t bytes = t->args.count * t->dtype_size;
  int root = t->rank == t->args.root;
  size_t touched = chorus__touched_bytes(root ? t->args.sendbuf : NULL, bytes, t->args.recvbuf, bytes);
  if (chorus__conn_zc_eligible(t, root ? t->args.sendbuf : NULL, root ? bytes : 0, root ? NULL : t->args.recvbuf,
                               root ? 0 : bytes))
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  if (single_copy_pays(t, bytes)) {
    chorus__conn_cma_use(t, root ? t->args.sendbuf : NULL, t->args.recvbuf);
    return chorus__shm_op_init(t, 1, 1, touched, 0);
  }
  return chorus__shm_op_init(t, t->args.count, chorus__shm_chunk_elems(t, bytes, pipelined(t, bytes)), touched, bytes);
}

static chorus_status_t zero_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t bytes = t->args.count * t->dtype_size;
  const char* src = t->rank == t->args.root ? t->args.sendbuf : chorus__conn_zc_send(t, t->args.root);
  if (bytes && t->args.recvbuf != src) chorus__shm_copy_out(s, t->args.recvbuf, src, bytes);
  return CHORUS_OK;
}

static chorus_status_t single_copy(chorus_task_t* t, chorus_shm_op_t* s) {
  size_t bytes = t->args.count * t->dtype_size;
  if (t->rank != t->args.root) return chorus__conn_cma_read_send(t, t->args.root, 0, t->args.recvbuf, bytes);
  if (t->args.recvbuf != t->args.sendbuf) chorus__shm_copy_out(s, t->args.recvbuf, t->args.sendbuf, bytes);
  return CHORUS_OK;
}

/* Broadcast payloads in LL lines only up to two lines: its root returns before the others
 * read, so the staged slot costs it no more, and the others poll one flag instead of every
 * line (2 ranks, alternating, 2026-12-06: LL 0.90-0.93x the staged time at 128-256 B, level
 * at 64 B). */
#define BCAST_LL_MAX_BYTES 64u

static int uses_ll(const chorus_task_t* t, const chorus_shm_op_t* s) {
  return s->nchunks == 1 && t->args.count * t->dtype_size <= BCAST_LL_MAX_BYTES;
}

/* The root's last wait: every other rank has entered the call (see the top of the file). */
static chorus_status_t root_wait_entries(chorus_task_t* t, chorus_shm_op_t* s) {
  chorus_status_t st = CHORUS_OK;
  CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, s->base + 1, &st), st);
  s->k = s->nchunks;
  return CHORUS_OK;
}

static chorus_status_t progress_ll(chorus_task_t* t, chorus_shm_op_t* s) {
  uint64_t id = chorus__shm_id(s);
  size_t bytes = t->args.count * t->dtype_size;
  chorus_status_t st = CHORUS_OK;
  if (t->rank == t->args.root) {
    if (s->stage == 0) {
      CHORUS_SHM_WAIT(chorus__shm_parity_free(t, s, &st), st);
      chorus__ll_write(t, id, t->args.sendbuf, bytes);
      if (t->args.recvbuf != t->args.sendbuf) memcpy(t->args.recvbuf, t->args.sendbuf, bytes);
      /* ARRIVED too: a rank that also takes itself for the root waits for it (and finds the
       * mismatch at once). */
      chorus__conn_shm_publish(t, SHM_ARRIVED, id);
      chorus__conn_shm_publish(t, SHM_DONE, id);
      chorus__shm_advance(t, s, 1);
    }
    st = root_wait_entries(t, s);
    if (st == CHORUS_OK) chorus__ll_reclaim(t, id, bytes); /* every reader has entered: see ll.h */
    return st;
  }
  chorus__shm_announce_entry(t, s);
  CHORUS_SHM_WAIT(chorus__ll_arrived(t, t->args.root, id, 0, bytes, &st), st);
  chorus__ll_read(t, t->args.root, id, 0, bytes, t->args.recvbuf);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  s->k = s->nchunks;
  return CHORUS_OK;
}

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant == CHORUS_VARIANT_CMA) return chorus__shm_zc_progress(t, single_copy);
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  if (s->nchunks == 0) return CHORUS_OK;
  if (uses_ll(t, s)) return progress_ll(t, s);
  size_t es = t->dtype_size;
  int root = t->args.root;
  chorus_status_t st = CHORUS_OK;
  int pipe = t->nranks == 2 && s->nchunks > 1;
  if (t->rank != root) chorus__shm_announce_entry(t, s);
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    size_t first = s->k * s->chunk_elems, m = chorus__shm_chunk_len(s, t->args.count);
    char* out = (char*)t->args.recvbuf + first * es;
    char* slot = pipe ? chorus__shm_pipe_place(t, s, root) : chorus__shm_op_slot(t, s, root, which);
    if (t->rank == root) {
      CHORUS_SHM_WAIT(pipe ? chorus__shm_pipe_place_free(t, s, &st) : chorus__shm_slot_free(t, s, &st), st);
      const char* in = (const char*)t->args.sendbuf + first * es;
      chorus__shm_stage_copy(slot, in, m * es);
      chorus__conn_shm_publish(t, SHM_ARRIVED, id);
      if (out != in && !pipe) chorus__shm_copy_out(s, out, in, m * es);
    } else {
      CHORUS_SHM_WAIT(chorus__shm_reached(t, s, root, SHM_ARRIVED, id, &st), st);
      chorus__shm_copy_out(s, out, slot, m * es);
    }
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    chorus__shm_advance(t, s, 0);
  }
  if (t->rank != root) return CHORUS_OK;
  if (!pipe) return root_wait_entries(t, s);
  if (s->stage == 0) {
    if (t->args.recvbuf != t->args.sendbuf)
      chorus__shm_copy_out(s, t->args.recvbuf, t->args.sendbuf, t->args.count * es);
    chorus__shm_advance(t, s, 1);
  }
  CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_DONE, s->base + s->nchunks, &st), st);
  return CHORUS_OK;
}

const chorus_algo_t chorus__algo_shm_broadcast = {
    .name = "shm",
    .desc = "same-host memory semantics: the root stages each chunk once, every rank copies it out in parallel "
            "(up to 64 bytes in the root's LL lines; up to 512 KiB staged whole, the root returning once the others "
            "entered; two ranks above: a pipeline of chunks; more than 4 KiB up to 1 MiB read straight from the "
            "root's buffer where the kernel's copy is fast)",
    .coll = CH_COLL_BROADCAST,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
