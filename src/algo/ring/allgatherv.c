/*
 * ring/allgatherv.c - ring allgatherv, chunk-pipelined: ring/allgather.c's schedule with blocks
 * of their own sizes, recvcounts[i] elements of rank i at rdispls[i] of recvbuf (ring.c).
 *
 * Steps for rank r, s = 0 .. n-2: send block r-s (step 0 from sendbuf, later the block
 * received at s-1, from recvbuf), receive block r-s-1 into its place; chunks of at most
 * chunk_bytes, K per step for the largest block. Chunk 0 of every step travels even when its
 * block is empty: every frame carries the hash of recvcounts, so ranks that disagree on any
 * count fail at their first receive. Bytes per rank: S - B(r+1) received, S - B(r-1) sent (S:
 * all blocks, B(i): rank i's block), plus an empty frame per empty block.
 *
 * Cost (alpha-beta): T = (n-1) * alpha + (S - Bmin) / beta (the busiest link carries every
 * block but its receiver's); 0 for n = 1.
 */
#include "algo/algos.h"
#include "algo/common.h"
#include "algo/ring/ring.h"

double chorus__ring_v_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  size_t smallest = t->args.recvcounts[0];
  for (int i = 1; i < t->nranks; i++) smallest = chorus__min_sz(smallest, t->args.recvcounts[i]);
  double n = t->nranks, busiest_bytes = (double)(t->args.count - smallest) * (double)t->dtype_size;
  return (n - 1.0) * cx->flat.alpha_us + busiest_bytes / cx->flat.bytes_per_us;
}

static chorus_status_t ring_allgatherv_init(chorus_task_t* t) {
  return chorus__ring_init(t, CHORUS_RING_ALLGATHER);
}

const chorus_algo_t chorus__algo_ring_allgatherv = {
    .name = "ring",
    .desc = "chunk-pipelined ring allgatherv, blocks of any size, (n-1) steps",
    .coll = CH_COLL_ALLGATHERV,
    .supported = NULL,
    .cost_us = chorus__ring_v_cost_us,
    .init = ring_allgatherv_init,
    .progress = chorus__ring_progress,
    .fini = chorus__ring_fini,
};
