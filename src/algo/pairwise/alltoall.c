/*
 * pairwise/alltoall.c - pairwise-exchange alltoall (the engine: pairwise.c).
 *
 * Steps for rank r, k = 1 .. n-1: send block (r+k) mod n of sendbuf to rank r+k, receive block
 * (r-k) mod n of recvbuf from rank r-k, counting in step order (pairwise.c: the hosts
 * interleaved when they are of equal size, else rank order); up to CHORUS_PAIRWISE_WINDOW steps in flight, sends and
 * receives advancing independently. The own block is copied locally while they travel. Tag = k.
 * In place (sendbuf == recvbuf) the floor(n/2) blocks that a receive would overwrite before
 * they are sent are saved to a stash first (pairwise.c).
 * Bytes per rank: (n-1) * B sent and received, B = count * elem bytes (plus floor(n/2) * B
 * copied when in place).
 *
 * Cost (alpha-beta): T = (n-1) * alpha + (n-1) * B / beta; 0 for n = 1.
 */
#include "algo/algos.h"
#include "algo/pairwise/pairwise.h"

static double pairwise_alltoall_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double n = t->nranks, block_bytes = (double)t->args.count * (double)t->dtype_size;
  if (t->nranks <= 1) return 0.0;
  return (n - 1.0) * cx->spread.alpha_us + (n - 1.0) * block_bytes / cx->spread.bytes_per_us;
}

const chorus_algo_t chorus__algo_pairwise_alltoall = {
    .name = "pairwise",
    .desc = "n-1 pairwise exchange steps (to r+k, from r-k, the hosts interleaved), a few steps in flight",
    .coll = CH_COLL_ALLTOALL,
    .supported = NULL,
    .cost_us = pairwise_alltoall_cost_us,
    .init = chorus__pairwise_init,
    .progress = chorus__pairwise_progress,
    .fini = chorus__pairwise_fini,
};
