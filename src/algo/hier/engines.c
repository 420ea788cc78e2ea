/*
 * hier/engines.c - the flat allreduce engines a two-level algorithm can run over a rail, as
 * small adapters to each engine's own start/step/free.
 */
#include <float.h>
#include <string.h>

#include "algo/hier/hier.h"
#include "algo/rd/rd.h"
#include "algo/rhd/rhd.h"
#include "algo/ring/ring.h"
#include "algo/zip/zip.h"

static chorus_status_t ring_start(const chorus_sched_t* s, void** state) {
  chorus_ring_t* g = NULL;
  chorus_status_t st = chorus__ring_start(s, CHORUS_RING_ALLREDUCE, &g);
  *state = g;
  return st;
}
static chorus_status_t ring_step(chorus_task_t* t, void* state) { return chorus__ring_step(t, state); }
static void ring_free(void* state) { chorus__ring_free(state); }
static double ring_cost(double bytes, int n, const chorus_cost_ctx_t* cx, const chorus_link_model_t* link) {
  (void)cx;
  if (n <= 1) return 0.0;
  return 2.0 * (n - 1) * link->alpha_us + 2.0 * (n - 1) / n * bytes / link->bytes_per_us;
}
static const chorus_ar_engine_t ring_engine = {"ring", ring_start, ring_step, ring_free, ring_cost, 1};

static chorus_status_t rd_start(const chorus_sched_t* s, void** state) {
  chorus_rd_allreduce_t* e = NULL;
  chorus_status_t st = chorus__rd_allreduce_start(s, &e);
  *state = e;
  return st;
}
static chorus_status_t rd_step(chorus_task_t* t, void* state) { return chorus__rd_allreduce_step(t, state); }
static void rd_free(void* state) { chorus__rd_allreduce_free(state); }
/* The rounds of the largest power of two within n, and a fold in and out for the rest: 3 steps
 * for 3 hosts, which ceil(log2 n) + 2 priced at 4, so that the leaders of 1+2+3 emulated hosts
 * took the ring (4 steps of a start-up each): 136-190 us at 8 bytes against rd's 39-75. */
static double rd_cost(double bytes, int n, const chorus_cost_ctx_t* cx, const chorus_link_model_t* link) {
  return chorus__rd_steps(n) * (link->alpha_us + bytes / link->bytes_per_us + bytes / cx->reduce_bytes_per_us);
}
static const chorus_ar_engine_t rd_engine = {"rd", rd_start, rd_step, rd_free, rd_cost, 1};

static chorus_status_t rhd_start(const chorus_sched_t* s, void** state) {
  chorus_rhd_t* e = NULL;
  chorus_status_t st = chorus__rhd_start(s, CHORUS_RHD_ALLREDUCE, &e);
  *state = e;
  return st;
}
static chorus_status_t rhd_step(chorus_task_t* t, void* state) { return chorus__rhd_step(t, state); }
static void rhd_free(void* state) { chorus__rhd_free(state); }
static double rhd_cost(double bytes, int n, const chorus_cost_ctx_t* cx, const chorus_link_model_t* link) {
  if (n <= 1) return 0.0;
  chorus_rd_shape_t sh; /* the halving runs on the largest power of two within n, the rest folds */
  chorus__rd_shape(&sh, 0, n);
  double k = sh.rounds, folded = sh.rem ? 1.0 : 0.0, p = sh.p;
  return (2.0 * k + 2.0 * folded) * link->alpha_us + (2.0 * (p - 1.0) / p + 2.0 * folded) * bytes / link->bytes_per_us +
         ((p - 1.0) / p + folded) * bytes / cx->reduce_bytes_per_us;
}
/* Forced only (hier/rhd): its rounds run one whole exchange at a time, and over the rails of
 * 4 emulated hosts (2 Gbit/s) it never beat ring or rd at any size from 8 B to 16 MiB, taking up
 * to 1.8x their time (bench/sweep, docs/cluster.md), while its alpha-beta price ties with theirs. */
static const chorus_ar_engine_t rhd_engine = {"rhd", rhd_start, rhd_step, rhd_free, rhd_cost, 0};

static chorus_status_t zip_start(const chorus_sched_t* s, void** state) {
  chorus_zip_t* z = NULL;
  chorus_status_t st = chorus__zip_start(s, &z);
  *state = z;
  return st;
}
static chorus_status_t zip_step(chorus_task_t* t, void* state) { return chorus__zip_step(t, state); }
static void zip_free(void* state) { chorus__zip_free(state); }
/* Its price depends on the codec, which the engine interface does not carry: hier prices it
 * with chorus__zip_cost_us. */
static double zip_cost_unknown(double bytes, int n, const chorus_cost_ctx_t* cx, const chorus_link_model_t* link) {
  (void)bytes, (void)n, (void)cx, (void)link;
  return DBL_MAX;
}
const chorus_ar_engine_t chorus__hier_zip_engine = {"zip", zip_start, zip_step, zip_free, zip_cost_unknown, 0};

const chorus_ar_engine_t* const chorus__hier_ar_engines[] = {&ring_engine, &rhd_engine, &rd_engine};
const size_t chorus__hier_nar_engines = sizeof(chorus__hier_ar_engines) / sizeof(chorus__hier_ar_engines[0]);

const chorus_ar_engine_t* chorus__hier_ar_engine(const char* name) {
  for (size_t i = 0; i < chorus__hier_nar_engines; i++)
    if (strcmp(chorus__hier_ar_engines[i]->name, name) == 0) return chorus__hier_ar_engines[i];
  return NULL;
}
