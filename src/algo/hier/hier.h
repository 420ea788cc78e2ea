/*
 * hier.h - what the two-level (hierarchical) algorithms share: the communicator's host group
 * and rail of this rank, and the flat allreduce engines an inter-host phase can run over a
 * rail (chosen by cost, or forced with CHORUS_ALGO=allreduce:hier/<engine>).
 */
#ifndef CHORUS_ALGO_HIER_H
#define CHORUS_ALGO_HIER_H

#include "algo/common.h"

/* A flat allreduce engine, as a phase: in place on s->recvbuf (s->sendbuf == s->recvbuf). */
typedef struct {
  const char* name;
  chorus_status_t (*start)(const chorus_sched_t* s, void** state);
  chorus_status_t (*step)(chorus_task_t* t, void* state);
  void (*free)(void* state);
  /* Predicted time of an allreduce of `bytes` over n members on `link`. */
  double (*cost_us)(double bytes, int n, const chorus_link_model_t* link);
} chorus_ar_engine_t;

extern const chorus_ar_engine_t* const chorus__hier_ar_engines[];
extern const size_t chorus__hier_nar_engines;
const chorus_ar_engine_t* chorus__hier_ar_engine(const char* name); /* NULL when unknown */

/* 1 when the two-level schedule applies: several hosts, several ranks on each, all equal. */
static inline int chorus__hier_shape_ok(const chorus_task_t* t) {
  const chorus_topo_t* topo = t->topo;
  return topo->nhosts > 1 && topo->max_local > 1 && topo->uniform;
}

#endif /* CHORUS_ALGO_HIER_H */
