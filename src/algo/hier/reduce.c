/*
 * hier/reduce.c - two-level reduce: reduce inside each host, cross hosts with 1/L of the data
 * per rank towards the root's host, gather there. For H hosts of L ranks, per pipeline chunk c
 * of the buffer (cut into L segments, chorus__ring_segment):
 *   1. intra, every host: ring reduce-scatter half (CHORUS_RING_ALLREDUCE_RS, undivided): local
 *      rank l ends with segment (l+1) mod L of chunk c reduced over its host;
 *   2. inter, every local rank l: binomial reduce of that segment over rail l to the member on
 *      the root's host; avg divides there by n, once;
 *   3. intra, on the root's host only: ring allgather half (CHORUS_RING_ALLREDUCE_AG) over the
 *      host brings the L segments to every rank of that host, the root included.
 * The root works in its recvbuf; every other rank in a scratch of N bytes (its recvbuf is not
 * significant, chorus.h, and may be NULL).
 * When the host's ranks share its segment (the usual case), steps 1 and 3 run by memory
 * semantics instead (algo/shm/group.h), and local rank l carries segment l.
 * Bytes that cross hosts per rank: N/L sent (off the root's host), and N/L received per child
 * in the rail's tree (at most ceil(log2 H)); a flat binomial tree over the host-ordered ring
 * moves N per child across hosts through the few ranks at host boundaries.
 *
 * Pipelining: chunk c crosses hosts while chunk c+1 is reduced inside the hosts and chunk c-1
 * is gathered on the root's host. Each level runs one phase at a time in a fixed order
 * identical on every rank (hier/pipe.c): intra 1(0), 1(1), 3(0), 1(2), 3(1), ..., 3(C-1) on the
 * root's host, 1(0), 1(1), ... elsewhere; inter 2(0), 2(1), ...; 2(c) waits for 1(c), 3(c) for
 * 2(c).
 *
 * Cost (alpha-beta, C chunks of P = N/C bytes, intra a1/b1, inter a2/b2, lg = ceil(log2)):
 *   t1, t3 = shm reduce-scatter and allgather of P (shm.h's prices), t2 = lg(H) (a2 + P/b2) (the
 *   L rails of a host share its link, P/L each),
 *   T = t1 + t2 + t3 + (C-1) max(t1 + t3, t2)   (the root's host runs both intra phases).
 * Hosts of unequal size have no rails: there one head per host carries the whole buffer (the
 * root on its host, the host's leader elsewhere, hier.h): 1. reduce of chunk c to the head over
 * its host (memory semantics, or a binomial tree), 2. binomial reduce of it among the heads to
 * the root, where avg divides; t1 = shm reduce of P, t2 = lg(H) (a2 + P/b2).
 * Requires H > 1 and L > 1 on some host; otherwise it is not offered, and a forced hier runs
 * the flat binomial tree over the host-ordered ring and logs it once.
 */
#include <float.h>
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/hier/hier.h"
#include "algo/ring/ring.h"
#include "algo/shm/group.h"
#include "algo/shm/shm.h"
#include "core/log.h"

typedef struct {
  chorus_sched_t whole;
  chorus_hier_place_t at;
  int root_host;
  char* work;    /* where the chunks are reduced: the root's recvbuf, else `scratch` */
  char* scratch;
  int shm;              /* intra-host steps by memory semantics */
  int heads;            /* hosts of unequal size: one head per host carries the whole chunk */
  int* head_ranks;      /* heads: the root on its host, each other host's leader */
  chorus_group_t head_group;
  size_t* seg_first;    /* L entries each: the segments of a chunk */
  size_t* seg_len;
  size_t pipe, nchunks;
  chorus_hier_pipe_t p;
} hrd_t;

/* Hosts of unequal size: each host reduces the chunk to its head (stage 0), the heads reduce
 * it along a binomial tree to the root (stage 1), where avg divides. */
static chorus_status_t start_heads_stage(chorus_task_t* t, hrd_t* h, chorus_sched_t* s, int stage, size_t off,
                                         chorus_hier_run_t* run) {
  if (stage == 1) {
    s->group = h->head_group;
    s->root = h->root_host;
    s->sendbuf = s->recvbuf;
    return chorus__hier_run_reduce(s, run);
  }
  int on_root_host = t->topo->host_of[t->rank] == h->root_host;
  s->group = h->at.host;
  s->root = on_root_host ? t->topo->local_of[t->args.root] : h->at.lead;
  s->sendbuf = (const char*)h->whole.sendbuf + off;
  s->avg_divisor = 0; /* partial sums: the heads' tree divides */
  return h->shm ? chorus__hier_run_shm(t, s, CHORUS_HIER_SHM_REDUCE, NULL, NULL, 0, run) : chorus__hier_run_reduce(s, run);
}

static chorus_status_t hrd_start(chorus_task_t* t, void* ctx, int stage, size_t chunk, chorus_hier_run_t* run) {
  hrd_t* h = ctx;
  size_t es = h->whole.elem_bytes, first_elem = chunk * h->pipe;
  size_t len = chorus__min_sz(h->pipe, h->whole.count - first_elem);
  chorus_sched_t s = h->whole;
  s.tag_base = chorus__hier_tag(stage, chunk);
  s.recvbuf = h->work + first_elem * es;
  s.count = len;
  if (h->heads) return start_heads_stage(t, h, &s, stage, first_elem * es, run);
  for (int i = 0; i < h->at.L; i++) chorus__ring_segment(len, h->at.L, i, &h->seg_first[i], &h->seg_len[i]);
  if (stage == 0) { /* reduce-scatter the chunk over the host */
    s.group = h->at.host;
    s.sendbuf = (const char*)h->whole.sendbuf + first_elem * es;
    s.avg_divisor = 0; /* partial sums: the inter phase divides */
    if (!h->shm) return chorus__hier_run_ring(&s, CHORUS_RING_ALLREDUCE_RS, run);
    return chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_RS, h->seg_first, h->seg_len, 0, run);
  }
  if (stage == 1) { /* my segment over my rail, to the root's host */
    size_t first, seg;
    chorus__ring_segment(len, h->at.L, h->shm ? h->at.l : chorus__ring_rs_owned(h->at.l, h->at.L), &first, &seg);
    s.group = h->at.rail;
    s.root = h->root_host;
    s.recvbuf = (char*)s.recvbuf + first * es;
    s.sendbuf = s.recvbuf;
    s.count = seg;
    return chorus__hier_run_reduce(&s, run);
  }
  s.group = h->at.host; /* the root's host: gather the segments */
  s.sendbuf = s.recvbuf;
  if (!h->shm) return chorus__hier_run_ring(&s, CHORUS_RING_ALLREDUCE_AG, run);
  return chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_AG, h->seg_first, h->seg_len, 0, run);
}

static chorus_status_t hrd_progress(chorus_task_t* t) {
  hrd_t* h = t->state;
  return chorus__hier_pipe_step(t, &h->p);
}

static void hrd_fini(chorus_task_t* t) {
  hrd_t* h = t->state;
  if (h) {
    chorus__hier_pipe_free(&h->p);
    chorus__task_scratch_free(t, h->scratch);
    free(h->seg_first);
    free(h->head_ranks);
  }
  free(h);
  t->state = NULL;
}

static chorus_status_t hrd_init(chorus_task_t* t) {
  hrd_t* h = calloc(1, sizeof(*h));
  if (!h) return CHORUS_ERR_NO_MEMORY;
  t->state = h;
  const chorus_topo_t* topo = t->topo;
  chorus__sched_of_task(t, chorus__topo_ring(topo, t->rank), &h->whole);
  if (!chorus__hier_leaders_ok(t)) {
    CH_INFO(ALGO, t->rank, "reduce hier: one host, or one rank per host: flat binomial tree instead");
    chorus_status_t st = chorus__hier_run_reduce(&h->whole, &h->p.flat);
    if (st < 0) hrd_fini(t);
    return st;
  }
  h->at = chorus__hier_place(t);
  h->root_host = topo->host_of[t->args.root];
  h->pipe = chorus__hier_pipe_elems(h->whole.count, h->whole.elem_bytes, h->at.L, t->pipe_unit_bytes);
  h->nchunks = chorus__div_up(h->whole.count, h->pipe);
  h->shm = chorus__shm_group_ok(t, &(chorus_sched_t){.group = h->at.host, .elem_bytes = h->whole.elem_bytes});
  h->seg_first = calloc(2 * (size_t)h->at.L, sizeof(size_t));
  if (!h->seg_first) {
    hrd_fini(t);
    return CHORUS_ERR_NO_MEMORY;
  }
  h->seg_len = h->seg_first + h->at.L;
  if (t->rank == t->args.root) {
    h->work = h->whole.recvbuf;
  } else {
    size_t bytes = h->whole.count * h->whole.elem_bytes;
    h->scratch = chorus__task_scratch(t, bytes);
    if (!h->scratch) {
      hrd_fini(t);
      return CHORUS_ERR_NO_MEMORY;
    }
    h->work = h->scratch;
  }
  int on_root_host = topo->host_of[t->rank] == h->root_host;
  h->heads = !chorus__hier_shape_ok(t);
  if (h->heads && chorus__hier_heads(t, &h->head_ranks, &h->head_group) < 0) {
    hrd_fini(t);
    return CHORUS_ERR_NO_MEMORY;
  }
  int is_head = !h->heads || h->head_group.me >= 0;
  h->p = (chorus_hier_pipe_t){.nchunks = h->nchunks,
                              .nstages = 3,
                              .level = {CHORUS_HIER_INTRA, CHORUS_HIER_INTER, CHORUS_HIER_INTRA},
                              .active = {1, is_head, on_root_host && !h->heads},
                              .start = hrd_start,
                              .ctx = h};
  chorus__hier_pipe_setup(&h->p);
  return CHORUS_OK;
}

static double hrd_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!chorus__hier_leaders_ok(t)) return DBL_MAX;
  int L = cx->max_local, H = cx->nhosts;
  size_t bytes = t->args.count * t->dtype_size;
  if (bytes == 0) return 0.0;
  size_t pipe = chorus__hier_pipe_elems(t->args.count, t->dtype_size, L, t->pipe_unit_bytes) * t->dtype_size;
  double chunks = (double)chorus__div_up(bytes, pipe), P = (double)bytes / chunks;
  size_t slot = chorus__hier_cost_slot_bytes(t);
  if (!chorus__hier_shape_ok(t)) { /* the heads: the host's reduce, then the whole chunk along the tree */
    double gather = chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)P, slot), L * P);
    double across = chorus__ceil_log2(H) * (cx->inter.alpha_us + P / cx->inter.bytes_per_us + P / cx->reduce_bytes_per_us);
    return chorus__hier_pipelined_us(gather, across, chunks);
  }
  double t1 = chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)P, slot), 2.0 * P);
  double t3 = chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)P / (size_t)L, slot), P);
  double t2 = chorus__ceil_log2(H) * (cx->inter.alpha_us + P / cx->inter.bytes_per_us);
  double slowest = t1 + t3 > t2 ? t1 + t3 : t2;
  return t1 + t2 + t3 + (chunks - 1.0) * slowest;
}

const chorus_algo_t chorus__algo_hier_reduce = {
    .name = "hier",
    .desc = "two-level: intra-host reduce-scatter, inter-host tree per rail of 1/L each, allgather on the root's host, pipelined",
    .coll = CH_COLL_REDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = hrd_cost_us,
    .init = hrd_init,
    .progress = hrd_progress,
    .fini = hrd_fini,
};
