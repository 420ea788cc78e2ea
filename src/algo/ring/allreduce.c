/*
 * ring/allreduce.c - ring allreduce, chunk-pipelined: a reduce-scatter of n-1 steps, then an
 * allgather of n-1 steps, over n segments whose sizes differ by at most one element. It is
 * bandwidth-optimal: each rank sends and receives 2(n-1)/n of the buffer, whatever n is.
 *
 * Steps for rank r (next = r+1, prev = r-1, mod n), step s = 0 .. 2n-3:
 *   s <= n-2, reduce-scatter: send segment r-s; receive segment r-s-1 into a scratch slot and
 *     reduce it with this rank's own input straight into recvbuf (no initial copy). At s = n-2
 *     segment r+1 is complete; avg divides it there, before it travels, so that every rank ends
 *     with the same bits.
 *   s >= n-1, allgather (k = s-n+1): send segment r+1-k, receive segment r-k into recvbuf.
 * Every segment is cut into K chunks of at most chunk_bytes; unit (s,c) = chunk c of step s.
 * Send (s,c) waits only for receive (s-1,c), so consecutive steps overlap. Bytes per rank:
 * 2(n-1)/n * N sent and as many received; (n-1)/n * N elements reduced.
 *
 * Schedule, n = 3, K = 2, rank 0 (segments a, b, c = 0, 1, 2; "a.1" = chunk 1 of a); each
 * link r -> r+1 carries units in the same s-major order, never idle once the pipe is full:
 *
 *   slot          1     2     3     4     5     6     7     8
 *   send to 1    a.0   a.1   c.0   c.1   b.0   b.1   a.0   a.1     (c, b: reduced in recvbuf)
 *   recv from 2  c.0   c.1   b.0   b.1   a.0   a.1   c.0   c.1
 *   reduce        .    c.0   c.1   b.0*  b.1*                       (* = final: b complete)
 *                \--- reduce-scatter (s=0,1) ---/\--- allgather (s=2,3) ---/
 *
 * Cost (alpha-beta, N = count * elem bytes): T = 2(n-1) * alpha + 2(n-1)/n * N / beta
 * (beta = link bytes_per_us); 0 for n = 1. The engine lives in ring/ring.c.
 */
#include "algo/algos.h"
#include "algo/common.h"
#include "algo/ring/ring.h"

double chorus__ring_allreduce_cost_us(const chorus_task_t* t, const chorus_link_model_t* link) {
  double n = t->nranks, bytes = (double)t->args.count * (double)t->dtype_size;
  if (t->nranks <= 1) return 0.0;
  return 2.0 * (n - 1.0) * link->alpha_us + 2.0 * (n - 1.0) / n * bytes / link->bytes_per_us;
}

static double ring_allreduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  return chorus__ring_allreduce_cost_us(t, &cx->flat);
}

static chorus_status_t ring_allreduce_init(chorus_task_t* t) {
  return chorus__ring_init(t, CHORUS_RING_ALLREDUCE);
}

const chorus_algo_t chorus__algo_ring_allreduce = {
    .name = "ring",
    .desc = "chunk-pipelined ring: reduce-scatter then allgather, 2(n-1)/n of the data per rank",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = ring_allreduce_cost_us,
    .init = ring_allreduce_init,
    .progress = chorus__ring_progress,
    .fini = chorus__ring_fini,
};
