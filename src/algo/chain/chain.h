/*
 * chain.h - the pipelined chain broadcast engine over any group: root -> root+1 -> ... ->
 * root-1 (member indexes mod n), chunk by chunk.
 */
#ifndef CHORUS_ALGO_CHAIN_H
#define CHORUS_ALGO_CHAIN_H

#include "algo/algo.h"

/* Chunks in flight on each link (receives posted ahead, sends not yet done). */
#ifndef CHORUS_CHAIN_WINDOW
#define CHORUS_CHAIN_WINDOW 4
#endif

/* The engine: start, step until OK (or < 0), free (NULL-safe). The root's sendbuf ends in
 * every member's recvbuf. */
typedef struct chorus_chain chorus_chain_t;
chorus_status_t chorus__chain_bcast_start(const chorus_sched_t* s, chorus_chain_t** out);
chorus_status_t chorus__chain_bcast_step(chorus_task_t* t, chorus_chain_t* c);
size_t chorus__chain_bcast_chunks_done(const chorus_chain_t* c);
void chorus__chain_bcast_free(chorus_chain_t* c);

#endif /* CHORUS_ALGO_CHAIN_H */
