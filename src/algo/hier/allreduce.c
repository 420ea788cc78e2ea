/*
 * hier/allreduce.c - two-level allreduce: reduce inside each host, cross hosts with only what
 * must cross, spread inside the host again (the HCCL scheme). For H hosts of L ranks, per
 * pipeline chunk c of the buffer (cut into L segments), in the rails mode:
 *   1. intra RS(c): reduce-scatter over the host's ranks by memory semantics (shm/group.c:
 *      every rank stages the others' segments in its slot once, then combines its own segment
 *      from its send buffer and their slots); local rank l ends with segment l reduced over its
 *      host. Without a shared segment on the host: a ring over the shared rings (segment
 *      (l+1) mod L);
 *   2. inter AR(c): allreduce of that segment over rail l (the ranks of local index l, one per
 *      host), by a flat engine (ring, rhd or rd; chosen by cost over the rail's share of the
 *      link, or forced: CHORUS_ALGO=allreduce:hier/<engine>); avg divides here, once;
 *   3. intra AG(c): allgather of the segments over the host, by memory semantics (or a ring).
 * Every rank's sockets carry only 1/L of the data: 2(H-1)/H * N/L per rank crosses hosts, and
 * every host link carries 2(H-1)/H * N, the least any allreduce can, spread over L rails.
 * Latency-bound sizes take the leader mode instead (hier/leader forces it): 1. reduce of the
 * chunk to the host's leader by memory semantics (local index h mod its size on host h: core/topo.h),
 * 2. allreduce among the leaders alone (half the processes wake per message, each with the
 * whole link), 3. broadcast back.
 *
 * Pipelining: chunk c+1 is reduced inside the host while chunk c crosses hosts, and chunk c is
 * spread while c+1 crosses. Phases that talk to the same peers (and draw shared-memory ids)
 * must start in the same order on every rank, so each level runs one phase at a time in a
 * fixed order: intra RS0, RS1, AG0, RS2, AG1, ..., AG(C-1); inter AR0, AR1, ..., AR(C-1).
 * AG(c) waits for AR(c); AR(c) for RS(c). Bitwise identical on every rank: each segment is
 * combined inside each host by one rank in a fixed order, then across hosts by the inter
 * engine (identical on all rail members), then copied.
 *
 * Cost (plan()): per chunk of S bytes, intra = the memory-semantics stages (a flag hand-over
 * per stage and slot-sized sub-chunk, bytes at memory speed), inter = the engine's allreduce of
 * S/L on 1/L of the inter-host link (rails) or of S on all of it (leader), and
 * T = intra + inter + (C - 1) max(intra, inter); the cheaper mode and engine win.
 * A fused group operation (task.segs) in the rails mode with memory semantics reads its members'
 * inputs in the intra RS and writes their results in the intra AG (shm/group.c); only the
 * segments each rank carries over its rail live in the packed buffer. Otherwise it is packed.
 * The rails mode requires equal L on every host; on hosts of unequal size (3+1, 1+2+3: a host
 * of one rank is its own leader) the leader mode serves every size, its pipeline cutting chunks
 * for the most populated host. With H = 1 or one rank per host it is not offered (selection
 * falls back to a flat algorithm; a forced hier runs the flat ring and logs it once), nor for a
 * compressed call on unequal hosts (the flat zip serves it).
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/hier/hier.h"
#include "algo/ring/ring.h"
#include "algo/shm/group.h"
#include "algo/shm/shm.h"
#include "algo/zip/zip.h"
#include "core/log.h"

enum { STAGE_RS = 0, STAGE_AR = 1, STAGE_AG = 2 }; /* leader mode: reduce, allreduce, broadcast */

#define LEADER "leader" /* CHORUS_ALGO=allreduce:hier/leader */

typedef struct {
  chorus_sched_t whole; /* the call: buffers, count, op */
  chorus_hier_place_t at;
  size_t pipe_elems;
  const chorus_ar_engine_t* eng;
  int shm;              /* intra-host phases by memory semantics (else ring over the shared rings) */
  int leader;           /* latency-bound: reduce to the leader, allreduce among leaders, broadcast */
  int segs;             /* a fused group's members (task.segs) are the RS input and the AG output */
  size_t* seg_first;    /* L entries each: the segments of the chunk being started */
  size_t* seg_len;
  chorus_hier_pipe_t pipe;
} hier_t;

static size_t chunk_first(const hier_t* h, size_t c) { return c * h->pipe_elems; }
static size_t chunk_elems(const hier_t* h, size_t c) {
  return chorus__min_sz(h->pipe_elems, h->whole.count - chunk_first(h, c));
}

/* The segment of a chunk local rank l reduces inside the host and carries over its rail. */
static int owned_segment(const hier_t* h) { return h->shm ? h->at.l : chorus__ring_rs_owned(h->at.l, h->at.L); }

/* Leader mode: the chunk reduced to the host's leader, allreduced by the leaders alone (the
 * whole link is theirs), broadcast back from the leader. */
static chorus_status_t start_leader_stage(chorus_task_t* t, hier_t* h, chorus_sched_t* s, int stage, size_t c,
                                          chorus_hier_run_t* run) {
  char* chunk = (char*)h->whole.recvbuf + chunk_first(h, c) * h->whole.elem_bytes;
  s->count = chunk_elems(h, c);
  s->recvbuf = chunk;
  s->root = h->at.lead;
  if (stage == STAGE_AR) {
    s->group = h->at.leaders;
    s->sendbuf = chunk;
    if (s->residual) s->residual += chunk_first(h, c);
    *run = (chorus_hier_run_t){h->eng->step, h->eng->free, NULL};
    return h->eng->start(s, &run->st);
  }
  s->group = h->at.host;
  s->avg_divisor = 0;
  s->residual = NULL;
  if (stage == STAGE_RS) {
    s->sendbuf = (const char*)h->whole.sendbuf + chunk_first(h, c) * h->whole.elem_bytes;
    return h->shm ? chorus__hier_run_shm(t, s, CHORUS_HIER_SHM_REDUCE, NULL, NULL, 0, run) : chorus__hier_run_reduce(s, run);
  }
  s->sendbuf = chunk;
  return h->shm ? chorus__hier_run_shm(t, s, CHORUS_HIER_SHM_BCAST, NULL, NULL, 0, run) : chorus__hier_run_bcast(s, run);
}

static chorus_status_t start_stage(chorus_task_t* t, void* ctx, int stage, size_t c, chorus_hier_run_t* run) {
  hier_t* h = ctx;
  size_t off = chunk_first(h, c) * h->whole.elem_bytes;
  chorus_sched_t s = h->whole;
  s.tag_base = chorus__hier_tag(stage, c);
  if (h->leader) return start_leader_stage(t, h, &s, stage, c, run);
  if (stage == STAGE_AR) { /* my segment of the chunk, in place, over my rail; avg divides here */
    size_t first, len;
    chorus__ring_segment(chunk_elems(h, c), h->at.L, owned_segment(h), &first, &len);
    s.group = h->at.rail;
    s.recvbuf = (char*)h->whole.recvbuf + off + first * h->whole.elem_bytes;
    s.sendbuf = s.recvbuf;
    s.count = len;
    if (s.residual) s.residual += chunk_first(h, c) + first; /* the segment this rank carries */
    *run = (chorus_hier_run_t){h->eng->step, h->eng->free, NULL};
    return h->eng->start(&s, &run->st);
  }
  int is_rs = stage == STAGE_RS;
  s.residual = NULL;
  s.group = h->at.host;
  s.sendbuf = is_rs ? (const char*)h->whole.sendbuf + off : (char*)h->whole.recvbuf + off;
  s.recvbuf = (char*)h->whole.recvbuf + off;
  s.count = chunk_elems(h, c);
  s.avg_divisor = 0; /* partial sums: the inter phase divides */
  if (!h->shm) return chorus__hier_run_ring(&s, is_rs ? CHORUS_RING_ALLREDUCE_RS : CHORUS_RING_ALLREDUCE_AG, run);
  if (h->segs) {
    s.segs = t->segs;
    s.nsegs = t->nsegs;
    s.seg_at = chunk_first(h, c);
  }
  for (int i = 0; i < h->at.L; i++) chorus__ring_segment(s.count, h->at.L, i, &h->seg_first[i], &h->seg_len[i]);
  size_t bytes = h->whole.count * h->whole.elem_bytes;
  return chorus__hier_run_shm(t, &s, is_rs ? CHORUS_HIER_SHM_RS : CHORUS_HIER_SHM_AG, h->seg_first, h->seg_len,
                              chorus__touched_bytes(h->whole.sendbuf, bytes, h->whole.recvbuf, bytes), run);
}

static chorus_status_t hier_progress(chorus_task_t* t) {
  hier_t* h = t->state;
  return chorus__hier_pipe_step(t, &h->pipe);
}

static void hier_fini(chorus_task_t* t) {
  hier_t* h = t->state;
  if (h) {
    chorus__hier_pipe_free(&h->pipe);
    free(h->seg_first);
  }
  free(h);
  t->state = NULL;
}

/* What one rail sees of the inter-host link: the L rails of a host cross it at once, so each
 * gets 1/L of its bandwidth (one network interface per host). Over a pipeline of chunks, one
 * rail's start-ups overlap the others' transfers on the shared link, so each step costs 1/L of
 * an alpha: with a whole alpha per step, 4 emulated hosts x 2 ranks at 2 Gbit/s priced 1 MiB at
 * 8.7 ms against the flat ring's 8.5 and ran it in 6.8 against 9.4; with L alphas, the leader
 * mode won from 256 KiB to 4 MiB, where it took 1.2-1.4x the rails' time. A single chunk
 * overlaps nothing: its messages leave together, and a latency-bound call's queue like any flat
 * algorithm's whose every rank crosses (cx->spread, which chorus__cost_for_call gave the
 * queueing alpha). A latency-bound call cut into several chunks (a small CHORUS_BUFF_SIZE) is
 * priced as a pipeline. */
static chorus_link_model_t rail_link(const chorus_cost_ctx_t* cx, double chunks) {
  int L = cx->max_local > 0 ? cx->max_local : 1;
  double alpha = chunks > 1.0 ? cx->inter.alpha_us / L : cx->spread.alpha_us;
  /* The pair's figure, not the ring's: the leader mode's is the pair's too (its one stream per
   * host at 2 Gbit/s and its latency-bound calls were measured that way), and the two must stay
   * comparable: rails priced at the ring figure lost 4 MiB to the leader mode at 10 Gbit/s (1.5x). */
  return (chorus_link_model_t){alpha, cx->inter.bytes_per_us / L};
}

/* The inter-host engine for `bytes` over H members on `link`: forced by name, else the
 * cheapest of those chosen automatically (engines.c). */
static const chorus_ar_engine_t* pick_engine(const chorus_task_t* t, const chorus_cost_ctx_t* cx,
                                             const chorus_link_model_t* link, double bytes, double* us_out) {
  if (t->codec.kind != CHORUS_CODEC_NONE) { /* only the inter-host phase crosses: it carries the codec's form */
    *us_out = chorus__zip_cost_us(&t->codec, bytes, cx->nhosts, cx, link);
    return &chorus__hier_zip_engine;
  }
  const chorus_ar_engine_t* best = NULL;
  double best_us = DBL_MAX;
  int forced = t->sub_algo && t->sub_algo[0] && strcmp(t->sub_algo, LEADER) != 0;
  for (size_t i = 0; i < chorus__hier_nar_engines; i++) {
    const chorus_ar_engine_t* e = chorus__hier_ar_engines[i];
    if (forced ? strcmp(t->sub_algo, e->name) != 0 : !e->automatic) continue;
    double us = e->cost_us(bytes, cx->nhosts, cx, link);
    if (us < best_us) {
      best_us = us;
      best = e;
    }
  }
  *us_out = best_us;
  return best;
}

typedef struct {
  int leader;
  const chorus_ar_engine_t* eng;
  double us;
} hier_plan_t;

/* Whether this call can run two levels: rails (and the leader mode) on hosts of equal size, the
 * leader mode alone on hosts of unequal size; a compressed call on unequal hosts is left to the
 * flat compressed allreduce (zip), which serves those shapes. */
static int leaders_serve(const chorus_task_t* t) {
  return chorus__hier_shape_ok(t) || (chorus__hier_leaders_ok(t) && !t->codec.kind);
}

/* The mode and inter-host engine, and the predicted time: per chunk of S bytes (C chunks), the
 * intra-host phases by memory semantics (shm.h's price: a flag hand-over per stage and
 * sub-chunk of one slot, bytes at memory speed) and the inter-host allreduce, which overlap
 * from chunk to chunk: T = intra + inter + (C - 1) max(intra, inter). Rails carry S/L each on
 * 1/L of the link; the leader carries S on all of it, after a reduce that reads L S. A forced
 * engine (hier/ring, hier/rhd, hier/rd) means rails; hier/leader the leader. On hosts of unequal
 * size there are no rails: the leader mode, with the forced engine if any. */
static hier_plan_t plan(const chorus_task_t* t, const chorus_cost_ctx_t* comm_cx) {
  double bytes = (double)t->args.count * (double)t->dtype_size;
  chorus_cost_ctx_t call_cx = chorus__cost_for_call(comm_cx, bytes); /* init passes the communicator's */
  const chorus_cost_ctx_t* cx = &call_cx;
  int L = cx->max_local > 0 ? cx->max_local : 1;
  size_t pipe = chorus__hier_pipe_elems(t->args.count, t->dtype_size, L, t->pipe_unit_bytes) * t->dtype_size;
  double chunks = bytes > 0 ? (double)chorus__div_up((size_t)bytes, pipe) : 1.0, S = bytes / chunks;
  size_t slot = chorus__hier_cost_slot_bytes(t), S_bytes = (size_t)S;
  const char* sub = t->sub_algo && t->sub_algo[0] ? t->sub_algo : NULL;
  hier_plan_t best = {0, NULL, DBL_MAX};
  int rails = chorus__hier_shape_ok(t);
  for (int leader = 0; leader < 2; leader++) {
    if (!leader && !rails) continue; /* hosts of unequal size: only the leaders cross */
    if (sub && rails && (strcmp(sub, LEADER) == 0) != leader) continue;
    chorus_link_model_t link = leader ? cx->inter : rail_link(cx, chunks);
    double inter = 0.0;
    size_t sub_chunks = chorus__div_up(S_bytes, slot), ag_chunks = chorus__div_up(S_bytes / (size_t)L, slot);
    const chorus_ar_engine_t* eng = pick_engine(t, cx, &link, leader ? S : S / L, &inter);
    if (!eng) continue;
    /* The leader mode's reduce of one sub-chunk puts one hand-over on the call's path, the
     * others' ARRIVED, which the leader waits for; its DONE, which the others wait for, passes
     * while the leader crosses hosts (with several sub-chunks, all but the last DONE come back
     * onto the path: the others wait for them to reuse their slots). The broadcast puts both
     * (the others wait for the leader's ARRIVED, the leader for their DONE). Priced at 2 + 2, the
     * leader mode lost 16-256 B on 4 emulated hosts x 2 ranks to flat rd (105.8 us predicted
     * against 109.8) where it took 75-81 us to rd's 101-109. */
    double reduce_stages = 2.0 - 1.0 / (double)(sub_chunks ? sub_chunks : 1);
    double intra = leader ? chorus__shm_cost_us(cx, reduce_stages, sub_chunks, L * S) + chorus__shm_cost_us(cx, 2, sub_chunks, S)
                          : chorus__shm_cost_us(cx, 2, sub_chunks, 2.0 * S) + chorus__shm_cost_us(cx, 2, ag_chunks, S);
    double us = chorus__hier_pipelined_us(intra, inter, chunks);
    if (leader) us += chorus__algo_packing_us(t, cx); /* only the rails take a fused group's members */
    if (us < best.us) best = (hier_plan_t){leader, eng, us};
  }
  return best;
}

static chorus_status_t hier_init(chorus_task_t* t) {
  hier_t* h = calloc(1, sizeof(*h));
  if (!h) return CHORUS_ERR_NO_MEMORY;
  t->state = h;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &h->whole);
  chorus_status_t st = CHORUS_OK;
  if (!leaders_serve(t)) { /* forced on a shape it cannot serve: the flat ring */
    CH_INFO(ALGO, t->rank, "allreduce hier: no two-level schedule for one host, one rank per host, or a compressed "
            "call on hosts of unequal size: flat %s instead", t->codec.kind ? "compressed allreduce" : "ring");
    if (t->codec.kind) {
      const chorus_ar_engine_t* zip = &chorus__hier_zip_engine;
      h->pipe.flat = (chorus_hier_run_t){zip->step, zip->free, NULL};
      st = zip->start(&h->whole, &h->pipe.flat.st);
    } else {
      st = chorus__hier_run_ring(&h->whole, CHORUS_RING_ALLREDUCE, &h->pipe.flat);
    }
  } else {
    h->at = chorus__hier_place(t);
    h->pipe_elems = chorus__hier_pipe_elems(h->whole.count, h->whole.elem_bytes, h->at.L, t->pipe_unit_bytes);
    hier_plan_t p = plan(t, t->cost);
    h->eng = p.eng;
    h->leader = p.leader;
    if (!h->eng) st = CHORUS_ERR_NOT_SUPPORTED;
    h->shm = chorus__shm_group_ok(t, &(chorus_sched_t){.group = h->at.host, .elem_bytes = h->whole.elem_bytes});
    h->seg_first = calloc(2 * (size_t)h->at.L, sizeof(size_t));
    if (!h->seg_first) st = CHORUS_ERR_NO_MEMORY;
    else h->seg_len = h->seg_first + h->at.L;
    /* Only the memory-semantics phases of the rails mode read and write a fused group's
     * members where they are; otherwise the group packs them (coll/group.c). */
    h->segs = t->segs && h->shm && !h->leader;
    h->pipe.nchunks = chorus__div_up(h->whole.count, h->pipe_elems);
    h->pipe.nstages = 3;
    h->pipe.level[STAGE_RS] = h->pipe.level[STAGE_AG] = CHORUS_HIER_INTRA;
    h->pipe.level[STAGE_AR] = CHORUS_HIER_INTER;
    h->pipe.active[STAGE_RS] = h->pipe.active[STAGE_AG] = 1;
    h->pipe.active[STAGE_AR] = !h->leader || h->at.l == h->at.lead;
    h->pipe.start = start_stage;
    h->pipe.ctx = h;
    chorus__hier_pipe_setup(&h->pipe);
    CH_DEBUG(ALGO, t->rank, "allreduce hier: %s, %s across hosts, %zu chunks, intra-host phases %s",
             h->leader ? "leader (one rank per host carries all)" : "rails", h->eng ? h->eng->name : "?", h->pipe.nchunks,
             h->shm ? "by memory semantics" : "over the shared rings (no segment)");
  }
  if (!h->segs) {
    t->segs = NULL;
    t->nsegs = 0;
  }
  if (st < 0) hier_fini(t);
  return st;
}

static const char* sub_name(size_t i) {
  return i < chorus__hier_nar_engines ? chorus__hier_ar_engines[i]->name : i == chorus__hier_nar_engines ? LEADER : NULL;
}

/* Offered on every shape, so that a forced hier on a shape without two levels falls back (init)
 * instead of failing; the cost keeps automatic selection to the shapes it serves. */
static double hier_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!leaders_serve(t)) return DBL_MAX;
  if (t->codec.kind && t->codec_scope_all) return DBL_MAX; /* it keeps the host exact: zip compresses all */
  return plan(t, cx).us;
}

const chorus_algo_t chorus__algo_hier_allreduce = {
    .name = "hier",
    .desc = "two-level: intra-host reduce-scatter, inter-host allreduce per rail, intra-host allgather, pipelined; "
            "latency-bound: reduce to the host's leader, allreduce among the leaders, broadcast (leader)",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = hier_cost_us,
    .init = hier_init,
    .progress = hier_progress,
    .fini = hier_fini,
    .sub_name = sub_name,
    .takes_segments = 1,
    .compresses = 1,
};
