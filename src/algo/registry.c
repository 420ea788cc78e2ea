/*
 * registry.c - the table of every algorithm, in preference order per operation (the first
 * entry of an operation is its default when no cost model or override chooses), and the
 * lookup by (operation, name) that CHORUS_ALGO overrides, chorus-diag and chorus-perf use.
 */
#include <string.h>

#include "algo/algos.h"

const chorus_algo_t* const chorus__algos[] = {
    &chorus__algo_ring_allreduce,        &chorus__algo_binomial_broadcast,
    &chorus__algo_binomial_reduce,           &chorus__algo_ring_allgather,
    &chorus__algo_ring_reduce_scatter,   &chorus__algo_pairwise_alltoall,
    &chorus__algo_linear_gather,         &chorus__algo_linear_scatter,
    &chorus__algo_dissemination_barrier, &chorus__algo_direct_send,
    &chorus__algo_direct_recv,           &chorus__algo_direct_sendrecv,
    &chorus__algo_rd_allreduce,          &chorus__algo_direct_allreduce,
    &chorus__algo_naive_allreduce,       &chorus__algo_rd_allgather,
    &chorus__algo_bruck_allgather,       &chorus__algo_bruck_alltoall,
    &chorus__algo_rhd_allreduce,         &chorus__algo_rhd_reduce_scatter,
    &chorus__algo_chain_broadcast,       &chorus__algo_sag_broadcast,
    &chorus__algo_dbtree_allreduce,      &chorus__algo_chain_reduce,
    &chorus__algo_rankring_allreduce, /* baseline: after `ring`, which wins its ties */
    &chorus__algo_binomial_scatter,
    /* Same-host memory semantics: chosen by cost when every rank shares one host. */
    &chorus__algo_shm_allreduce,         &chorus__algo_shm_reduce_scatter,
    &chorus__algo_shm_allgather,         &chorus__algo_shm_broadcast,
    &chorus__algo_shm_reduce,            &chorus__algo_shm_barrier,
    &chorus__algo_shm_alltoall,
    /* Two-level: chosen by cost when the communicator spans hosts of equal rank counts. */
    &chorus__algo_hier_allreduce,        &chorus__algo_hier_allgather,
    &chorus__algo_hier_reduce_scatter,   &chorus__algo_hier_broadcast,
    &chorus__algo_hier_reduce,           &chorus__algo_hier_barrier,
    /* Compressed (CHORUS_COMPRESSION): offered only to calls with a codec that hier does not take. */
    &chorus__algo_zip_allreduce,
    /* Variable-size collectives: one each, over the host-ordered ring or pairs. */
    &chorus__algo_ring_allgatherv,       &chorus__algo_ring_reduce_scatterv,
    &chorus__algo_pairwise_alltoallv,    &chorus__algo_linear_gatherv,
    &chorus__algo_linear_scatterv,
};

const size_t chorus__nalgos = sizeof(chorus__algos) / sizeof(chorus__algos[0]);

int chorus__algo_has_sub(const chorus_algo_t* algo, const char* sub) {
  for (size_t i = 0; algo->sub_name && algo->sub_name(i); i++)
    if (strcmp(algo->sub_name(i), sub) == 0) return 1;
  return 0;
}

/* The algorithm called `name` for coll; with name NULL or "", the first one listed for coll.
 * NULL when there is none. */
const chorus_algo_t* chorus__algo_find(chorus_coll_t coll, const char* name) {
  for (size_t i = 0; i < chorus__nalgos; i++) {
    const chorus_algo_t* a = chorus__algos[i];
    if (a->coll != coll) continue;
    if (!name || !*name || strcmp(a->name, name) == 0) return a;
  }
  return NULL;
}
