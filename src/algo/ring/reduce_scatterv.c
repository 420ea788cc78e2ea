/*
 * ring/reduce_scatterv.c - ring reduce_scatterv, chunk-pipelined: ring/reduce_scatter.c's
 * schedule with blocks of their own sizes, recvcounts[i] elements for rank i, back to back in
 * sendbuf (ring.c).
 *
 * Steps for rank r, s = 0 .. n-2: send block r-s-1 (step 0 from sendbuf, later the partial sum
 * received at s-1), receive block r-s-2 into a scratch slot and reduce it with this rank's own
 * input of it; at s = n-2 the block is r and the result goes into recvbuf (divided by n for
 * avg). Chunks of at most chunk_bytes, K per step for the largest block; chunk 0 of every step
 * travels even when its block is empty, carrying the hash of recvcounts, so ranks that disagree
 * on any count fail at their first receive. Scratch: K + window chunks of the largest block.
 * Bytes per rank: S - B(r) received and S - B(r+1) sent (S: all blocks, B(i): rank i's block);
 * S - B(r) elements reduced.
 *
 * Cost (alpha-beta): T = (n-1) * alpha + (S - Bmin) / beta; 0 for n = 1.
 */
#include "algo/algos.h"
#include "algo/common.h"
#include "algo/ring/ring.h"

static chorus_status_t ring_reduce_scatterv_init(chorus_task_t* t) {
  return chorus__ring_init(t, CHORUS_RING_REDUCE_SCATTER);
}

const chorus_algo_t chorus__algo_ring_reduce_scatterv = {
    .name = "ring",
    .desc = "chunk-pipelined ring reduce-scatterv, blocks of any size, (n-1) steps",
    .coll = CH_COLL_REDUCE_SCATTERV,
    .supported = chorus__algo_reduce_supported,
    .cost_us = chorus__ring_v_cost_us,
    .init = ring_reduce_scatterv_init,
    .progress = chorus__ring_progress,
    .fini = chorus__ring_fini,
};
