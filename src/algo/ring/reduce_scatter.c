/*
 * ring/reduce_scatter.c - ring reduce_scatter, chunk-pipelined: the first half of ring
 * allreduce, with segments = the n blocks of recvcount elements, shifted by one so that rank r
 * ends with block r.
 *
 * Steps for rank r, s = 0 .. n-2: send block r-s-1 (step 0 from sendbuf, later the partial sum
 * received at s-1), receive block r-s-2 into a scratch slot and reduce it with this rank's own
 * block in the slot; at s = n-2 the block is r and the reduction goes into recvbuf (divided by
 * n for avg). Partial sums wait in their slot until forwarded, so scratch is K + window chunks
 * (K = chunks per block). Blocks are cut into chunks of at most chunk_bytes and the steps
 * overlap as in ring/allreduce.c. Bytes per rank: (n-1) * B sent and received, B = recvcount *
 * elem bytes; (n-1) * recvcount elements reduced.
 *
 * Cost (alpha-beta): T = (n-1) * alpha + (n-1) * B / beta, plus the (n-1) B of reductions where
 * ranks share cores (algo.h, chorus__cost_crowded_reduce_us); 0 for n = 1.
 */
#include "algo/algos.h"
#include "algo/common.h"
#include "algo/ring/ring.h"

static double ring_reduce_scatter_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double n = t->nranks, block_bytes = (double)t->args.count * (double)t->dtype_size;
  if (t->nranks <= 1) return 0.0;
  return (n - 1.0) * cx->flat.alpha_us + (n - 1.0) * block_bytes / cx->flat.bytes_per_us +
         chorus__cost_crowded_reduce_us(cx, (n - 1.0) * block_bytes);
}

static chorus_status_t ring_reduce_scatter_init(chorus_task_t* t) {
  return chorus__ring_init(t, CHORUS_RING_REDUCE_SCATTER);
}

const chorus_algo_t chorus__algo_ring_reduce_scatter = {
    .name = "ring",
    .desc = "chunk-pipelined ring reduce-scatter, (n-1) blocks sent and received per rank",
    .coll = CH_COLL_REDUCE_SCATTER,
    .supported = chorus__algo_reduce_supported,
    .cost_us = ring_reduce_scatter_cost_us,
    .init = ring_reduce_scatter_init,
    .progress = chorus__ring_progress,
    .fini = chorus__ring_fini,
};
