/*
 * rhd/reduce_scatter.c - recursive halving reduce_scatter; the engine lives in rhd/rhd.c.
 *
 * Steps (p = 2^k <= n < 2p, r = n - p; member i's block is block block_of[i] of the n-block
 * input): fold: member 2i (i < r) sends all n blocks to 2i+1, which reduces them and stands
 * for both; k halving rounds: exchange half of the current range of blocks with new rank
 * q ^ (p >> i) and reduce the half kept, so new rank q ends with its members' blocks fully
 * reduced (divided there for avg); unfold: 2i+1 sends block 2i's result to 2i. Runs column by
 * column (elements c*j .. c*j+c-1 of every block, c = chunk elements) in a member-ordered work
 * buffer of n * c elements, so scratch is bounded by the column, not the count.
 * Bytes per rank (B = count * elem bytes): (p-1)/p * n * B sent and received in the rounds,
 * plus n * B in the fold and B in the unfold for the first 2r members.
 *
 * Cost (alpha-beta, C = ceil(count / c) columns, f = 1 if r > 0 else 0):
 * T = C * (k + 2f) * alpha + ((p-1)/p * n + f * (n + 1)) * B / beta; 0 for n = 1.
 */
#include "algo/algos.h"
#include "algo/common.h"
#include "algo/rhd/rhd.h"

static double rhd_reduce_scatter_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  int k = 0;
  while ((2 << k) <= t->nranks) k++;
  double n = t->nranks, p = (double)(1 << k), f = t->nranks > (1 << k) ? 1.0 : 0.0;
  double block = (double)t->args.count * (double)t->dtype_size;
  double cols = (double)chorus__div_up(t->args.count ? t->args.count : 1, chorus__chunk_elems(t));
  /* Halving rounds pair members at distance p/2, p/4, ..., 1 over the host-ordered ring: on
   * hosts of L = 2^j ranks the last j stay inside the host and carry 2^j - 1 of the p - 1
   * segments (n/p blocks each) a member sends, priced at the intra-host link as rd's allgather
   * prices its first rounds. Priced as crossing, 4 emulated hosts x 2 ranks put rhd at 316 us
   * for 2 KiB blocks where it took 134, and chose hier's 200. */
  int j = f ? 0 : chorus__cost_rounds_inside_hosts(cx, t->nranks);
  double inside = (double)((1 << j) - 1) / p * n;
  return cols * ((k - j + 2.0 * f) * cx->spread.alpha_us + j * cx->intra.alpha_us) +
         ((p - 1.0) / p * n + f * (n + 1.0) - inside) * block / cx->spread.bytes_per_us +
         inside * block / cx->intra.bytes_per_us +
         ((p - 1.0) / p * n + f * n) * block / cx->reduce_bytes_per_us; /* each round reduces what it got */
}

static chorus_status_t rhd_reduce_scatter_init(chorus_task_t* t) {
  return chorus__rhd_init(t, CHORUS_RHD_REDUCE_SCATTER);
}

const chorus_algo_t chorus__algo_rhd_reduce_scatter = {
    .name = "rhd",
    .desc = "recursive halving reduce-scatter: log2 p rounds, (p-1)/p of the blocks per rank, folds n - p",
    .coll = CH_COLL_REDUCE_SCATTER,
    .supported = chorus__algo_reduce_supported,
    .cost_us = rhd_reduce_scatter_cost_us,
    .init = rhd_reduce_scatter_init,
    .progress = chorus__rhd_progress,
    .fini = chorus__rhd_fini,
};
