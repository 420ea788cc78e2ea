/*
 * direct.h - one-shot schedules over any group (members, not ranks): every member talks to
 * every other member directly, in one step per chunk.
 */
#ifndef CHORUS_ALGO_DIRECT_H
#define CHORUS_ALGO_DIRECT_H

#include "algo/algo.h"

/* Allreduce: every member sends its vector to every other one and reduces all n inputs in
 * member order. Start, step until OK (or < 0), free (NULL-safe). */
typedef struct chorus_direct_allreduce chorus_direct_allreduce_t;
chorus_status_t chorus__direct_allreduce_start(const chorus_sched_t* s, chorus_direct_allreduce_t** out);
chorus_status_t chorus__direct_allreduce_step(chorus_task_t* t, chorus_direct_allreduce_t* e);
void chorus__direct_allreduce_free(chorus_direct_allreduce_t* e);

#endif /* CHORUS_ALGO_DIRECT_H */
