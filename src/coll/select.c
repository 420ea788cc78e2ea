/*
 * select.c - algorithm selection: CHORUS_ALGO forces a choice (an error when that algorithm
 * cannot serve the call, never a silent fallback); otherwise the registry entry with the
 * lowest predicted alpha-beta cost among those that support the call.
 */
#include <float.h>
#include <stdio.h>

#include "coll/coll.h"
#include "core/log.h"

chorus_status_t chorus__select(chorus_comm_t* comm, chorus_task_t* t) {
  chorus_coll_t coll = t->args.coll;
  const char* cname = chorus__coll_name(coll);
  const chorus_algo_t* forced = comm->forced[coll];
  if (forced) {
    if (forced->supported && !forced->supported(t)) {
      chorus__comm_set_error(comm, "%s: CHORUS_ALGO=%s forces algorithm \"%s\", which cannot serve this call "
                             "(%zu elements on %d ranks)", cname, comm->algo_spec, forced->name,
                             t->args.count, comm->nranks);
      return CHORUS_ERR_NOT_SUPPORTED;
    }
    t->algo = forced;
    return CHORUS_OK;
  }
  if (comm->forced_name[coll][0]) {
    chorus__comm_set_error(comm, "%s: CHORUS_ALGO=%s names no %s algorithm (chorus-diag --algos lists them)",
                           cname, comm->algo_spec, cname);
    return CHORUS_ERR_NOT_SUPPORTED;
  }
  const chorus_algo_t *best = NULL, *second = NULL;
  double best_us = DBL_MAX, second_us = DBL_MAX;
  for (size_t i = 0; i < chorus__nalgos; i++) {
    const chorus_algo_t* a = chorus__algos[i];
    if (a->coll != coll || (a->supported && !a->supported(t))) continue;
    double us = a->cost_us ? a->cost_us(t, &comm->link) : 0.0;
    if (us < best_us) {
      second = best;
      second_us = best_us;
      best = a;
      best_us = us;
    } else if (us < second_us) {
      second = a;
      second_us = us;
    }
  }
  if (!best) {
    chorus__comm_set_error(comm, "%s: no registered algorithm supports this call", cname);
    return CHORUS_ERR_NOT_SUPPORTED;
  }
  CH_DEBUG(TUNE, comm->rank, "%s of %zu elements: %s (%.1f us predicted)%s%s", cname, t->args.count,
           best->name, best_us, second ? ", runner-up " : "", second ? second->name : "");
  t->algo = best;
  return CHORUS_OK;
}
