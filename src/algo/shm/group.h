/*
 * group.h - memory-semantics engines over the ranks of one host inside a communicator that may
 * span several hosts: the intra-host phases of the two-level algorithms (hier/). They run over
 * a schedule whose group is this host's group (core/topo.h: its ranks in rank order, so member
 * index = local index in the host's shared segment) and follow the flag protocol of shm.h with
 * ids drawn when they start: every rank of the host starts the same phases in the same order.
 *
 * The buffer is cut into one piece per member: member i's piece is elements
 * [first[i], first[i] + len[i]) (the segments of an allreduce, or the blocks of a
 * reduce-scatter); pieces may be empty. touched_bytes: what the whole call reads and writes of
 * the caller's buffers on this rank (shm.h's chorus__shm_op_setup: it decides the stores).
 */
#ifndef CHORUS_ALGO_SHM_GROUP_H
#define CHORUS_ALGO_SHM_GROUP_H

#include "algo/common.h"

typedef struct chorus_shm_group chorus_shm_group_t;

/* 1 when the memory-semantics engines can run over s->group on this host: its ranks map the
 * host's segment and the group is that host's whole group. */
int chorus__shm_group_ok(const chorus_task_t* t, const chorus_sched_t* s);

/* Reduce-scatter: member i's piece of every member's s->sendbuf is combined (s->op; avg
 * divides by s->avg_divisor, 0: left undivided) into member i's s->recvbuf at the same
 * element offset. recvbuf == sendbuf is allowed. With s->segs the input is read from the
 * pieces' send pointers instead (s->sendbuf unused). A member's first/len place the pieces in
 * its own buffers only: members may lay out their vectors differently, the slots go by member. Per chunk: every member stages the others'
 * pieces in its slot (ARRIVED), then combines its own from its send buffer and every other
 * member's slot, in member order after its own (DONE). */
chorus_status_t chorus__shm_group_rs_start(chorus_task_t* t, const chorus_sched_t* s, const size_t* first,
                                           const size_t* len, size_t touched_bytes, chorus_shm_group_t** out);
/* Allgather: member i's piece, read from s->sendbuf + first[i] elements on member i (in place
 * when s->sendbuf == s->recvbuf), lands at the same offset of every member's s->recvbuf. Per
 * chunk: stage my piece in my slot (ARRIVED), copy the others' out (DONE). With s->segs (a
 * list of pieces of a vector) the output lands in the pieces' receive buffers instead; with
 * s->segs and no s->sendbuf, each member's own piece is already in its place there and is read
 * from the pieces' send pointers (the same places): in place, scattered. */
chorus_status_t chorus__shm_group_ag_start(chorus_task_t* t, const chorus_sched_t* s, const size_t* first,
                                           const size_t* len, size_t touched_bytes, chorus_shm_group_t** out);
/* Reduce to member s->root: the s->count elements of every member's s->sendbuf are combined
 * into the root's s->recvbuf (avg divides by s->avg_divisor, 0: undivided); recvbuf is unused
 * elsewhere, and may be the root's sendbuf. Per chunk: every other member stages its chunk
 * (ARRIVED), the root combines its own and theirs in member order (DONE). */
chorus_status_t chorus__shm_group_reduce_start(chorus_task_t* t, const chorus_sched_t* s, chorus_shm_group_t** out);
/* Broadcast from member s->root: the root's s->sendbuf (s->count elements) lands in every
 * member's s->recvbuf. Per chunk: the root stages it (ARRIVED), the others copy it out (DONE). */
chorus_status_t chorus__shm_group_bcast_start(chorus_task_t* t, const chorus_sched_t* s, chorus_shm_group_t** out);
/* INPROGRESS, OK, or < 0. */
chorus_status_t chorus__shm_group_step(chorus_task_t* t, chorus_shm_group_t* g);
void chorus__shm_group_free(chorus_shm_group_t* g); /* NULL-safe */

#endif /* CHORUS_ALGO_SHM_GROUP_H */
