/*
 * ranks.h - ranks as threads: run_ranks(n, fn, arg) makes a unique id, starts n threads that
 * each create their communicator (rank r of n), run fn(comm, r, arg), wait for each other,
 * destroy the communicator and join. All ranks live in the one process of the test case.
 */
#ifndef CHORUS_TEST_RANKS_H
#define CHORUS_TEST_RANKS_H

#include "chorus.h"

/* The body of one rank. Returns 0 on success. A nonzero return is a "soft" failure: the rank
 * must still have made every collective call its peers expect (so nobody hangs); for a hard
 * failure use ASSERT_*, which ends the whole case at once. */
typedef int (*ranks_fn)(chorus_comm_t* comm, int rank, void* arg);

/* Runs fn on n ranks with chorus_comm_init(&comm, n, r, &id, NULL) and returns 0 once every
 * rank returned 0; fails the case when a rank failed (fn returned nonzero, or init or destroy
 * returned an error: the case ends with the status name and the library's message). */
int run_ranks(int nranks, ranks_fn fn, void* arg);
/* The same with a communicator configuration (cfg may be NULL). */
int run_ranks_cfg(int nranks, const chorus_config_t* cfg, ranks_fn fn, void* arg);

/* Emulated hosts: from now on, every group of n ranks gives rank r the host id "emu<h>" with
 * h = host_of[r] (copied), so ranks with equal h share memory and the others talk over TCP,
 * as on a cluster. n = 0 (or host_of NULL) goes back to one host. Call it while no rank
 * thread runs. */
void ranks_set_hosts(int n, const int* host_of);
/* Per-rank operation timeouts: from now on, rank r of every group of n ranks gets
 * timeout_sec[r] seconds (0: the configuration's). n = 0 (or NULL) undoes it. Call it while no
 * rank thread runs. */
void ranks_set_timeouts(int n, const int* timeout_sec);
/* 1 when groups of n ranks run on emulated hosts now. */
int ranks_hosts_active(int n);

/* Two-step form, to drive several groups (several communicators) at the same time, or to go
 * on after soft failures: ranks_join returns the number of ranks whose fn returned nonzero. */
typedef struct ranks_group ranks_group_t;
ranks_group_t* ranks_start(int nranks, const chorus_config_t* cfg, ranks_fn fn, void* arg);
int ranks_join(ranks_group_t* group);

/* Creates a communicator of one rank under the current environment and destroys it again:
 * returns the creation's status (a failed creation that left a handle behind: ERR_INTERNAL). */
chorus_status_t ranks_create_alone(void);

#endif /* CHORUS_TEST_RANKS_H */
