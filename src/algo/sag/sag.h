/*
 * sag.h - the scatter-allgather (van de Geijn) broadcast engine over any group: a binomial
 * scatter of n blocks from the root, then a ring allgather of the blocks.
 */
#ifndef CHORUS_ALGO_SAG_H
#define CHORUS_ALGO_SAG_H

#include "algo/algo.h"

/* Chunks in flight per transfer stream. */
#ifndef CHORUS_SAG_WINDOW
#define CHORUS_SAG_WINDOW 4
#endif

/* The engine: start, step until OK (or < 0), free (NULL-safe). The root's sendbuf ends in
 * every member's recvbuf. */
typedef struct chorus_sag chorus_sag_t;
chorus_status_t chorus__sag_bcast_start(const chorus_sched_t* s, chorus_sag_t** out);
chorus_status_t chorus__sag_bcast_step(chorus_task_t* t, chorus_sag_t* g);
size_t chorus__sag_bcast_stage(const chorus_sag_t* g);
void chorus__sag_bcast_free(chorus_sag_t* g);

#endif /* CHORUS_ALGO_SAG_H */
