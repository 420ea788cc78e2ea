/*
 * rd/allgather.c - recursive-doubling allgather: log2 p rounds in which partners v and v ^ 2^k
 * swap everything they hold, so the data held doubles every round.
 *
 * Steps for member m of n (p = largest power of two <= n, rem = n - p, shape in rd.h):
 *   own block into place (unless in place);
 *   fold (rem > 0): member 2i+1 (i < rem) sends its block to 2i and waits;
 *   round k = 0 .. log2 p - 1: vrank v holds the blocks of the members of vranks
 *     [v & ~(2^k - 1), + 2^k) (a contiguous member range, rd.h) and swaps them with vrank
 *     v ^ 2^k, which holds the neighbouring range;
 *   unfold: 2i sends member 2i+1 every block but its own.
 * Blocks go straight from and into recvbuf: one transfer per run of members whose blocks are
 * adjacent in it (one per round when member i owns block i). Tags: fold 0, round k 1+k,
 * unfold 1+log2 p.
 * Bytes per rank (B = count * elem bytes): (p-1) * B sent and received in the rounds; the fold
 * pairs move B one way and (n-1) * B the other way.
 *
 * Cost (alpha-beta, L = floor(log2 n)): power of two T = L * alpha + (n-1) * B / beta;
 * otherwise T = (L + 2) * alpha + (p-1 + 1 + n-1) * B / beta; 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "algo/rd/rd.h"

enum { AG_START, AG_ROUND, AG_FINISH, AG_EXTRA_SEND, AG_DONE };

struct chorus_rd_allgather {
  chorus_sched_t s;
  chorus_rd_shape_t sh;
  size_t block_bytes;
  char* recvbuf;
  int phase, round, nx;
  chorus_algo_xfer_t* x; /* 2n */
};
typedef struct chorus_rd_allgather rdag_t;

/* Posts the blocks of the members of vranks [v0, v0 + len) at x[nx ...). */
static chorus_status_t post_vranks(chorus_task_t* t, rdag_t* e, int is_send, int peer, int v0, int len,
                                   uint32_t tag) {
  int lo = chorus__rd_member(&e->sh, v0), hi = chorus__rd_member(&e->sh, v0 + len), k = 0;
  chorus_status_t st = chorus__sched_post_blocks(t, &e->s, e->x + e->nx, &k, is_send, peer, e->recvbuf,
                                                 e->block_bytes, lo, hi - lo, tag);
  e->nx += k;
  return st;
}

/* Posts the blocks of every member but `skip`, at x[nx ...). */
static chorus_status_t post_all_but(chorus_task_t* t, rdag_t* e, int is_send, int peer, int skip, uint32_t tag) {
  int k = 0;
  chorus_status_t st = chorus__sched_post_blocks(t, &e->s, e->x + e->nx, &k, is_send, peer, e->recvbuf,
                                                 e->block_bytes, skip + 1, e->sh.n - 1, tag);
  e->nx += k;
  return st;
}

chorus_status_t chorus__rd_allgather_step(chorus_task_t* t, rdag_t* e) {
  const chorus_sched_t* s = &e->s;
  int me = s->group.me, k = 0;
  uint32_t unfold_tag = 1u + (uint32_t)e->sh.rounds;
  chorus_status_t st = CHORUS_OK;
  for (;;) {
    /* Every phase waits for all the transfers of the one before. */
    if (!chorus__algo_all_done(e->x, e->nx)) return CHORUS_INPROGRESS;
    e->nx = 0;
    switch (e->phase) {
      case AG_START:
        chorus__algo_copy(e->recvbuf + (size_t)chorus__sched_block(s, me) * e->block_bytes, s->sendbuf,
                          e->block_bytes);
        if (e->sh.fold_peer >= 0) { /* fold: the odd member's block goes to the even one */
          int odd = e->sh.vrank < 0 ? me : e->sh.fold_peer;
          st = chorus__sched_post_blocks(t, s, e->x, &k, e->sh.vrank < 0, e->sh.fold_peer, e->recvbuf,
                                         e->block_bytes, odd, 1, 0);
          e->nx = k;
        }
        e->phase = e->sh.vrank < 0 ? AG_EXTRA_SEND : AG_ROUND;
        break;
      case AG_ROUND: {
        if (e->round == e->sh.rounds) {
          e->phase = AG_FINISH;
          break;
        }
        int mask = 1 << e->round, v = e->sh.vrank, base = v & ~(mask - 1);
        int peer = chorus__rd_member(&e->sh, v ^ mask);
        st = post_vranks(t, e, 0, peer, base ^ mask, mask, 1u + (uint32_t)e->round);
        if (st == CHORUS_OK) st = post_vranks(t, e, 1, peer, base, mask, 1u + (uint32_t)e->round);
        e->round++;
        break;
      }
      case AG_FINISH:
        if (e->sh.fold_peer >= 0) st = post_all_but(t, e, 1, e->sh.fold_peer, e->sh.fold_peer, unfold_tag);
        e->phase = AG_DONE;
        break;
      case AG_EXTRA_SEND: /* own block gone: receive all the others */
        st = post_all_but(t, e, 0, e->sh.fold_peer, me, unfold_tag);
        e->phase = AG_DONE;
        break;
      default:
        return CHORUS_OK;
    }
    if (st < 0) return st;
  }
}

chorus_status_t chorus__rd_allgather_start(const chorus_sched_t* s, rdag_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  int n = s->group.size;
  rdag_t* e = calloc(1, sizeof(*e) + 2 * (size_t)n * sizeof(chorus_algo_xfer_t));
  if (!e) return CHORUS_ERR_NO_MEMORY;
  e->s = *s;
  chorus__rd_shape(&e->sh, s->group.me, n);
  e->block_bytes = s->count * s->elem_bytes;
  e->recvbuf = s->recvbuf;
  e->x = (chorus_algo_xfer_t*)(e + 1);
  *out = e;
  return CHORUS_OK;
}

void chorus__rd_allgather_free(rdag_t* e) { free(e); }

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t rd_allgather_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  s.block_of = s.group.ranks; /* the member at ring position i owns its rank's block */
  rdag_t* e = NULL;
  chorus_status_t st = chorus__rd_allgather_start(&s, &e);
  t->state = e;
  return st;
}

static chorus_status_t rd_allgather_progress(chorus_task_t* t) {
  rdag_t* e = t->state;
  chorus_status_t st = chorus__rd_allgather_step(t, e);
  t->step = (size_t)e->round;
  return st;
}

static void rd_allgather_fini(chorus_task_t* t) {
  chorus__rd_allgather_free(t->state);
  t->state = NULL;
}

static double rd_allgather_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  chorus_rd_shape_t sh;
  chorus__rd_shape(&sh, 0, t->nranks);
  double block = (double)t->args.count * (double)t->dtype_size;
  /* Round i moves 2^i blocks; the first `intra` rounds (1 + 2 + ... blocks) stay in the host. */
  int intra = chorus__cost_rounds_inside_hosts(cx, t->nranks);
  double steps = sh.rounds - intra, intra_blocks = (double)((1 << intra) - 1), blocks = sh.p - 1 - intra_blocks;
  if (sh.rem) {
    steps += 2;
    blocks += 1 + (t->nranks - 1);
  }
  return intra * cx->intra.alpha_us + intra_blocks * block / cx->intra.bytes_per_us + steps * cx->spread.alpha_us +
         blocks * block / cx->spread.bytes_per_us;
}

const chorus_algo_t chorus__algo_rd_allgather = {
    .name = "rd",
    .desc = "recursive doubling: log2 n exchanges of doubling block ranges (non-powers of two fold first)",
    .coll = CH_COLL_ALLGATHER,
    .supported = NULL,
    .cost_us = rd_allgather_cost_us,
    .init = rd_allgather_init,
    .progress = rd_allgather_progress,
    .fini = rd_allgather_fini,
};
