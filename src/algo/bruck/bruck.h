/*
 * bruck.h - Bruck's schedules over any group (members, not ranks), for small blocks on any n:
 * ceil(log2 n) rounds, in round k member m sends to m -/+ 2^k and receives from m +/- 2^k.
 * Member i's block of a buffer is block_of[i] (NULL: block i).
 */
#ifndef CHORUS_ALGO_BRUCK_H
#define CHORUS_ALGO_BRUCK_H

#include "algo/algo.h"

/* Allgather: every member's recvbuf gets all n blocks of count elements. */
typedef struct chorus_bruck_allgather chorus_bruck_allgather_t;
chorus_status_t chorus__bruck_allgather_start(const chorus_sched_t* s, chorus_bruck_allgather_t** out);
chorus_status_t chorus__bruck_allgather_step(chorus_task_t* t, chorus_bruck_allgather_t* e);
void chorus__bruck_allgather_free(chorus_bruck_allgather_t* e);

/* Alltoall: block j of a member's sendbuf goes to the member that owns block j; block j of its
 * recvbuf comes from that member (count elements per block; sendbuf == recvbuf allowed). */
typedef struct chorus_bruck_alltoall chorus_bruck_alltoall_t;
chorus_status_t chorus__bruck_alltoall_start(const chorus_sched_t* s, chorus_bruck_alltoall_t** out);
chorus_status_t chorus__bruck_alltoall_step(chorus_task_t* t, chorus_bruck_alltoall_t* e);
void chorus__bruck_alltoall_free(chorus_bruck_alltoall_t* e);

#endif /* CHORUS_ALGO_BRUCK_H */
