/*
 * shm_setup.c - moving same-host peers onto shared memory at communicator creation. The
 * lowest rank of the host (the leader) creates the segment (a memfd) and tells each local peer
 * where to open it (its pid and fd) over their TCP connection; each peer maps it and answers;
 * the leader then announces one verdict to all (shared memory for everyone, or TCP for
 * everyone, so both ends of every pair agree) and closes its fd: from then on the segment
 * lives only in the mappings and vanishes with the last process, however it ends.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "transport/transport.h"

#define SHM_NAME_LEN 64

static int peer_fd(const chorus_transport_t* tp, int peer) { return tp->peers[peer].socks[0].fd; }

static chorus_status_t leader_side(chorus_transport_t* tp, const int* local, int nlocal, size_t ring_bytes,
                                   size_t slot_bytes, uint64_t deadline, int* verdict) {
  char name[SHM_NAME_LEN] = "", err[256];
  int fd = -1;
  if (chorus__shm_create(name, sizeof(name), nlocal, ring_bytes, slot_bytes, &tp->shm, &fd, err, sizeof(err)) < 0) {
    CH_WARN(tp->rank, "same-host peers fall back to TCP: %s", err);
    name[0] = '\0';
  }
  chorus_status_t st = CHORUS_OK;
  for (int i = 1; i < nlocal && st >= 0; i++) st = chorus__sock_write_all(peer_fd(tp, local[i]), name, sizeof(name), deadline);
  *verdict = name[0] != '\0';
  for (int i = 1; i < nlocal && st >= 0; i++) {
    int32_t answer = CHORUS_ERR_INTERNAL;
    st = chorus__sock_read_all(peer_fd(tp, local[i]), &answer, sizeof(answer), deadline);
    if (st >= 0 && answer != CHORUS_OK) *verdict = 0;
  }
  int32_t v = *verdict;
  for (int i = 1; i < nlocal && st >= 0; i++) st = chorus__sock_write_all(peer_fd(tp, local[i]), &v, sizeof(v), deadline);
  if (fd >= 0) close(fd); /* every peer has answered: mapped, or never will */
  if (st < 0) snprintf(tp->err, sizeof(tp->err), "rank %d: a local peer left while setting up shared memory", tp->rank);
  return st;
}

static chorus_status_t member_side(chorus_transport_t* tp, int leader, int nlocal, int my_local, uint64_t deadline,
                                   int* verdict) {
  char name[SHM_NAME_LEN], err[256];
  chorus_status_t st = chorus__sock_read_all(peer_fd(tp, leader), name, sizeof(name), deadline);
  if (st < 0) {
    snprintf(tp->err, sizeof(tp->err), "rank %d: rank %d left while setting up shared memory", tp->rank, leader);
    return st;
  }
  name[SHM_NAME_LEN - 1] = '\0';
  int32_t answer = CHORUS_ERR_NOT_SUPPORTED;
  if (name[0]) {
    answer = chorus__shm_attach(name, nlocal, my_local, &tp->shm, err, sizeof(err));
    if (answer < 0) CH_WARN(tp->rank, "same-host peers fall back to TCP: %s", err);
  }
  int32_t v = 0;
  st = chorus__sock_write_all(peer_fd(tp, leader), &answer, sizeof(answer), deadline);
  if (st >= 0) st = chorus__sock_read_all(peer_fd(tp, leader), &v, sizeof(v), deadline);
  *verdict = v;
  return st;
}

chorus_status_t chorus__transport_setup_shm(chorus_transport_t* tp, chorus_group_t host, size_t ring_bytes,
                                            size_t slot_bytes, uint64_t deadline_ns) {
  const int* local = host.ranks;
  int nlocal = host.size, my_local = host.me;
  if (nlocal < 2) return CHORUS_OK;
  int verdict = 0;
  chorus_status_t st = my_local == 0 ? leader_side(tp, local, nlocal, ring_bytes, slot_bytes, deadline_ns, &verdict)
                                     : member_side(tp, local[0], nlocal, my_local, deadline_ns, &verdict);
  if (st < 0 || !verdict) {
    chorus__shm_detach(&tp->shm);
    return st;
  }
  tp->shm.my_local = my_local;
  tp->my_bell = chorus__shm_bell(&tp->shm, my_local);
  tp->my_ctl = chorus__shm_ctl(&tp->shm, my_local);
  tp->shm_all_local = nlocal == tp->nranks;
  for (int i = 0; i < nlocal; i++) {
    if (i == my_local) continue;
    chorus_stream_t* s = &tp->peers[local[i]].socks[0];
    s->is_shm = 1;
    s->tx_ring = chorus__shm_ring(&tp->shm, my_local, i);
    s->rx_ring = chorus__shm_ring(&tp->shm, i, my_local);
    s->peer_bell = chorus__shm_bell(&tp->shm, i);
  }
  CH_INFO(INIT, tp->rank, "shared memory with %d local peer(s), rings of %zu bytes", nlocal - 1, tp->shm.ring_bytes);
  return CHORUS_OK;
}
