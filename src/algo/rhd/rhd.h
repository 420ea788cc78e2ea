/*
 * rhd.h - the recursive halving-doubling (Rabenseifner) engine shared by rhd allreduce and rhd
 * reduce_scatter, over any group. p = 2^floor(log2 n); the r = n - p extra members are folded
 * first (member 2i sends its vector to member 2i+1, i < r, which reduces it and takes part for
 * both) and get their result back at the end. rhd.c holds the engine and its description.
 */
#ifndef CHORUS_ALGO_RHD_H
#define CHORUS_ALGO_RHD_H

#include "algo/algo.h"

typedef enum {
  CHORUS_RHD_ALLREDUCE,      /* count elements; reduce-scatter by halving, allgather by doubling */
  CHORUS_RHD_REDUCE_SCATTER  /* n blocks of count elements; member i keeps block block_of[i] */
} chorus_rhd_kind_t;

/* The engine, over any group: start, step until OK (or < 0), free (NULL-safe). */
typedef struct chorus_rhd chorus_rhd_t;
chorus_status_t chorus__rhd_start(const chorus_sched_t* s, chorus_rhd_kind_t kind, chorus_rhd_t** out);
chorus_status_t chorus__rhd_step(chorus_task_t* t, chorus_rhd_t* h);
void chorus__rhd_free(chorus_rhd_t* h);

/* The registry entries' init/progress/fini: the whole communicator on its host-ordered ring. */
chorus_status_t chorus__rhd_init(chorus_task_t* t, chorus_rhd_kind_t kind);
chorus_status_t chorus__rhd_progress(chorus_task_t* t);
void chorus__rhd_fini(chorus_task_t* t);

#endif /* CHORUS_ALGO_RHD_H */
