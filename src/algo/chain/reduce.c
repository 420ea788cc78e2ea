/*
 * chain/reduce.c - pipelined chain reduce for large messages: the tree reduce engine of
 * binomial.h over a chain, root-1 -> ... -> root+1 -> root (member indexes mod n); the registry
 * entry runs it over the host-ordered ring, so the chain crosses each host boundary once.
 *
 * Steps: v = (member - root) mod n. The last member sends its chunks towards the root; member
 * v receives chunk c from v+1 into a slot, reduces it with its own chunk into an accumulation
 * slot and sends that on to v-1, while chunk c+1 is already arriving; the root reduces into
 * recvbuf (avg divides there). The root's result is s_0 + (s_1 + (... + s_{n-1})), the same
 * whatever the timing. Bytes per rank: N received (but the last), N sent (but the root):
 * every link carries N once, where a binomial tree's root takes N from each of its
 * ceil(log2 n) children over its one link (on 4 emulated hosts x 2 ranks at 2 Gbit/s: 64 MiB in
 * 561 ms, twice what one pass of the root host's link takes).
 *
 * Chunks and price as the chain broadcast's (chain.h), plus the reductions, which overlap the
 * transfers but not each other's core time: N / the kernels' speed.
 */
#include "algo/algos.h"
#include "algo/binomial/binomial.h"
#include "algo/chain/chain.h"
#include "algo/common.h"

static chorus_status_t chain_reduce_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  s.chunk_bytes = chorus__chain_chunk_bytes(s.count * s.elem_bytes, s.chunk_bytes);
  chorus_tree_t chain;
  chorus__chain_tree_init(&chain, s.group.me, s.group.size, s.root);
  chorus_treduce_t* r = NULL;
  chorus_status_t st = chorus__tree_reduce_start(&s, &chain, &r);
  t->state = r;
  return st;
}

static chorus_status_t chain_reduce_progress(chorus_task_t* t) {
  chorus_status_t st = chorus__binomial_reduce_step(t, t->state);
  t->step = chorus__tree_reduce_chunks_done(t->state);
  return st;
}

static void chain_reduce_fini(chorus_task_t* t) {
  chorus__binomial_reduce_free(t->state);
  t->state = NULL;
}

static double chain_reduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  double bytes = (double)t->args.count * (double)t->dtype_size;
  return chorus__chain_cost_us(t, cx) + (t->nranks > 1 ? bytes / cx->reduce_bytes_per_us : 0.0);
}

const chorus_algo_t chorus__algo_chain_reduce = {
    .name = "chain",
    .desc = "pipelined chain towards the root, each member reduces and forwards: every link carries the data once",
    .coll = CH_COLL_REDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = chain_reduce_cost_us,
    .init = chain_reduce_init,
    .progress = chain_reduce_progress,
    .fini = chain_reduce_fini,
};
