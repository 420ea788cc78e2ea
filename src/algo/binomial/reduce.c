/*
 * binomial/reduce.c - binomial-tree reduce, chunk-pipelined, rooted at the root member; the
 * registry entry runs it over the host-ordered ring, so subtrees stay inside hosts.
 *
 * Steps: the buffer is cut into C chunks of at most chunk_bytes. A leaf sends its sendbuf
 * chunks to its parent. An inner rank receives chunk c from every child into per-child scratch
 * slots; once all have arrived it reduces own + child 0 + child 1 + ... (always this order, so
 * the result does not depend on arrival times) into an accumulation slot and sends that up,
 * while later chunks are still arriving. The root reduces into recvbuf and, for avg, divides
 * each finished chunk by n. CHORUS_TREE_WINDOW chunks are in flight per edge.
 * Bytes per rank: N sent (non-root), N received per child (at most ceil(log2 n) children),
 * N = count * elem bytes; one reduction of count elements per child.
 *
 * Cost (alpha-beta, L = ceil(log2 n)): T = L * alpha + L * N / beta (the root receives N from
 * each of its L children over its one link); 0 for n = 1.
 */
#include <stdlib.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "algo/binomial/binomial.h"

struct chorus_treduce {
  chorus_sched_t s;
  chorus_tree_t tree;
  int is_root, nranks;
  chorus_dtype_t dtype;
  chorus_op_t op;
  chorus_reduce_fn reduce;
  const char* sendbuf;
  char* recvbuf; /* root only */
  size_t elem_bytes, count, chunk_elems, nchunks;
  size_t window, slot_bytes;
  char* recv_slots; /* nchildren x window chunks */
  char* acc_slots;  /* window chunks: partial results waiting to go up (inner non-root) */
  chorus_algo_xfer_t* recv_xfers; /* nchildren rings of window, chunk c at c % window */
  chorus_algo_xfer_t* send_xfers; /* window */
  size_t recvs_posted; /* chunks whose receives are posted from every child */
  size_t reduced;      /* chunks reduced, in order */
  size_t sends_posted, sends_done;
  int copy_pending; /* n == 1 */
};
typedef struct chorus_treduce treduce_t;

static size_t chunk_elems_at(const treduce_t* r, size_t chunk) {
  return chorus__min_sz(r->chunk_elems, r->count - chunk * r->chunk_elems);
}

static char* recv_slot(const treduce_t* r, int child, size_t chunk) {
  return r->recv_slots + ((size_t)child * r->window + chunk % r->window) * r->slot_bytes;
}

static chorus_algo_xfer_t* recv_xfer(const treduce_t* r, int child, size_t chunk) {
  return &r->recv_xfers[(size_t)child * r->window + chunk % r->window];
}

/* What goes up for chunk c: a leaf's own input, an inner rank's accumulation slot. */
static const char* up_data(const treduce_t* r, size_t chunk) {
  if (r->tree.nchildren == 0) return r->sendbuf + chunk * r->chunk_elems * r->elem_bytes;
  return r->acc_slots + (chunk % r->window) * r->slot_bytes;
}

static chorus_status_t post_recvs(chorus_task_t* t, treduce_t* r, int* moved) {
  while (r->tree.nchildren > 0 && r->recvs_posted < r->nchunks &&
         r->recvs_posted < r->reduced + r->window) {
    size_t c = r->recvs_posted, nbytes = chunk_elems_at(r, c) * r->elem_bytes;
    for (int j = 0; j < r->tree.nchildren; j++) {
      chorus_status_t st = chorus__sched_post(t, &r->s, recv_xfer(r, j, c), 0, r->tree.children[j],
                                             recv_slot(r, j, c), nbytes, (uint32_t)c);
      if (st < 0) return st;
    }
    r->recvs_posted++;
    *moved = 1;
  }
  return CHORUS_OK;
}

/* Chunk c is reducible once every child's piece is here and, off the root, its accumulation
 * slot is no longer being sent (chunk c - window has gone up). */
static int can_reduce(const treduce_t* r, size_t chunk) {
  if (chunk >= r->recvs_posted) return 0;
  if (!r->is_root && chunk >= r->sends_done + r->window) return 0;
  for (int j = 0; j < r->tree.nchildren; j++)
    if (!chorus__algo_done(recv_xfer(r, j, chunk))) return 0;
  return 1;
}

static void reduce_chunk(treduce_t* r, size_t chunk) {
  size_t elems = chunk_elems_at(r, chunk), first_byte = chunk * r->chunk_elems * r->elem_bytes;
  char* dst = r->is_root ? r->recvbuf + first_byte : (char*)up_data(r, chunk);
  r->reduce(dst, recv_slot(r, 0, chunk), r->sendbuf + first_byte, elems);
  for (int j = 1; j < r->tree.nchildren; j++) r->reduce(dst, dst, recv_slot(r, j, chunk), elems);
  if (r->is_root) chorus__sched_avg_finish(&r->s, dst, elems);
}

static int reduce_ready(treduce_t* r) {
  int moved = 0;
  while (r->tree.nchildren > 0 && can_reduce(r, r->reduced)) {
    reduce_chunk(r, r->reduced);
    r->reduced++;
    moved = 1;
  }
  return moved;
}

static chorus_status_t post_sends(chorus_task_t* t, treduce_t* r, int* moved) {
  size_t ready = r->tree.nchildren == 0 ? r->nchunks : r->reduced;
  while (!r->is_root && r->sends_posted < ready && r->sends_posted < r->sends_done + r->window) {
    size_t c = r->sends_posted;
    chorus_status_t st = chorus__sched_post(t, &r->s, &r->send_xfers[c % r->window], 1, r->tree.parent,
                                           up_data(r, c), chunk_elems_at(r, c) * r->elem_bytes,
                                           (uint32_t)c);
    if (st < 0) return st;
    r->sends_posted++;
    *moved = 1;
  }
  return CHORUS_OK;
}

static int reap_sends(treduce_t* r) {
  int moved = 0;
  while (r->sends_done < r->sends_posted &&
         chorus__algo_done(&r->send_xfers[r->sends_done % r->window])) {
    r->sends_done++;
    moved = 1;
  }
  return moved;
}

static int finished(const treduce_t* r) {
  if (r->copy_pending) return 0;
  if (r->is_root) return r->tree.nchildren == 0 || r->reduced == r->nchunks;
  return r->sends_done == r->nchunks;
}

chorus_status_t chorus__binomial_reduce_step(chorus_task_t* t, treduce_t* r) {
  if (r->copy_pending) { /* n == 1: the result is the input */
    chorus__algo_copy(r->recvbuf, r->sendbuf, r->count * r->elem_bytes);
    chorus__sched_avg_finish(&r->s, r->recvbuf, r->count);
    r->copy_pending = 0;
  }
  int moved;
  do {
    moved = 0;
    chorus_status_t st = post_recvs(t, r, &moved);
    if (st == CHORUS_OK) st = post_sends(t, r, &moved);
    if (st < 0) return st;
    moved |= reap_sends(r);
    moved |= reduce_ready(r);
  } while (moved);
  return finished(r) ? CHORUS_OK : CHORUS_INPROGRESS;
}

static chorus_status_t alloc_buffers(treduce_t* r) {
  size_t nchild = (size_t)r->tree.nchildren;
  r->recv_xfers = calloc((nchild + 1) * r->window, sizeof(*r->recv_xfers));
  if (!r->recv_xfers) return CHORUS_ERR_NO_MEMORY;
  r->send_xfers = r->recv_xfers + nchild * r->window;
  if (nchild == 0 || r->nchunks == 0) return CHORUS_OK;
  size_t nslots = (nchild + (r->is_root ? 0 : 1)) * r->window;
  r->recv_slots = chorus__sched_scratch(&r->s, nslots * r->slot_bytes);
  if (!r->recv_slots) return CHORUS_ERR_NO_MEMORY;
  r->acc_slots = r->is_root ? NULL : r->recv_slots + nchild * r->window * r->slot_bytes;
  return CHORUS_OK;
}

size_t chorus__tree_reduce_chunks_done(const treduce_t* r) { return r->is_root ? r->reduced : r->sends_done; }

void chorus__binomial_reduce_free(treduce_t* r) {
  if (r) {
    chorus__sched_scratch_free(&r->s, r->recv_slots);
    free(r->recv_xfers);
  }
  free(r);
}

chorus_status_t chorus__binomial_reduce_start(const chorus_sched_t* s, treduce_t** out) {
  chorus_tree_t tree;
  chorus__binomial_init(&tree, s->group.me, s->group.size, s->root);
  return chorus__tree_reduce_start(s, &tree, out);
}

chorus_status_t chorus__tree_reduce_start(const chorus_sched_t* s, const chorus_tree_t* tree, treduce_t** out) {
  *out = NULL;
  chorus_reduce_fn fn = chorus__algo_reduce_fn(s->dtype, s->op);
  if (!fn) return CHORUS_ERR_NOT_SUPPORTED;
  treduce_t* r = calloc(1, sizeof(*r));
  if (!r) return CHORUS_ERR_NO_MEMORY;
  r->s = *s;
  r->tree = *tree;
  r->is_root = s->group.me == s->root;
  r->nranks = s->group.size;
  r->dtype = s->dtype;
  r->op = s->op;
  r->reduce = fn;
  r->sendbuf = s->sendbuf;
  r->recvbuf = s->recvbuf;
  r->elem_bytes = s->elem_bytes;
  r->count = s->count;
  r->chunk_elems = chorus__sched_chunk_elems(s);
  r->nchunks = chorus__div_up(r->count, r->chunk_elems);
  r->window = CHORUS_TREE_WINDOW;
  r->slot_bytes = chorus__min_sz(r->chunk_elems, r->count) * r->elem_bytes;
  r->copy_pending = r->nranks == 1;
  chorus_status_t st = alloc_buffers(r);
  if (st < 0) {
    chorus__binomial_reduce_free(r);
    return st;
  }
  *out = r;
  return CHORUS_OK;
}

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t binomial_reduce_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  treduce_t* r = NULL;
  chorus_status_t st = chorus__binomial_reduce_start(&s, &r);
  t->state = r;
  return st;
}

static chorus_status_t binomial_reduce_progress(chorus_task_t* t) {
  treduce_t* r = t->state;
  chorus_status_t st = chorus__binomial_reduce_step(t, r);
  t->step = chorus__tree_reduce_chunks_done(r);
  return st;
}

static void binomial_reduce_fini(chorus_task_t* t) {
  chorus__binomial_reduce_free(t->state);
  t->state = NULL;
}

static double binomial_reduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  return chorus__binomial_cost_us(t, cx);
}

const chorus_algo_t chorus__algo_binomial_reduce = {
    .name = "binomial",
    .desc = "chunk-pipelined binomial tree towards the root, ceil(log2 n) levels",
    .coll = CH_COLL_REDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = binomial_reduce_cost_us,
    .init = binomial_reduce_init,
    .progress = binomial_reduce_progress,
    .fini = binomial_reduce_fini,
};
