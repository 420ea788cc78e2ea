/*
 * ring/allreduce_rankring.c - the ring allreduce of ring/allreduce.c over the ranks in rank
 * order, whatever host each is on: the topology-unaware flat ring, kept as a baseline (as
 * `naive` is) so that the two-level table can show what following the hosts is worth
 * (forceable with CHORUS_ALGO=allreduce:rankring).
 *
 * Numbered host by host, the rank order is the host-ordered ring: the same schedule as `ring`,
 * whose cost it shares, so the registry's earlier `ring` is the one chosen. Numbered otherwise
 * (round robin: rank l * H + h is local rank l of host h), every step of every rank crosses
 * hosts at once: each host link carries its L ranks' 2(n-1)/n N, L times what the host-ordered
 * ring puts on it; its cost takes the `spread` link, what a flat algorithm whose every rank
 * talks across hosts at once sees.
 */
#include "algo/algos.h"
#include "algo/common.h"
#include "algo/ring/ring.h"

static double rank_order_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  return chorus__ring_allreduce_cost_us(t, t->topo->identity ? &cx->flat : &cx->spread);
}

static chorus_status_t rank_order_init(chorus_task_t* t) {
  chorus_group_t in_rank_order = {.size = t->nranks, .me = t->rank, .ranks = NULL};
  return chorus__ring_init_over(t, CHORUS_RING_ALLREDUCE, in_rank_order);
}

const chorus_algo_t chorus__algo_rankring_allreduce = {
    .name = "rankring",
    .desc = "baseline: the ring allreduce over the ranks in rank order, whatever their hosts (numbered round robin, "
            "every step crosses hosts)",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = rank_order_cost_us,
    .init = rank_order_init,
    .progress = chorus__ring_progress,
    .fini = chorus__ring_fini,
};
