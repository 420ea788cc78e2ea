/*
 * dbtree.h - the double binary tree allreduce engine over any group (NCCL style): two
 * complementary binary trees (every member is an inner node in at most one), half of the data
 * reduced up and broadcast down each, chunk-pipelined.
 */
#ifndef CHORUS_ALGO_DBTREE_H
#define CHORUS_ALGO_DBTREE_H

#include "algo/algo.h"

/* Chunks in flight per peer and direction (also the receive slots per peer). */
#ifndef CHORUS_DBTREE_WINDOW
#define CHORUS_DBTREE_WINDOW 4
#endif

/* The engine: start, step until OK (or < 0), free (NULL-safe). Every member's recvbuf ends
 * with the reduction of every member's sendbuf. */
typedef struct chorus_dbtree chorus_dbtree_t;
chorus_status_t chorus__dbtree_allreduce_start(const chorus_sched_t* s, chorus_dbtree_t** out);
chorus_status_t chorus__dbtree_allreduce_step(chorus_task_t* t, chorus_dbtree_t* d);
size_t chorus__dbtree_allreduce_units_done(const chorus_dbtree_t* d);
void chorus__dbtree_allreduce_free(chorus_dbtree_t* d);

#endif /* CHORUS_ALGO_DBTREE_H */
