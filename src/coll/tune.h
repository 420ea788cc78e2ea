/*
 * tune.h - the link figures of the cost model (comm->cost): measured by a short probe when a
 * communicator is created, read from a file chorus-diag --tune wrote, or given by variables
 * (CHORUS_TUNE, CHORUS_LINK_INTRA, CHORUS_LINK_INTER). Every rank ends with the same figures,
 * so that every rank selects the same algorithms.
 */
#ifndef CHORUS_COLL_TUNE_H
#define CHORUS_COLL_TUNE_H

#include "core/comm.h"

/* Fills comm->cost's links. store: the bootstrap store (the probe shares its figures there);
 * NULL for a communicator made by split, which keeps its parent's. Collective over comm. */
chorus_status_t chorus__tune_links(chorus_comm_t* comm, chorus_store_t* store);

/* The probe's figures between this rank and peer: half the exchange time of a small message
 * (alpha) and the bandwidth of a large one. reps: exchanges per size. lead: -1 measures the
 * pair where it runs; else 1 on one rank of the pair and 0 on the other, and where the two share
 * a machine with more ranks than CPUs the small exchanges run on the lead's CPU (tune.c). */
chorus_status_t chorus__tune_measure(chorus_comm_t* comm, int peer, int reps, size_t big_bytes, int lead,
                                     chorus_link_model_t* out);

/* The lead argument of chorus__tune_measure for `rank` of the inter-host pair whose first rank
 * is `first`: -1 (as placed) when every host has one rank. */
int chorus__tune_inter_lead(const chorus_topo_t* topo, int rank, int first);

/* The probe's pairs: the first two ranks of the first host that has two (intra; -1, -1 when
 * none) and the first ranks of hosts 0 and 1 (inter; -1, -1 on one host). */
void chorus__tune_probe_pairs(const chorus_topo_t* topo, int intra[2], int inter[2]);

/* Bandwidth from an exchange of `bytes` each way that took `us`, of which alpha_us start-up. */
double chorus__tune_bytes_per_us(size_t bytes, double us, double alpha_us);

/* 1 when the link probe's sockets comparison (best_us: one socket, all of them) keeps every
 * socket: they were clearly faster than one. */
int chorus__tune_stripes_kept(const double best_us[2]);

/* One exchange of `bytes` by the first rank of every host at once, each sending to the next
 * host's and receiving from the previous one's (a host-ordered ring's load on every host link):
 * this rank's fastest of reps, in microseconds. Called by the first rank of every host. */
chorus_status_t chorus__tune_ring_us(chorus_comm_t* comm, size_t bytes, int reps, double* fastest_us);

/* What one rank's turn on a core costs another rank that waits for it while both spin. */
#define CHORUS_CORE_TURN_US 3.0

/* The figures the model derives from the links and the shape (cx's links, nhosts, max_local,
 * machine_oversub set): flat, spread, the hand-overs and spin_bytes. */
void chorus__tune_derive(chorus_cost_ctx_t* cx);

/* CHORUS_SPIN_US=-1, across hosts: how long a waiting thread of a call of at most
 * cx->spin_bytes polls before it sleeps (others: CHORUS_SPIN_ONE_HOST_US; on one host whose
 * ranks outnumber the CPUs they may run on every wait polls CHORUS_SPIN_SHARED_CORES_US, core/comm.h). */
int chorus__tune_spin_us(const chorus_cost_ctx_t* cx);

/* "ALPHA_US,BYTES_PER_US" (CHORUS_LINK_INTRA, CHORUS_LINK_INTER): 1 and *out when valid. */
int chorus__tune_parse_link(const char* txt, chorus_link_model_t* out);

#endif /* CHORUS_COLL_TUNE_H */
