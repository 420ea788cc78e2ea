/*
 * pairwise/alltoallv.c - pairwise-exchange alltoallv: pairwise alltoall's schedule (the
 * engine: pairwise.c) with a block of its own size and place per peer and direction.
 *
 * Steps for rank r, k = 1 .. n-1: send sendcounts[r+k] elements at sdispls[r+k] to rank r+k,
 * receive recvcounts[r-k] elements at rdispls[r-k] from rank r-k, counting in step order
 * (pairwise.c: the hosts interleaved when they are of equal size, else rank order); up to
 * CHORUS_PAIRWISE_WINDOW steps in flight; the own block is copied locally. Tag = k. Every pair
 * exchanges a frame both ways, empty blocks included, whose size and count word (what the
 * sender expects back) let each end check both directions of the pair: a disagreement fails
 * both with ERR_MISMATCH. In place (recvbuf's blocks sent, then replaced) through a stash of
 * the floor(n/2) blocks a receive would overwrite before they are sent.
 * Bytes per rank: the sum of its sendcounts and of its recvcounts but its own, plus a 48-byte
 * frame header per peer and direction (and the stash when in place).
 *
 * Cost (alpha-beta): T = (n-1) * alpha + max(sent, received) / beta; 0 for n = 1.
 */
#include "algo/algos.h"
#include "algo/pairwise/pairwise.h"

static double pairwise_alltoallv_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  const chorus_coll_args_t* a = &t->args;
  size_t sent = 0, received = 0;
  for (int i = 0; i < t->nranks; i++) {
    if (i == t->rank) continue;
    sent += a->sendcounts[i];
    received += a->recvcounts[i];
  }
  double n = t->nranks, bytes = (double)(sent > received ? sent : received) * (double)t->dtype_size;
  return (n - 1.0) * cx->spread.alpha_us + bytes / cx->spread.bytes_per_us;
}

const chorus_algo_t chorus__algo_pairwise_alltoallv = {
    .name = "pairwise",
    .desc = "n-1 pairwise exchange steps (to r+k, from r-k, the hosts interleaved), blocks of any size, a few "
            "steps in flight",
    .coll = CH_COLL_ALLTOALLV,
    .supported = NULL,
    .cost_us = pairwise_alltoallv_cost_us,
    .init = chorus__pairwise_init,
    .progress = chorus__pairwise_progress,
    .fini = chorus__pairwise_fini,
};
