/*
 * hier/allgather.c - two-level allgather: cross hosts once per block, spread inside the host.
 * For H hosts of L ranks (n = H L), B = count elements of each rank, local index l, each block
 * cut into C pipeline chunks of E elements (chunk c: elements [c E, c E + E) of every block):
 *   1. inter: ring allgather over my rail (rail l, host order) of chunk c of my own block,
 *      straight into recvbuf: rail member h's chunk lands in the block of its comm rank;
 *   2. view chunk c of the n blocks of recvbuf in rail order, as a vector of n E elements:
 *      segment l' (H E elements) = chunk c of the blocks of rail l''s comm ranks, in host order;
 *   3. intra: allgather of that vector's segments over the host (block H E), so that every
 *      rank ends with every rail's chunks: by memory semantics when the host's ranks share its
 *      segment (algo/shm/group.h: in place, the pieces read and written where recvbuf has them),
 *      else a ring over chunk c's region of a scratch of n B elements (n E elements from n c E),
 *      packed from recvbuf before and unpacked into it after.
 * Step 1 of chunk c+1 crosses hosts while steps 2-3 of chunk c run inside the host (hier.h's
 * pipeline). Bytes that cross hosts per rank: (H-1) B sent and received, 1/L of the (n-1) B it
 * gathers (a flat ring over the host-ordered ring sends (n-1) B per rank over host boundaries on
 * the ranks at them).
 *
 * Cost (alpha-beta, S = E bytes a chunk, intra a1/b1, inter a2/b2): per chunk the L rails of a
 * host cross its link at once (each at b2/L), and the copies (the shm allgather's: n S per rank)
 * follow them, overlapped with the next chunk's crossing:
 *   inter = (H-1) (a2' + L S/b2), intra = the shm allgather's hand-overs + the copies (hier.h),
 *   T = inter + intra + (C-1) max(inter, intra),
 * a2' the alpha of messages that leave at once (cx->spread: the rails start together).
 *
 * Hosts of unequal size (3+1, 1+2+3) have no rails; the leader mode (HCCL's intra AG -> inter
 * AG) serves them, over a scratch of the n blocks in host order (hier.h):
 *   1. intra: allgather of the host's blocks into its bundle of the scratch;
 *   2. inter: the host leaders (local index h mod its size) alone: ring allgather of the
 *      bundles, blocks of the hosts' sizes;
 *   3. intra: broadcast of the whole scratch from the leader; then every rank copies it into
 *      recvbuf in rank order (the scratch is recvbuf itself when ranks are numbered by host).
 * Every host link carries the bundles of the other hosts once (n B minus the smallest bundle on
 * the busiest), as the host-ordered flat ring does, in H-1 steps instead of n-1:
 *   T = the shm allgather of the bundle + (H-1) a2 + (n S - Smin) / b2 + the shm broadcast of n S.
 * With H = 1 or one rank per host it is not offered; a forced hier runs the flat ring over the
 * host-ordered ring and logs it once. Scratch: n B elements without a shared segment (none on
 * equal hosts that share one; none in the leader mode when ranks are numbered by host).
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
  char* scratch;
  size_t pipe_elems;    /* E: elements of each block in a pipeline chunk (rails) */
  size_t* rail_counts;  /* H entries each: a chunk's blocks on the rail's ring (the ring runs */
  size_t* rail_displs;  /* one chunk at a time, so one pair serves them all) */
  chorus_seg_t* pieces; /* shm, n entries: a chunk in rail order, where recvbuf has it (the intra
                           level runs one chunk at a time too) */
  int shm;              /* the intra-host step by memory semantics */
  size_t* seg_first;    /* L entries each: the rails' segments of a chunk's vector */
  size_t* seg_len;
  int leader;           /* hosts of unequal size: the leader mode over a host-ordered scratch */
  size_t* counts;       /* leader mode, H entries each: the hosts' bundles (hier.h) */
  size_t* displs;
  chorus_hier_pipe_t pipe;
} hag_t;

static size_t chunk_first(const hag_t* h, size_t c) { return c * h->pipe_elems; }
static size_t chunk_elems(const hag_t* h, size_t c) {
  return chorus__min_sz(h->pipe_elems, h->whole.count - chunk_first(h, c));
}

/* Chunk c's region of the scratch (n E elements), and in it chunk c of rail l's block h. */
static char* scratch_region(const hag_t* h, size_t c) {
  return h->scratch + (size_t)h->at.H * (size_t)h->at.L * chunk_first(h, c) * h->whole.elem_bytes;
}
static char* scratch_block(const hag_t* h, size_t c, int l, int host) {
  return scratch_region(h, c) + ((size_t)l * (size_t)h->at.H + (size_t)host) * chunk_elems(h, c) * h->whole.elem_bytes;
}
/* Chunk c of the block of rail l's member h in recvbuf. */
static char* recv_block(const hag_t* h, size_t c, int l, int host) {
  size_t rank = (size_t)h->topo->rails[l * h->topo->nhosts + host];
  return (char*)h->whole.recvbuf + (rank * h->whole.count + chunk_first(h, c)) * h->whole.elem_bytes;
}

/* Leader mode, stage 0: my block into my host's bundle; 1: the leaders' bundles; 2: the whole
 * scratch from the leader. */
static chorus_status_t hag_leader_start(chorus_task_t* t, hag_t* h, chorus_sched_t* s, int stage,
                                        chorus_hier_run_t* run) {
  size_t es = h->whole.elem_bytes, B = h->whole.count;
  int host = h->topo->host_of[t->rank], members = h->at.host.size;
  char* bundle = h->scratch + h->displs[host] * es;
  s->block_of = NULL;
  if (stage == 1) {
    s->group = h->at.leaders;
    s->sendbuf = bundle;
    s->recvbuf = h->scratch;
    s->counts = h->counts;
    s->displs = h->displs;
    return chorus__hier_run_ring(s, CHORUS_RING_ALLGATHER, run);
  }
  s->group = h->at.host;
  if (stage == 2) {
    s->root = h->at.lead;
    s->sendbuf = s->recvbuf = h->scratch;
    s->count = (size_t)t->nranks * B;
    return h->shm ? chorus__hier_run_shm(t, s, CHORUS_HIER_SHM_BCAST, NULL, NULL, 0, run) : chorus__hier_run_bcast(s, run);
  }
  s->recvbuf = bundle;
  if (!h->shm) return chorus__hier_run_ring(s, CHORUS_RING_ALLGATHER, run);
  chorus__algo_copy(bundle + (size_t)h->at.l * B * es, h->whole.sendbuf, B * es);
  s->sendbuf = bundle; /* in place: my piece of the bundle is mine */
  s->count = (size_t)members * B;
  for (int l = 0; l < members; l++) {
    h->seg_first[l] = (size_t)l * B;
    h->seg_len[l] = B;
  }
  return chorus__hier_run_shm(t, s, CHORUS_HIER_SHM_AG, h->seg_first, h->seg_len, 0, run);
}

static chorus_status_t hag_start(chorus_task_t* t, void* ctx, int stage, size_t c, chorus_hier_run_t* run) {
  hag_t* h = ctx;
  chorus_sched_t s = h->whole;
  s.tag_base = chorus__hier_tag(stage, c);
  if (h->leader) return hag_leader_start(t, h, &s, stage, run);
  size_t es = h->whole.elem_bytes, first = chunk_first(h, c), E = chunk_elems(h, c);
  if (stage == 0) { /* inter: chunk c of my block over my rail, into the members' blocks */
    for (int host = 0; host < h->at.H; host++) {
      h->rail_counts[host] = E;
      h->rail_displs[host] = (size_t)h->at.rail.ranks[host] * h->whole.count + first;
    }
    s.group = h->at.rail;
    s.sendbuf = (const char*)h->whole.sendbuf + first * es;
    s.count = E;
    s.counts = h->rail_counts;
    s.displs = h->rail_displs;
    return chorus__hier_run_ring(&s, CHORUS_RING_ALLGATHER, run);
  }
  s.group = h->at.host;
  s.count = (size_t)h->at.H * E;
  s.block_of = NULL;
  if (!h->shm) {
    for (int host = 0; host < h->at.H; host++) /* pack my rail's chunks as segment l */
      chorus__algo_copy(scratch_block(h, c, h->at.l, host), recv_block(h, c, h->at.l, host), E * es);
    s.sendbuf = scratch_block(h, c, h->at.l, 0);
    s.recvbuf = scratch_region(h, c);
    return chorus__hier_run_ring(&s, CHORUS_RING_ALLGATHER, run);
  }
  for (int l = 0; l < h->at.L; l++)
    for (int host = 0; host < h->at.H; host++) {
      size_t j = (size_t)l * (size_t)h->at.H + (size_t)host;
      char* at = recv_block(h, c, l, host);
      h->pieces[j] = (chorus_seg_t){at, at, j * E, E};
    }
  s.sendbuf = NULL; /* in place in recvbuf, where the pieces say */
  s.recvbuf = NULL;
  s.segs = h->pieces;
  s.nsegs = (size_t)t->nranks;
  s.seg_at = 0;
  size_t seg = s.count;
  for (int l = 0; l < h->at.L; l++) {
    h->seg_first[l] = (size_t)l * seg;
    h->seg_len[l] = seg;
  }
  return chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_AG, h->seg_first, h->seg_len, 0, run);
}

static void hag_finish(void* ctx, int stage, size_t c) {
  hag_t* h = ctx;
  if (h->leader) {
    size_t block = h->whole.count * h->whole.elem_bytes;
    if (stage == 2 && h->scratch != (char*)h->whole.recvbuf) chorus__hier_reorder(h->topo, h->scratch, h->whole.recvbuf, block, 0);
    return;
  }
  if (stage != 1 || h->shm) return; /* the shm allgather wrote into recvbuf itself */
  size_t bytes = chunk_elems(h, c) * h->whole.elem_bytes;
  for (int l = 0; l < h->at.L; l++)
    if (l != h->at.l)
      for (int host = 0; host < h->at.H; host++) chorus__algo_copy(recv_block(h, c, l, host), scratch_block(h, c, l, host), bytes);
}

static chorus_status_t hag_progress(chorus_task_t* t) {
  hag_t* h = t->state;
  return chorus__hier_pipe_step(t, &h->pipe);
}

static void hag_fini(chorus_task_t* t) {
  hag_t* h = t->state;
  if (h) {
    chorus__hier_pipe_free(&h->pipe);
    if (h->scratch != (char*)h->whole.recvbuf) chorus__task_scratch_free(t, h->scratch);
    free(h->seg_first);
    free(h->counts);
    free(h->rail_counts);
    free(h->pieces);
  }
  free(h);
  t->state = NULL;
}

/* The leader mode's state: the bundles, and the scratch (recvbuf itself when ranks are
 * numbered by host). */
static chorus_status_t hag_leader_init(chorus_task_t* t, hag_t* h) {
  const chorus_topo_t* topo = h->topo;
  size_t bytes = (size_t)t->nranks * h->whole.count * h->whole.elem_bytes;
  h->leader = 1;
  h->counts = calloc(2 * (size_t)topo->nhosts, sizeof(size_t));
  h->scratch = topo->identity && bytes ? h->whole.recvbuf : chorus__task_scratch(t, bytes); /* recvbuf may be NULL at 0 */
  if (!h->counts || !h->scratch) return CHORUS_ERR_NO_MEMORY;
  h->displs = h->counts + topo->nhosts;
  chorus__hier_host_bundles(topo, h->whole.count, h->counts, h->displs);
  h->pipe = chorus__hier_leader_pipe(h->at.l == h->at.lead, hag_start, hag_finish, h);
  CH_DEBUG(ALGO, t->rank, "allgather hier: hosts of unequal size: through the host leaders, intra-host phases %s",
           h->shm ? "by memory semantics" : "over the shared rings (no segment)");
  return CHORUS_OK;
}

static chorus_status_t hag_init(chorus_task_t* t) {
  hag_t* h = calloc(1, sizeof(*h));
  if (!h) return CHORUS_ERR_NO_MEMORY;
  t->state = h;
  const chorus_topo_t* topo = t->topo;
  h->topo = topo;
  chorus__sched_of_task(t, chorus__topo_ring(topo, t->rank), &h->whole);
  chorus_status_t st = CHORUS_OK;
  if (!chorus__hier_leaders_ok(t)) {
    CH_INFO(ALGO, t->rank, "allgather hier: one host, or one rank per host: flat ring instead");
    chorus_sched_t s = h->whole;
    s.block_of = s.group.ranks;
    st = chorus__hier_run_ring(&s, CHORUS_RING_ALLGATHER, &h->pipe.flat);
  } else {
    h->at = chorus__hier_place(t);
    h->seg_first = calloc(2 * (size_t)h->at.L, sizeof(size_t));
    if (!h->seg_first) st = CHORUS_ERR_NO_MEMORY;
    else h->seg_len = h->seg_first + h->at.L;
    h->shm = chorus__shm_group_ok(t, &(chorus_sched_t){.group = h->at.host, .elem_bytes = h->whole.elem_bytes});
    if (st >= 0 && !chorus__hier_shape_ok(t)) {
      st = hag_leader_init(t, h);
    } else if (st >= 0) {
      size_t bytes = (size_t)t->nranks * h->whole.count * h->whole.elem_bytes;
      h->scratch = h->shm ? NULL : chorus__task_scratch(t, bytes);
      h->pieces = h->shm ? calloc((size_t)t->nranks, sizeof(*h->pieces)) : NULL;
      h->rail_counts = calloc(2 * (size_t)h->at.H, sizeof(size_t));
      if ((h->shm ? !h->pieces : bytes && !h->scratch) || !h->rail_counts) st = CHORUS_ERR_NO_MEMORY;
      else h->rail_displs = h->rail_counts + h->at.H;
      h->pipe_elems = chorus__hier_block_pipe_elems(h->whole.count, h->whole.elem_bytes, h->at.H, t->pipe_unit_bytes);
      h->pipe = (chorus_hier_pipe_t){.nchunks = chorus__hier_chunks(h->whole.count, h->pipe_elems),
                                     .nstages = 2,
                                     .level = {CHORUS_HIER_INTER, CHORUS_HIER_INTRA},
                                     .active = {1, 1},
                                     .start = hag_start,
                                     .finish = hag_finish,
                                     .ctx = h};
    }
    chorus__hier_pipe_setup(&h->pipe);
  }
  if (st < 0) hag_fini(t);
  return st;
}

static double hag_leader_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx, double block, size_t slot) {
  double n = t->nranks, L = cx->max_local, H = cx->nhosts, smallest = chorus__hier_smallest_host(t->topo);
  return chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)(L * block), slot), 2.0 * L * block) +
         (H - 1.0) * cx->inter.alpha_us + (n - smallest) * block / cx->inter.bytes_per_us +
         chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)(n * block), slot), 2.0 * n * block);
}

static double hag_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!chorus__hier_leaders_ok(t)) return DBL_MAX;
  int L = cx->max_local, H = cx->nhosts;
  double block = (double)t->args.count * (double)t->dtype_size;
  size_t slot = chorus__hier_cost_slot_bytes(t);
  if (!chorus__hier_shape_ok(t)) return hag_leader_cost_us(t, cx, block, slot);
  double n = t->nranks, touched = n * block + block; /* recvbuf, sendbuf */
  size_t E = chorus__hier_block_pipe_elems(t->args.count, t->dtype_size, H, t->pipe_unit_bytes);
  double chunks = (double)chorus__hier_chunks(t->args.count, E), S = block / chunks;
  double inter = (H - 1.0) * (cx->spread.alpha_us + L * S / cx->inter.bytes_per_us);
  double intra = chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)(H * S), slot), 0.0) +
                 chorus__hier_copy_us(cx, n * S, touched);
  return chorus__hier_pipelined_us(inter, intra, chunks);
}

const chorus_algo_t chorus__algo_hier_allgather = {
    .name = "hier",
    .desc = "two-level: inter-host ring allgather per rail, intra-host allgather of the rails' blocks (hosts of "
            "unequal size: intra-host allgather, the leaders' ring, intra-host broadcast)",
    .coll = CH_COLL_ALLGATHER,
    .supported = NULL,
    .cost_us = hag_cost_us,
    .init = hag_init,
    .progress = hag_progress,
    .fini = hag_fini,
};
