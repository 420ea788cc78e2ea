/*
 * vargs.c - the variable-size calls' arrays: checked on this rank before anything is posted
 * (ERR_INVALID_ARG with a sentence, the communicator stays usable), then copied into one
 * allocation the task owns, so that the caller may free its arrays as soon as a non-blocking
 * call returns and every later reader (selection, the algorithm) sees the same numbers.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"

/* Which arrays the call uses on this rank. */
typedef struct {
  int send, recv; /* sendcounts/sdispls, recvcounts/rdispls */
} roles_t;

static roles_t roles_of(const chorus_comm_t* comm, const chorus_coll_args_t* a) {
  int root = comm->rank == a->root;
  switch (a->coll) {
    case CH_COLL_ALLGATHERV:
    case CH_COLL_REDUCE_SCATTERV: return (roles_t){0, 1};
    case CH_COLL_ALLTOALLV: return (roles_t){1, 1};
    case CH_COLL_GATHERV: return (roles_t){0, root};
    case CH_COLL_SCATTERV: return (roles_t){root, 0};
    default: return (roles_t){0, 0};
  }
}

/* One direction's arrays as checked: counts, displacements (filled in when NULL), and the
 * bytes from the buffer's start to the end of its last non-empty block. */
typedef struct {
  const char* name;  /* "recvcounts" */
  const char* dname; /* "rdispls" */
  size_t* counts;
  size_t* displs;
  size_t extent_bytes;
  size_t total; /* sum of the counts */
} side_t;

/* Copies counts and displacements into side (arrays of n), checking that every block ends
 * inside the address space: (displacement + count) x elem bytes at most SIZE_MAX / 2. */
static chorus_status_t copy_side(chorus_comm_t* comm, const char* call, const size_t* counts, const size_t* displs,
                                 size_t esize, side_t* side) {
  int n = comm->nranks;
  size_t limit = SIZE_MAX / 2 / esize, next = 0;
  side->extent_bytes = side->total = 0;
  for (int i = 0; i < n; i++) {
    size_t c = counts[i], d = displs ? displs[i] : next;
    if (c > limit || d > limit - c) {
      chorus__comm_set_error(comm, "%s: the block of rank %d (%s[%d] = %zu, at element %zu%s) ends beyond the "
                             "address space", call, i, side->name, i, c, d, displs ? "" : ", back to back");
      return CHORUS_ERR_INVALID_ARG;
    }
    side->counts[i] = c;
    side->displs[i] = c ? d : 0; /* an empty block's place is never used (nor is a NULL buffer's) */
    next = d + c;
    side->total += c; /* at most 2 x limit: no wrap before the check */
    if (side->total > limit) {
      chorus__comm_set_error(comm, "%s: the %s add up to more elements than the address space holds", call, side->name);
      return CHORUS_ERR_INVALID_ARG;
    }
    if (c && next * esize > side->extent_bytes) side->extent_bytes = next * esize;
  }
  return CHORUS_OK;
}

typedef struct {
  size_t lo, hi;
  int rank;
} span_t;

static int cmp_span(const void* x, const void* y) {
  const span_t *a = x, *b = y;
  return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Receive blocks may not overlap: two ranks' data would land on the same elements. */
static chorus_status_t check_disjoint(chorus_comm_t* comm, const char* call, const side_t* side) {
  int n = comm->nranks, k = 0;
  span_t* spans = malloc((size_t)n * sizeof(*spans));
  if (!spans) return CHORUS_ERR_NO_MEMORY;
  for (int i = 0; i < n; i++)
    if (side->counts[i]) spans[k++] = (span_t){side->displs[i], side->displs[i] + side->counts[i], i};
  qsort(spans, (size_t)k, sizeof(*spans), cmp_span);
  chorus_status_t st = CHORUS_OK;
  for (int j = 1; j < k && st == CHORUS_OK; j++) {
    if (spans[j].lo >= spans[j - 1].hi) continue;
    int a = spans[j - 1].rank, b = spans[j].rank;
    chorus__comm_set_error(comm, "%s: the receive blocks of ranks %d (elements %zu-%zu) and %d (elements %zu-%zu) "
                           "overlap (%s, %s)", call, a, spans[j - 1].lo, spans[j - 1].hi - 1, b, spans[j].lo,
                           spans[j].hi - 1, side->name, side->dname);
    st = CHORUS_ERR_INVALID_ARG;
  }
  free(spans);
  return st;
}

/* A rank's own counts that must agree with each other (what it sends itself is what it
 * receives from itself). */
static chorus_status_t check_own(chorus_comm_t* comm, const char* call, const chorus_coll_args_t* a,
                                 const side_t* send, const side_t* recv) {
  int me = comm->rank, root = me == a->root;
  size_t mine = 0, expected = 0;
  const char *mine_name = NULL, *expected_name = NULL;
  if (a->coll == CH_COLL_ALLGATHERV || (a->coll == CH_COLL_GATHERV && root)) {
    mine = a->count, mine_name = "sendcount";
    expected = recv->counts[me], expected_name = "recvcounts";
  } else if (a->coll == CH_COLL_SCATTERV && root) {
    mine = a->count, mine_name = "recvcount";
    expected = send->counts[me], expected_name = "sendcounts";
  } else if (a->coll == CH_COLL_ALLTOALLV) {
    mine = send->counts[me], mine_name = "sendcounts[rank]";
    expected = recv->counts[me], expected_name = "recvcounts";
  }
  if (!mine_name || mine == expected) return CHORUS_OK;
  chorus__comm_set_error(comm, "%s: %s = %zu differs from %s[%d] = %zu (this rank's own block)", call, mine_name,
                         mine, expected_name, me, expected);
  return CHORUS_ERR_INVALID_ARG;
}

/* Bytes this rank's send and receive buffers span, and whether the call is in place. */
static void buffer_spans(const chorus_comm_t* comm, const chorus_coll_args_t* a, size_t esize, const side_t* send,
                         const side_t* recv, size_t* sb, size_t* rb, int* in_place) {
  const char *s = a->sendbuf, *r = a->recvbuf;
  int me = comm->rank, root = me == a->root;
  *sb = *rb = 0;
  *in_place = 0;
  switch (a->coll) {
    case CH_COLL_ALLGATHERV:
      *sb = a->count * esize, *rb = recv->extent_bytes;
      *in_place = r && s == r + recv->displs[me] * esize;
      break;
    case CH_COLL_REDUCE_SCATTERV:
      *sb = recv->total * esize, *rb = recv->counts[me] * esize;
      *in_place = s && r == s + recv->displs[me] * esize;
      break;
    case CH_COLL_ALLTOALLV:
      *sb = send->extent_bytes, *rb = recv->extent_bytes;
      *in_place = s == r;
      break;
    case CH_COLL_GATHERV:
      *sb = a->count * esize, *rb = root ? recv->extent_bytes : 0;
      *in_place = root && r && s == r + recv->displs[me] * esize;
      break;
    case CH_COLL_SCATTERV:
      *sb = root ? send->extent_bytes : 0, *rb = a->count * esize;
      *in_place = root && s && r == s + send->displs[me] * esize;
      break;
    default: break;
  }
}

static chorus_status_t check_buffers(chorus_comm_t* comm, const char* call, const chorus_coll_args_t* a,
                                     size_t esize, const side_t* send, const side_t* recv) {
  size_t sb, rb;
  int in_place;
  buffer_spans(comm, a, esize, send, recv, &sb, &rb, &in_place);
  if ((sb && !a->sendbuf) || (rb && !a->recvbuf)) {
    int s_bad = sb && !a->sendbuf;
    chorus__comm_set_error(comm, "%s: %s buffer is NULL but the call moves %zu bytes through it", call,
                           s_bad ? "send" : "receive", s_bad ? sb : rb);
    return CHORUS_ERR_INVALID_ARG;
  }
  uintptr_t s0 = (uintptr_t)a->sendbuf, r0 = (uintptr_t)a->recvbuf;
  if (sb && rb && !in_place && s0 < r0 + rb && r0 < s0 + sb) {
    chorus__comm_set_error(comm, "%s: send and receive buffers overlap without being in place "
                           "(see chorus.h for each call's in-place layout)", call);
    return CHORUS_ERR_INVALID_ARG;
  }
  return CHORUS_OK;
}

/* In place, alltoallv sends from the receive blocks: given send arrays must say the same. */
static chorus_status_t check_alltoallv_in_place(chorus_comm_t* comm, const char* call, const chorus_coll_args_t* a,
                                                const side_t* recv) {
  for (int i = 0; i < comm->nranks; i++) {
    int counts_differ = a->sendcounts && a->sendcounts[i] != recv->counts[i];
    int displs_differ = a->sdispls && recv->counts[i] && a->sdispls[i] != recv->displs[i];
    if (counts_differ || displs_differ) {
      chorus__comm_set_error(comm, "%s: in place (sendbuf == recvbuf) but %s[%d] differs from %s[%d]; pass NULL "
                             "or the receive side's arrays", call, counts_differ ? "sendcounts" : "sdispls", i,
                             counts_differ ? "recvcounts" : "rdispls", i);
      return CHORUS_ERR_INVALID_ARG;
    }
  }
  return CHORUS_OK;
}

/* splitmix64's finaliser: distinct count vectors give distinct hashes but by a 2^-64 chance. */
static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t counts_hash(const size_t* counts, int n) {
  uint64_t h = mix64((uint64_t)n);
  for (int i = 0; i < n; i++) h = mix64(h ^ (uint64_t)counts[i]);
  return h;
}

/* Points a's arrays at the checked copies and sets count and vsig (task.h). */
static void settle(chorus_coll_args_t* a, const roles_t* use, const side_t* send, const side_t* recv, int n,
                   int in_place) {
  a->sendcounts = use->send ? send->counts : NULL;
  a->sdispls = use->send ? send->displs : NULL;
  a->recvcounts = use->recv ? recv->counts : NULL;
  a->rdispls = use->recv ? recv->displs : NULL;
  if (a->coll == CH_COLL_ALLTOALLV && in_place) { /* one set of blocks, both ways */
    a->sendcounts = recv->counts;
    a->sdispls = recv->displs;
  }
  a->vsig = 0;
  if (a->coll == CH_COLL_ALLGATHERV || a->coll == CH_COLL_REDUCE_SCATTERV) {
    a->count = recv->total;
    a->vsig = counts_hash(recv->counts, n);
  } else if (a->coll == CH_COLL_ALLTOALLV) {
    a->count = in_place ? recv->total : send->total;
  }
}

static chorus_status_t require(chorus_comm_t* comm, const char* call, const void* array, const char* name) {
  if (array) return CHORUS_OK;
  chorus__comm_set_error(comm, "%s: %s is NULL", call, name);
  return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__vargs_prepare(chorus_comm_t* comm, chorus_coll_args_t* a, void** vec) {
  *vec = NULL;
  char call[40];
  snprintf(call, sizeof(call), "chorus_%s", chorus__coll_name(a->coll));
  size_t esize = chorus_dtype_size(a->dtype), n = (size_t)comm->nranks;
  roles_t use = roles_of(comm, a);
  int in_place = a->coll == CH_COLL_ALLTOALLV && a->sendbuf == a->recvbuf;
  chorus_status_t st = CHORUS_OK;
  if (use.recv) st = require(comm, call, a->recvcounts, "recvcounts");
  if (st == CHORUS_OK && use.send && !in_place)
    st = require(comm, call, a->sendcounts, a->coll == CH_COLL_SCATTERV ? "root's sendcounts" : "sendcounts");
  if (st < 0) return st;
  size_t* mem = malloc(4 * n * sizeof(size_t));
  if (!mem) return CHORUS_ERR_NO_MEMORY;
  side_t send = {"sendcounts", a->coll == CH_COLL_SCATTERV ? "displs" : "sdispls", mem, mem + n, 0, 0};
  side_t recv = {"recvcounts", a->coll == CH_COLL_ALLTOALLV ? "rdispls" : "displs", mem + 2 * n, mem + 3 * n, 0, 0};
  memset(mem, 0, 4 * n * sizeof(size_t));
  /* reduce_scatterv takes no displacements: its input blocks lie back to back. */
  const size_t* rdispls = a->coll == CH_COLL_REDUCE_SCATTERV ? NULL : a->rdispls;
  if (use.recv) st = copy_side(comm, call, a->recvcounts, rdispls, esize, &recv);
  if (st == CHORUS_OK && use.send && !in_place) st = copy_side(comm, call, a->sendcounts, a->sdispls, esize, &send);
  if (st == CHORUS_OK && in_place) {
    st = check_alltoallv_in_place(comm, call, a, &recv);
    send = recv;
  }
  if (st == CHORUS_OK && use.recv && a->coll != CH_COLL_REDUCE_SCATTERV) st = check_disjoint(comm, call, &recv);
  if (st == CHORUS_OK) st = check_own(comm, call, a, &send, &recv);
  if (st == CHORUS_OK) st = check_buffers(comm, call, a, esize, &send, &recv);
  if (st < 0) {
    free(mem);
    return st;
  }
  settle(a, &use, &send, &recv, comm->nranks, in_place);
  *vec = mem;
  return CHORUS_OK;
}
