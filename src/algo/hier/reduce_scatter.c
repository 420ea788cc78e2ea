/*
 * hier/reduce_scatter.c - two-level reduce_scatter: reduce inside the host first, so that only
 * what is left crosses hosts. For H hosts of L ranks (n = H L), B = count elements per block,
 * local index l, each block cut into C pipeline chunks of E elements (chunk c: elements
 * [c E, c E + E) of every block):
 *   1. view chunk c of sendbuf's blocks by rail, as a vector of n E elements: a segment (H E
 *      elements) per rail = chunk c of the blocks of the comm ranks of that rail, in host order.
 *      When the host's ranks share its segment, a list of pieces of sendbuf in which each rank
 *      puts its own rail's segment first (the memory-semantics engine places the pieces by
 *      member in its slots, so the ranks' views may differ); else packed in rail order into
 *      chunk c's region of a scratch (n E elements from n c E);
 *   2. intra: reduce_scatter of that vector's segments over the host (block H E, left
 *      undivided): local rank l ends with rail l's segment reduced over its host, in chunk c's
 *      part of a scratch of H B (H E elements from H c E): by memory semantics (algo/shm/group.h:
 *      its members read their inputs where the list says), else by a ring;
 *   3. inter: ring reduce_scatter of those H chunks over rail l (member h owns chunk h, which
 *      is in the block of comm rank rails[l][h]: for me, my own), into chunk c of recvbuf; avg
 *      divides here by n, once.
 * Step 3 of chunk c crosses hosts while steps 1-2 of chunk c+1 run inside the host (hier.h's
 * pipeline). Bytes that cross hosts per rank: (H-1) B sent and received (a flat ring over the
 * host-ordered ring sends (n-1) B per rank, across host boundaries on the ranks at them).
 *
 * Cost (alpha-beta, S = E bytes a chunk, intra a1/b1, inter a2/b2): per chunk the copies (the
 * shm reduce-scatter's staging and reduction: 2 n S per rank), then the L rails of a
 * host crossing its link at once (each at b2/L), overlapped with the next chunk's copies:
 *   intra = the shm reduce-scatter's hand-overs + the copies (hier.h), inter = (H-1) (a2' + L S/b2),
 *   T = intra + inter + (C-1) max(intra, inter),
 * a2' the alpha of messages that leave at once (cx->spread: the rails start together).
 *
 * Hosts of unequal size (3+1, 1+2+3) have no rails; the leader mode serves them, with the n
 * blocks in host order (hier.h) between its steps:
 *   1. intra: reduce of the whole input (n B) to the host's leader (local index h mod its size),
 *      left undivided; the leader puts the blocks in host order;
 *   2. inter: the leaders alone: ring reduce_scatter of the hosts' bundles, blocks of the hosts'
 *      sizes; each leader ends with its host's bundle reduced over all hosts (avg divides here);
 *   3. intra: broadcast of the bundle from the leader; every rank keeps its block.
 * The busiest host link carries n B minus the smallest bundle, as the host-ordered flat ring
 * does, in H-1 steps instead of n-1:
 *   T = the shm reduce of n S + (H-1) a2 + (n S - Smin) / b2 + the shm broadcast of Lmax S.
 * With H = 1 or one rank per host it is not offered; a forced hier runs the flat ring over the
 * host-ordered ring and logs it once. Scratch: H B ((n + H) B without a shared segment); in
 * the leader mode Lmax B, and on leaders n B (2 n B when ranks are not numbered by host).
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
  const chorus_topo_t* topo;
  chorus_hier_place_t at;
  char* packed;  /* without shm, n B: the input in rail order, chunk by chunk */
  char* reduced; /* H B: my rail's segments reduced over the host, chunk by chunk */
  size_t pipe_elems; /* E: elements of each block in a pipeline chunk (rails) */
  chorus_seg_t* pieces; /* shm, n entries: a chunk's input by rail, mine first, where it is in sendbuf
                           (the intra level runs one chunk at a time, so one list serves them all) */
  int shm;              /* the intra-host step by memory semantics */
  size_t* seg_first;    /* L entries each: the rails' segments of a chunk's vector */
  size_t* seg_len;
  int leader;           /* hosts of unequal size: the leader mode */
  size_t* counts;       /* leader mode, H entries each: the hosts' bundles (hier.h) */
  size_t* displs;
  char* by_host;        /* leader mode: the host's sum in host order (reduced itself when ranks are numbered by host) */
  char* bundle;         /* leader mode: this host's bundle, reduced over all hosts */
  chorus_hier_pipe_t pipe;
} hrs_t;

/* Leader mode, stage 0: the whole input reduced to the leader; 1: the leaders' bundles; 2: my
 * host's bundle from the leader. */
static chorus_status_t hrs_leader_start(chorus_task_t* t, hrs_t* h, chorus_sched_t* s, int stage,
                                        chorus_hier_run_t* run) {
  size_t B = h->whole.count;
  if (stage == 1) {
    s->group = h->at.leaders;
    s->sendbuf = h->by_host;
    s->recvbuf = h->bundle;
    s->counts = h->counts;
    s->displs = h->displs;
    return chorus__hier_run_ring(s, CHORUS_RING_REDUCE_SCATTER, run);
  }
  s->group = h->at.host;
  s->root = h->at.lead;
  s->avg_divisor = 0; /* partial sums (stage 0), finished values (stage 2): the leaders' ring divides */
  if (stage == 2) {
    s->sendbuf = s->recvbuf = h->bundle;
    s->count = (size_t)h->at.host.size * B;
    return h->shm ? chorus__hier_run_shm(t, s, CHORUS_HIER_SHM_BCAST, NULL, NULL, 0, run) : chorus__hier_run_bcast(s, run);
  }
  s->recvbuf = h->reduced;
  s->count = (size_t)t->nranks * B;
  return h->shm ? chorus__hier_run_shm(t, s, CHORUS_HIER_SHM_REDUCE, NULL, NULL, 0, run) : chorus__hier_run_reduce(s, run);
}

static void hrs_leader_finish(void* ctx, int stage, size_t chunk) {
  (void)chunk;
  hrs_t* h = ctx;
  size_t block = h->whole.count * h->whole.elem_bytes;
  if (stage == 0 && h->by_host != h->reduced) /* the leader, ranks not numbered by host */
    chorus__hier_reorder(h->topo, h->by_host, h->reduced, block, 1);
  if (stage == 2) chorus__algo_copy(h->whole.recvbuf, h->bundle + (size_t)h->at.l * block, block);
}

static size_t chunk_first(const hrs_t* h, size_t c) { return c * h->pipe_elems; }
static size_t chunk_elems(const hrs_t* h, size_t c) {
  return chorus__min_sz(h->pipe_elems, h->whole.count - chunk_first(h, c));
}

/* Chunk c's region of the packed input (n E elements, without shm), and the H E elements
 * that I reduce inside the host and carry over my rail. */
static char* packed_region(const hrs_t* h, size_t c) {
  return h->packed + (size_t)h->at.H * (size_t)h->at.L * chunk_first(h, c) * h->whole.elem_bytes;
}
static char* reduced_chunk(const hrs_t* h, size_t c) {
  return h->reduced + (size_t)h->at.H * chunk_first(h, c) * h->whole.elem_bytes;
}

/* The memory-semantics view of chunk c: rail (l + v) mod L's segment v-th, so that mine comes
 * first and its reduction lands at the start of the receive buffer (reduced_chunk). */
static void view_by_rail(hrs_t* h, size_t c) {
  size_t es = h->whole.elem_bytes, first = chunk_first(h, c), E = chunk_elems(h, c), H = (size_t)h->at.H;
  for (int v = 0; v < h->at.L; v++) {
    int rail = (h->at.l + v) % h->at.L;
    h->seg_first[rail] = (size_t)v * H * E;
    h->seg_len[rail] = H * E;
    for (size_t host = 0; host < H; host++) {
      size_t rank = (size_t)h->topo->rails[(size_t)rail * H + host], j = (size_t)v * H + host;
      h->pieces[j] = (chorus_seg_t){(const char*)h->whole.sendbuf + (rank * h->whole.count + first) * es, NULL, j * E, E};
    }
  }
}

static chorus_status_t hrs_start(chorus_task_t* t, void* ctx, int stage, size_t c, chorus_hier_run_t* run) {
  hrs_t* h = ctx;
  chorus_sched_t s = h->whole;
  s.tag_base = chorus__hier_tag(stage, c);
  s.block_of = NULL;
  if (h->leader) return hrs_leader_start(t, h, &s, stage, run);
  size_t es = h->whole.elem_bytes, first = chunk_first(h, c), E = chunk_elems(h, c);
  if (stage == 0) { /* chunk c by rail, then reduced over the host */
    s.group = h->at.host;
    s.count = (size_t)h->at.H * E;
    s.recvbuf = reduced_chunk(h, c);
    s.avg_divisor = 0; /* partial sums: the inter phase divides */
    if (h->shm) {
      view_by_rail(h, c);
      s.sendbuf = NULL; /* the input is where the pieces say */
      s.segs = h->pieces;
      s.nsegs = (size_t)t->nranks;
      s.seg_at = 0;
      return chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_RS, h->seg_first, h->seg_len, 0, run);
    }
    char* region = packed_region(h, c);
    for (int l = 0; l < h->at.L; l++)
      for (int host = 0; host < h->at.H; host++) {
        size_t rank = (size_t)h->topo->rails[l * h->topo->nhosts + host], j = (size_t)l * (size_t)h->at.H + (size_t)host;
        chorus__algo_copy(region + j * E * es, (const char*)h->whole.sendbuf + (rank * h->whole.count + first) * es, E * es);
      }
    s.sendbuf = region;
    return chorus__hier_run_ring(&s, CHORUS_RING_REDUCE_SCATTER, run);
  }
  s.group = h->at.rail;
  s.sendbuf = reduced_chunk(h, c);
  s.recvbuf = (char*)h->whole.recvbuf + first * es;
  s.count = E;
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
    chorus__task_scratch_free(t, h->packed);
    free(h->seg_first);
    free(h->pieces);
    free(h->counts);
  }
  free(h);
  t->state = NULL;
}

/* The leader mode's state: the bundles, and one allocation for the bundle and, on the leader,
 * the host's sum and its copy in host order (when ranks are not numbered by host); the others
 * pass no receive buffer to the reduce, whose result only the root keeps. */
static chorus_status_t hrs_leader_init(chorus_task_t* t, hrs_t* h) {
  const chorus_topo_t* topo = h->topo;
  size_t block = h->whole.count * h->whole.elem_bytes, n = (size_t)t->nranks;
  int leads = h->at.l == h->at.lead, reorders = leads && !topo->identity;
  size_t sums = (leads ? n : 0) + (reorders ? n : 0), bytes = (sums + (size_t)h->at.L) * block;
  h->leader = 1;
  h->counts = calloc(2 * (size_t)topo->nhosts, sizeof(size_t));
  h->packed = chorus__task_scratch(t, bytes);
  if (!h->counts || !h->packed) return CHORUS_ERR_NO_MEMORY;
  h->displs = h->counts + topo->nhosts;
  chorus__hier_host_bundles(topo, h->whole.count, h->counts, h->displs);
  h->reduced = leads ? h->packed : NULL;
  h->by_host = reorders ? h->packed + n * block : h->reduced;
  h->bundle = h->packed + sums * block;
  h->pipe = chorus__hier_leader_pipe(leads, hrs_start, hrs_leader_finish, h);
  CH_DEBUG(ALGO, t->rank, "reduce_scatter hier: hosts of unequal size: through the host leaders, intra-host phases %s",
           h->shm ? "by memory semantics" : "over the shared rings (no segment)");
  return CHORUS_OK;
}

static chorus_status_t hrs_init(chorus_task_t* t) {
  hrs_t* h = calloc(1, sizeof(*h));
  if (!h) return CHORUS_ERR_NO_MEMORY;
  t->state = h;
  const chorus_topo_t* topo = t->topo;
  h->topo = topo;
  chorus__sched_of_task(t, chorus__topo_ring(topo, t->rank), &h->whole);
  chorus_status_t st = CHORUS_OK;
  if (!chorus__hier_leaders_ok(t)) {
    CH_INFO(ALGO, t->rank, "reduce_scatter hier: one host, or one rank per host: flat ring instead");
    chorus_sched_t s = h->whole;
    s.block_of = s.group.ranks;
    st = chorus__hier_run_ring(&s, CHORUS_RING_REDUCE_SCATTER, &h->pipe.flat);
  } else {
    h->at = chorus__hier_place(t);
    h->seg_first = calloc(2 * (size_t)h->at.L, sizeof(size_t));
    if (!h->seg_first) st = CHORUS_ERR_NO_MEMORY;
    else h->seg_len = h->seg_first + h->at.L;
    h->shm = chorus__shm_group_ok(t, &(chorus_sched_t){.group = h->at.host, .elem_bytes = h->whole.elem_bytes});
    if (st >= 0 && !chorus__hier_shape_ok(t)) {
      st = hrs_leader_init(t, h);
    } else if (st >= 0) {
      size_t block = h->whole.count * h->whole.elem_bytes, packed = h->shm ? 0 : (size_t)t->nranks * block;
      h->packed = chorus__task_scratch(t, packed + (size_t)h->at.H * block);
      h->pieces = h->shm ? calloc((size_t)t->nranks, sizeof(*h->pieces)) : NULL;
      if (!h->packed || (h->shm && !h->pieces)) st = CHORUS_ERR_NO_MEMORY;
      else h->reduced = h->packed + packed;
      h->pipe_elems = chorus__hier_block_pipe_elems(h->whole.count, h->whole.elem_bytes, h->at.H, t->pipe_unit_bytes);
      h->pipe = (chorus_hier_pipe_t){.nchunks = chorus__hier_chunks(h->whole.count, h->pipe_elems),
                                     .nstages = 2,
                                     .level = {CHORUS_HIER_INTRA, CHORUS_HIER_INTER},
                                     .active = {1, 1},
                                     .start = hrs_start,
                                     .ctx = h};
    }
    chorus__hier_pipe_setup(&h->pipe);
  }
  if (st < 0) hrs_fini(t);
  return st;
}

static double hrs_leader_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx, double block, size_t slot) {
  double n = t->nranks, L = cx->max_local, H = cx->nhosts, smallest = chorus__hier_smallest_host(t->topo);
  return chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)(n * block), slot), L * n * block) +
         (H - 1.0) * cx->inter.alpha_us + (n - smallest) * block / cx->inter.bytes_per_us +
         chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)(L * block), slot), 2.0 * L * block);
}

static double hrs_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!chorus__hier_leaders_ok(t)) return DBL_MAX;
  int L = cx->max_local, H = cx->nhosts;
  double block = (double)t->args.count * (double)t->dtype_size;
  size_t slot = chorus__hier_cost_slot_bytes(t);
  if (!chorus__hier_shape_ok(t)) return hrs_leader_cost_us(t, cx, block, slot);
  double n = t->nranks, touched = (n + H + 1.0) * block; /* sendbuf, the scratch, recvbuf */
  size_t E = chorus__hier_block_pipe_elems(t->args.count, t->dtype_size, H, t->pipe_unit_bytes);
  double chunks = (double)chorus__hier_chunks(t->args.count, E), S = block / chunks;
  double intra = chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)(L * H * S), slot), 0.0) +
                 chorus__hier_copy_us(cx, 2.0 * n * S, touched);
  double inter = (H - 1.0) * (cx->spread.alpha_us + L * S / cx->inter.bytes_per_us);
  return chorus__hier_pipelined_us(intra, inter, chunks);
}

const chorus_algo_t chorus__algo_hier_reduce_scatter = {
    .name = "hier",
    .desc = "two-level: intra-host reduce-scatter of the rails' blocks, inter-host ring reduce-scatter per rail "
            "(hosts of unequal size: intra-host reduce, the leaders' ring, intra-host broadcast)",
    .coll = CH_COLL_REDUCE_SCATTER,
    .supported = chorus__algo_reduce_supported,
    .cost_us = hrs_cost_us,
    .init = hrs_init,
    .progress = hrs_progress,
    .fini = hrs_fini,
};
