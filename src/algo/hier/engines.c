/*
 * hier/engines.c - the flat allreduce engines a two-level algorithm can run over a rail, as
 * small adapters to each engine's own start/step/free.
 */
#include <string.h>

#include "algo/hier/hier.h"
#include "algo/ring/ring.h"

static chorus_status_t ring_start(const chorus_sched_t* s, void** state) {
  chorus_ring_t* g = NULL;
  chorus_status_t st = chorus__ring_start(s, CHORUS_RING_ALLREDUCE, &g);
  *state = g;
  return st;
}
static chorus_status_t ring_step(chorus_task_t* t, void* state) { return chorus__ring_step(t, state); }
static void ring_free(void* state) { chorus__ring_free(state); }
static double ring_cost(double bytes, int n, const chorus_link_model_t* link) {
  if (n <= 1) return 0.0;
  return 2.0 * (n - 1) * link->alpha_us + 2.0 * (n - 1) / n * bytes / link->bytes_per_us;
}
static const chorus_ar_engine_t ring_engine = {"ring", ring_start, ring_step, ring_free, ring_cost};

const chorus_ar_engine_t* const chorus__hier_ar_engines[] = {&ring_engine};
const size_t chorus__hier_nar_engines = sizeof(chorus__hier_ar_engines) / sizeof(chorus__hier_ar_engines[0]);

const chorus_ar_engine_t* chorus__hier_ar_engine(const char* name) {
  for (size_t i = 0; i < chorus__hier_nar_engines; i++)
    if (strcmp(chorus__hier_ar_engines[i]->name, name) == 0) return chorus__hier_ar_engines[i];
  return NULL;
}
