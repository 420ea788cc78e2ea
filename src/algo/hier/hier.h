/*
 * hier.h - what the two-level (hierarchical) algorithms share: the communicator's host group
 * and rail of this rank, and the flat allreduce engines an inter-host phase can run over a
 * rail (chosen by cost, or forced with CHORUS_ALGO=allreduce:hier/<engine>).
 */
#ifndef CHORUS_ALGO_HIER_H
#define CHORUS_ALGO_HIER_H

#include <stdlib.h>

#include "algo/common.h"

/* A flat allreduce engine, as a phase: in place on s->recvbuf (s->sendbuf == s->recvbuf). */
typedef struct {
  const char* name;
  chorus_status_t (*start)(const chorus_sched_t* s, void** state);
  chorus_status_t (*step)(chorus_task_t* t, void* state);
  void (*free)(void* state);
  /* Predicted time of an allreduce of `bytes` over n members on `link`. */
  double (*cost_us)(double bytes, int n, const chorus_cost_ctx_t* cx, const chorus_link_model_t* link);
  int automatic; /* a candidate of the automatic choice (else only when forced) */
} chorus_ar_engine_t;

extern const chorus_ar_engine_t* const chorus__hier_ar_engines[];
extern const size_t chorus__hier_nar_engines;
const chorus_ar_engine_t* chorus__hier_ar_engine(const char* name); /* NULL when unknown */
/* The compressed engine (zip/zip.h): the inter-host phase of a call with a codec, whatever the
 * inner engine CHORUS_ALGO names; not one of the engines above. */
extern const chorus_ar_engine_t chorus__hier_zip_engine;

/* This rank's place in the two levels: H hosts of L ranks, its local index l, the ranks of its
 * host and its rail (the ranks of local index l, one per host); the local index of its host's
 * leader and the leaders of all hosts (core/topo.h). */
typedef struct {
  int H, L, l, lead;
  chorus_group_t host, rail, leaders;
} chorus_hier_place_t;

static inline chorus_hier_place_t chorus__hier_place(const chorus_task_t* t) {
  const chorus_topo_t* topo = t->topo;
  int h = topo->host_of[t->rank];
  chorus_hier_place_t at = {topo->nhosts, topo->max_local, topo->local_of[t->rank], chorus__topo_leader_local(topo, h),
                            {0, -1, NULL}, {0, -1, NULL}, {0, -1, NULL}};
  at.host = chorus__topo_host_group(topo, h, t->rank);
  at.rail = chorus__topo_rail(topo, at.l, t->rank);
  at.leaders = chorus__topo_leaders(topo, t->rank);
  return at;
}

/* 1 when the rails apply: several hosts, several ranks on each, all equal. */
static inline int chorus__hier_shape_ok(const chorus_task_t* t) { return chorus__topo_has_rails(t->topo); }

/* One head per host for a rooted call on hosts of unequal size (broadcast, reduce): the root
 * on its host, the host's leader elsewhere. *ranks gets nhosts entries (the caller frees them),
 * *group the heads with this rank's index (its host's) or -1. -1 when out of memory. */
static inline int chorus__hier_heads(const chorus_task_t* t, int** ranks, chorus_group_t* group) {
  const chorus_topo_t* topo = t->topo;
  int root_host = topo->host_of[t->args.root], me = topo->host_of[t->rank];
  *ranks = malloc((size_t)topo->nhosts * sizeof(int));
  if (!*ranks) return -1;
  for (int host = 0; host < topo->nhosts; host++) (*ranks)[host] = host == root_host ? t->args.root : topo->leaders[host];
  *group = (chorus_group_t){topo->nhosts, (*ranks)[me] == t->rank ? me : -1, *ranks};
  return 0;
}

/* The slot size the intra-host phases are priced with: the setting, the same on every host (a
 * host of one rank has no segment, and a rank that priced with its own would select apart).
 * Under CHORUS_SHM_DISABLE, 1: the intra-host steps then run over TCP, which these prices (of
 * memory semantics) do not describe, and the sub-chunks of one byte keep hier out of automatic
 * selection, as before. */
static inline size_t chorus__hier_cost_slot_bytes(const chorus_task_t* t) {
  size_t slot = chorus__conn_shm_slot_setting(t);
  return slot ? slot : 1;
}

/* Bytes a call may touch and still be priced in cache by chorus__hier_copy_us: core/cache.c's
 * figure for an unknown cache. Not the machine's own streaming threshold (conn.h), which
 * differs between machines: every rank must price alike, or ranks would choose apart. */
#define CHORUS_HIER_COPY_CACHED_BYTES (16.0 * 1024.0 * 1024.0)

/* What the local copies of a rank cost, `bytes` read once and written once, while its call
 * touches `touched` bytes: at shm.h's memory speed while that fits the caches, else at the
 * reduction kernels' speed out of cache, shared by the ranks of each core (they all copy at
 * once). Before the rails of allgather and reduce_scatter were pipelined, their copies (two or
 * three passes over the whole buffer) overlapped nothing: on 4 emulated hosts x 2 ranks (4
 * ranks a core) their 64 MiB calls spent 70 ms on copies beside 209 of transfers, which shm.h's
 * price put at 13, so they were chosen over a ring 1.12x faster. */
static inline double chorus__hier_copy_us(const chorus_cost_ctx_t* cx, double bytes, double touched) {
  if (touched < CHORUS_HIER_COPY_CACHED_BYTES) return bytes / CHORUS_COST_COPY_BYTES_PER_US;
  return bytes / cx->reduce_bytes_per_us * (cx->machine_oversub > 1.0 ? cx->machine_oversub : 1.0);
}

/* 1 when a schedule through one leader per host applies (reduce inside each host, cross among
 * the leaders, spread inside the host again): several hosts, some with several ranks, of any
 * sizes (a host of one rank is its own leader). */
static inline int chorus__hier_leaders_ok(const chorus_task_t* t) {
  return t->topo->nhosts > 1 && t->topo->max_local > 1;
}

/* The leader mode of allgather and reduce_scatter on hosts of unequal size works on a buffer of
 * the n blocks in host order (topo->by_host): host h's blocks lie back to back, counts[h]
 * elements from element displs[h] (blocks of `block` elements), the variable blocks of the
 * leaders' ring. */
static inline void chorus__hier_host_bundles(const chorus_topo_t* topo, size_t block, size_t* counts, size_t* displs) {
  for (int h = 0; h < topo->nhosts; h++) {
    counts[h] = (size_t)topo->host_size[h] * block;
    displs[h] = (size_t)topo->host_first[h] * block;
  }
}

/* The rank count of the least populated host: its bundle is what the busiest host link does
 * not carry in the leaders' ring. */
static inline int chorus__hier_smallest_host(const chorus_topo_t* topo) {
  int smallest = topo->host_size[0];
  for (int h = 1; h < topo->nhosts; h++)
    if (topo->host_size[h] < smallest) smallest = topo->host_size[h];
  return smallest;
}

/* Copies n blocks of block_bytes between rank order and host order: to_host: rank_buf ->
 * host_buf, else host_buf -> rank_buf. Nothing to do when the ranks are numbered by host and the
 * two are one buffer. */
static inline void chorus__hier_reorder(const chorus_topo_t* topo, char* host_buf, char* rank_buf, size_t block_bytes,
                                        int to_host) {
  for (int i = 0; i < topo->nranks; i++) {
    char* h = host_buf + (size_t)i * block_bytes;
    char* r = rank_buf + (size_t)topo->by_host[i] * block_bytes;
    if (to_host) chorus__algo_copy(h, r, block_bytes);
    else chorus__algo_copy(r, h, block_bytes);
  }
}

/* ---- one engine run as a phase, whatever the engine (hier/pipe.c) ---- */
typedef struct {
  chorus_status_t (*step)(chorus_task_t* t, void* st);
  void (*free)(void* st);
  void* st;
} chorus_hier_run_t;

chorus_status_t chorus__hier_run_ring(const chorus_sched_t* s, int ring_kind, chorus_hier_run_t* run);
chorus_status_t chorus__hier_run_bcast(const chorus_sched_t* s, chorus_hier_run_t* run);
chorus_status_t chorus__hier_run_reduce(const chorus_sched_t* s, chorus_hier_run_t* run);
chorus_status_t chorus__hier_run_rd(const chorus_sched_t* s, chorus_hier_run_t* run); /* allreduce */
/* A memory-semantics engine over s->group, this host's group (algo/shm/group.h): the
 * reduce-scatter or allgather of the pieces first/len, or the reduce to or broadcast from
 * s->root of the whole buffer (first/len unused). touched_bytes: what the whole call reads and
 * writes of the caller's buffers on this rank, which decides its stores (algo/shm/shm.h; 0:
 * plain stores). */
enum { CHORUS_HIER_SHM_RS, CHORUS_HIER_SHM_AG, CHORUS_HIER_SHM_REDUCE, CHORUS_HIER_SHM_BCAST };
chorus_status_t chorus__hier_run_shm(chorus_task_t* t, const chorus_sched_t* s, int kind, const size_t* first,
                                     const size_t* len, size_t touched_bytes, chorus_hier_run_t* run);
void chorus__hier_run_free(chorus_hier_run_t* run); /* NULL-safe, idempotent */

/* ---- the phase pipeline of a two-level algorithm (hier/pipe.c) ----
 * Up to three stages per chunk, each on one level (intra-host or inter-host); stage s of chunk c
 * starts once the previous active stage of chunk c has finished. Each level runs one phase at a
 * time in a fixed order, the same on every rank of that level's groups (so the per-peer FIFO
 * matching stays aligned): one stage on a level runs chunks 0, 1, ..., C-1; two stages a < b
 * on the same level run a0, a1, b0, a2, b1, ..., b(C-1). `active` must therefore be equal on
 * every member of a group the stage talks to (host-wide for intra stages, rail-wide for inter
 * ones). start() sets up stage s of chunk c; finish() (may be NULL) runs when it is done. */
enum { CHORUS_HIER_INTRA = 0, CHORUS_HIER_INTER = 1 };
#define CHORUS_HIER_STAGES 3

typedef struct {
  int stages[2]; /* the active stages on this level, in stage order */
  int nstages;
  size_t pos, len;
  int running, stage;
  size_t chunk;
  chorus_hier_run_t run;
} chorus_hier_level_t;

typedef struct {
  /* set by the algorithm before chorus__hier_pipe_setup */
  size_t nchunks;
  int nstages;
  int level[CHORUS_HIER_STAGES];
  int active[CHORUS_HIER_STAGES];
  chorus_status_t (*start)(chorus_task_t* t, void* ctx, int stage, size_t chunk, chorus_hier_run_t* run);
  void (*finish)(void* ctx, int stage, size_t chunk);
  void* ctx;
  /* Another shape, forced: the flat engine the algorithm runs instead (step and free only it). */
  chorus_hier_run_t flat;
  /* the driver's */
  size_t done[CHORUS_HIER_STAGES]; /* chunks finished per stage (in order) */
  chorus_hier_level_t lv[2];
} chorus_hier_pipe_t;

void chorus__hier_pipe_setup(chorus_hier_pipe_t* p);
/* The one-chunk pipeline of a leader mode: intra-host stage 0, inter-host stage 1 on the host
 * leaders alone (`leads`), intra-host stage 2. */
static inline chorus_hier_pipe_t chorus__hier_leader_pipe(int leads,
                                                          chorus_status_t (*start)(chorus_task_t*, void*, int, size_t,
                                                                                   chorus_hier_run_t*),
                                                          void (*finish)(void*, int, size_t), void* ctx) {
  return (chorus_hier_pipe_t){.nchunks = 1,
                              .nstages = 3,
                              .level = {CHORUS_HIER_INTRA, CHORUS_HIER_INTER, CHORUS_HIER_INTRA},
                              .active = {1, leads, 1},
                              .start = start,
                              .finish = finish,
                              .ctx = ctx};
}
chorus_status_t chorus__hier_pipe_step(chorus_task_t* t, chorus_hier_pipe_t* p); /* INPROGRESS, OK, < 0 */
void chorus__hier_pipe_free(chorus_hier_pipe_t* p);

/* Elements per pipeline chunk of a vector of `count` that L local ranks share out: about 16
 * chunks, each giving every local rank between half a pipelining unit and 2 of them
 * (CHORUS_BUFF_SIZE: 128 to 512 KiB by default); pipe.c says why. */
size_t chorus__hier_pipe_elems(size_t count, size_t elem_bytes, int L, size_t unit_bytes);
/* The same for the block-layout calls (allgather, reduce_scatter): elements of each block per
 * chunk, so that a rank's rail carries the same chunk bytes (H blocks of it) as allreduce's. At
 * least one. */
size_t chorus__hier_block_pipe_elems(size_t count, size_t elem_bytes, int H, size_t unit_bytes);
/* The chunks of `count` elements cut `elems` at a time: one (empty) for a count of 0. */
static inline size_t chorus__hier_chunks(size_t count, size_t elems) { return count ? chorus__div_up(count, elems) : 1; }

/* The predicted time of a two-stage pipeline of `chunks` chunks whose stages take `first` and
 * `second` per chunk: the first chunk goes through both, each later one adds the slower. */
static inline double chorus__hier_pipelined_us(double first, double second, double chunks) {
  return first + second + (chunks - 1.0) * (first > second ? first : second);
}

/* The tag base of stage `stage` (0..2) of chunk `chunk`: phases of one task never match. */
static inline uint32_t chorus__hier_tag(int stage, size_t chunk) {
  return ((uint32_t)(stage + 1) << 28) + (uint32_t)(chunk & 0xfff) * 0x10000u;
}

#endif /* CHORUS_ALGO_HIER_H */
