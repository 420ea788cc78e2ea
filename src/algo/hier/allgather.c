/*
 * hier/allgather.c - two-level allgather: cross hosts once per block, spread inside the host.
 * For H hosts of L ranks (n = H L), B = count elements of each rank, local index l:
 *   1. inter: ring allgather over my rail (rail l, host order) of my own block, straight into
 *      recvbuf: rail member h's block lands at the position of its comm rank;
 *   2. pack the H blocks of my rail, in host order, as segment l (H B elements) of a scratch of
 *      n B elements;
 *   3. intra: allgather of the segments over the host (block H B), in place in the scratch,
 *      so segment l' holds rail l''s blocks in host order: by memory semantics when the host's
 *      ranks share its segment (algo/shm/group.h), else a ring;
 *   4. unpack every other segment l' into recvbuf at the comm ranks of rail l'.
 * Bytes that cross hosts per rank: (H-1) B sent and received, 1/L of the (n-1) B it gathers
 * (a flat ring over the host-ordered ring sends (n-1) B per rank over host boundaries on the
 * ranks at them). Not pipelined across the levels (each ring pipelines by chunk inside itself):
 * the inter phase is one ring over the whole blocks, and the intra one follows it.
 *
 * Cost (alpha-beta, S = B bytes, intra a1/b1, inter a2/b2): the L rails of a host cross its
 * link at once (each at b2/L), and the copies (the shm allgather's, the pack and the unpack: 2 n
 * S per rank) follow them:
 *   T = (H-1) (a2' + L S/b2) + the shm allgather's hand-overs + the copies (hier.h's price),
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
 * host-ordered ring and logs it once. Scratch: n B elements (none in the leader mode when ranks
 * are numbered by host).
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
  int shm;              /* the intra-host step by memory semantics */
  size_t* seg_first;    /* L entries each: the rails' segments of the scratch */
  size_t* seg_len;
  int leader;           /* hosts of unequal size: the leader mode over a host-ordered scratch */
  size_t* counts;       /* leader mode, H entries each: the hosts' bundles (hier.h) */
  size_t* displs;
  chorus_hier_pipe_t pipe;
} hag_t;

/* The position of rail l's block h in the scratch, and in recvbuf. */
static char* scratch_block(const hag_t* h, int l, int host) {
  return h->scratch + ((size_t)l * (size_t)h->at.H + (size_t)host) * h->whole.count * h->whole.elem_bytes;
}
static char* recv_block(const hag_t* h, int l, int host) {
  int rank = h->topo->rails[l * h->topo->nhosts + host];
  return (char*)h->whole.recvbuf + (size_t)rank * h->whole.count * h->whole.elem_bytes;
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

static chorus_status_t hag_start(chorus_task_t* t, void* ctx, int stage, size_t chunk, chorus_hier_run_t* run) {
  hag_t* h = ctx;
  size_t block = h->whole.count * h->whole.elem_bytes;
  chorus_sched_t s = h->whole;
  s.tag_base = chorus__hier_tag(stage, chunk);
  if (h->leader) return hag_leader_start(t, h, &s, stage, run);
  if (stage == 0) { /* inter: my block over my rail, into recvbuf */
    s.group = h->at.rail;
    s.block_of = h->at.rail.ranks;
    return chorus__hier_run_ring(&s, CHORUS_RING_ALLGATHER, run);
  }
  for (int host = 0; host < h->at.H; host++) /* pack my rail's blocks as segment l */
    chorus__algo_copy(scratch_block(h, h->at.l, host), recv_block(h, h->at.l, host), block);
  s.group = h->at.host;
  s.count = (size_t)h->at.H * h->whole.count;
  s.sendbuf = scratch_block(h, h->at.l, 0);
  s.recvbuf = h->scratch;
  s.block_of = NULL;
  if (!h->shm) return chorus__hier_run_ring(&s, CHORUS_RING_ALLGATHER, run);
  s.sendbuf = h->scratch; /* in place: segment l of the scratch is mine */
  size_t seg = s.count;
  for (int l = 0; l < h->at.L; l++) {
    h->seg_first[l] = (size_t)l * seg;
    h->seg_len[l] = seg;
  }
  return chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_AG, h->seg_first, h->seg_len, 0, run);
}

static void hag_finish(void* ctx, int stage, size_t chunk) {
  (void)chunk;
  hag_t* h = ctx;
  size_t block = h->whole.count * h->whole.elem_bytes;
  if (h->leader) {
    if (stage == 2 && h->scratch != (char*)h->whole.recvbuf) chorus__hier_reorder(h->topo, h->scratch, h->whole.recvbuf, block, 0);
    return;
  }
  if (stage != 1) return;
  for (int l = 0; l < h->at.L; l++)
    if (l != h->at.l)
      for (int host = 0; host < h->at.H; host++) chorus__algo_copy(recv_block(h, l, host), scratch_block(h, l, host), block);
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
      h->scratch = chorus__task_scratch(t, bytes);
      if (!h->scratch) st = CHORUS_ERR_NO_MEMORY;
      h->pipe = (chorus_hier_pipe_t){.nchunks = 1,
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
  double n = t->nranks, touched = 2.0 * n * block + block; /* recvbuf, scratch, sendbuf */
  return (H - 1.0) * (cx->spread.alpha_us + L * block / cx->inter.bytes_per_us) +
         chorus__shm_cost_us(cx, 2, chorus__div_up((size_t)(H * block), slot), 0.0) +
         chorus__hier_copy_us(cx, 2.0 * n * block, touched);
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
