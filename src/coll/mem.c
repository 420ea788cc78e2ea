/*
 * mem.c - registered memory (chorus_mem_alloc / chorus_mem_free). Allocation is collective:
 * every rank makes its region, the ranks swap where to open each other's (pid, memfd), each
 * maps those of its own host's ranks (windows are indexed by local index), they agree that
 * everyone succeeded, and only then close the memfds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/live.h"

typedef struct {
  chorus_window_ref_t ref;
  int32_t status;
  int32_t reserved;
} mem_vote_t;

/* Every rank learns whether every rank succeeded (an allgather of statuses). */
static chorus_status_t agree(chorus_comm_t* comm, chorus_status_t mine, const chorus_window_ref_t* ref,
                             mem_vote_t* votes, int* all_ok) {
  mem_vote_t me = {.status = mine};
  if (ref) me.ref = *ref;
  chorus_status_t st = chorus_allgather(&me, votes, sizeof(me), CHORUS_UINT8, comm);
  *all_ok = st >= 0;
  for (int r = 0; st >= 0 && r < comm->nranks; r++)
    if (votes[r].status < 0) *all_ok = 0;
  return st;
}

CHORUS_API chorus_status_t chorus_mem_alloc(chorus_comm_t* comm, size_t bytes, void** ptr) {
  if (!chorus__live_check(comm, "chorus_mem_alloc")) return CHORUS_ERR_INVALID_ARG;
  if (!ptr || bytes == 0) {
    chorus__comm_set_error(comm, "chorus_mem_alloc: %s", ptr ? "size 0" : "ptr is NULL");
    return CHORUS_ERR_INVALID_ARG;
  }
  *ptr = NULL;
  chorus_transport_t* tp = &comm->tp;
  /* The ranks of each host map each other's regions; a host of one rank maps only its own.
   * A host whose ranks share no segment votes no, so that every rank fails alike. */
  int nlocal = tp->shm.base ? tp->shm.nlocal : 1, my_local = tp->shm.base ? tp->shm.my_local : 0;
  int shared = comm->topo.host_size[comm->topo.host_of[comm->rank]] == nlocal;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  bytes = (bytes + page - 1) / page * page;
  char err[300] = "";
  chorus_window_t* w = NULL;
  pthread_mutex_lock(&comm->mu);
  uint64_t index = tp->windows_made++;
  pthread_mutex_unlock(&comm->mu);
  chorus_status_t mine = CHORUS_ERR_NOT_SUPPORTED;
  if (shared) mine = chorus__window_create(bytes, nlocal, index, &w, err, sizeof(err));
  else snprintf(err, sizeof(err), "the ranks of rank %d's host share no memory (CHORUS_SHM_DISABLE, or it could not be set up)",
                comm->rank);
  chorus_window_ref_t ref = {.pid = (int32_t)getpid(), .fd = w ? w->fd : -1};
  mem_vote_t* votes = calloc((size_t)comm->nranks, sizeof(*votes));
  if (!votes) mine = CHORUS_ERR_NO_MEMORY;
  int all_ok = 0;
  chorus_status_t st = votes ? agree(comm, mine, &ref, votes, &all_ok) : CHORUS_ERR_NO_MEMORY;
  if (st >= 0 && all_ok) {
    chorus_window_ref_t refs[nlocal];
    for (int l = 0; l < nlocal; l++) refs[l] = votes[nlocal > 1 ? tp->local_ranks[l] : comm->rank].ref;
    mine = chorus__window_map_peers(w, my_local, refs, err, sizeof(err));
    st = agree(comm, mine, NULL, votes, &all_ok); /* also: every peer has mapped ours */
  }
  free(votes);
  if (st < 0) {
    chorus__window_destroy(w);
    return st;
  }
  if (!all_ok) {
    chorus__comm_set_error(comm, "chorus_mem_alloc of %zu bytes failed%s%s", bytes, err[0] ? ": " : " on another rank", err);
    chorus__window_destroy(w);
    return mine < 0 ? mine : CHORUS_ERR_REMOTE;
  }
  chorus__window_close_fd(w);
  pthread_mutex_lock(&comm->mu);
  w->next = tp->windows;
  tp->windows = w;
  pthread_mutex_unlock(&comm->mu);
  *ptr = w->base;
  return CHORUS_OK;
}

CHORUS_API chorus_status_t chorus_mem_free(chorus_comm_t* comm, void* ptr) {
  if (!chorus__live_check(comm, "chorus_mem_free")) return CHORUS_ERR_INVALID_ARG;
  pthread_mutex_lock(&comm->mu);
  chorus_window_t** link = &comm->tp.windows;
  while (*link && (*link)->base != ptr) link = &(*link)->next;
  chorus_window_t* w = *link;
  if (w) *link = w->next;
  pthread_mutex_unlock(&comm->mu);
  if (!w) {
    chorus__comm_set_error(comm, "chorus_mem_free: %p was not returned by chorus_mem_alloc on this communicator", ptr);
    return CHORUS_ERR_INVALID_ARG;
  }
  chorus__window_destroy(w);
  return CHORUS_OK;
}
