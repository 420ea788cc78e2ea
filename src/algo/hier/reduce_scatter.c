/*
 * hier/reduce_scatter.c - two-level reduce_scatter: reduce inside the host first, so that only
 * what is left crosses hosts. For H hosts of L ranks (n = H L), B = count elements per block,
 * local index l:
 *   1. pack sendbuf into a scratch in rail order: segment l' (H B elements) = the blocks of the
 *      comm ranks of rail l', in host order;
 *   2. intra: ring reduce_scatter of the segments over the host (block H B, left undivided):
 *      local rank l ends with segment l reduced over its host, in a second scratch of H B;
 *   3. inter: ring reduce_scatter of those H blocks over rail l (member h owns block h, which
 *      is the block of comm rank rails[l][h]: for me, my own), into recvbuf; avg divides here
 *      by n, once.
 * Bytes that cross hosts per rank: (H-1) B sent and received (a flat ring over the host-ordered
 * ring sends (n-1) B per rank, across host boundaries on the ranks at them). Not pipelined
 * across the levels (each ring pipelines by chunk inside itself): the inter phase waits for the
 * whole intra one.
 *
 * Cost (alpha-beta, S = B bytes, intra a1/b1, inter a2/b2; the pack copy not modelled):
 *   T = (L-1) (a1 + H S/b1) + (H-1) (a2 + S/b2).
 * Requires H > 1, L > 1 and equal L on every host; otherwise it is not offered, and a forced
 * hier runs the flat ring over the host-ordered ring and logs it once. Scratch: (n + H) B.
 */
#include <float.h>
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/hier/hier.h"
#include "algo/ring/ring.h"
#include "core/log.h"

typedef struct {
  chorus_sched_t whole;
  const chorus_topo_t* topo;
  chorus_hier_place_t at;
  char* packed;  /* n B: the input in rail order */
  char* reduced; /* H B: my segment reduced over the host */
  chorus_hier_pipe_t pipe;
} hrs_t;

static chorus_status_t hrs_start(chorus_task_t* t, void* ctx, int stage, size_t chunk, chorus_hier_run_t* run) {
  (void)t;
  hrs_t* h = ctx;
  size_t block = h->whole.count * h->whole.elem_bytes;
  chorus_sched_t s = h->whole;
  s.tag_base = chorus__hier_tag(stage, chunk);
  s.block_of = NULL;
  if (stage == 0) { /* pack, then reduce over the host */
    for (int l = 0; l < h->at.L; l++)
      for (int host = 0; host < h->at.H; host++) {
        int rank = h->topo->rails[l * h->topo->nhosts + host];
        chorus__algo_copy(h->packed + ((size_t)l * (size_t)h->at.H + (size_t)host) * block,
                          (const char*)h->whole.sendbuf + (size_t)rank * block, block);
      }
    s.group = h->at.host;
    s.count = (size_t)h->at.H * h->whole.count;
    s.sendbuf = h->packed;
    s.recvbuf = h->reduced;
    s.avg_divisor = 0; /* partial sums: the inter phase divides */
    return chorus__hier_run_ring(&s, CHORUS_RING_REDUCE_SCATTER, run);
  }
  s.group = h->at.rail;
  s.sendbuf = h->reduced;
  return chorus__hier_run_ring(&s, CHORUS_RING_REDUCE_SCATTER, run);
}

static chorus_status_t hrs_progress(chorus_task_t* t) {
  hrs_t* h = t->state;
  return chorus__hier_pipe_step(t, &h->pipe);
}

static void hrs_fini(chorus_task_t* t) {
  hrs_t* h = t->state;
  if (h) {
    chorus__hier_pipe_free(&h->pipe);
    free(h->packed);
  }
  free(h);
  t->state = NULL;
}

static chorus_status_t hrs_init(chorus_task_t* t) {
  hrs_t* h = calloc(1, sizeof(*h));
  if (!h) return CHORUS_ERR_NO_MEMORY;
  t->state = h;
  const chorus_topo_t* topo = t->topo;
  h->topo = topo;
  chorus__sched_of_task(t, chorus__topo_ring(topo, t->rank), &h->whole);
  chorus_status_t st = CHORUS_OK;
  if (!chorus__hier_shape_ok(t)) {
    CH_INFO(ALGO, t->rank, "reduce_scatter hier: hosts of unequal size (or one host, or one rank per host): flat ring instead");
    chorus_sched_t s = h->whole;
    s.block_of = s.group.ranks;
    st = chorus__hier_run_ring(&s, CHORUS_RING_REDUCE_SCATTER, &h->pipe.flat);
  } else {
    h->at = chorus__hier_place(t);
    size_t block = h->whole.count * h->whole.elem_bytes;
    size_t bytes = ((size_t)t->nranks + (size_t)h->at.H) * block;
    h->packed = malloc(bytes ? bytes : 1);
    if (!h->packed) st = CHORUS_ERR_NO_MEMORY;
    else h->reduced = h->packed + (size_t)t->nranks * block;
    h->pipe = (chorus_hier_pipe_t){.nchunks = 1,
                                   .nstages = 2,
                                   .level = {CHORUS_HIER_INTRA, CHORUS_HIER_INTER},
                                   .active = {1, 1},
                                   .start = hrs_start,
                                   .ctx = h};
    chorus__hier_pipe_setup(&h->pipe);
  }
  if (st < 0) hrs_fini(t);
  return st;
}

static double hrs_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!chorus__hier_shape_ok(t)) return DBL_MAX;
  int L = cx->max_local, H = cx->nhosts;
  double block = (double)t->args.count * (double)t->dtype_size;
  return (L - 1.0) * (cx->intra.alpha_us + H * block / cx->intra.bytes_per_us) +
         (H - 1.0) * (cx->inter.alpha_us + block / cx->inter.bytes_per_us);
}

const chorus_algo_t chorus__algo_hier_reduce_scatter = {
    .name = "hier",
    .desc = "two-level: intra-host ring reduce-scatter of the rails' blocks, inter-host ring reduce-scatter per rail",
    .coll = CH_COLL_REDUCE_SCATTER,
    .supported = chorus__algo_reduce_supported,
    .cost_us = hrs_cost_us,
    .init = hrs_init,
    .progress = hrs_progress,
    .fini = hrs_fini,
};
