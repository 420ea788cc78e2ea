/*
 * topo.h - the communicator's topology, derived once at creation from every rank's host id:
 * the hosts (numbered in order of first appearance), each host's ranks in rank order (a rank's
 * index there is its shm local index), the rails (the ranks with the same local index, one per
 * host, in host order), the host-ordered ring (every host's ranks back to back) and whether
 * every host has the same number of ranks. Engines run over rank groups (chorus_group_t) that
 * this module hands out, so a two-level algorithm can compose phases inside ONE communicator.
 */
#ifndef CHORUS_TOPO_H
#define CHORUS_TOPO_H

/* A rank group: `size` members; the caller is member `me` (-1: not a member); member i is
 * communicator rank ranks[i], or i itself when ranks is NULL (the whole communicator). */
typedef struct {
  int size;
  int me;
  const int* ranks;
} chorus_group_t;

static inline int chorus__group_rank(const chorus_group_t* g, int i) { return g->ranks ? g->ranks[i] : i; }

typedef struct chorus_topo_s {
  int nranks, nhosts;
  int max_local;  /* ranks on the most populated host */
  int uniform;    /* every host has max_local ranks */
  int identity;   /* ranks are numbered host by host: the host-ordered ring is 0, 1, ..., n-1 */
  int* host_of;   /* host index of every rank */
  int* local_of;  /* index of every rank among its host's ranks */
  int* host_first; /* host h's ranks are by_host[host_first[h] .. host_first[h] + host_size[h]) */
  int* host_size;
  int* by_host;   /* every rank, host by host, each host's in rank order: the host-ordered ring */
  int* rails;     /* rail l: rails[l * nhosts .. + rail_size[l]), in host order */
  int* rail_size;
  int* leaders;   /* host h's leader, one per host in host order (chorus__topo_leader_local) */
} chorus_topo_t;

/* Derives the topology of nranks ranks from their host ids. 0, or -1 when out of memory. */
int chorus__topo_init(chorus_topo_t* topo, int nranks, const char* const* host_ids);
void chorus__topo_free(chorus_topo_t* topo);

/* The ranks of host h, with `rank`'s index among them (-1 if not there). */
chorus_group_t chorus__topo_host_group(const chorus_topo_t* topo, int h, int rank);
/* The host-ordered ring of the whole communicator (ranks NULL when it is the identity). */
chorus_group_t chorus__topo_ring(const chorus_topo_t* topo, int rank);
/* The rail of local index l (0 <= l < max_local): one rank per host that has more than l
 * ranks, in host order, with `rank`'s index among them (-1 if not there). */
chorus_group_t chorus__topo_rail(const chorus_topo_t* topo, int l, int rank);

/* The local index of host h's leader, the rank that alone carries a host's share across hosts
 * in a latency-bound two-level call: h mod the host's size, so that the leaders of hosts that
 * share one machine's cores (emulated hosts, where a launcher pins local rank l of every node
 * to the same core) do not all queue for one core while the others idle. On hosts of their
 * own the choice costs nothing. */
static inline int chorus__topo_leader_local(const chorus_topo_t* topo, int h) { return h % topo->host_size[h]; }
/* The host leaders, in host order, with `rank`'s index among them (-1 if it leads no host). */
chorus_group_t chorus__topo_leaders(const chorus_topo_t* topo, int rank);

/* 1 when rails pair every rank: several hosts, several ranks on each, all equal (what the
 * two-level algorithms need). */
static inline int chorus__topo_has_rails(const chorus_topo_t* topo) {
  return topo->nhosts > 1 && topo->max_local > 1 && topo->uniform;
}

#endif /* CHORUS_TOPO_H */
