/*
 * vmatrix.c - the variable-size collectives in the matrix (matrix.h): every rank's counts and
 * displacements for a spec (the same on every rank, computed here, never asked of the library),
 * its buffers, and its expectation, built from ref.c's streams: a result is right only if it is
 * bitwise what these plain loops place, with the gaps between blocks left untouched.
 *
 * Counts: spec.count is a scale; per rank (or per pair for alltoallv) a pseudo-random count in
 * 1 .. 2 x scale, a third (a quarter) of them 0, and one rank (one pair) with a large block of
 * V_BIG_BLOCK elements from scale 7 on, so that chunked runs pipeline a block of many chunks
 * next to empty ones. In-place alltoallv needs sendcounts == recvcounts: its counts are
 * symmetric.
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "matrix.h"
#include "ref.h"
#include "test.h"

enum { V_BIG_BLOCK = 20011 };
/* Where layout 1 puts empty blocks: far outside every buffer, so a library touching one is
 * caught (ASan, or a crash), yet inside the address-space limit the library checks. */
static const size_t V_FAR_DISPL = (size_t)1 << 30;

int mx_coll_is_v(chorus_coll_t coll) {
  return coll == CH_COLL_ALLGATHERV || coll == CH_COLL_REDUCE_SCATTERV || coll == CH_COLL_ALLTOALLV ||
         coll == CH_COLL_GATHERV || coll == CH_COLL_SCATTERV;
}

static size_t scaled_count(uint64_t h, size_t scale, unsigned zero_one_in) {
  if (h % zero_one_in == 0) return 0;
  return 1 + (size_t)((h >> 8) % (2 * scale));
}

/* Rank i's count in the one-vector calls (allgatherv, reduce_scatterv, gatherv, scatterv). */
static size_t vec_count(const mx_spec_t* s, int n, int i) {
  if (s->count == 0) return 0;
  int big = (int)(ref_mix64(s->seed) % (uint64_t)n);
  if (i == big && s->count >= 7) return V_BIG_BLOCK;
  return scaled_count(ref_mix64(s->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(i + 1))), s->count, 3);
}

/* What rank i sends rank j in alltoallv. */
static size_t pair_count(const mx_spec_t* s, int n, int i, int j) {
  if (s->count == 0) return 0;
  if (s->in_place && i > j) { /* symmetric */
    int k = i;
    i = j;
    j = k;
  }
  uint64_t b = ref_mix64(s->seed + 1);
  int bi = (int)(b % (uint64_t)n), bj = (int)((b >> 16) % (uint64_t)n);
  if (s->in_place && bi > bj) {
    int k = bi;
    bi = bj;
    bj = k;
  }
  if (i == bi && j == bj && s->count >= 7) return V_BIG_BLOCK;
  return scaled_count(ref_mix64(s->seed ^ ((uint64_t)i * 0x10001u + (uint64_t)j + 1)), s->count, 4);
}

/* Displacements of counts under the spec's layout (layout 0: back to back, as the library
 * computes for NULL). Returns the extent in elements: the end of the last non-empty block. */
static size_t layout_displs(const mx_spec_t* s, int n, const size_t* counts, size_t* displs) {
  size_t pos = 0, extent = 0;
  for (int k = 0; k < n; k++) {
    int i = s->layout ? n - 1 - k : k;
    if (s->layout) pos += (size_t)(i % 3) + 1; /* a gap before the block */
    displs[i] = s->layout && counts[i] == 0 ? V_FAR_DISPL : pos;
    pos += counts[i];
    if (counts[i]) extent = pos;
  }
  return extent;
}

/* The arrays of op: four of n, in v_mem. */
static size_t* arrays(mx_op_t* op) {
  size_t n = (size_t)op->nranks;
  op->v_mem = calloc(4 * n, sizeof(size_t));
  ASSERT_NOT_NULL(op->v_mem);
  return op->v_mem;
}

/* A receive buffer of `elems` elements, poisoned; the expectation starts as its copy. */
static unsigned char* poisoned_recv(mx_op_t* op, size_t elems) {
  size_t bytes = elems * op->esize;
  op->recv_alloc = mx_alloc_guarded(bytes, 1);
  op->recv_bytes = bytes;
  op->recv_arg = mx_body(op->recv_alloc);
  op->check_at = mx_body(op->recv_alloc);
  op->check_bytes = bytes;
  unsigned char* expect = mx_own_expect(op, bytes);
  memset(expect, MX_POISON_BYTE, bytes);
  op->expect = expect;
  return expect;
}

/* A send buffer of `elems` elements holding rank's stream (ref_fill_bytes from offset 0). */
static void stream_send(mx_op_t* op, size_t elems, int rank) {
  size_t bytes = elems * op->esize;
  op->send_alloc = mx_alloc_guarded(bytes, 0);
  op->send_bytes = bytes;
  ref_fill_bytes(mx_body(op->send_alloc), bytes, rank, op->s.seed, 0);
  op->send_arg = mx_body(op->send_alloc);
}

/* allgatherv, and gatherv on its root: every rank's block (its stream's first bytes) at its
 * place; in place, the caller's block is already there. */
static void prepare_gatherv_like(mx_op_t* op) {
  const mx_spec_t* s = &op->s;
  int n = op->nranks, me = op->rank, gathers = s->coll == CH_COLL_ALLGATHERV || me == s->root;
  size_t *mem = arrays(op), *counts = mem, *displs = mem + n, es = op->esize;
  for (int i = 0; i < n; i++) counts[i] = vec_count(s, n, i);
  size_t extent = layout_displs(s, n, counts, displs);
  op->v_scalar = counts[me];
  if (!gathers) { /* a gatherv non-root: no receive side at all */
    stream_send(op, counts[me], me);
    return;
  }
  op->v_recvcounts = counts;
  op->v_rdispls = s->layout ? displs : NULL;
  unsigned char* expect = poisoned_recv(op, extent);
  for (int i = 0; i < n; i++)
    if (counts[i]) ref_fill_bytes(expect + displs[i] * es, counts[i] * es, i, s->seed, 0);
  if (s->in_place) {
    unsigned char* own = mx_body(op->recv_alloc) + displs[me] * es;
    ref_fill_bytes(own, counts[me] * es, me, s->seed, 0);
    op->send_arg = own;
  } else {
    stream_send(op, counts[me], me);
  }
}

/* scatterv: the root's send buffer is its stream; rank i gets the bytes at its block. */
static void prepare_scatterv(mx_op_t* op) {
  const mx_spec_t* s = &op->s;
  int n = op->nranks, me = op->rank, root = me == s->root;
  size_t *mem = arrays(op), *counts = mem, *displs = mem + n, es = op->esize;
  for (int i = 0; i < n; i++) counts[i] = vec_count(s, n, i);
  size_t extent = layout_displs(s, n, counts, displs);
  op->v_scalar = counts[me];
  if (root) {
    stream_send(op, extent, me);
    op->v_sendcounts = counts;
    op->v_sdispls = s->layout ? displs : NULL;
  }
  size_t bytes = counts[me] * es;
  if (root && s->in_place) {
    op->recv_arg = mx_body(op->send_alloc) + displs[me] * es;
    op->check_at = op->recv_arg;
    op->check_bytes = bytes;
    op->expect = mx_own_expect(op, bytes);
  } else {
    poisoned_recv(op, counts[me]);
  }
  ref_fill_bytes(op->expect_owned, bytes, s->root, s->seed, displs[me] * es);
}

/* reduce_scatterv: every rank's input is elements 0 .. total of ref.c's reduction inputs. */
static void prepare_reduce_scatterv(mx_op_t* op) {
  const mx_spec_t* s = &op->s;
  int n = op->nranks, me = op->rank;
  size_t *counts = arrays(op), es = op->esize, total = 0, offset = 0;
  for (int i = 0; i < n; i++) {
    counts[i] = vec_count(s, n, i);
    if (i < me) offset += counts[i];
    total += counts[i];
  }
  op->v_recvcounts = counts;
  op->send_alloc = mx_alloc_guarded(total * es, 0);
  op->send_bytes = total * es;
  ref_fill_reduce_input(mx_body(op->send_alloc), total, s->dtype, s->op, n, me, 0, s->seed);
  op->send_arg = mx_body(op->send_alloc);
  if (s->in_place) {
    op->recv_arg = mx_body(op->send_alloc) + offset * es;
    op->check_at = op->recv_arg;
    op->check_bytes = counts[me] * es;
    op->expect = mx_own_expect(op, counts[me] * es);
  } else {
    poisoned_recv(op, counts[me]);
  }
  ref_reduce_expected(op->expect_owned, counts[me], s->dtype, s->op, n, offset, s->seed);
}

/* alltoallv: rank i's send buffer is its stream; its block for j lies at i's sdispls[j].
 * In place the one buffer is the stream, and the blocks are rdispls'. */
static void prepare_alltoallv(mx_op_t* op) {
  const mx_spec_t* s = &op->s;
  int n = op->nranks, me = op->rank;
  size_t *mem = arrays(op), *sc = mem, *sd = mem + n, *rc = mem + 2 * (size_t)n, *rd = mem + 3 * (size_t)n;
  size_t es = op->esize, *peer_counts = calloc(2 * (size_t)n, sizeof(size_t)), *peer_displs = peer_counts + n;
  ASSERT_NOT_NULL(peer_counts);
  for (int j = 0; j < n; j++) {
    sc[j] = pair_count(s, n, me, j);
    rc[j] = pair_count(s, n, j, me);
  }
  size_t send_extent = layout_displs(s, n, sc, sd), recv_extent = layout_displs(s, n, rc, rd);
  unsigned char* expect;
  if (s->in_place) {
    size_t bytes = recv_extent * es;
    op->recv_alloc = mx_alloc_guarded(bytes, 0);
    op->recv_bytes = bytes;
    op->recv_arg = mx_body(op->recv_alloc);
    op->send_arg = op->recv_arg;
    ref_fill_bytes(op->recv_arg, bytes, me, s->seed, 0);
    op->check_at = op->recv_arg;
    op->check_bytes = bytes;
    expect = mx_own_expect(op, bytes);
    memcpy(expect, op->recv_arg, bytes);
    op->expect = expect;
    /* Layout 1 passes the send arrays too (equal to the receive ones), layout 0 NULL. */
    memcpy(sc, rc, (size_t)n * sizeof(size_t));
    memcpy(sd, rd, (size_t)n * sizeof(size_t));
  } else {
    stream_send(op, send_extent, me);
    expect = poisoned_recv(op, recv_extent);
  }
  op->v_sendcounts = s->in_place && !s->layout ? NULL : sc;
  op->v_sdispls = s->layout ? sd : NULL;
  op->v_recvcounts = rc;
  op->v_rdispls = s->layout ? rd : NULL;
  for (int i = 0; i < n; i++) { /* rank i's block for me: where i's own layout put it */
    for (int j = 0; j < n; j++) peer_counts[j] = pair_count(s, n, i, j);
    if (s->in_place)
      for (int j = 0; j < n; j++) peer_counts[j] = pair_count(s, n, j, i);
    layout_displs(s, n, peer_counts, peer_displs);
    if (rc[i]) ref_fill_bytes(expect + rd[i] * es, rc[i] * es, i, s->seed, peer_displs[me] * es);
  }
  free(peer_counts);
}

void mx_vop_prepare(mx_op_t* op) {
  switch (op->s.coll) {
    case CH_COLL_ALLGATHERV:
    case CH_COLL_GATHERV: prepare_gatherv_like(op); break;
    case CH_COLL_SCATTERV: prepare_scatterv(op); break;
    case CH_COLL_REDUCE_SCATTERV: prepare_reduce_scatterv(op); break;
    case CH_COLL_ALLTOALLV: prepare_alltoallv(op); break;
    default: FAIL("mx_vop_prepare: %d is not a variable-size collective", (int)op->s.coll);
  }
}

chorus_status_t mx_vop_call(mx_op_t* op, chorus_comm_t* comm, chorus_req_t** req) {
  const mx_spec_t* s = &op->s;
  const void* sb = op->send_arg;
  void* rb = op->recv_arg;
  const size_t *sc = op->v_sendcounts, *sd = op->v_sdispls, *rc = op->v_recvcounts, *rd = op->v_rdispls;
  size_t k = op->v_scalar;
  chorus_dtype_t dt = s->dtype;
  switch (s->coll) {
    case CH_COLL_ALLGATHERV:
      return req ? chorus_iallgatherv(sb, k, rb, rc, rd, dt, comm, req) : chorus_allgatherv(sb, k, rb, rc, rd, dt, comm);
    case CH_COLL_REDUCE_SCATTERV:
      return req ? chorus_ireduce_scatterv(sb, rb, rc, dt, s->op, comm, req)
                 : chorus_reduce_scatterv(sb, rb, rc, dt, s->op, comm);
    case CH_COLL_ALLTOALLV:
      return req ? chorus_ialltoallv(sb, sc, sd, rb, rc, rd, dt, comm, req)
                 : chorus_alltoallv(sb, sc, sd, rb, rc, rd, dt, comm);
    case CH_COLL_GATHERV:
      return req ? chorus_igatherv(sb, k, rb, rc, rd, dt, s->root, comm, req)
                 : chorus_gatherv(sb, k, rb, rc, rd, dt, s->root, comm);
    case CH_COLL_SCATTERV:
      return req ? chorus_iscatterv(sb, sc, sd, rb, k, dt, s->root, comm, req)
                 : chorus_scatterv(sb, sc, sd, rb, k, dt, s->root, comm);
    default: return CHORUS_ERR_INVALID_ARG;
  }
}

void mx_vop_drop_arrays(mx_op_t* op) {
  if (op->v_mem) memset(op->v_mem, 0xff, 4 * (size_t)op->nranks * sizeof(size_t));
  free(op->v_mem);
  op->v_mem = NULL;
  op->v_sendcounts = op->v_sdispls = op->v_recvcounts = op->v_rdispls = NULL;
}
