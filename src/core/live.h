/*
 * live.h - the process's set of live communicators, so that a call can refuse a NULL,
 * destroyed or never-created communicator with ERR_INVALID_ARG and a message, without reading
 * its memory (a destroyed one is freed). Best effort: a new communicator may reuse the address
 * of a destroyed one, and then the stale pointer is taken for it.
 */
#ifndef CHORUS_LIVE_H
#define CHORUS_LIVE_H

#include "chorus.h"

/* Adds comm to the set (at creation); 0 on success, -1 when out of memory. */
int chorus__live_add(const chorus_comm_t* comm);
/* Removes comm; 1 when it was there (0: destroyed already, or never created). */
int chorus__live_remove(const chorus_comm_t* comm);
/* 1 when comm is live. Lock-free, a few loads: called by every API entry. */
int chorus__live_has(const chorus_comm_t* comm);
/* 1 when comm is live; otherwise 0, with "<call>: ..." as this thread's error message. */
int chorus__live_check(const chorus_comm_t* comm, const char* call);
/* This thread's message about comm, when it was the last communicator refused ("" if not). */
const char* chorus__live_error(const chorus_comm_t* comm);

#endif /* CHORUS_LIVE_H */
