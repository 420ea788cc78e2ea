/*
 * coll.h - the collective layer's internal calls: argument checks and algorithm selection.
 */
#ifndef CHORUS_COLL_H
#define CHORUS_COLL_H

#include "core/comm.h"

/* Validates a call's arguments on this rank; on error writes comm->last_error. */
chorus_status_t chorus__args_check(chorus_comm_t* comm, const chorus_coll_args_t* a);
/* Bytes of the send and receive buffers this rank uses for the call (variable-size calls: 0;
 * vargs.c checks their buffers). */
void chorus__args_buffer_bytes(const chorus_comm_t* comm, const chorus_coll_args_t* a, size_t esize,
                               size_t* send_bytes, size_t* recv_bytes);
/* A variable-size call's arrays (vargs.c): checks them on this rank (on error writes
 * comm->last_error), then copies them into *vec (the task's, to free when it ends), points a's
 * arrays there with displacements filled in, and sets a->count and a->vsig (task.h). */
chorus_status_t chorus__vargs_prepare(chorus_comm_t* comm, chorus_coll_args_t* a, void** vec);
/* Chooses t->algo: the CHORUS_ALGO override, else the cheapest supported algorithm. */
chorus_status_t chorus__select(chorus_comm_t* comm, chorus_task_t* t);

/* The settings every rank of a communicator must share (shared.c): setting i's name, with this
 * rank's value described in `value` (NULL past the last); the hashes ranks publish of them. */
const char* chorus__shared_setting(const chorus_comm_t* comm, int i, char* value, size_t len);
void chorus__shared_settings_hash(const chorus_comm_t* comm, uint64_t hashes[CHORUS_SHARED_SETTINGS]);

/* Gradient compression (compress.c): the setting CHORUS_COMPRESSION and CHORUS_COMPRESSION_SCOPE
 * give (on error writes err), and the codec of call t (t->codec: none for every call the
 * setting does not cover). comm->mu held. */
chorus_status_t chorus__compression_from_env(chorus_compression_opts_t* o, char* err, size_t errlen);
/* CHORUS_ZEROS (the lossless form across hosts): *mode gets CHORUS_ZEROS_OFF, _ON or _AUTO. */
enum { CHORUS_ZEROS_OFF, CHORUS_ZEROS_ON, CHORUS_ZEROS_AUTO };
chorus_status_t chorus__zeros_from_env(int* mode, char* err, size_t errlen);
void chorus__compression_resolve(const chorus_comm_t* comm, chorus_task_t* t);
/* 1 when the communicator's setting (under comm->mu) would compress this call but for its size
 * (min_bytes): coll/group.c keeps such calls exact when it fuses them. */
int chorus__compression_exact_by_size(const chorus_comm_t* comm, const chorus_coll_args_t* a);
/* chorus_allreduce_ex's options: a valid compression, a residual of this communicator and count
 * (on error writes comm->last_error). comm->mu held. */
chorus_status_t chorus__compression_check_opts(chorus_comm_t* comm, const chorus_coll_args_t* a);

/* A blocking exchange of bytes for the library itself (the link probe): the first registered
 * algorithm, no CHORUS_ALGO rule, no recorder or trace entry. */
chorus_status_t chorus__sendrecv_internal(const void* sendbuf, size_t bytes, int dst, void* recvbuf,
                                          size_t recvbytes, int src, chorus_comm_t* comm);

/* Posts a task prepared with chorus__coll_prepare (non-blocking: it runs in the background),
 * as any call does: select, init, stamp, queue. comm->mu held. */
void chorus__coll_prepare(chorus_task_t* t, chorus_comm_t* comm, const chorus_coll_args_t* a);
chorus_status_t chorus__coll_post(chorus_comm_t* comm, chorus_task_t* t);

/* ---- groups (group.c) ---- */
/* 1 while the calling thread has a group open (chorus_group_start). */
int chorus__group_open(void);
/* 1 when the calling thread's open group holds calls on comm. */
int chorus__group_holds(const chorus_comm_t* comm);
/* Gathers a call made in an open group: req (prepared, not posted) is posted by
 * chorus_group_end; a blocking call's status (and info, for a receive) is delivered then.
 * comm->mu held. */
chorus_status_t chorus__group_add(chorus_comm_t* comm, chorus_req_t* req, int blocking, chorus_msg_info_t* info);

#endif /* CHORUS_COLL_H */
