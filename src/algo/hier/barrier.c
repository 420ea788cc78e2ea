/*
 * hier/barrier.c - two-level barrier: gather the arrivals inside each host, cross hosts once
 * per host, release inside each host. For H hosts of L ranks each (or of different counts):
 *   1. intra: reduce of one byte (int8 max) over the host to the host's leader (local index
 *      h mod its size on host h: core/topo.h): by memory semantics when the host's ranks share
 *      its segment (every rank raises a flag, the leader waits for them), else a binomial tree
 *      of messages;
 *   2. inter, the leaders only: recursive-doubling allreduce of that byte among them;
 *   3. intra: broadcast of the byte from the leader over the host (a flag, or a binomial tree).
 * A rank leaves once step 3 reaches it, which is after its host's leader finished step 2,
 * which needs every host's leader to have finished step 1, i.e. every rank to have entered.
 * The bytes carry nothing (they live in the state); one byte because empty transfers are
 * skipped on both sides. Bytes that cross hosts: one byte per round of recursive doubling, on
 * the leaders only (log2 of the largest power of two within H rounds, two more when H is not
 * a power of two, to fold the rest in and out); the other ranks never cross hosts.
 *
 * Cost (intra flag hand-over f, inter a2, p = the largest power of two within H):
 * T = 2 f + (log2 p + (H > p ? 2 : 0)) a2.
 * Hosts may hold different numbers of ranks (a host of one rank is its own leader). Requires
 * H > 1 and some host with L > 1; otherwise it is not offered, and a forced hier runs a
 * one-byte ring allreduce over the host-ordered ring and logs it once.
 */
#include <float.h>
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/hier/hier.h"
#include "algo/rd/rd.h"
#include "algo/ring/ring.h"
#include "algo/shm/group.h"
#include "algo/shm/shm.h"
#include "core/log.h"

typedef struct {
  chorus_sched_t one; /* one int8, max */
  chorus_hier_place_t at; /* its host, its host's leader and the leaders */
  int shm;            /* steps 1 and 3 by memory semantics */
  char in, out;
  chorus_hier_pipe_t p;
} hbar_t;

static chorus_status_t hbar_start(chorus_task_t* t, void* ctx, int stage, size_t chunk, chorus_hier_run_t* run) {
  hbar_t* b = ctx;
  chorus_sched_t s = b->one;
  s.tag_base = chorus__hier_tag(stage, chunk);
  s.recvbuf = &b->out;
  s.sendbuf = &b->out;
  s.root = b->at.lead;
  if (stage == 0) { /* arrivals, to the leader */
    s.group = b->at.host;
    s.sendbuf = &b->in;
    return b->shm ? chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_REDUCE, NULL, NULL, 0, run) : chorus__hier_run_reduce(&s, run);
  }
  if (stage == 1) { /* the leaders: across hosts */
    s.group = b->at.leaders;
    return chorus__hier_run_rd(&s, run);
  }
  s.group = b->at.host; /* release */
  return b->shm ? chorus__hier_run_shm(t, &s, CHORUS_HIER_SHM_BCAST, NULL, NULL, 0, run) : chorus__hier_run_bcast(&s, run);
}

static chorus_status_t hbar_progress(chorus_task_t* t) {
  hbar_t* b = t->state;
  return chorus__hier_pipe_step(t, &b->p);
}

static void hbar_fini(chorus_task_t* t) {
  hbar_t* b = t->state;
  if (b) {
    chorus__hier_pipe_free(&b->p);
  }
  free(b);
  t->state = NULL;
}

static chorus_status_t hbar_init(chorus_task_t* t) {
  hbar_t* b = calloc(1, sizeof(*b));
  if (!b) return CHORUS_ERR_NO_MEMORY;
  t->state = b;
  const chorus_topo_t* topo = t->topo;
  b->one = (chorus_sched_t){.group = chorus__topo_ring(topo, t->rank),
                            .sendbuf = &b->in,
                            .recvbuf = &b->out,
                            .count = 1,
                            .dtype = CHORUS_INT8,
                            .elem_bytes = 1,
                            .op = CHORUS_MAX,
                            .chunk_bytes = t->chunk_bytes,
                            .pool = t->comm};
  if (!chorus__hier_leaders_ok(t)) {
    CH_INFO(ALGO, t->rank, "barrier hier: one host, or one rank per host: flat ring instead");
    chorus_status_t st = chorus__hier_run_ring(&b->one, CHORUS_RING_ALLREDUCE, &b->p.flat);
    if (st < 0) hbar_fini(t);
    return st;
  }
  b->at = chorus__hier_place(t);
  b->shm = chorus__shm_group_ok(t, &(chorus_sched_t){.group = b->at.host, .elem_bytes = 1});
  b->p = (chorus_hier_pipe_t){.nchunks = 1,
                              .nstages = 3,
                              .level = {CHORUS_HIER_INTRA, CHORUS_HIER_INTER, CHORUS_HIER_INTRA},
                              .active = {1, b->at.l == b->at.lead, 1},
                              .start = hbar_start,
                              .ctx = b};
  chorus__hier_pipe_setup(&b->p);
  return CHORUS_OK;
}

static double hbar_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!chorus__hier_leaders_ok(t)) return DBL_MAX;
  return chorus__shm_cost_us(cx, 2, 1, 0.0) + chorus__rd_steps(cx->nhosts) * cx->inter.alpha_us;
}

const chorus_algo_t chorus__algo_hier_barrier = {
    .name = "hier",
    .desc = "two-level: intra-host flags to the host's leader, recursive doubling among the leaders, intra-host release",
    .coll = CH_COLL_BARRIER,
    .supported = NULL,
    .cost_us = hbar_cost_us,
    .init = hbar_init,
    .progress = hbar_progress,
    .fini = hbar_fini,
};
