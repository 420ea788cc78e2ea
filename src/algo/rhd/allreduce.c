/*
 * rhd/allreduce.c - recursive halving-doubling allreduce (Rabenseifner); the engine lives in
 * rhd/rhd.c.
 *
 * Steps (p = 2^k <= n < 2p, r = n - p): fold: member 2i (i < r) sends its whole vector to
 * 2i+1, which reduces it; k halving rounds: exchange half of the current range with new rank
 * q ^ (p >> i) and reduce the half kept, so new rank q ends owning segment q of p (divided
 * there for avg); k doubling rounds: exchange the owned 2^i segments with q ^ 2^i, so every new
 * rank has the whole result; unfold: 2i+1 sends it to 2i. Pieces of n * chunk elements run the
 * schedule one after another (bounded scratch: one piece).
 * Bytes per rank (N = count * elem bytes): 2(p-1)/p * N sent and received in the rounds, plus
 * N each way in the fold and the unfold for the first 2r members; (p-1)/p * N (+ N) reduced.
 *
 * Cost (alpha-beta, P = ceil(N / (n * chunk)) pieces, f = 1 if r > 0 else 0):
 * T = P * (2k + 2f) * alpha + (2(p-1)/p + 2f) * N / beta; 0 for n = 1.
 */
#include "algo/algos.h"
#include "algo/common.h"
#include "algo/rhd/rhd.h"

static double rhd_allreduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  int k = 0;
  while ((2 << k) <= t->nranks) k++;
  double p = (double)(1 << k), f = t->nranks > (1 << k) ? 1.0 : 0.0;
  double bytes = (double)t->args.count * (double)t->dtype_size;
  double piece = (double)t->nranks * (double)chorus__chunk_elems(t) * (double)t->dtype_size;
  double pieces = bytes > piece ? bytes / piece : 1.0;
  return pieces * (2.0 * k + 2.0 * f) * cx->spread.alpha_us +
         (2.0 * (p - 1.0) / p + 2.0 * f) * bytes / cx->spread.bytes_per_us +
         ((p - 1.0) / p + f) * bytes / cx->reduce_bytes_per_us;
}

static chorus_status_t rhd_allreduce_init(chorus_task_t* t) { return chorus__rhd_init(t, CHORUS_RHD_ALLREDUCE); }

const chorus_algo_t chorus__algo_rhd_allreduce = {
    .name = "rhd",
    .desc = "recursive halving-doubling (Rabenseifner): 2 log2 p rounds, 2(p-1)/p of the data per rank, folds n - p",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = rhd_allreduce_cost_us,
    .init = rhd_allreduce_init,
    .progress = chorus__rhd_progress,
    .fini = chorus__rhd_fini,
};
