/*
 * matrix.c - one collective call with independently computed expectations (mx_op_*), and the
 * matrix driver (mx_run_matrix). Buffers carry poisoned guard bytes on both sides; outputs are
 * poisoned before the call; inputs come from ref.c's generators, so a result is right only if
 * it is bitwise equal to what ref.c computes with plain loops.
 */
#define _GNU_SOURCE
#include "matrix.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

enum {
  MX_GUARD_BYTES = 64,
  MX_POISON = 0xa5,
  MX_SEND_COPY_MAX_BYTES = 4 << 20, /* inputs up to this size are checked to stay unchanged */
  MX_REPORT_LIMIT = 20,             /* wrong-result reports printed per process */
};

/* Seeds the unused send buffer of a non-root (broadcast, scatter) with other data, so that a
 * library reading it by mistake is caught. */
static const uint64_t GARBAGE_SEED = 0x6a09e667f3bcc908ull;

const size_t mx_small_counts[4] = {0, 1, 7, 1023};
const size_t mx_big_count = ((size_t)1 << 20) + 3;

static atomic_int reports_printed;

/* ---- collective facts ---- */

const char* mx_coll_name(chorus_coll_t coll) {
#define MX_XX_(name, str) str,
  static const char* const names[] = {CHORUS_COLL_MAP(MX_XX_)};
#undef MX_XX_
  return (unsigned)coll < CH_COLL_COUNT ? names[coll] : "?";
}

int mx_coll_reduces(chorus_coll_t coll) {
  return coll == CH_COLL_ALLREDUCE || coll == CH_COLL_REDUCE || coll == CH_COLL_REDUCE_SCATTER ||
         coll == CH_COLL_REDUCE_SCATTERV;
}

int mx_coll_rooted(chorus_coll_t coll) {
  return coll == CH_COLL_BROADCAST || coll == CH_COLL_REDUCE || coll == CH_COLL_GATHER ||
         coll == CH_COLL_SCATTER || coll == CH_COLL_GATHERV || coll == CH_COLL_SCATTERV;
}

static int coll_is_p2p(chorus_coll_t coll) {
  return coll == CH_COLL_SEND || coll == CH_COLL_RECV || coll == CH_COLL_SENDRECV;
}

int mx_coll_has_in_place(chorus_coll_t coll) {
  return coll != CH_COLL_BARRIER && !coll_is_p2p(coll);
}

const char* mx_spec_str(const mx_spec_t* s, char* buf, size_t size) {
  char extra[64] = "";
  if (mx_coll_reduces(s->coll)) snprintf(extra, sizeof(extra), " %s", ref_op_names[s->op]);
  if (mx_coll_rooted(s->coll))
    snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), " root=%d", s->root);
  if (coll_is_p2p(s->coll))
    snprintf(extra, sizeof(extra), " pattern=%s", s->pattern == MX_P2P_RING ? "ring" : "pairs");
  if (mx_coll_is_v(s->coll))
    snprintf(extra + strlen(extra), sizeof(extra) - strlen(extra), " %s", s->layout ? "displs" : "packed");
  snprintf(buf, size, "%s %s=%zu %s%s%s", mx_coll_name(s->coll), mx_coll_is_v(s->coll) ? "scale" : "count",
           s->count, ref_dtypes[s->dtype].name, extra, s->in_place ? " in_place" : "");
  return buf;
}

/* ---- buffers ---- */

/* The matrix makes thousands of calls with the same few buffer sizes; a small per-thread cache
 * of freed blocks saves the page faults of fresh multi-megabyte allocations each time. */
enum { CACHE_SLOTS = 8 };
typedef struct {
  void* ptr;
  size_t capacity;
} cached_block_t;
static __thread int cache_enabled;
static __thread cached_block_t cache[CACHE_SLOTS];

static void* cache_alloc(size_t bytes) {
  if (bytes == 0) bytes = 1;
  for (int i = 0; cache_enabled && i < CACHE_SLOTS; i++) {
    /* Large enough, but not wastefully so (a huge block for a tiny buffer would hide
     * overruns from ASan). */
    if (cache[i].ptr && cache[i].capacity >= bytes && cache[i].capacity <= 2 * bytes + 4096) {
      void* p = cache[i].ptr;
      cache[i].ptr = NULL;
      return p;
    }
  }
  void* p = test_alloc_large(bytes);
  if (!p) FAIL("out of memory allocating %zu bytes", bytes);
  return p;
}

static void cache_free(void* p) {
  if (!p) return;
  if (!cache_enabled) {
    free(p);
    return;
  }
  int slot = 0; /* an empty slot, else evict the smallest block */
  for (int i = 0; i < CACHE_SLOTS; i++) {
    if (!cache[i].ptr) {
      slot = i;
      break;
    }
    if (cache[i].capacity < cache[slot].capacity) slot = i;
  }
  free(cache[slot].ptr);
  cache[slot].ptr = p;
  cache[slot].capacity = malloc_usable_size(p);
}

static void cache_enable(int enable) {
  for (int i = 0; i < CACHE_SLOTS; i++) {
    free(cache[i].ptr);
    cache[i].ptr = NULL;
  }
  cache_enabled = enable;
}

static unsigned char* alloc_guarded(size_t bytes, int poison_body) {
  unsigned char* a = cache_alloc(bytes + 2 * MX_GUARD_BYTES);
  memset(a, MX_POISON, MX_GUARD_BYTES);
  memset(a + MX_GUARD_BYTES + bytes, MX_POISON, MX_GUARD_BYTES);
  if (poison_body) memset(a + MX_GUARD_BYTES, MX_POISON, bytes);
  return a;
}

static unsigned char* body(unsigned char* alloc) { return alloc + MX_GUARD_BYTES; }

unsigned char* mx_alloc_guarded(size_t bytes, int poison_body) { return alloc_guarded(bytes, poison_body); }
unsigned char* mx_body(unsigned char* alloc) { return body(alloc); }

/* ---- expectations ---- */

size_t mx_common_expect_elems(const mx_spec_t* s, int nranks) {
  switch (s->coll) {
    case CH_COLL_ALLREDUCE:
    case CH_COLL_REDUCE:
    case CH_COLL_BROADCAST: return s->count;
    case CH_COLL_ALLGATHER: return s->count * (size_t)nranks;
    default: return 0;
  }
}

/* Elements [lo, hi) of every rank's blocks laid end to end (allgather, gather). */
static void concat_blocks_range(const mx_spec_t* s, int nranks, unsigned char* out, size_t lo,
                                size_t hi) {
  size_t es = ref_dtypes[s->dtype].size_bytes;
  for (int j = 0; j < nranks && s->count > 0; j++) {
    size_t block_lo = (size_t)j * s->count, block_hi = block_lo + s->count;
    size_t from = lo > block_lo ? lo : block_lo, to = hi < block_hi ? hi : block_hi;
    if (from >= to) continue;
    ref_fill_bytes(out + from * es, (to - from) * es, j, s->seed, (from - block_lo) * es);
  }
}

void mx_common_expect_range(const mx_spec_t* s, int nranks, void* out, size_t lo, size_t hi) {
  size_t es = ref_dtypes[s->dtype].size_bytes;
  unsigned char* o = out;
  if (hi <= lo) return;
  switch (s->coll) {
    case CH_COLL_ALLREDUCE:
    case CH_COLL_REDUCE:
      ref_reduce_expected(o + lo * es, hi - lo, s->dtype, s->op, nranks, lo, s->seed);
      break;
    case CH_COLL_BROADCAST:
      ref_fill_bytes(o + lo * es, (hi - lo) * es, s->root, s->seed, lo * es);
      break;
    case CH_COLL_ALLGATHER: concat_blocks_range(s, nranks, o, lo, hi); break;
    default: break;
  }
}

static const unsigned char* own_expect(mx_op_t* op, size_t bytes) {
  op->expect_owned = cache_alloc(bytes);
  return op->expect_owned;
}

unsigned char* mx_own_expect(mx_op_t* op, size_t bytes) {
  own_expect(op, bytes);
  return op->expect_owned;
}

/* The shared expectation, computed here when the caller did not. */
static const unsigned char* common_expect_or_own(mx_op_t* op, const void* common) {
  if (common) return common;
  size_t elems = mx_common_expect_elems(&op->s, op->nranks);
  own_expect(op, elems * op->esize);
  mx_common_expect_range(&op->s, op->nranks, op->expect_owned, 0, elems);
  return op->expect_owned;
}

/* ---- prepare, one function per family ---- */

static void prepare_reduce_like(mx_op_t* op, const void* common) {
  const mx_spec_t* s = &op->s;
  size_t bytes = s->count * op->esize;
  op->recv_alloc = alloc_guarded(bytes, !s->in_place);
  op->recv_bytes = bytes;
  if (s->in_place) {
    ref_fill_reduce_input(body(op->recv_alloc), s->count, s->dtype, s->op, op->nranks, op->rank, 0,
                          s->seed);
    op->send_arg = body(op->recv_alloc);
  } else {
    op->send_alloc = alloc_guarded(bytes, 0);
    op->send_bytes = bytes;
    ref_fill_reduce_input(body(op->send_alloc), s->count, s->dtype, s->op, op->nranks, op->rank, 0,
                          s->seed);
    op->send_arg = body(op->send_alloc);
  }
  op->recv_arg = body(op->recv_alloc);
  /* reduce: recvbuf is unused on non-roots, so nothing is checked there. */
  if (s->coll == CH_COLL_ALLREDUCE || op->rank == s->root) {
    op->check_at = body(op->recv_alloc);
    op->check_bytes = bytes;
    op->expect = common_expect_or_own(op, common);
  }
}

static void prepare_broadcast(mx_op_t* op, const void* common) {
  const mx_spec_t* s = &op->s;
  size_t bytes = s->count * op->esize;
  int is_root = op->rank == s->root;
  op->recv_alloc = alloc_guarded(bytes, !(s->in_place && is_root));
  op->recv_bytes = bytes;
  op->recv_arg = body(op->recv_alloc);
  if (s->in_place) {
    if (is_root) ref_fill_bytes(body(op->recv_alloc), bytes, op->rank, s->seed, 0);
    op->send_arg = op->recv_arg;
  } else {
    op->send_alloc = alloc_guarded(bytes, 0);
    op->send_bytes = bytes;
    ref_fill_bytes(body(op->send_alloc), bytes, op->rank,
                   is_root ? s->seed : s->seed ^ GARBAGE_SEED, 0);
    op->send_arg = body(op->send_alloc);
  }
  op->check_at = body(op->recv_alloc);
  op->check_bytes = bytes;
  op->expect = common_expect_or_own(op, common);
}

/* allgather and gather: recvbuf holds nranks blocks; in place, the caller's block is its input. */
static void prepare_gather_like(mx_op_t* op, const void* common) {
  const mx_spec_t* s = &op->s;
  size_t block = s->count * op->esize;
  size_t total = block * (size_t)op->nranks;
  int checks = s->coll == CH_COLL_ALLGATHER || op->rank == s->root;
  int in_place = s->in_place && checks; /* gather in place concerns the root only */
  op->recv_alloc = alloc_guarded(total, 1);
  op->recv_bytes = total;
  op->recv_arg = body(op->recv_alloc);
  unsigned char* own_slot = body(op->recv_alloc) + (size_t)op->rank * block;
  if (in_place) {
    ref_fill_bytes(own_slot, block, op->rank, s->seed, 0);
    op->send_arg = own_slot;
  } else {
    op->send_alloc = alloc_guarded(block, 0);
    op->send_bytes = block;
    ref_fill_bytes(body(op->send_alloc), block, op->rank, s->seed, 0);
    op->send_arg = body(op->send_alloc);
  }
  if (!checks) return;
  op->check_at = body(op->recv_alloc);
  op->check_bytes = total;
  if (s->coll == CH_COLL_ALLGATHER) {
    op->expect = common_expect_or_own(op, common);
  } else {
    op->expect = own_expect(op, total);
    concat_blocks_range(s, op->nranks, op->expect_owned, 0, s->count * (size_t)op->nranks);
  }
}

static void prepare_reduce_scatter(mx_op_t* op) {
  const mx_spec_t* s = &op->s;
  size_t block = s->count * op->esize;
  size_t total_elems = s->count * (size_t)op->nranks;
  op->send_alloc = alloc_guarded(block * (size_t)op->nranks, 0);
  op->send_bytes = block * (size_t)op->nranks;
  ref_fill_reduce_input(body(op->send_alloc), total_elems, s->dtype, s->op, op->nranks, op->rank, 0,
                        s->seed);
  op->send_arg = body(op->send_alloc);
  if (s->in_place) {
    op->recv_arg = body(op->send_alloc) + (size_t)op->rank * block;
  } else {
    op->recv_alloc = alloc_guarded(block, 1);
    op->recv_bytes = block;
    op->recv_arg = body(op->recv_alloc);
  }
  op->check_at = op->recv_arg;
  op->check_bytes = block;
  op->expect = own_expect(op, block);
  ref_reduce_expected(op->expect_owned, s->count, s->dtype, s->op, op->nranks,
                      (size_t)op->rank * s->count, s->seed);
}

static void prepare_alltoall(mx_op_t* op) {
  const mx_spec_t* s = &op->s;
  size_t block = s->count * op->esize;
  size_t total = block * (size_t)op->nranks;
  op->recv_alloc = alloc_guarded(total, !s->in_place);
  op->recv_bytes = total;
  op->recv_arg = body(op->recv_alloc);
  if (s->in_place) {
    ref_fill_bytes(body(op->recv_alloc), total, op->rank, s->seed, 0);
    op->send_arg = op->recv_arg;
  } else {
    op->send_alloc = alloc_guarded(total, 0);
    op->send_bytes = total;
    ref_fill_bytes(body(op->send_alloc), total, op->rank, s->seed, 0);
    op->send_arg = body(op->send_alloc);
  }
  op->check_at = body(op->recv_alloc);
  op->check_bytes = total;
  op->expect = own_expect(op, total);
  /* Block i of my result is block `rank` of rank i's input. */
  for (int i = 0; i < op->nranks; i++)
    ref_fill_bytes(op->expect_owned + (size_t)i * block, block, i, s->seed,
                   (size_t)op->rank * block);
}

static void prepare_scatter(mx_op_t* op) {
  const mx_spec_t* s = &op->s;
  size_t block = s->count * op->esize;
  size_t total = block * (size_t)op->nranks;
  int is_root = op->rank == s->root;
  op->send_alloc = alloc_guarded(total, 0);
  op->send_bytes = total;
  ref_fill_bytes(body(op->send_alloc), total, op->rank, is_root ? s->seed : s->seed ^ GARBAGE_SEED,
                 0);
  op->send_arg = body(op->send_alloc);
  if (s->in_place && is_root) {
    op->recv_arg = body(op->send_alloc) + (size_t)op->rank * block;
  } else {
    op->recv_alloc = alloc_guarded(block, 1);
    op->recv_bytes = block;
    op->recv_arg = body(op->recv_alloc);
  }
  op->check_at = op->recv_arg;
  op->check_bytes = block;
  op->expect = own_expect(op, block);
  ref_fill_bytes(op->expect_owned, block, s->root, s->seed, (size_t)op->rank * block);
}

/* Peers of a point-to-point pattern; -1 when this rank takes no part. A blocking send to
 * oneself cannot complete, so CH_COLL_SEND leaves such a rank idle; sendrecv exchanges with
 * itself instead. */
static void p2p_peers(mx_op_t* op) {
  int n = op->nranks, r = op->rank;
  int to_self_ok = op->s.coll == CH_COLL_SENDRECV;
  if (op->s.pattern == MX_P2P_RING) {
    op->peer_dst = (r + 1) % n;
    op->peer_src = (r - 1 + n) % n;
  } else {
    int partner = r ^ 1;
    op->peer_dst = op->peer_src = partner < n ? partner : r;
  }
  if (op->peer_dst == r && !to_self_ok) op->peer_dst = op->peer_src = -1;
}

static void prepare_p2p(mx_op_t* op) {
  const mx_spec_t* s = &op->s;
  size_t bytes = s->count * op->esize;
  p2p_peers(op);
  if (op->peer_dst < 0) return;
  op->send_alloc = alloc_guarded(bytes, 0);
  op->send_bytes = bytes;
  ref_fill_bytes(body(op->send_alloc), bytes, op->rank, s->seed, 0);
  op->send_arg = body(op->send_alloc);
  op->recv_alloc = alloc_guarded(bytes, 1);
  op->recv_bytes = bytes;
  op->recv_arg = body(op->recv_alloc);
  op->check_at = body(op->recv_alloc);
  op->check_bytes = bytes;
  op->expect = own_expect(op, bytes);
  ref_fill_bytes(op->expect_owned, bytes, op->peer_src, s->seed, 0);
}

void mx_op_prepare(mx_op_t* op, const mx_spec_t* s, int rank, int nranks,
                   const void* common_expect) {
  memset(op, 0, sizeof(*op));
  op->s = *s;
  op->rank = rank;
  op->nranks = nranks;
  op->esize = ref_dtypes[s->dtype].size_bytes;
  op->peer_dst = op->peer_src = -1;
  switch (s->coll) {
    case CH_COLL_ALLREDUCE:
    case CH_COLL_REDUCE: prepare_reduce_like(op, common_expect); break;
    case CH_COLL_BROADCAST: prepare_broadcast(op, common_expect); break;
    case CH_COLL_ALLGATHER:
    case CH_COLL_GATHER: prepare_gather_like(op, common_expect); break;
    case CH_COLL_REDUCE_SCATTER: prepare_reduce_scatter(op); break;
    case CH_COLL_ALLTOALL: prepare_alltoall(op); break;
    case CH_COLL_SCATTER: prepare_scatter(op); break;
    case CH_COLL_SEND:
    case CH_COLL_SENDRECV: prepare_p2p(op); break;
    case CH_COLL_BARRIER: break;
    case CH_COLL_ALLGATHERV:
    case CH_COLL_REDUCE_SCATTERV:
    case CH_COLL_ALLTOALLV:
    case CH_COLL_GATHERV:
    case CH_COLL_SCATTERV: mx_vop_prepare(op); break;
    default: FAIL("mx_op_prepare: unsupported collective %d", (int)s->coll);
  }
  if (!s->in_place && op->send_alloc && op->send_bytes <= MX_SEND_COPY_MAX_BYTES) {
    op->send_copy = cache_alloc(op->send_bytes);
    memcpy(op->send_copy, body(op->send_alloc), op->send_bytes);
  }
}

/* ---- calls ---- */

/* In CH_COLL_SEND's patterns one side of each pair sends first, the other receives first. */
static int p2p_sends_first(const mx_op_t* op) {
  if (op->s.pattern == MX_P2P_RING) return op->rank % 2 == 0;
  return op->rank < op->peer_dst;
}

chorus_status_t mx_op_run(mx_op_t* op, chorus_comm_t* comm) {
  const mx_spec_t* s = &op->s;
  size_t c = s->count;
  chorus_status_t st;
  if (mx_coll_is_v(s->coll)) return mx_vop_call(op, comm, NULL);
  switch (s->coll) {
    case CH_COLL_ALLREDUCE:
      return chorus_allreduce(op->send_arg, op->recv_arg, c, s->dtype, s->op, comm);
    case CH_COLL_BROADCAST:
      return chorus_broadcast(op->send_arg, op->recv_arg, c, s->dtype, s->root, comm);
    case CH_COLL_REDUCE:
      return chorus_reduce(op->send_arg, op->recv_arg, c, s->dtype, s->op, s->root, comm);
    case CH_COLL_ALLGATHER: return chorus_allgather(op->send_arg, op->recv_arg, c, s->dtype, comm);
    case CH_COLL_REDUCE_SCATTER:
      return chorus_reduce_scatter(op->send_arg, op->recv_arg, c, s->dtype, s->op, comm);
    case CH_COLL_ALLTOALL: return chorus_alltoall(op->send_arg, op->recv_arg, c, s->dtype, comm);
    case CH_COLL_GATHER:
      return chorus_gather(op->send_arg, op->recv_arg, c, s->dtype, s->root, comm);
    case CH_COLL_SCATTER:
      return chorus_scatter(op->send_arg, op->recv_arg, c, s->dtype, s->root, comm);
    case CH_COLL_BARRIER: return chorus_barrier(comm);
    case CH_COLL_SEND:
      if (op->peer_dst < 0) return CHORUS_OK;
      if (p2p_sends_first(op)) {
        st = chorus_send(op->send_arg, c, s->dtype, op->peer_dst, comm);
        if (st != CHORUS_OK) return st;
        return chorus_recv(op->recv_arg, c, s->dtype, op->peer_src, comm);
      }
      st = chorus_recv(op->recv_arg, c, s->dtype, op->peer_src, comm);
      if (st != CHORUS_OK) return st;
      return chorus_send(op->send_arg, c, s->dtype, op->peer_dst, comm);
    case CH_COLL_SENDRECV:
      if (op->peer_dst < 0) return CHORUS_OK;
      return chorus_sendrecv(op->send_arg, c, op->peer_dst, op->recv_arg, c, op->peer_src, s->dtype,
                             comm);
    default: return CHORUS_ERR_INVALID_ARG;
  }
}

chorus_status_t mx_op_post(mx_op_t* op, chorus_comm_t* comm) {
  const mx_spec_t* s = &op->s;
  size_t c = s->count;
  chorus_req_t** r = op->req;
  chorus_status_t st;
  op->nreq = 1;
  if (mx_coll_is_v(s->coll)) {
    st = mx_vop_call(op, comm, r);
    mx_vop_drop_arrays(op);
    return st;
  }
  switch (s->coll) {
    case CH_COLL_ALLREDUCE:
      return chorus_iallreduce(op->send_arg, op->recv_arg, c, s->dtype, s->op, comm, r);
    case CH_COLL_BROADCAST:
      return chorus_ibroadcast(op->send_arg, op->recv_arg, c, s->dtype, s->root, comm, r);
    case CH_COLL_REDUCE:
      return chorus_ireduce(op->send_arg, op->recv_arg, c, s->dtype, s->op, s->root, comm, r);
    case CH_COLL_ALLGATHER:
      return chorus_iallgather(op->send_arg, op->recv_arg, c, s->dtype, comm, r);
    case CH_COLL_REDUCE_SCATTER:
      return chorus_ireduce_scatter(op->send_arg, op->recv_arg, c, s->dtype, s->op, comm, r);
    case CH_COLL_ALLTOALL:
      return chorus_ialltoall(op->send_arg, op->recv_arg, c, s->dtype, comm, r);
    case CH_COLL_GATHER:
      return chorus_igather(op->send_arg, op->recv_arg, c, s->dtype, s->root, comm, r);
    case CH_COLL_SCATTER:
      return chorus_iscatter(op->send_arg, op->recv_arg, c, s->dtype, s->root, comm, r);
    case CH_COLL_BARRIER: return chorus_ibarrier(comm, r);
    case CH_COLL_SEND:
      op->nreq = 0;
      if (op->peer_dst < 0) return CHORUS_OK;
      if (p2p_sends_first(op)) {
        st = chorus_isend(op->send_arg, c, s->dtype, op->peer_dst, comm, &r[0]);
        if (st != CHORUS_OK) return st;
        op->nreq = 1;
        st = chorus_irecv(op->recv_arg, c, s->dtype, op->peer_src, comm, &r[1]);
      } else {
        st = chorus_irecv(op->recv_arg, c, s->dtype, op->peer_src, comm, &r[0]);
        if (st != CHORUS_OK) return st;
        op->nreq = 1;
        st = chorus_isend(op->send_arg, c, s->dtype, op->peer_dst, comm, &r[1]);
      }
      if (st == CHORUS_OK) op->nreq = 2;
      return st;
    case CH_COLL_SENDRECV:
      if (op->peer_dst < 0) {
        op->nreq = 0;
        return CHORUS_OK;
      }
      return chorus_isendrecv(op->send_arg, c, op->peer_dst, op->recv_arg, c, op->peer_src,
                              s->dtype, comm, r);
    default: op->nreq = 0; return CHORUS_ERR_INVALID_ARG;
  }
}

/* ---- verification ---- */

static void report(const mx_op_t* op, const char* what) {
  if (atomic_fetch_add(&reports_printed, 1) >= MX_REPORT_LIMIT) return;
  char spec[160];
  mx_spec_str(&op->s, spec, sizeof(spec));
  const char* context = test_get_context();
  /* The matrix's context already names the call; others get it added. */
  fprintf(stderr, "WRONG [rank %d of %d] [%s]%s%s: %s\n", op->rank, op->nranks, context,
          strstr(context, spec) ? "" : " ", strstr(context, spec) ? "" : spec, what);
}

static void report_result_mismatch(const mx_op_t* op) {
  size_t es = op->esize, elems = op->check_bytes / es, first = elems, nwrong = 0;
  for (size_t e = 0; e < elems; e++) {
    if (memcmp(op->check_at + e * es, op->expect + e * es, es) != 0) {
      if (first == elems) first = e;
      nwrong++;
    }
  }
  char got[64], want[64], what[320];
  ref_format_elem(got, sizeof(got), op->check_at + first * es, op->s.dtype);
  ref_format_elem(want, sizeof(want), op->expect + first * es, op->s.dtype);
  size_t block = op->s.count ? first / op->s.count : 0,
         offset = op->s.count ? first % op->s.count : 0;
  snprintf(what, sizeof(what),
           "element %zu (block %zu, offset %zu) is %s, expected %s; %zu of %zu elements wrong",
           first, block, offset, got, want, nwrong, elems);
  report(op, what);
}

static int guards_intact(const unsigned char* alloc, size_t bytes) {
  for (size_t k = 0; k < MX_GUARD_BYTES; k++)
    if (alloc[k] != MX_POISON || alloc[MX_GUARD_BYTES + bytes + k] != MX_POISON) return 0;
  return 1;
}

int mx_op_verify(const mx_op_t* op) {
  int problems = 0;
  if (op->check_at && memcmp(op->check_at, op->expect, op->check_bytes) != 0) {
    report_result_mismatch(op);
    problems++;
  }
  if (op->recv_alloc && !guards_intact(op->recv_alloc, op->recv_bytes)) {
    report(op, "wrote outside the receive buffer (guard bytes changed)");
    problems++;
  }
  if (op->send_alloc && !guards_intact(op->send_alloc, op->send_bytes)) {
    report(op, "wrote outside the send buffer (guard bytes changed)");
    problems++;
  }
  if (op->send_copy && memcmp(op->send_copy, body(op->send_alloc), op->send_bytes) != 0) {
    report(op, "modified the (const) send buffer of an out-of-place call");
    problems++;
  }
  return problems;
}

void mx_op_release(mx_op_t* op) {
  cache_free(op->send_alloc);
  cache_free(op->recv_alloc);
  cache_free(op->expect_owned);
  cache_free(op->send_copy);
  op->send_alloc = op->recv_alloc = op->expect_owned = op->send_copy = NULL;
  free(op->v_mem);
  op->v_mem = NULL;
}

/* ---- algorithms ---- */

int mx_algo_names(chorus_coll_t coll, const char** names, int max) {
  static char inner[MX_MAX_ALGOS][48]; /* "hier/rhd": two-level algorithms with each inner engine */
  int k = 0, ninner = 0;
  for (size_t i = 0; i < chorus__nalgos; i++) {
    const chorus_algo_t* a = chorus__algos[i];
    if (!a || a->coll != coll) continue;
    if (k < max) names[k++] = a->name;
    for (size_t j = 0; a->sub_name && a->sub_name(j) && k < max && ninner < MX_MAX_ALGOS; j++) {
      snprintf(inner[ninner], sizeof(inner[ninner]), "%s/%s", a->name, a->sub_name(j));
      names[k++] = inner[ninner++];
    }
  }
  return k;
}

void mx_force_algo(chorus_coll_t coll, const char* name) {
  if (!name) {
    unsetenv("CHORUS_ALGO");
    return;
  }
  char value[256];
  int len = snprintf(value, sizeof(value), "%s:%s", mx_coll_name(coll), name);
  /* Blocking send/recv: force the receive side to the same family when it has one. */
  if (coll == CH_COLL_SEND) {
    const char* recv_names[MX_MAX_ALGOS];
    int nrecv = mx_algo_names(CH_COLL_RECV, recv_names, MX_MAX_ALGOS);
    for (int i = 0; i < nrecv; i++)
      if (strcmp(recv_names[i], name) == 0)
        snprintf(value + len, sizeof(value) - (size_t)len, ",%s:%s", mx_coll_name(CH_COLL_RECV),
                 name);
  }
  setenv("CHORUS_ALGO", value, 1);
}

/* ---- the matrix ---- */

typedef struct {
  chorus_coll_t coll;
  int nranks;
  const size_t* counts;
  size_t ncounts;
  unsigned flags;   /* MX_* reductions of the matrix */
  const char* algo; /* NULL: automatic selection */
  int verbose;      /* CHORUS_TEST_VERBOSE: print every call's time (rank 0) */
  uint64_t base_seed;
  pthread_barrier_t barrier;
  unsigned char* common_expect; /* shared by the rank threads, sized for the largest call */
  atomic_long calls, unsupported, wrong;
} mx_ctx_t;

/* The roots (rooted collectives), patterns (p2p) or the single variant of one combination. */
static int variants(const mx_ctx_t* ctx, uint64_t* rotation, int* out) {
  int n = ctx->nranks;
  if (mx_coll_rooted(ctx->coll)) {
    if (ctx->flags & MX_ROTATE_ROOTS) {
      out[0] = (int)((*rotation)++ % (uint64_t)n);
      return 1;
    }
    if (n <= 4) {
      for (int r = 0; r < n; r++) out[r] = r;
      return n;
    }
    out[0] = 0;
    out[1] = n / 2;
    out[2] = n - 1;
    return 3;
  }
  if (coll_is_p2p(ctx->coll)) {
    out[0] = MX_P2P_RING;
    out[1] = MX_P2P_PAIRS;
    return 2;
  }
  out[0] = 0;
  return 1;
}

/* One call of the matrix on one rank. Returns the number of problems found. */
static int matrix_step(mx_ctx_t* ctx, chorus_comm_t* comm, int rank, const mx_spec_t* s) {
  int n = ctx->nranks;
  char spec[160];
  test_set_context("algo=%s n=%d %s", ctx->algo ? ctx->algo : "auto", n,
                   mx_spec_str(s, spec, sizeof(spec)));
  /* The shared expectation is computed by all ranks together, a slice each. */
  size_t common = mx_common_expect_elems(s, n);
  double t0 = test_now_sec();
  if (common) {
    size_t lo = common * (size_t)rank / (size_t)n, hi = common * (size_t)(rank + 1) / (size_t)n;
    mx_common_expect_range(s, n, ctx->common_expect, lo, hi);
    pthread_barrier_wait(&ctx->barrier);
  }
  double t1 = test_now_sec();
  mx_op_t op;
  mx_op_prepare(&op, s, rank, n, common ? ctx->common_expect : NULL);
  double t2 = test_now_sec();
  chorus_status_t st = mx_op_run(&op, comm);
  double t3 = test_now_sec();
  int problems = 0;
  if (st == CHORUS_ERR_NOT_SUPPORTED && ctx->algo) {
    if (rank == 0) atomic_fetch_add(&ctx->unsupported, 1);
  } else {
    ASSERT_COMM_OK(comm, st);
    problems = mx_op_verify(&op);
  }
  if (rank == 0) atomic_fetch_add(&ctx->calls, 1);
  double t4 = test_now_sec();
  mx_op_release(&op);
  if (common) pthread_barrier_wait(&ctx->barrier); /* everyone is done with common_expect */
  if (ctx->verbose && rank == 0)
    printf("    %s: expect %.1f prepare %.1f call %.1f verify %.1f release+sync %.1f ms\n", spec,
           (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t4 - t3) * 1e3,
           (test_now_sec() - t4) * 1e3);
  return problems;
}

/* A collective that only moves data sees a dtype as its element size: one dtype per size is
 * enough where MX_SIZE_DTYPES asks for it (the small counts try them all). */
static int size_representative_dtype(chorus_dtype_t dt) {
  return dt == CHORUS_INT8 || dt == CHORUS_FLOAT16 || dt == CHORUS_FLOAT32 || dt == CHORUS_FLOAT64;
}

/* Under ThreadSanitizer the matrix thins itself past count 1: TSan looks for races between
 * threads, which do not depend on the dtype or the op (the kernels run on one thread), and its
 * calls cost 5-10x. Counts 0 and 1 keep the full product; the larger counts, which add chunking
 * and pipelining, run the MX_COVER_OPS and MX_SIZE_DTYPES reductions. The normal and ASan trees
 * run the full product. */
#ifndef MX_UNDER_TSAN
#define MX_UNDER_TSAN 0 /* tests/CMakeLists.txt sets it in the TSan tree (CHORUS_TSAN) */
#endif

static unsigned flags_for_count(unsigned flags, size_t count) {
  if (MX_UNDER_TSAN && count > 1) flags |= MX_COVER_OPS | MX_SIZE_DTYPES;
  return flags;
}

static int matrix_rank_main(chorus_comm_t* comm, int rank, void* arg) {
  mx_ctx_t* ctx = arg;
  uint64_t combo = 0, rotation = 0;
  long problems = 0;
  int nops = mx_coll_reduces(ctx->coll) ? CHORUS_OP_COUNT : 1;
  int nin_place = mx_coll_has_in_place(ctx->coll) ? 2 : 1;
  cache_enable(1);
  for (size_t ci = 0; ci < ctx->ncounts; ci++) {
    unsigned flags = flags_for_count(ctx->flags, ctx->counts[ci]);
    for (int dt = 0; dt < CHORUS_DTYPE_COUNT; dt++) {
      if ((flags & MX_SIZE_DTYPES) && !mx_coll_reduces(ctx->coll) &&
          !size_representative_dtype((chorus_dtype_t)dt))
        continue;
      for (int op = 0; op < nops; op++) {
        int in_place_first = 0, in_place_last = nin_place - 1;
        if ((flags & MX_COVER_OPS) && nops > 1) {
          /* Big counts exercise chunking and pipelining, which the small counts do not;
           * the kernels per dtype x op are already covered by the small counts. So each
           * dtype meets two ops here (one out of place, one in place) and each op four
           * dtypes, a fifth of the full product. */
          int k = (dt + op) % CHORUS_OP_COUNT;
          if (k > 1) continue;
          in_place_first = in_place_last = k;
        }
        int vars[16];
        int nvars = variants(ctx, &rotation, vars);
        /* Variable-size calls: blocks back to back (NULL displacements) and scattered. */
        int nlayouts = mx_coll_is_v(ctx->coll) && ctx->coll != CH_COLL_REDUCE_SCATTERV ? 2 : 1;
        for (int v = 0; v < nvars; v++) {
          for (int in_place = in_place_first; in_place <= in_place_last; in_place++) {
            for (int layout = 0; layout < nlayouts; layout++) {
              mx_spec_t s = {ctx->coll,
                             ctx->counts[ci],
                             (chorus_dtype_t)dt,
                             (chorus_op_t)op,
                             mx_coll_rooted(ctx->coll) ? vars[v] : 0,
                             coll_is_p2p(ctx->coll) ? vars[v] : 0,
                             in_place,
                             ref_mix64(ctx->base_seed + ++combo),
                             layout};
              problems += matrix_step(ctx, comm, rank, &s);
            }
          }
        }
      }
    }
  }
  cache_enable(0);
  test_set_context("algo=%s n=%d", ctx->algo ? ctx->algo : "auto", ctx->nranks);
  atomic_fetch_add(&ctx->wrong, problems);
  return problems ? 1 : 0;
}

static size_t largest_common_bytes(int nranks, const size_t* counts, size_t ncounts) {
  size_t max_count = 0;
  for (size_t i = 0; i < ncounts; i++)
    if (counts[i] > max_count) max_count = counts[i];
  return max_count * (size_t)nranks * 8 + 1; /* allgather of the widest dtype */
}

static int is_small_message_algo(const char* name) {
  static const char* const small[] = {"rd", "direct", "naive", "bruck"};
  for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++)
    if (strcmp(name, small[i]) == 0) return 1;
  return 0;
}

void mx_run_matrix(chorus_coll_t coll, int nranks, const size_t* counts, size_t ncounts,
                   unsigned flags) {
  const char* algos[MX_MAX_ALGOS + 1];
  algos[0] = NULL; /* automatic selection first */
  int nalgos = 1 + mx_algo_names(coll, algos + 1, MX_MAX_ALGOS);
  /* With one registered algorithm, automatic selection can only choose it: forcing it as
   * well would repeat the same calls. */
  if ((flags & MX_AUTO_IF_SINGLE) && nalgos == 2) nalgos = 1;
  long total_wrong = 0, failed_ranks = 0;
  for (int a = 0; a < nalgos; a++) {
    /* On one host a two-level algorithm runs its flat fallback: once, with small counts. */
    int one_host = !ranks_hosts_active(nranks);
    if (algos[a] && one_host && (strchr(algos[a], '/') || ((flags & MX_COVER_OPS) && !strcmp(algos[a], "hier"))))
      continue;
    /* Small-message algorithms move the whole vector per step: their chunked runs (4 KiB
     * chunks, many of them) cover what the big count would, at a fraction of its time. */
    if (algos[a] && (flags & MX_COVER_OPS) && is_small_message_algo(algos[a])) continue;
    mx_ctx_t* ctx = calloc(1, sizeof(*ctx));
    ASSERT_NOT_NULL(ctx);
    ctx->coll = coll;
    ctx->nranks = nranks;
    ctx->counts = counts;
    ctx->ncounts = ncounts;
    ctx->flags = flags;
    ctx->algo = algos[a];
    ctx->verbose = getenv("CHORUS_TEST_VERBOSE") != NULL;
    ctx->base_seed = ref_mix64((uint64_t)coll * 1000003u + (uint64_t)nranks * 7919u + (uint64_t)a);
    ctx->common_expect = test_alloc_large(largest_common_bytes(nranks, counts, ncounts));
    ASSERT_NOT_NULL(ctx->common_expect);
    ASSERT_EQ(pthread_barrier_init(&ctx->barrier, NULL, (unsigned)nranks), 0);

    mx_force_algo(coll, algos[a]);
    double start_sec = test_now_sec();
    failed_ranks += ranks_join(ranks_start(nranks, NULL, matrix_rank_main, ctx));
    double elapsed_sec = test_now_sec() - start_sec;
    mx_force_algo(coll, NULL);

    printf("  %s n=%d algo=%s: %ld calls, %ld unsupported, %ld wrong, %.2f s\n", mx_coll_name(coll),
           nranks, algos[a] ? algos[a] : "auto", atomic_load(&ctx->calls),
           atomic_load(&ctx->unsupported), atomic_load(&ctx->wrong), elapsed_sec);
    fflush(stdout);
    total_wrong += atomic_load(&ctx->wrong);
    pthread_barrier_destroy(&ctx->barrier);
    free(ctx->common_expect);
    free(ctx);
  }
  if (total_wrong || failed_ranks)
    FAIL("%s n=%d: %ld wrong results, %ld failed ranks (WRONG lines above)", mx_coll_name(coll),
         nranks, total_wrong, failed_ranks);
}

/* Sets the CHORUS_* variables of `assignments` ("NAME=value", NULL-terminated) for the
 * communicators created next, or unsets them (restore != 0). Only while no rank thread runs. */
static void set_env_list(const char* const* assignments, int restore) {
  for (const char* const* a = assignments; *a; a++) {
    char name[64];
    const char* eq = strchr(*a, '=');
    snprintf(name, sizeof(name), "%.*s", (int)(eq - *a), *a);
    if (restore)
      unsetenv(name);
    else
      setenv(name, eq + 1, 1);
  }
}

/* mx_run_matrix with the variables of env set, then unset. */
static void run_with_env(const char* const* env, chorus_coll_t coll, int nranks, const size_t* counts, size_t ncounts,
                         unsigned flags) {
  set_env_list(env, 0);
  mx_run_matrix(coll, nranks, counts, ncounts, flags);
  set_env_list(env, 1);
}

/* Small pipelining chunks and the smallest shared-memory rings and slots: a few kilobytes
 * then take many chunks, slots and ring wraps, cheaply enough for the sanitizer builds. Every
 * output is written with streaming stores (a path otherwise taken from 8 MiB on), over the odd
 * lengths and offsets of these counts. */
static const char* const small_chunk_env[] = {"CHORUS_BUFF_SIZE=4096", "CHORUS_SHM_BUFF_SIZE=65536",
                                              "CHORUS_SHM_SLOT_SIZE=65536", "CHORUS_SHM_STREAM_BYTES=1", NULL};
static const size_t chunked_counts[] = {4099, 20011};

void mx_run_chunked(chorus_coll_t coll, int nranks) {
  run_with_env(small_chunk_env, coll, nranks, chunked_counts, sizeof(chunked_counts) / sizeof(chunked_counts[0]),
               MX_ROTATE_ROOTS);
}

/* Ranks of one host over TCP instead of shared memory (message semantics only). */
static const char* const tcp_env[] = {"CHORUS_SHM_DISABLE=1", NULL};
static const size_t tcp_counts[] = {0, 1, 1023, 20011};

void mx_run_tcp(chorus_coll_t coll, int nranks) {
  run_with_env(tcp_env, coll, nranks, tcp_counts, sizeof(tcp_counts) / sizeof(tcp_counts[0]), MX_ROTATE_ROOTS);
}

/* Ranks of one host over TCP with 3 sockets per peer: messages of 512 KiB and more are striped
 * in parts of at least 256 KiB (2 or 3 parts, and parts that are not a multiple of the element
 * size); engines' chunks are 3 x 256 KiB. Both ends must cut every message alike. Without the
 * link probe, which on loopback would keep one socket (tune.c). */
static const char* const striped_env[] = {"CHORUS_SHM_DISABLE=1", "CHORUS_NSOCKS_PER_PEER=3", "CHORUS_TUNE=0",
                                          NULL};
static const size_t striped_counts[] = {262147, (1 << 20) + 3};

void mx_run_striped(chorus_coll_t coll, int nranks) {
  run_with_env(striped_env, coll, nranks, striped_counts, sizeof(striped_counts) / sizeof(striped_counts[0]),
               MX_ROTATE_ROOTS | MX_COVER_OPS | MX_SIZE_DTYPES | MX_AUTO_IF_SINGLE);
}

/* Emulated hosts: the small counts and two chunked ones (4 KiB chunks), roots rotating. */
static const char* const hosts_env[] = {"CHORUS_BUFF_SIZE=4096", NULL};
static const size_t hosts_counts[] = {0, 1, 7, 1023, 20011};

void mx_run_hosts(chorus_coll_t coll, int nranks, const int* host_of) {
  set_env_list(hosts_env, 0);
  ranks_set_hosts(nranks, host_of);
  mx_run_matrix(coll, nranks, hosts_counts, sizeof(hosts_counts) / sizeof(hosts_counts[0]), MX_ROTATE_ROOTS);
  ranks_set_hosts(0, NULL);
  set_env_list(hosts_env, 1);
}

void mx_run_hosts_tcp(chorus_coll_t coll, int nranks, const int* host_of) {
  set_env_list(tcp_env, 0);
  mx_run_hosts(coll, nranks, host_of);
  set_env_list(tcp_env, 1);
}

/* Variable-size collectives: count scales {0, 1, 7, 1023} (per-rank counts, vmatrix.c) with
 * 4 KiB chunks and the smallest shared-memory rings and slots, so that the large block of
 * scales 7 and up is pipelined in many chunks next to empty and short blocks. Each has one
 * algorithm: automatic selection only. */
static const size_t v_scales[] = {0, 1, 7, 1023};

void mx_run_v(chorus_coll_t coll, int nranks) {
  run_with_env(small_chunk_env, coll, nranks, v_scales, sizeof(v_scales) / sizeof(v_scales[0]), MX_AUTO_IF_SINGLE);
}

void mx_run_v_tcp(chorus_coll_t coll, int nranks) {
  set_env_list(tcp_env, 0);
  mx_run_v(coll, nranks);
  set_env_list(tcp_env, 1);
}

void mx_run_v_hosts(chorus_coll_t coll, int nranks, const int* host_of) {
  ranks_set_hosts(nranks, host_of);
  mx_run_v(coll, nranks);
  ranks_set_hosts(0, NULL);
}

void mx_run_small(chorus_coll_t coll, int nranks) {
  mx_run_matrix(coll, nranks, mx_small_counts, sizeof(mx_small_counts) / sizeof(mx_small_counts[0]),
                0);
}

void mx_run_big(chorus_coll_t coll, int nranks) {
  mx_run_matrix(coll, nranks, &mx_big_count, 1,
                MX_ROTATE_ROOTS | MX_COVER_OPS | MX_SIZE_DTYPES | MX_AUTO_IF_SINGLE);
}
