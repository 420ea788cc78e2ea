/*
 * verdict.h - between conn.c, which reads the operation signatures same-host ranks publish, and
 * verdict.c, which writes the verdict after a timeout from them and from status frames.
 */
#ifndef CHORUS_TRANSPORT_VERDICT_H
#define CHORUS_TRANSPORT_VERDICT_H

#include <stddef.h>
#include <stdint.h>

#include "transport/conn.h"

/* Reads a rank's published signature into out; 0 while it is being rewritten (then it is not
 * the awaited operation's any more). */
int chorus__conn_read_signature(const chorus_shm_ctl_t* c, uint64_t out[CHORUS_SIG_WORDS]);

/* The verdict on the ranks of this host, from their signatures; `skip` (a rank, or -1) is left
 * out; with culprits_only, only the ranks that hold the operation up are named. */
void chorus__conn_local_verdict(chorus_task_t* t, int skip, int culprits_only, char* out, size_t outlen,
                                chorus_blame_t* blame);

#endif
