/*
 * rd.h - recursive doubling over any group (members, not ranks), for small messages: log2 p
 * exchange rounds between partners v and v ^ 2^k of a power-of-two set of p "virtual" members.
 * A group of n = p + rem members (p the largest power of two <= n) first folds: member 2i+1,
 * i < rem, hands its data to member 2i and drops out until the end, when 2i sends it the
 * result. Kept member m has vrank m/2 (m < 2 rem, even) or m - rem; vrank v is member
 * chorus__rd_member(v), and the vranks [a, b) cover the members [member(a), member(b)).
 */
#ifndef CHORUS_ALGO_RD_H
#define CHORUS_ALGO_RD_H

#include "algo/algo.h"

typedef struct {
  int n, p, rem, rounds; /* rounds = log2 p */
  int vrank;             /* -1 for a folded member */
  int fold_peer;         /* the member folded into this one, or that this one folds into; -1 */
} chorus_rd_shape_t;

static inline void chorus__rd_shape(chorus_rd_shape_t* sh, int me, int n) {
  int p = 1, rounds = 0;
  while (2 * p <= n) {
    p *= 2;
    rounds++;
  }
  sh->n = n;
  sh->p = p;
  sh->rem = n - p;
  sh->rounds = rounds;
  sh->fold_peer = -1;
  if (me < 2 * sh->rem) {
    sh->vrank = me % 2 ? -1 : me / 2;
    sh->fold_peer = me % 2 ? me - 1 : me + 1;
  } else {
    sh->vrank = me - sh->rem;
  }
}

/* The exchanges recursive doubling over n members runs in sequence, for the cost model: the
 * rounds of the largest power of two within n, and a fold in and out for the rest. */
static inline int chorus__rd_steps(int n) {
  chorus_rd_shape_t sh;
  chorus__rd_shape(&sh, 0, n);
  return sh.rounds + (sh.rem ? 2 : 0);
}

/* The member of vrank v (0 <= v <= p; v = p gives n, the end of the last range). */
static inline int chorus__rd_member(const chorus_rd_shape_t* sh, int v) {
  return v < sh->rem ? 2 * v : v + sh->rem;
}

/* Allreduce: every member's recvbuf gets the reduction of all sendbufs (count elements). */
typedef struct chorus_rd_allreduce chorus_rd_allreduce_t;
chorus_status_t chorus__rd_allreduce_start(const chorus_sched_t* s, chorus_rd_allreduce_t** out);
chorus_status_t chorus__rd_allreduce_step(chorus_task_t* t, chorus_rd_allreduce_t* e);
void chorus__rd_allreduce_free(chorus_rd_allreduce_t* e);

/* Allgather: every member's recvbuf gets all n blocks of count elements (member i's block is
 * block_of[i], or i); a member's sendbuf may be its own block of recvbuf (in place). */
typedef struct chorus_rd_allgather chorus_rd_allgather_t;
chorus_status_t chorus__rd_allgather_start(const chorus_sched_t* s, chorus_rd_allgather_t** out);
chorus_status_t chorus__rd_allgather_step(chorus_task_t* t, chorus_rd_allgather_t* e);
void chorus__rd_allgather_free(chorus_rd_allgather_t* e);

#endif /* CHORUS_ALGO_RD_H */
