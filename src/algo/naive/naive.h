/*
 * naive.h - the seed design's baseline allreduce over any group: a binomial reduce to member 0
 * then a binomial broadcast from it, the two binomial engines (binomial/binomial.h) run as
 * phases of one task.
 */
#ifndef CHORUS_ALGO_NAIVE_H
#define CHORUS_ALGO_NAIVE_H

#include "algo/algo.h"

typedef struct chorus_naive_allreduce chorus_naive_allreduce_t;
chorus_status_t chorus__naive_allreduce_start(const chorus_sched_t* s, chorus_naive_allreduce_t** out);
chorus_status_t chorus__naive_allreduce_step(chorus_task_t* t, chorus_naive_allreduce_t* e);
void chorus__naive_allreduce_free(chorus_naive_allreduce_t* e);

#endif /* CHORUS_ALGO_NAIVE_H */
