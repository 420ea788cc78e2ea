/*
 * hier/broadcast.c - two-level broadcast: every local rank carries 1/L of the buffer across
 * hosts, on its own rail. For H hosts of L ranks, per pipeline chunk c of the buffer (cut into
 * L segments as the ring allreduce halves cut it, chorus__ring_segment):
 *   1. intra, on the root's host only: binomial broadcast of chunk c over the host from the
 *      root's local index;
 *   2. inter, every local rank l: binomial broadcast over rail l of segment (l+1) mod L of chunk
 *      c (chorus__ring_rs_owned), rooted at the rail member on the root's host;
 *   3. intra, on every host but the root's: ring allgather half (CHORUS_RING_ALLREDUCE_AG) over
 *      the host spreads the L segments.
 * The buffer travels as bytes (a broadcast only moves data), so any dtype works.
 * Bytes that cross hosts per rank: N/L received (off the root's host), and N/L sent per child
 * in the rail's tree (at most ceil(log2 H)); a flat binomial tree over the host-ordered ring
 * sends N per child across hosts from the few ranks at host boundaries.
 * When the host's ranks share its segment (the usual case), steps 1 and 3 run by memory
 * semantics instead (algo/shm/group.h: the root stages each piece once and its host-mates copy
 * it out; every rank stages its segment once and the others copy it out), and local rank l
 * carries segment l.
 *
 * Pipelining: chunk c+1 is spread on the root's host while chunk c crosses hosts, and chunk c
 * is spread on the other hosts while c+1 crosses. Each level runs one phase at a time in a
 * fixed order identical on every rank (hier/pipe.c): intra 1(0), 1(1), ... on the root's host
 * and 3(0), 3(1), ... elsewhere; inter 2(0), 2(1), ...; 2(c) waits for 1(c), 3(c) for 2(c).
 *
 * Cost (alpha-beta, C chunks of P = N/C bytes, intra a1/b1, inter a2/b2, lg = ceil(log2)):
 *   t1 = shm broadcast of P, t2 = lg(H) (a2 + P/b2) (the L rails of a host share its link,
 *   P/L each), t3 = shm allgather of P (shm.h's prices), T = t1 + t2 + t3 + (C-1) max(t1, t2, t3).
 * Hosts of unequal size have no rails: there one head per host carries the whole buffer (the
 * root on its host, the host's leader elsewhere, core/topo.h): 2. binomial broadcast of chunk c
 * among the heads from the root's host, 3. broadcast of chunk c from the head over its host
 * (memory semantics, or a binomial tree); t2 = lg(H) (a2 + P/b2), t3 = shm broadcast of P.
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
  chorus_sched_t whole; /* the call as bytes: count = N, uint8 */
  chorus_hier_place_t at;
  int root_host, root_local;
  int shm;              /* intra-host steps by memory semantics */
  int heads;            /* hosts of unequal size: one head per host carries the whole chunk */
  int* head_ranks;      /* heads: the root on its host, each other host's leader */
  chorus_group_t head_group;
  size_t* seg_first;    /* L entries each: the segments of a chunk */
  size_t* seg_len;
  size_t pipe, nchunks;
  chorus_hier_pipe_t p;
} hbc_t;

/* Hosts of unequal size: the heads pass the chunk along a binomial tree (stage 1), then each
 * head spreads it over its host (stage 2). The root reads its send buffer in both. */
static chorus_status_t start_heads_stage(chorus_task_t* t, hbc_t* h, chorus_sched_t* s, int stage, size_t off,
                                         chorus_hier_run_t* run) {
  int head_local = t->topo->host_of[t->rank] == h->root_host ? h->root_local : h->at.lead;
  if (t->rank == t->args.root) s->sendbuf = (const char*)h->whole.sendbuf + off;
  if (stage == 1) {
    s->group = h->head_group;
    s->root = h->root_host;
    return chorus__hier_run_bcast(s, run);
  }
  s->group = h->at.host;
  s->root = head_local;
  return h->shm ? chorus__hier_run_shm(t, s, CHORUS_HIER_SHM_BCAST, NULL, NULL, 0, run) : chorus__hier_run_bcast(s, run);
}

static chorus_status_t hbc_start(chorus_task_t* t, void* ctx, int stage, size_t chunk, chorus_hier_run_t* run) {
  hbc_t* h = ctx;
  size_t off = chunk * h->pipe, len = chorus__min_sz(h->pipe, h->whole.count - off);
  chorus_sched_t s = h->whole;
  s.tag_base = chorus__hier_tag(stage, chunk);
  s.recvbuf = (char*)h->whole.recvbuf + off;
  s.sendbuf = s.recvbuf;
  s.count = len;
  if (h->heads) return start_heads_stage(t, h, &s, stage, off, run);
  if (stage == 0) { /* the root's host: from the root */
    s.group = h->at.host;
    s.root = h->root_local;
    if (h->at.host.me == h->root_local) s.sendbuf = (const char*)h->whole.sendbuf + off;
    return h->shm ? chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_BCAST, NULL, NULL, 0, run) : chorus__hier_run_bcast(&s, run);
  }
  if (stage == 1) { /* my segment over my rail, from the root's host */
    size_t first, seg;
    chorus__ring_segment(len, h->at.L, h->shm ? h->at.l : chorus__ring_rs_owned(h->at.l, h->at.L), &first, &seg);
    s.group = h->at.rail;
    s.root = h->root_host;
    s.recvbuf = (char*)s.recvbuf + first;
    s.sendbuf = s.recvbuf;
    s.count = seg;
    return chorus__hier_run_bcast(&s, run);
  }
  s.group = h->at.host; /* the other hosts: spread the segments */
  if (!h->shm) return chorus__hier_run_ring(&s, CHORUS_RING_ALLREDUCE_AG, run);
  for (int i = 0; i < h->at.L; i++) chorus__ring_segment(len, h->at.L, i, &h->seg_first[i], &h->seg_len[i]);
  return chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_AG, h->seg_first, h->seg_len, h->whole.count, run);
}

static chorus_status_t hbc_progress(chorus_task_t* t) {
  hbc_t* h = t->state;
  return chorus__hier_pipe_step(t, &h->p);
}

static void hbc_fini(chorus_task_t* t) {
  hbc_t* h = t->state;
  if (h) {
    chorus__hier_pipe_free(&h->p);
    free(h->seg_first);
    free(h->head_ranks);
  }
  free(h);
  t->state = NULL;
}

static chorus_status_t hbc_init(chorus_task_t* t) {
  hbc_t* h = calloc(1, sizeof(*h));
  if (!h) return CHORUS_ERR_NO_MEMORY;
  t->state = h;
  const chorus_topo_t* topo = t->topo;
  chorus__sched_of_task(t, chorus__topo_ring(topo, t->rank), &h->whole);
  chorus_status_t st = CHORUS_OK;
  if (!chorus__hier_leaders_ok(t)) {
    CH_INFO(ALGO, t->rank, "broadcast hier: one host, or one rank per host: flat binomial tree instead");
    st = chorus__hier_run_bcast(&h->whole, &h->p.flat);
    if (st < 0) hbc_fini(t);
    return st;
  }
  h->whole.count *= h->whole.elem_bytes;
  h->whole.elem_bytes = 1;
  h->whole.dtype = CHORUS_UINT8;
  h->whole.op = CHORUS_SUM; /* the allgather half needs a kernel, never runs it */
  h->at = chorus__hier_place(t);
  h->root_host = topo->host_of[t->args.root];
  h->root_local = topo->local_of[t->args.root];
  h->pipe = chorus__hier_pipe_elems(h->whole.count, 1, h->at.L, t->pipe_unit_bytes);
  h->nchunks = chorus__div_up(h->whole.count, h->pipe);
  h->shm = chorus__shm_group_ok(t, &(chorus_sched_t){.group = h->at.host, .elem_bytes = 1});
  h->seg_first = calloc(2 * (size_t)h->at.L, sizeof(size_t));
  if (!h->seg_first) {
    hbc_fini(t);
    return CHORUS_ERR_NO_MEMORY;
  }
  h->seg_len = h->seg_first + h->at.L;
  int on_root_host = topo->host_of[t->rank] == h->root_host;
  h->heads = !chorus__hier_shape_ok(t);
  if (h->heads && chorus__hier_heads(t, &h->head_ranks, &h->head_group) < 0) {
    hbc_fini(t);
    return CHORUS_ERR_NO_MEMORY;
  }
  int is_head = !h->heads || h->head_group.me >= 0;
  h->p = (chorus_hier_pipe_t){.nchunks = h->nchunks,
                              .nstages = 3,
                              .level = {CHORUS_HIER_INTRA, CHORUS_HIER_INTER, CHORUS_HIER_INTRA},
                              .active = {on_root_host && !h->heads, is_head, !on_root_host || h->heads},
                              .start = hbc_start,
                              .ctx = h};
  chorus__hier_pipe_setup(&h->p);
  return CHORUS_OK;
}

static double hbc_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!chorus__hier_leaders_ok(t)) return DBL_MAX;
  int L = cx->max_local, H = cx->nhosts;
  size_t bytes = t->args.count * t->dtype_size;
  if (bytes == 0) return 0.0;
  size_t pipe = chorus__hier_pipe_elems(bytes, 1, L, t->pipe_unit_bytes);
  double chunks = (double)chorus__div_up(bytes, pipe), P = (double)bytes / chunks;
  size_t slot = chorus__hier_cost_slot_bytes(t);
  if (!chorus__hier_shape_ok(t)) { /* the heads: the whole chunk along the tree, then the host */
    double across = chorus__ceil_log2(H) * (cx->inter.alpha_us + P / cx->inter.bytes_per_us);
    double spread = chorus__shm_cost_us(cx, 1, chorus__div_up((size_t)P, slot), 2.0 * P);
    return chorus__hier_pipelined_us(across, spread, chunks);
  }
  double t1 = chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)P, slot), 2.0 * P);
  double t2 = chorus__ceil_log2(H) * (cx->inter.alpha_us + P / cx->inter.bytes_per_us);
  double t3 = chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)P / (size_t)L, slot), P);
  double slowest = t1 > t2 ? t1 : t2;
  if (t3 > slowest) slowest = t3;
  return t1 + t2 + t3 + (chunks - 1.0) * slowest;
}

const chorus_algo_t chorus__algo_hier_broadcast = {
    .name = "hier",
    .desc = "two-level: intra-host tree on the root's host, inter-host tree per rail of 1/L each, intra-host allgather, pipelined",
    .coll = CH_COLL_BROADCAST,
    .supported = NULL,
    .cost_us = hbc_cost_us,
    .init = hbc_init,
    .progress = hbc_progress,
    .fini = hbc_fini,
};
