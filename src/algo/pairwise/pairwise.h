/*
 * pairwise.h - the pairwise-exchange schedule behind pairwise alltoall and alltoallv
 * (pairwise.c): n-1 steps, to r+k and from r-k (the hosts interleaved when they are of equal
 * size), a few in flight, in place through a stash.
 */
#ifndef CHORUS_ALGO_PAIRWISE_H
#define CHORUS_ALGO_PAIRWISE_H

#include "algo/algo.h"

/* Steps in flight, sends and receives each. A compile-time knob: algorithms read no
 * environment. */
#ifndef CHORUS_PAIRWISE_WINDOW
#define CHORUS_PAIRWISE_WINDOW 4
#endif

/* The registry entries' init/progress/fini over the whole communicator: alltoall (count
 * elements per block, block p at p x count) and alltoallv (the task's counts and
 * displacements per peer and direction). */
chorus_status_t chorus__pairwise_init(chorus_task_t* t);
chorus_status_t chorus__pairwise_progress(chorus_task_t* t);
void chorus__pairwise_fini(chorus_task_t* t);

#endif /* CHORUS_ALGO_PAIRWISE_H */
