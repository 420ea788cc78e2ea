/*
 * algos.h - the registry entries defined by the algorithm files, one per (family, operation).
 * registry.c lists them in chorus__algos[]; each algorithm file defines exactly one or, for
 * direct/p2p.c, three of them.
 */
#ifndef CHORUS_ALGOS_H
#define CHORUS_ALGOS_H

#include "algo/algo.h"

extern const chorus_algo_t chorus__algo_ring_allreduce;
extern const chorus_algo_t chorus__algo_rd_allreduce;
extern const chorus_algo_t chorus__algo_direct_allreduce;
extern const chorus_algo_t chorus__algo_naive_allreduce;
extern const chorus_algo_t chorus__algo_rankring_allreduce;
extern const chorus_algo_t chorus__algo_ring_allgather;
extern const chorus_algo_t chorus__algo_rd_allgather;
extern const chorus_algo_t chorus__algo_bruck_allgather;
extern const chorus_algo_t chorus__algo_ring_reduce_scatter;
extern const chorus_algo_t chorus__algo_rhd_allreduce;
extern const chorus_algo_t chorus__algo_rhd_reduce_scatter;
extern const chorus_algo_t chorus__algo_chain_broadcast;
extern const chorus_algo_t chorus__algo_chain_reduce;
extern const chorus_algo_t chorus__algo_sag_broadcast;
extern const chorus_algo_t chorus__algo_dbtree_allreduce;
extern const chorus_algo_t chorus__algo_binomial_broadcast;
extern const chorus_algo_t chorus__algo_binomial_reduce;
extern const chorus_algo_t chorus__algo_pairwise_alltoall;
extern const chorus_algo_t chorus__algo_bruck_alltoall;
extern const chorus_algo_t chorus__algo_dissemination_barrier;
extern const chorus_algo_t chorus__algo_linear_gather;
extern const chorus_algo_t chorus__algo_linear_scatter;
extern const chorus_algo_t chorus__algo_binomial_scatter;
extern const chorus_algo_t chorus__algo_direct_send;
extern const chorus_algo_t chorus__algo_direct_recv;
extern const chorus_algo_t chorus__algo_direct_sendrecv;
extern const chorus_algo_t chorus__algo_shm_allreduce;
extern const chorus_algo_t chorus__algo_shm_reduce_scatter;
extern const chorus_algo_t chorus__algo_shm_allgather;
extern const chorus_algo_t chorus__algo_shm_broadcast;
extern const chorus_algo_t chorus__algo_shm_alltoall;
extern const chorus_algo_t chorus__algo_shm_reduce;
extern const chorus_algo_t chorus__algo_shm_barrier;
extern const chorus_algo_t chorus__algo_hier_allreduce;
extern const chorus_algo_t chorus__algo_zip_allreduce;
extern const chorus_algo_t chorus__algo_hier_allgather;
extern const chorus_algo_t chorus__algo_hier_reduce_scatter;
extern const chorus_algo_t chorus__algo_hier_broadcast;
extern const chorus_algo_t chorus__algo_hier_reduce;
extern const chorus_algo_t chorus__algo_hier_barrier;
extern const chorus_algo_t chorus__algo_ring_allgatherv;
extern const chorus_algo_t chorus__algo_ring_reduce_scatterv;
extern const chorus_algo_t chorus__algo_pairwise_alltoallv;
extern const chorus_algo_t chorus__algo_linear_gatherv;
extern const chorus_algo_t chorus__algo_linear_scatterv;

#endif /* CHORUS_ALGOS_H */
