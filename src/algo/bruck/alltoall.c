/*
 * bruck/alltoall.c - Bruck alltoall: ceil(log2 n) rounds on any n, for small blocks.
 *
 * Steps for member m of n, with tmp[j] = the block m holds for member m+j (mod n), kept in
 * recvbuf at the block of member m+j (so the textbook's initial rotation is the plain copy
 * sendbuf -> recvbuf):
 *   round k (d = 2^k, while d < n): pack every tmp[j] whose index j has bit k set (j ascending)
 *     into one buffer, send it to m+d, receive the same-shaped pack from m-d and unpack it over
 *     those tmp[j]; afterwards tmp[j] is the block from member m-j for m;
 *   finish: the block from m-j belongs at member m-j's place, so swap the blocks of members
 *     m+j and m-j for j = 1 .. (n-1)/2 (the textbook's final inverse rotation, in place).
 * Tag = k. Bytes per rank (B = count * elem bytes): at most floor(n/2) * B sent and received per
 * round (ceil(log2 n) * n/2 * B in all, against (n-1) * B for pairwise), plus the packing and
 * unpacking copies; scratch 2 * floor(n/2) * B.
 *
 * Cost (alpha-beta, L = ceil(log2 n)): T = L * alpha + L * floor(n/2) * B / beta + the local
 * copies, n B (the first copy) + 2 L floor(n/2) B (packs and unpacks) + 3 floor((n-1)/2) B (the
 * swaps), at memory speed; 0 for n = 1. Without the copies, 4 ranks' alltoalls of 1-4 KiB took
 * Bruck at 1.08-1.16x pairwise's time.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/bruck/bruck.h"
#include "algo/common.h"

struct chorus_bruck_alltoall {
  chorus_sched_t s;
  int n, me, started, posted, finished, round;
  size_t block_bytes, pack_blocks; /* packs hold floor(n/2) blocks */
  char* send_pack;
  char* recv_pack;
  chorus_algo_xfer_t x[2];
};
typedef struct chorus_bruck_alltoall ba_t;

static char* tmp_block(const ba_t* e, int j) {
  return (char*)e->s.recvbuf + (size_t)chorus__sched_block(&e->s, (e->me + j) % e->n) * e->block_bytes;
}

/* Copies the blocks with bit `d` of their index set between tmp and a pack; their number. */
static size_t pack(const ba_t* e, int d, char* pk, int to_pack) {
  size_t k = 0;
  for (int j = 1; j < e->n; j++) {
    if (!(j & d)) continue;
    char* p = pk + k++ * e->block_bytes;
    if (e->block_bytes) {
      if (to_pack)
        memcpy(p, tmp_block(e, j), e->block_bytes);
      else
        memcpy(tmp_block(e, j), p, e->block_bytes);
    }
  }
  return k;
}

static void finish(ba_t* e) {
  if (!e->block_bytes) return;
  for (int j = 1; j < e->n - j; j++) {
    char *a = tmp_block(e, j), *b = tmp_block(e, e->n - j);
    memcpy(e->send_pack, a, e->block_bytes);
    memcpy(a, b, e->block_bytes);
    memcpy(b, e->send_pack, e->block_bytes);
  }
}

chorus_status_t chorus__bruck_alltoall_step(chorus_task_t* t, ba_t* e) {
  const chorus_sched_t* s = &e->s;
  if (!e->started) {
    chorus__algo_copy(s->recvbuf, s->sendbuf, (size_t)e->n * e->block_bytes);
    e->started = 1;
  }
  for (;;) {
    if (e->posted) {
      if (!chorus__algo_done(&e->x[0]) || !chorus__algo_done(&e->x[1])) return CHORUS_INPROGRESS;
      pack(e, 1 << e->round, e->recv_pack, 0);
      e->round++;
      e->posted = 0;
    }
    if ((1L << e->round) >= e->n) {
      if (!e->finished) finish(e);
      e->finished = 1;
      return CHORUS_OK;
    }
    int d = 1 << e->round;
    size_t nbytes = pack(e, d, e->send_pack, 1) * e->block_bytes;
    chorus_status_t st = chorus__sched_post(t, s, &e->x[0], 0, chorus__mod(e->me - d, e->n), e->recv_pack,
                                            nbytes, (uint32_t)e->round);
    if (st == CHORUS_OK)
      st = chorus__sched_post(t, s, &e->x[1], 1, (e->me + d) % e->n, e->send_pack, nbytes, (uint32_t)e->round);
    if (st < 0) return st;
    e->posted = 1;
  }
}

chorus_status_t chorus__bruck_alltoall_start(const chorus_sched_t* s, ba_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  int n = s->group.size;
  size_t block = s->count * s->elem_bytes, pack_blocks = (size_t)(n / 2);
  ba_t* e = calloc(1, sizeof(*e));
  if (!e) return CHORUS_ERR_NO_MEMORY;
  if (!(e->send_pack = chorus__sched_scratch(s, 2 * pack_blocks * block))) {
    free(e);
    return CHORUS_ERR_NO_MEMORY;
  }
  e->s = *s;
  e->n = n;
  e->me = s->group.me;
  e->block_bytes = block;
  e->pack_blocks = pack_blocks;
  e->recv_pack = e->send_pack + pack_blocks * block;
  *out = e;
  return CHORUS_OK;
}

void chorus__bruck_alltoall_free(ba_t* e) {
  if (!e) return;
  chorus__sched_scratch_free(&e->s, e->send_pack);
  free(e);
}

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t bruck_alltoall_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  s.block_of = s.group.ranks; /* the member at ring position i is its rank's block */
  ba_t* e = NULL;
  chorus_status_t st = chorus__bruck_alltoall_start(&s, &e);
  t->state = e;
  return st;
}

static chorus_status_t bruck_alltoall_progress(chorus_task_t* t) {
  ba_t* e = t->state;
  chorus_status_t st = chorus__bruck_alltoall_step(t, e);
  t->step = (size_t)e->round;
  return st;
}

static void bruck_alltoall_fini(chorus_task_t* t) {
  chorus__bruck_alltoall_free(t->state);
  t->state = NULL;
}

static double bruck_alltoall_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  double rounds = chorus__ceil_log2(t->nranks), block = (double)t->args.count * (double)t->dtype_size;
  double half = (double)(t->nranks / 2), swaps = (double)((t->nranks - 1) / 2);
  double copied = (double)t->nranks * block + 2.0 * rounds * half * block + 3.0 * swaps * block;
  return rounds * cx->spread.alpha_us + rounds * half * block / cx->spread.bytes_per_us +
         copied / CHORUS_COST_COPY_BYTES_PER_US;
}

const chorus_algo_t chorus__algo_bruck_alltoall = {
    .name = "bruck",
    .desc = "Bruck: ceil(log2 n) rounds on any n, packing the blocks whose index has bit k set",
    .coll = CH_COLL_ALLTOALL,
    .supported = NULL,
    .cost_us = bruck_alltoall_cost_us,
    .init = bruck_alltoall_init,
    .progress = bruck_alltoall_progress,
    .fini = bruck_alltoall_fini,
};
