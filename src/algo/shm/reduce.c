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
 * Calls of at most LL_MAX_BYTES on more than two ranks travel in the LL lines of the ranks
 * other than the root (ll.h), which the root combines in rank order with its own input.
 *
 * Ranks other than the root leave early, as an eager MPI send does: they return once the root
 * has entered the call (its ARRIVED = the op's first id, published on entry), not once it has
 * combined their data. What they staged stays until the root's DONE: LL lines and a two-rank
 * call of one chunk (in the slot of its id's parity) under the slot rule of shm.h; a two-rank
 * pipeline's places under the places' rule, the rest of the writes waiting for the places
 * left unread (shm.h, chorus_shm_slots_use_t). Waiting for the root's entry keeps them at most
 * a call ahead and the signature check in the call on both sides: two ranks that each take
 * the other for the root see each other's signature there, where they would otherwise both
 * return at once with nothing reduced (the root checks the others' signatures, and an LL
 * payload's, as it reads them). Keeping them until the root had combined made a 2-rank 8-byte
 * reduce a round trip: 0.14x Open MPI's speed, whose non-roots return at once
 * (docs/compare.md, run 28). 2 ranks, 2026-12-07, back to back, before and after: 8 B
 * 0.61-0.62 -> 0.37-0.41 us, 2 KiB 0.91-0.94 -> 0.62-0.68, 16 KiB 2.66 -> 1.7-1.9, 64 KiB 5.9
 * -> 3.9-4.0, 256 KiB 17.1 -> 15.0; 1 MiB and each call alone (chorus-perf -B 1) level. 4
 * ranks on 2 cores, 8-128 B 2.6-3.2 -> 1.5-1.7 us. Returning without the root's entry would
 * take the 8 B call to 0.22 us (measured), with a mismatched root found only in a later call.
 *
 * On registered memory: rank r reduces slice r from every send buffer straight into the root's
 * receive buffer.
 */
#include "algo/algos.h"
#include "algo/shm/ll.h"
#include "algo/shm/shm.h"

/* More than two ranks, up to the LL buffers' whole 1 KiB: the root reads each payload once. 4
 * ranks on 2 cores, 2026-12-07, against the three phases: 8-128 B 2.6-2.9 -> 1.5-1.6 us back to
 * back and 4.3-4.8 -> 3.0-3.4 each call alone (chorus-perf -B 1); 1 KiB 3.1-3.3 -> 2.3-2.4 and
 * 5.1-5.2 -> 3.6-3.8. Two ranks stage one chunk in a slot instead (progress_two_eager): level
 * with the LL lines back to back, and from 256 B faster alone, where a root that polls many LL
 * lines pulls them away from the rank that writes them (256 B 0.74-0.86 us against 0.48-0.60,
 * 1 KiB 1.9-2.1 against 0.72-0.80). */
#define LL_MAX_BYTES ((size_t)CHORUS_SHM_LL_MAX_BYTES)

static int uses_ll(const chorus_task_t* t, const chorus_shm_op_t* s) {
  return t->nranks > 2 && s->nchunks == 1 && t->args.count * t->dtype_size <= LL_MAX_BYTES;
}

static int supported(const chorus_task_t* t) {
  return chorus__conn_shm_avail(t) && chorus__algo_reduce_supported(t);
}

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  size_t bytes = t->args.count * t->dtype_size;
  if (t->nranks == 2) return chorus__shm_cost_us(cx, 1, chorus__shm_nchunks(t, bytes, 1), 2.0 * (double)bytes);
  if (bytes <= LL_MAX_BYTES) return chorus__shm_cost_us(cx, 1, 1, (double)t->nranks * (double)bytes);
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

/* A non-root's last wait: the root has entered the call, its signature checked against this
 * rank's (chorus__shm_reached). */
static chorus_status_t wait_root_entry(chorus_task_t* t, chorus_shm_op_t* s) {
  chorus_status_t st = CHORUS_OK;
  CHORUS_SHM_WAIT(chorus__shm_reached(t, s, t->args.root, SHM_ARRIVED, s->base + 1, &st), st);
  s->k = s->nchunks;
  return CHORUS_OK;
}

/* A non-root of an eager call has put its input where the root reads it: ARRIVED = id, and
 * DONE = id as it reads nothing. */
static void publish_staged(chorus_task_t* t, chorus_shm_op_t* s) {
  uint64_t id = chorus__shm_id(s);
  chorus__conn_shm_publish(t, SHM_ARRIVED, id);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  chorus__shm_advance(t, s, 2);
}

/* LL: the others write their input in their lines and leave once the root has entered; the
 * root combines every input, its own from its send buffer. Having seen every peer's lines of
 * this id, the root may take the LL shortcut of ll.h next time; the others saw no lines. */
static chorus_status_t progress_ll(chorus_task_t* t, chorus_shm_op_t* s) {
  uint64_t id = chorus__shm_id(s), *last = chorus__conn_shm_ll_last(t);
  size_t m = t->args.count, bytes = m * t->dtype_size;
  chorus_status_t st = CHORUS_OK;
  if (t->rank != t->args.root) {
    if (s->stage == 0) {
      if (*last + 1 != id) CHORUS_SHM_WAIT(chorus__shm_parity_free(t, s, &st), st);
      chorus__ll_write(t, id, t->args.sendbuf, bytes);
      publish_staged(t, s);
    }
    return wait_root_entry(t, s);
  }
  chorus__shm_announce_entry(t, s);
  for (; t->step < (size_t)t->nranks; t->step++)
    if ((int)t->step != t->rank) CHORUS_SHM_WAIT(chorus__ll_arrived(t, (int)t->step, id, 0, bytes, &st), st);
  chorus__ll_combine(t, s, 0, t->args.recvbuf, m, t->args.sendbuf);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  *last = id;
  s->k = s->nchunks;
  return CHORUS_OK;
}

/* Two ranks, one chunk: the other rank stages it in its slot of the id's parity and leaves
 * once the root has entered; the root combines rank 0's input and rank 1's, in that order,
 * into its receive buffer. */
static chorus_status_t progress_two_eager(chorus_task_t* t, chorus_shm_op_t* s) {
  uint64_t id = chorus__shm_id(s);
  size_t m = t->args.count, es = t->dtype_size;
  int peer = 1 - t->rank;
  chorus_status_t st = CHORUS_OK;
  if (t->rank != t->args.root) {
    if (s->stage == 0) {
      CHORUS_SHM_WAIT(chorus__shm_slot_free(t, s, &st), st);
      chorus__shm_stage_copy(chorus__shm_op_slot(t, s, t->rank, (int)(id & 1)), t->args.sendbuf, m * es);
      publish_staged(t, s);
    }
    return wait_root_entry(t, s);
  }
  chorus__shm_announce_entry(t, s);
  CHORUS_SHM_WAIT(chorus__shm_reached(t, s, peer, SHM_ARRIVED, id, &st), st);
  const char* mine = t->args.sendbuf;
  const char* theirs = chorus__shm_op_slot(t, s, peer, (int)(id & 1));
  chorus__shm_combine_two(t, s, t->args.recvbuf, t->rank == 0 ? mine : theirs, t->rank == 0 ? theirs : mine, m);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  s->k = s->nchunks;
  return CHORUS_OK;
}

/* Two ranks, several chunks: the other rank stages each chunk in the places of its slots
 * (shm.h's two-rank pipeline; ARRIVED = id, and DONE = id as it reads nothing) and leaves once
 * the root has entered, leaving word of what the root may still read (unread_until: shm.h);
 * the root combines rank 0's input and rank 1's, in that order, into its receive buffer and
 * publishes DONE = id, which frees the chunk's place. */
static chorus_status_t progress_two(chorus_task_t* t, chorus_shm_op_t* s) {
  if (s->nchunks == 1) return progress_two_eager(t, s);
  size_t es = t->dtype_size;
  int root = t->rank == t->args.root, peer = 1 - t->rank;
  chorus_status_t st = CHORUS_OK;
  if (root) chorus__shm_announce_entry(t, s);
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
  if (root) return CHORUS_OK;
  chorus_shm_slots_use_t* use = chorus__conn_shm_slots_use(t);
  use->unread_until = s->base + s->nchunks;
  use->reader = peer;
  return wait_root_entry(t, s);
}

static chorus_status_t progress(chorus_task_t* t) {
  if (t->variant) return chorus__shm_zc_progress(t, zero_copy);
  chorus_shm_op_t* s = t->state;
  if (s->nchunks == 0) return CHORUS_OK;
  if (uses_ll(t, s)) return progress_ll(t, s);
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
    .desc = "same-host memory semantics: stage once, reduce one slice per rank in place, the root copies out (2 "
            "ranks: the root combines both inputs as the other stages them; up to 1 KiB on more: the others' LL "
            "lines); the others leave once the root has entered",
    .coll = CH_COLL_REDUCE,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
