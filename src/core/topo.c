/*
 * topo.c - the topology (topo.h): hosts by first appearance, then every per-host and per-rail
 * list, from one allocation. Quadratic in the rank count only for the host-id comparisons,
 * done once per communicator.
 */
#include "core/topo.h"

#include <stdlib.h>
#include <string.h>

int chorus__topo_init(chorus_topo_t* topo, int nranks, const char* const* host_ids) {
  memset(topo, 0, sizeof(*topo));
  size_t n = (size_t)nranks;
  /* host_of, local_of, host_first, host_size, by_host, rails, rail_size, leaders: at most n each. */
  int* mem = calloc(8 * n + 1, sizeof(int));
  if (!mem) return -1;
  topo->nranks = nranks;
  topo->host_of = mem;
  topo->local_of = mem + n;
  topo->host_first = mem + 2 * n;
  topo->host_size = mem + 3 * n;
  topo->by_host = mem + 4 * n;
  topo->rails = mem + 5 * n;
  topo->rail_size = mem + 6 * n;
  topo->leaders = mem + 7 * n;
  for (int r = 0; r < nranks; r++) {
    int h = -1;
    for (int q = 0; q < r && h < 0; q++)
      if (strcmp(host_ids[q], host_ids[r]) == 0) h = topo->host_of[q];
    if (h < 0) h = topo->nhosts++;
    topo->host_of[r] = h;
    topo->local_of[r] = topo->host_size[h]++;
  }
  for (int h = 1; h < topo->nhosts; h++) topo->host_first[h] = topo->host_first[h - 1] + topo->host_size[h - 1];
  topo->identity = 1;
  for (int r = 0; r < nranks; r++) {
    int at = topo->host_first[topo->host_of[r]] + topo->local_of[r];
    topo->by_host[at] = r;
    topo->identity &= at == r;
  }
  topo->uniform = 1;
  for (int h = 0; h < topo->nhosts; h++) {
    if (topo->host_size[h] > topo->max_local) topo->max_local = topo->host_size[h];
    topo->uniform &= topo->host_size[h] == topo->host_size[0];
  }
  for (int h = 0; h < topo->nhosts; h++)
    topo->leaders[h] = topo->by_host[topo->host_first[h] + chorus__topo_leader_local(topo, h)];
  /* max_local * nhosts can exceed n on uneven hosts: rails then need their own room. */
  if ((size_t)topo->max_local * (size_t)topo->nhosts > n) {
    topo->rails = calloc((size_t)topo->max_local * (size_t)topo->nhosts, sizeof(int));
    if (!topo->rails) {
      free(mem);
      memset(topo, 0, sizeof(*topo));
      return -1;
    }
  }
  for (int h = 0; h < topo->nhosts; h++)
    for (int l = 0; l < topo->host_size[h]; l++)
      topo->rails[l * topo->nhosts + topo->rail_size[l]++] = topo->by_host[topo->host_first[h] + l];
  return 0;
}

void chorus__topo_free(chorus_topo_t* topo) {
  if (topo->rails && topo->rails != topo->host_of + 5 * (size_t)topo->nranks) free(topo->rails);
  free(topo->host_of);
  memset(topo, 0, sizeof(*topo));
}

chorus_group_t chorus__topo_host_group(const chorus_topo_t* topo, int h, int rank) {
  chorus_group_t g = {topo->host_size[h], -1, topo->by_host + topo->host_first[h]};
  if (topo->host_of[rank] == h) g.me = topo->local_of[rank];
  return g;
}

chorus_group_t chorus__topo_ring(const chorus_topo_t* topo, int rank) {
  chorus_group_t g = {topo->nranks, rank, NULL};
  if (!topo->identity) {
    g.ranks = topo->by_host;
    g.me = topo->host_first[topo->host_of[rank]] + topo->local_of[rank];
  }
  return g;
}

chorus_group_t chorus__topo_rail(const chorus_topo_t* topo, int l, int rank) {
  chorus_group_t g = {topo->rail_size[l], -1, topo->rails + (size_t)l * (size_t)topo->nhosts};
  for (int i = 0; i < g.size; i++)
    if (g.ranks[i] == rank) g.me = i;
  return g;
}

chorus_group_t chorus__topo_leaders(const chorus_topo_t* topo, int rank) {
  int h = topo->host_of[rank];
  return (chorus_group_t){topo->nhosts, topo->leaders[h] == rank ? h : -1, topo->leaders};
}
