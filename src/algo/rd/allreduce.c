/*
 * rd/allreduce.c - recursive-doubling allreduce for small messages: the whole vector in every
 * round, so log2 p latencies instead of the ring's 2(n-1).
 *
 * Steps for member m of n (p = largest power of two <= n, rem = n - p, shape in rd.h):
 *   fold (rem > 0): member 2i+1 (i < rem) sends its input to 2i and waits; 2i reduces
 *     own (+) received into recvbuf;
 *   round k = 0 .. log2 p - 1: vrank v exchanges its partial vector with vrank v ^ 2^k and
 *     both compute lower-vrank data (+) higher-vrank data, so the two partners hold the same
 *     bits after every round whatever the kernel's rounding (float16, bfloat16, prod);
 *   finish: avg divides once, then 2i sends the final vector to 2i+1.
 * Tags: fold 0, round k 1+k, unfold 1+log2 p. Not chunked: one message per round (the
 * algorithm is for sizes where latency dominates); one scratch vector per member.
 * Bytes per rank (N = count * elem bytes): log2 p * N sent and received, plus N each way for
 * the fold pairs; log2 p (+1) reductions of count elements.
 *
 * Cost (alpha-beta, L = floor(log2 n), f = 1 if n is not a power of two):
 *   T = (L + 2f) * (alpha + N / beta); 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "algo/rd/rd.h"

enum { RD_START, RD_FOLD, RD_ROUND, RD_ROUND_WAIT, RD_FINISH, RD_UNFOLD, RD_EXTRA_SEND, RD_EXTRA_RECV, RD_DONE };

struct chorus_rd_allreduce {
  chorus_sched_t s;
  chorus_rd_shape_t sh;
  chorus_reduce_fn reduce;
  size_t bytes;
  const char* acc; /* this member's partial result: sendbuf until the first reduction */
  char* recvbuf;
  char* scratch;   /* N bytes: the partner's vector */
  int phase, round, partner;
  chorus_algo_xfer_t x[2];
};
typedef struct chorus_rd_allreduce rd_t;

static int xfers_done(const rd_t* e, int nx) {
  for (int i = 0; i < nx; i++)
    if (!chorus__algo_done(&e->x[i])) return 0;
  return 1;
}

/* recvbuf = first (+) second; the partial result is in recvbuf from now on. */
static void combine(rd_t* e, const void* first, const void* second) {
  if (e->s.count) e->reduce(e->recvbuf, first, second, e->s.count);
  e->acc = e->recvbuf;
}

chorus_status_t chorus__rd_allreduce_step(chorus_task_t* t, rd_t* e) {
  const chorus_sched_t* s = &e->s;
  uint32_t unfold_tag = 1u + (uint32_t)e->sh.rounds;
  chorus_status_t st = CHORUS_OK;
  for (;;) {
    switch (e->phase) {
      case RD_START:
        if (e->sh.vrank < 0) {
          st = chorus__sched_post(t, s, &e->x[0], 1, e->sh.fold_peer, s->sendbuf, e->bytes, 0);
          e->phase = RD_EXTRA_SEND;
        } else if (e->sh.fold_peer >= 0) {
          st = chorus__sched_post(t, s, &e->x[0], 0, e->sh.fold_peer, e->scratch, e->bytes, 0);
          e->phase = RD_FOLD;
        } else {
          e->phase = RD_ROUND;
        }
        break;
      case RD_FOLD:
        if (!xfers_done(e, 1)) return CHORUS_INPROGRESS;
        combine(e, e->acc, e->scratch); /* this member is 2i, the lower one */
        e->phase = RD_ROUND;
        break;
      case RD_ROUND:
        if (e->round == e->sh.rounds) {
          e->phase = RD_FINISH;
          break;
        }
        e->partner = chorus__rd_member(&e->sh, e->sh.vrank ^ (1 << e->round));
        st = chorus__sched_post(t, s, &e->x[0], 0, e->partner, e->scratch, e->bytes, 1u + (uint32_t)e->round);
        if (st == CHORUS_OK)
          st = chorus__sched_post(t, s, &e->x[1], 1, e->partner, e->acc, e->bytes, 1u + (uint32_t)e->round);
        e->phase = RD_ROUND_WAIT;
        break;
      case RD_ROUND_WAIT:
        if (!xfers_done(e, 2)) return CHORUS_INPROGRESS;
        if ((e->sh.vrank >> e->round) & 1)
          combine(e, e->scratch, e->acc);
        else
          combine(e, e->acc, e->scratch);
        e->round++;
        e->phase = RD_ROUND;
        break;
      case RD_FINISH:
        chorus__algo_copy(e->recvbuf, e->acc, e->bytes); /* one member: its input */
        chorus__sched_avg_finish(s, e->recvbuf, s->count);
        if (e->sh.fold_peer >= 0)
          st = chorus__sched_post(t, s, &e->x[0], 1, e->sh.fold_peer, e->recvbuf, e->bytes, unfold_tag);
        e->phase = e->sh.fold_peer >= 0 ? RD_UNFOLD : RD_DONE;
        break;
      case RD_UNFOLD:
        if (!xfers_done(e, 1)) return CHORUS_INPROGRESS;
        e->phase = RD_DONE;
        break;
      case RD_EXTRA_SEND: /* in place, the result must not land before the input has left */
        if (!xfers_done(e, 1)) return CHORUS_INPROGRESS;
        st = chorus__sched_post(t, s, &e->x[0], 0, e->sh.fold_peer, e->recvbuf, e->bytes, unfold_tag);
        e->phase = RD_EXTRA_RECV;
        break;
      case RD_EXTRA_RECV:
        if (!xfers_done(e, 1)) return CHORUS_INPROGRESS;
        e->phase = RD_DONE;
        break;
      default:
        return CHORUS_OK;
    }
    if (st < 0) return st;
  }
}

chorus_status_t chorus__rd_allreduce_start(const chorus_sched_t* s, rd_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  chorus_reduce_fn fn = chorus__algo_reduce_fn(s->dtype, s->op);
  if (!fn) return CHORUS_ERR_NOT_SUPPORTED;
  size_t bytes = s->count * s->elem_bytes;
  rd_t* e = calloc(1, sizeof(*e));
  if (!e) return CHORUS_ERR_NO_MEMORY;
  if (bytes && !(e->scratch = chorus__sched_scratch(s, bytes))) {
    free(e);
    return CHORUS_ERR_NO_MEMORY;
  }
  e->s = *s;
  chorus__rd_shape(&e->sh, s->group.me, s->group.size);
  e->reduce = fn;
  e->bytes = bytes;
  e->acc = s->sendbuf;
  e->recvbuf = s->recvbuf;
  *out = e;
  return CHORUS_OK;
}

void chorus__rd_allreduce_free(rd_t* e) {
  if (!e) return;
  chorus__sched_scratch_free(&e->s, e->scratch);
  free(e);
}

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t rd_allreduce_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  rd_t* e = NULL;
  chorus_status_t st = chorus__rd_allreduce_start(&s, &e);
  t->state = e;
  return st;
}

static chorus_status_t rd_allreduce_progress(chorus_task_t* t) {
  rd_t* e = t->state;
  chorus_status_t st = chorus__rd_allreduce_step(t, e);
  t->step = (size_t)e->round;
  return st;
}

static void rd_allreduce_fini(chorus_task_t* t) {
  chorus__rd_allreduce_free(t->state);
  t->state = NULL;
}

static double rd_allreduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  int intra = chorus__cost_rounds_inside_hosts(cx, t->nranks);
  double inter = chorus__rd_steps(t->nranks) - intra;
  double bytes = (double)t->args.count * (double)t->dtype_size, reduce = bytes / cx->reduce_bytes_per_us;
  return intra * (cx->intra.alpha_us + cx->handover_us + bytes / cx->intra.bytes_per_us + reduce) +
         inter * (cx->spread.alpha_us + bytes / cx->spread.bytes_per_us + reduce);
}

const chorus_algo_t chorus__algo_rd_allreduce = {
    .name = "rd",
    .desc = "recursive doubling: log2 n exchanges of the whole vector (non-powers of two fold first)",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = rd_allreduce_cost_us,
    .init = rd_allreduce_init,
    .progress = rd_allreduce_progress,
    .fini = rd_allreduce_fini,
};
