/*
 * hier/pipe.c - what the two-level broadcast, reduce, allgather, reduce_scatter and barrier
 * share: an engine run behind one interface (ring, binomial broadcast, binomial reduce), and
 * the pipeline of stages over the two levels described in hier.h.
 */
#include <stdlib.h>

#include "algo/binomial/binomial.h"
#include "algo/hier/hier.h"
#include "algo/rd/rd.h"
#include "algo/ring/ring.h"
#include "algo/shm/group.h"

/* ---- engine runs ---- */

static chorus_status_t ring_step(chorus_task_t* t, void* st) { return chorus__ring_step(t, st); }
static void ring_free(void* st) { chorus__ring_free(st); }
static chorus_status_t bcast_step(chorus_task_t* t, void* st) { return chorus__binomial_bcast_step(t, st); }
static void bcast_free(void* st) { chorus__binomial_bcast_free(st); }
static chorus_status_t reduce_step(chorus_task_t* t, void* st) { return chorus__binomial_reduce_step(t, st); }
static void reduce_free(void* st) { chorus__binomial_reduce_free(st); }

chorus_status_t chorus__hier_run_ring(const chorus_sched_t* s, int ring_kind, chorus_hier_run_t* run) {
  chorus_ring_t* g = NULL;
  chorus_status_t st = chorus__ring_start(s, (chorus_ring_kind_t)ring_kind, &g);
  *run = (chorus_hier_run_t){ring_step, ring_free, g};
  return st;
}

chorus_status_t chorus__hier_run_bcast(const chorus_sched_t* s, chorus_hier_run_t* run) {
  chorus_bcast_t* b = NULL;
  chorus_status_t st = chorus__binomial_bcast_start(s, &b);
  *run = (chorus_hier_run_t){bcast_step, bcast_free, b};
  return st;
}

static chorus_status_t rd_step(chorus_task_t* t, void* st) { return chorus__rd_allreduce_step(t, st); }
static void rd_free(void* st) { chorus__rd_allreduce_free(st); }

chorus_status_t chorus__hier_run_rd(const chorus_sched_t* s, chorus_hier_run_t* run) {
  chorus_rd_allreduce_t* e = NULL;
  chorus_status_t st = chorus__rd_allreduce_start(s, &e);
  *run = (chorus_hier_run_t){rd_step, rd_free, e};
  return st;
}

chorus_status_t chorus__hier_run_reduce(const chorus_sched_t* s, chorus_hier_run_t* run) {
  chorus_treduce_t* r = NULL;
  chorus_status_t st = chorus__binomial_reduce_start(s, &r);
  *run = (chorus_hier_run_t){reduce_step, reduce_free, r};
  return st;
}

static chorus_status_t shm_step(chorus_task_t* t, void* st) { return chorus__shm_group_step(t, st); }
static void shm_free(void* st) { chorus__shm_group_free(st); }

chorus_status_t chorus__hier_run_shm(chorus_task_t* t, const chorus_sched_t* s, int kind, const size_t* first,
                                     const size_t* len, size_t touched_bytes, chorus_hier_run_t* run) {
  chorus_shm_group_t* g = NULL;
  chorus_status_t st = CHORUS_ERR_INTERNAL;
  if (kind == CHORUS_HIER_SHM_RS) st = chorus__shm_group_rs_start(t, s, first, len, touched_bytes, &g);
  else if (kind == CHORUS_HIER_SHM_AG) st = chorus__shm_group_ag_start(t, s, first, len, touched_bytes, &g);
  else if (kind == CHORUS_HIER_SHM_REDUCE) st = chorus__shm_group_reduce_start(t, s, &g);
  else if (kind == CHORUS_HIER_SHM_BCAST) st = chorus__shm_group_bcast_start(t, s, &g);
  *run = (chorus_hier_run_t){shm_step, shm_free, g};
  return st;
}

void chorus__hier_run_free(chorus_hier_run_t* run) {
  if (run->free && run->st) run->free(run->st);
  run->st = NULL;
}

/* ---- the pipeline ---- */

/* How a call is cut into pipeline chunks: about HIER_PIPE_CHUNKS of them, each giving every local
 * rank between half a pipelining unit and HIER_PIPE_MAX_UNITS of them. The first chunk's
 * intra-host phase and the last one's are not overlapped by the other level. Measured on 4
 * emulated hosts x 2 ranks at 2 Gbit/s (alternating runs): 64 MiB took 468 ms in 16 chunks
 * against 500 ms in 4; with at least half a unit (128 KiB) per rank instead of a whole one,
 * 1 MiB took 6.6-6.7 ms instead of 6.9-8.5 and 4 MiB 26.5 ms instead of 31-34; a quarter unit
 * gained nothing more and lost at 256 KiB. At most 2 units (512 KiB) per rank: 64 MiB in 64
 * chunks took 424-438 ms (median 431.5 of 12 launches) against 429-444 (439.5) in 16 of 2 MiB
 * per rank, where a chunk's reduced segment has left the cache before its rail sends it; 1 unit
 * (128 chunks) took 460-513, 3 units 427-442; 32 MiB 214-219 against 215-229; the two-level
 * allgather and broadcast of 64 MiB unchanged. */
#define HIER_PIPE_CHUNKS 16
#define HIER_PIPE_MAX_UNITS 2

void chorus__hier_pipe_setup(chorus_hier_pipe_t* p) {
  for (int v = 0; v < 2; v++) {
    chorus_hier_level_t* lv = &p->lv[v];
    lv->nstages = 0;
    for (int s = 0; s < p->nstages; s++)
      if (p->active[s] && p->level[s] == v && lv->nstages < 2) lv->stages[lv->nstages++] = s;
    lv->len = (size_t)lv->nstages * p->nchunks;
  }
}

/* Entry j of a level's fixed sequence. */
static void level_entry(const chorus_hier_pipe_t* p, const chorus_hier_level_t* lv, size_t j, int* stage,
                        size_t* chunk) {
  if (lv->nstages == 1) {
    *stage = lv->stages[0];
    *chunk = j;
  } else if (j == 0) {
    *stage = lv->stages[0];
    *chunk = 0;
  } else if (j == 2 * p->nchunks - 1) {
    *stage = lv->stages[1];
    *chunk = p->nchunks - 1;
  } else {
    int first = (j - 1) % 2 == 0;
    *stage = lv->stages[first ? 0 : 1];
    *chunk = (j - 1) / 2 + (first ? 1 : 0);
  }
}

/* Stage s of chunk c may start once the previous active stage of chunk c is done. */
static int ready(const chorus_hier_pipe_t* p, int stage, size_t chunk) {
  for (int s = stage - 1; s >= 0; s--)
    if (p->active[s]) return p->done[s] > chunk;
  return 1;
}

static chorus_status_t drive_level(chorus_task_t* t, chorus_hier_pipe_t* p, chorus_hier_level_t* lv, int* moved) {
  if (lv->pos == lv->len) return CHORUS_OK;
  if (!lv->running) {
    level_entry(p, lv, lv->pos, &lv->stage, &lv->chunk);
    if (!ready(p, lv->stage, lv->chunk)) return CHORUS_OK;
    chorus_status_t st = p->start(t, p->ctx, lv->stage, lv->chunk, &lv->run);
    if (st < 0) return st;
    lv->running = 1;
    *moved = 1;
  }
  chorus_status_t st = lv->run.step(t, lv->run.st);
  if (st < 0 || st == CHORUS_INPROGRESS) return st < 0 ? st : CHORUS_OK;
  chorus__hier_run_free(&lv->run);
  lv->running = 0;
  p->done[lv->stage] = lv->chunk + 1;
  if (p->finish) p->finish(p->ctx, lv->stage, lv->chunk);
  lv->pos++;
  *moved = 1;
  return CHORUS_OK;
}

chorus_status_t chorus__hier_pipe_step(chorus_task_t* t, chorus_hier_pipe_t* p) {
  if (p->flat.st) return p->flat.step(t, p->flat.st);
  int moved;
  do {
    moved = 0;
    chorus_status_t st = drive_level(t, p, &p->lv[CHORUS_HIER_INTER], &moved);
    if (st >= 0) st = drive_level(t, p, &p->lv[CHORUS_HIER_INTRA], &moved);
    if (st < 0) return st;
    if (moved) t->phase++;
  } while (moved);
  return p->lv[0].pos == p->lv[0].len && p->lv[1].pos == p->lv[1].len ? CHORUS_OK : CHORUS_INPROGRESS;
}

void chorus__hier_pipe_free(chorus_hier_pipe_t* p) {
  chorus__hier_run_free(&p->flat);
  for (int v = 0; v < 2; v++) chorus__hier_run_free(&p->lv[v].run);
}

size_t chorus__hier_pipe_elems(size_t count, size_t elem_bytes, int L, size_t unit_bytes) {
  size_t total = count * elem_bytes, per_rank = total / (size_t)L / HIER_PIPE_CHUNKS;
  if (per_rank < unit_bytes / 2) per_rank = unit_bytes / 2;
  if (per_rank > unit_bytes * HIER_PIPE_MAX_UNITS) per_rank = unit_bytes * HIER_PIPE_MAX_UNITS;
  size_t elems = per_rank * (size_t)L / elem_bytes;
  return elems ? elems : 1;
}

size_t chorus__hier_block_pipe_elems(size_t count, size_t elem_bytes, int H, size_t unit_bytes) {
  size_t elems = chorus__hier_pipe_elems(count * (size_t)H, elem_bytes, 1, unit_bytes) / (size_t)H;
  return elems ? elems : 1;
}
