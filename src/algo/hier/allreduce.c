/*
 * hier/allreduce.c - two-level allreduce: reduce inside each host, cross hosts with only what
 * must cross, spread inside the host again (the HCCL scheme). For H hosts of L ranks, per
 * pipeline chunk c of the buffer (cut into L segments):
 *   1. intra RS(c): ring reduce-scatter over the host's ranks (shared memory); local rank l
 *      ends with segment (l+1) mod L reduced over its host;
 *   2. inter AR(c): allreduce of that segment over rail l (the ranks of local index l, one per
 *      host), by a flat engine (ring by default; chosen by cost over the inter-host link, or
 *      forced: CHORUS_ALGO=allreduce:hier/<engine>); avg divides here, once;
 *   3. intra AG(c): ring allgather of the segments over the host.
 * Every rank's sockets carry only 1/L of the data: 2(H-1)/H * N/L per rank crosses hosts, and
 * every host link carries 2(H-1)/H * N, the same as the best flat ring, but spread over L
 * rails instead of one ring edge per host, and free of intra-host hops.
 *
 * Pipelining: chunk c+1 is reduced inside the host while chunk c crosses hosts, and chunk c is
 * spread while c+1 crosses. Phases that talk to the same peers must post in the same order on
 * every rank, so each level runs one phase at a time in a fixed order: intra RS0, RS1, AG0,
 * RS2, AG1, ..., AG(C-1); inter AR0, AR1, ..., AR(C-1). AG(c) waits for AR(c); AR(c) for RS(c).
 * Bitwise identical on every rank: each segment is summed inside each host in ring order, then
 * across hosts by the inter engine (identical on all rail members), then copied.
 *
 * Cost (alpha-beta, S = N bytes, intra link a1/b1, inter a2/b2, C chunks):
 *   T ~ (C + 1) * max(2(L-1) a1 + (L-1)/L S/C / b1, T_inter(S/(L C))) with T_inter the engine's.
 * Requires H > 1, L > 1 and equal L on every host; otherwise it is not offered (selection falls
 * back to a flat algorithm; a forced hier runs the flat ring and logs it once).
 */
#include <float.h>
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/hier/hier.h"
#include "algo/ring/ring.h"
#include "core/log.h"

/* Pipeline chunks: about HIER_TARGET_CHUNKS of them, each giving every local rank between a
 * quarter and 32 of the communicator's pipelining units (CHORUS_BUFF_SIZE: 64 KiB to 8 MiB by
 * default), so that small calls are one chunk and huge ones do not hold huge phases. */
#define HIER_TARGET_CHUNKS 8

enum { TAG_INTRA = 1u << 28, TAG_INTER = 2u << 28 };

typedef struct {
  chorus_sched_t whole;  /* the call: buffers, count, op */
  chorus_group_t host, rail;
  int L, l;
  size_t pipe_elems, nchunks;
  const chorus_ar_engine_t* eng;
  /* intra level: position in the fixed sequence of 2C phases, the running phase */
  size_t intra_pos;
  chorus_ring_t* intra;
  size_t rs_done; /* chunks whose intra RS finished */
  /* inter level */
  void* inter;
  size_t inter_started, inter_done;
  chorus_ring_t* flat; /* uneven hosts, forced: the flat ring instead */
} hier_t;

static size_t chunk_first(const hier_t* h, size_t c) { return c * h->pipe_elems; }
static size_t chunk_elems(const hier_t* h, size_t c) {
  return chorus__min_sz(h->pipe_elems, h->whole.count - chunk_first(h, c));
}

/* Phase j of the intra sequence: RS(0), then RS(k+1), AG(k) for k < C-1, then AG(C-1). */
static void intra_phase(const hier_t* h, size_t j, int* is_rs, size_t* chunk) {
  if (j == 0) {
    *is_rs = 1;
    *chunk = 0;
  } else if (j == 2 * h->nchunks - 1) {
    *is_rs = 0;
    *chunk = h->nchunks - 1;
  } else {
    *is_rs = (j - 1) % 2 == 0;
    *chunk = (j - 1) / 2 + (*is_rs ? 1 : 0);
  }
}

static chorus_status_t start_intra(hier_t* h, int is_rs, size_t c) {
  size_t off = chunk_first(h, c) * h->whole.elem_bytes;
  chorus_sched_t s = h->whole;
  s.group = h->host;
  s.sendbuf = is_rs ? (const char*)h->whole.sendbuf + off : (char*)h->whole.recvbuf + off;
  s.recvbuf = (char*)h->whole.recvbuf + off;
  s.count = chunk_elems(h, c);
  s.avg_divisor = 0; /* partial sums: the inter phase divides */
  s.tag_base = TAG_INTRA + (uint32_t)((2 * c + (is_rs ? 0 : 1)) & 0xfff) * 0x10000u;
  return chorus__ring_start(&s, is_rs ? CHORUS_RING_ALLREDUCE_RS : CHORUS_RING_ALLREDUCE_AG, &h->intra);
}

static chorus_status_t start_inter(hier_t* h, size_t c) {
  size_t first, len;
  chorus__ring_segment(chunk_elems(h, c), h->L, chorus__ring_rs_owned(h->l, h->L), &first, &len);
  chorus_sched_t s = h->whole;
  s.group = h->rail;
  s.recvbuf = (char*)h->whole.recvbuf + (chunk_first(h, c) + first) * h->whole.elem_bytes;
  s.sendbuf = s.recvbuf;
  s.count = len;
  s.tag_base = TAG_INTER + (uint32_t)(c & 0xfff) * 0x10000u;
  return h->eng->start(&s, &h->inter);
}

/* Advances the inter level; starts the next AR once its chunk is reduced in the host. */
static chorus_status_t drive_inter(chorus_task_t* t, hier_t* h, int* moved) {
  if (h->inter) {
    chorus_status_t st = h->eng->step(t, h->inter);
    if (st < 0 || st == CHORUS_INPROGRESS) return st < 0 ? st : CHORUS_OK;
    h->eng->free(h->inter);
    h->inter = NULL;
    h->inter_done++;
    *moved = 1;
  }
  if (h->inter_started < h->nchunks && h->rs_done > h->inter_started) {
    chorus_status_t st = start_inter(h, h->inter_started++);
    if (st < 0) return st;
    *moved = 1;
  }
  return CHORUS_OK;
}

static chorus_status_t drive_intra(chorus_task_t* t, hier_t* h, int* moved) {
  int is_rs;
  size_t c;
  if (h->intra_pos == 2 * h->nchunks) return CHORUS_OK;
  intra_phase(h, h->intra_pos, &is_rs, &c);
  if (!h->intra) {
    if (!is_rs && h->inter_done <= c) return CHORUS_OK; /* AG(c) spreads what AR(c) made */
    chorus_status_t st = start_intra(h, is_rs, c);
    if (st < 0) return st;
    *moved = 1;
  }
  chorus_status_t st = chorus__ring_step(t, h->intra);
  if (st < 0 || st == CHORUS_INPROGRESS) return st < 0 ? st : CHORUS_OK;
  chorus__ring_free(h->intra);
  h->intra = NULL;
  if (is_rs) h->rs_done = c + 1;
  h->intra_pos++;
  *moved = 1;
  return CHORUS_OK;
}

static chorus_status_t hier_progress(chorus_task_t* t) {
  hier_t* h = t->state;
  if (h->flat) return chorus__ring_step(t, h->flat);
  int moved;
  do {
    moved = 0;
    chorus_status_t st = drive_inter(t, h, &moved);
    if (st >= 0) st = drive_intra(t, h, &moved);
    if (st < 0) return st;
    if (moved) t->phase++;
  } while (moved);
  return h->intra_pos == 2 * h->nchunks && h->inter_done == h->nchunks ? CHORUS_OK : CHORUS_INPROGRESS;
}

static void hier_fini(chorus_task_t* t) {
  hier_t* h = t->state;
  if (h) {
    chorus__ring_free(h->intra);
    chorus__ring_free(h->flat);
    if (h->inter) h->eng->free(h->inter);
  }
  free(h);
  t->state = NULL;
}

/* The inter-host engine: forced by name, else the cheapest on the inter-host link. */
static const chorus_ar_engine_t* pick_engine(const chorus_task_t* t, const chorus_cost_ctx_t* cx, double seg_bytes) {
  if (t->sub_algo && t->sub_algo[0]) return chorus__hier_ar_engine(t->sub_algo);
  const chorus_ar_engine_t* best = chorus__hier_ar_engines[0];
  double best_us = best->cost_us(seg_bytes, cx->nhosts, &cx->inter);
  for (size_t i = 1; i < chorus__hier_nar_engines; i++) {
    double us = chorus__hier_ar_engines[i]->cost_us(seg_bytes, cx->nhosts, &cx->inter);
    if (us < best_us) {
      best_us = us;
      best = chorus__hier_ar_engines[i];
    }
  }
  return best;
}

static size_t pipe_elems_for(size_t count, size_t elem_bytes, int L, size_t unit_bytes) {
  size_t total = count * elem_bytes, per_rank = total / (size_t)L / HIER_TARGET_CHUNKS;
  if (per_rank < unit_bytes / 4) per_rank = unit_bytes / 4;
  if (per_rank > unit_bytes * 32) per_rank = unit_bytes * 32;
  size_t elems = per_rank * (size_t)L / elem_bytes;
  return elems ? elems : 1;
}

static chorus_status_t hier_init(chorus_task_t* t) {
  hier_t* h = calloc(1, sizeof(*h));
  if (!h) return CHORUS_ERR_NO_MEMORY;
  t->state = h;
  const chorus_topo_t* topo = t->topo;
  chorus__sched_of_task(t, chorus__topo_ring(topo, t->rank), &h->whole);
  if (!chorus__hier_shape_ok(t)) { /* forced on a shape it cannot serve: the flat ring */
    CH_INFO(ALGO, t->rank, "allreduce hier: hosts of unequal size (or one host, or one rank per host): flat ring instead");
    chorus_status_t st = chorus__ring_start(&h->whole, CHORUS_RING_ALLREDUCE, &h->flat);
    if (st < 0) hier_fini(t);
    return st;
  }
  h->L = topo->max_local;
  h->l = topo->local_of[t->rank];
  h->host = chorus__topo_host_group(topo, topo->host_of[t->rank], t->rank);
  h->rail = chorus__topo_rail(topo, h->l, t->rank);
  h->pipe_elems = pipe_elems_for(h->whole.count, h->whole.elem_bytes, h->L, h->whole.chunk_bytes);
  h->nchunks = chorus__div_up(h->whole.count, h->pipe_elems);
  h->eng = t->cost ? pick_engine(t, t->cost, (double)(h->pipe_elems * h->whole.elem_bytes) / h->L)
                   : chorus__hier_ar_engines[0];
  if (!h->eng) {
    hier_fini(t);
    return CHORUS_ERR_NOT_SUPPORTED;
  }
  return CHORUS_OK;
}

static const char* sub_name(size_t i) { return i < chorus__hier_nar_engines ? chorus__hier_ar_engines[i]->name : NULL; }

/* Offered on every shape, so that a forced hier on uneven hosts falls back (init) instead of
 * failing; the cost keeps automatic selection to the shapes it serves. */
static double hier_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!chorus__hier_shape_ok(t)) return DBL_MAX;
  int L = cx->max_local, H = cx->nhosts;
  double bytes = (double)t->args.count * (double)t->dtype_size;
  size_t pipe = pipe_elems_for(t->args.count, t->dtype_size, L, t->chunk_bytes) * t->dtype_size;
  double chunks = bytes > 0 ? (double)chorus__div_up((size_t)bytes, pipe) : 1.0, per_chunk = bytes / chunks;
  double intra = 2.0 * (L - 1) * cx->intra.alpha_us + (L - 1.0) / L * per_chunk / cx->intra.bytes_per_us;
  const chorus_ar_engine_t* eng = pick_engine(t, cx, per_chunk / L);
  double inter = eng ? eng->cost_us(per_chunk / L, H, &cx->inter) : 0.0;
  return (chunks + 1.0) * (intra > inter ? intra : inter);
}

const chorus_algo_t chorus__algo_hier_allreduce = {
    .name = "hier",
    .desc = "two-level: intra-host reduce-scatter, inter-host allreduce per rail, intra-host allgather, pipelined",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = hier_cost_us,
    .init = hier_init,
    .progress = hier_progress,
    .fini = hier_fini,
    .sub_name = sub_name,
};
