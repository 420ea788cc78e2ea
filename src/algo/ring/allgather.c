/*
 * ring/allgather.c - ring allgather, chunk-pipelined: the second half of ring allreduce, with
 * segments = the n blocks of sendcount elements.
 *
 * Steps for rank r, s = 0 .. n-2: send block r-s (step 0 straight from sendbuf, later the block
 * received at step s-1, from recvbuf), receive block r-s-1 into its place in recvbuf. The own
 * block is copied into recvbuf (unless in place) while the first sends travel. Blocks are cut
 * into chunks of at most chunk_bytes; chunk c of step s leaves as soon as chunk c of step s-1
 * has arrived, as in ring/allreduce.c. Bytes per rank: (n-1) * B sent and received, B =
 * sendcount * elem bytes.
 *
 * Cost (alpha-beta): T = (n-1) * alpha + (n-1) * B / beta; 0 for n = 1.
 */
#include "algo/algos.h"
#include "algo/common.h"
#include "algo/ring/ring.h"

static double ring_allgather_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double n = t->nranks, block_bytes = (double)t->args.count * (double)t->dtype_size;
  if (t->nranks <= 1) return 0.0;
  return (n - 1.0) * cx->flat.alpha_us + (n - 1.0) * block_bytes / cx->flat.bytes_per_us;
}

static chorus_status_t ring_allgather_init(chorus_task_t* t) {
  return chorus__ring_init(t, CHORUS_RING_ALLGATHER);
}

const chorus_algo_t chorus__algo_ring_allgather = {
    .name = "ring",
    .desc = "chunk-pipelined ring allgather, (n-1) blocks sent and received per rank",
    .coll = CH_COLL_ALLGATHER,
    .supported = NULL,
    .cost_us = ring_allgather_cost_us,
    .init = ring_allgather_init,
    .progress = chorus__ring_progress,
    .fini = chorus__ring_fini,
};
