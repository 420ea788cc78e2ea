/*
 * tree.h - the binomial tree shared by tree broadcast and tree reduce, rooted anywhere by
 * relabelling ranks: vrank = (rank - root) mod n. The parent of vrank v > 0 is v minus its
 * lowest set bit; its children are v + m for every power of two m below that bit (all powers
 * below n for the root), largest subtree first, so a pipeline feeds the deepest branch first.
 */
#ifndef CHORUS_ALGO_TREE_H
#define CHORUS_ALGO_TREE_H

#include "algo/algo.h"

#define CHORUS_TREE_MAX_CHILDREN 32

/* Chunks in flight per tree edge: receive slots per child and sends towards each peer. */
#ifndef CHORUS_TREE_WINDOW
#define CHORUS_TREE_WINDOW 4
#endif

typedef struct {
  int vrank;
  int parent; /* real rank; -1 at the root */
  int nchildren;
  int children[CHORUS_TREE_MAX_CHILDREN]; /* real ranks, largest subtree first */
} chorus_binomial_t;

static inline void chorus__binomial_init(chorus_binomial_t* b, int rank, int nranks, int root) {
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

#endif /* CHORUS_ALGO_TREE_H */
