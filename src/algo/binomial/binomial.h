/*
 * binomial.h - the binomial tree shared by binomial broadcast and reduce, over any group
 * (members, not ranks), rooted anywhere by relabelling: vrank = (member - root) mod n. The parent of vrank v > 0 is v minus its
 * lowest set bit; its children are v + m for every power of two m below that bit (all powers
 * below n for the root), largest subtree first, so a pipeline feeds the deepest branch first.
 * The reduce engine also runs over a chain (the chain reduce, algo/chain/reduce.c): the same
 * pipeline with one child per member.
 */
#ifndef CHORUS_ALGO_BINOMIAL_H
#define CHORUS_ALGO_BINOMIAL_H

#include "algo/algo.h"
#include "algo/common.h"

#define CHORUS_TREE_MAX_CHILDREN 32

/* Chunks in flight per tree edge: receive slots per child and sends towards each peer. */
#ifndef CHORUS_TREE_WINDOW
#define CHORUS_TREE_WINDOW 4
#endif

typedef struct {
  int vrank;
  int parent; /* member index; -1 at the root */
  int nchildren;
  int children[CHORUS_TREE_MAX_CHILDREN]; /* member indexes, largest subtree first */
} chorus_tree_t;

static inline void chorus__binomial_init(chorus_tree_t* b, int rank, int nranks, int root) {
  long n = nranks, v = chorus__mod(rank - root, nranks);
  long mask = 1;
  b->vrank = (int)v;
  b->parent = -1;
  b->nchildren = 0;
  while (mask < n) {
    if (v & mask) {
      b->parent = (int)((v - mask + root) % n);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) b->children[b->nchildren++] = (int)((v + mask + root) % n);
}

/* A chain towards the root: vrank v's parent is v - 1, its child v + 1 (none for the last). */
static inline void chorus__chain_tree_init(chorus_tree_t* b, int rank, int nranks, int root) {
  int v = (int)chorus__mod(rank - root, nranks);
  b->vrank = v;
  b->parent = v > 0 ? (rank + nranks - 1) % nranks : -1;
  b->nchildren = v + 1 < nranks ? 1 : 0;
  b->children[0] = (rank + 1) % nranks;
}

/* The engines, over any group (chorus_sched_t): start, step until OK (or < 0), free
 * (NULL-safe). Broadcast sends the root's sendbuf into every member's recvbuf; reduce leaves
 * the reduction of every member's sendbuf in the root's recvbuf. */
typedef struct chorus_bcast chorus_bcast_t;
chorus_status_t chorus__binomial_bcast_start(const chorus_sched_t* s, chorus_bcast_t** out);
chorus_status_t chorus__binomial_bcast_step(chorus_task_t* t, chorus_bcast_t* b);
void chorus__binomial_bcast_free(chorus_bcast_t* b);
typedef struct chorus_treduce chorus_treduce_t;
chorus_status_t chorus__binomial_reduce_start(const chorus_sched_t* s, chorus_treduce_t** out);
/* The reduce engine over another tree shape (tree: this member's place in it). */
chorus_status_t chorus__tree_reduce_start(const chorus_sched_t* s, const chorus_tree_t* tree, chorus_treduce_t** out);
size_t chorus__tree_reduce_chunks_done(const chorus_treduce_t* r); /* the root's reduced, the others' sent */
chorus_status_t chorus__binomial_reduce_step(chorus_task_t* t, chorus_treduce_t* r);
void chorus__binomial_reduce_free(chorus_treduce_t* r);

/* The registry entries' price: the root pushes the message to (broadcast) or takes it from
 * (reduce) one child per level over its one link. Over the host-ordered ring on hosts of L = 2^j
 * ranks (n a power of two), with the root first on its host, its j nearest children share its
 * host: priced at the intra-host link, as rd prices its first rounds, with the turn of ranks that
 * share cores (algo.h). Priced as crossing, every level put broadcasts of 16 KiB on 4 emulated
 * hosts x 2 ranks at 3 link times where they took 2. */
static inline double chorus__binomial_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double levels = chorus__ceil_log2(t->nranks), bytes = (double)t->args.count * (double)t->dtype_size;
  double inside = chorus__root_first_on_host(t) ? chorus__cost_rounds_inside_hosts(cx, t->nranks) : 0;
  return (levels - inside) * (cx->flat.alpha_us + bytes / cx->flat.bytes_per_us) +
         inside * (cx->intra.alpha_us + chorus__cost_inhost_turn_us(cx) + bytes / cx->intra.bytes_per_us);
}

#endif /* CHORUS_ALGO_BINOMIAL_H */
