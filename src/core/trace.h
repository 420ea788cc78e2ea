/*
 * trace.h - what happened, per communicator: a flight recorder of the last operations (kind,
 * sequence number, dtype, count, root, algorithm, state, timestamps, status), dumped as JSON
 * by chorus_comm_dump or on SIGUSR1, and an optional Chrome-trace file (CHORUS_TRACE_FILE)
 * with one event per operation on every rank, which chorus-trace-merge joins into one timeline.
 */
#ifndef CHORUS_TRACE_H
#define CHORUS_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "coll/task.h"

enum { CH_REC_POSTED, CH_REC_STARTED, CH_REC_DONE, CH_REC_FAILED };

typedef struct {
  uint64_t seq;
  uint64_t count;
  uint64_t post_ns, start_ns, end_ns;
  const char* algo;
  int32_t root;
  int32_t status;
  uint8_t coll, dtype, op, state;
} chorus_rec_entry_t;

typedef struct {
  chorus_rec_entry_t* entries; /* a ring of cap entries; operation k lives at k % cap */
  size_t cap;
  uint64_t recorded;           /* operations recorded so far */
} chorus_recorder_t;

struct chorus_comm;

/* Set-up (the recorder) and tear-down (also unregisters). A communicator is registered for
 * SIGUSR1 dumps (and opens the trace file) only once it is connected, so a dump never reads a
 * communicator that is still being built. */
chorus_status_t chorus__trace_comm_init(struct chorus_comm* comm);
void chorus__trace_comm_register(struct chorus_comm* comm);
void chorus__trace_comm_fini(struct chorus_comm* comm);

/* Called by the engine with comm->mu held. */
void chorus__trace_posted(struct chorus_comm* comm, chorus_task_t* t);
void chorus__trace_started(struct chorus_comm* comm, chorus_task_t* t);
void chorus__trace_finished(struct chorus_comm* comm, chorus_task_t* t, chorus_status_t st, uint64_t now);

/* Writes the recorder as JSON. comm->mu must not be held. */
void chorus__trace_dump(struct chorus_comm* comm, FILE* out);

#endif /* CHORUS_TRACE_H */
