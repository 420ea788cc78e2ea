/*
 * ring.c - the engine behind ring allreduce, reduce_scatter and allgather: one chunk-pipelined
 * schedule around the ring r -> r+1, of which the standalone collectives run one half.
 * The data is n segments, each cut into K chunks of at most chunk_bytes; a unit u = s*K + c is
 * chunk c of step s. Sends and receives are both posted in increasing u with tag u, so the
 * k-th message of a pair is the same unit on both ends. Zero-byte units are skipped by both.
 * The ring is a group (chorus_sched_t): r, n, next and prev are member indexes, mapped to
 * communicator ranks only when posting; the registry's entries run it over the host-ordered
 * ring, so that only H of the n links cross hosts whatever the rank numbering.
 * Variable-size blocks (allgatherv, reduce_scatterv: s->counts) take the same schedule with K
 * = the chunks of the largest block; a smaller block's later chunks are empty and skipped, but
 * chunk 0 of every step travels even when empty, so every receive of a step checks the frame's
 * counts hash: ranks that disagree on a count fail at their first step (ERR_MISMATCH).
 */
#include "algo/ring/ring.h"

#include <stdlib.h>
#include <string.h>

#include "algo/common.h"

/*
 * At step s rank r sends segment (r - s + shift) mod n to r+1 and receives segment
 * (r - s - 1 + shift) mod n from r-1. shift = 0 for allreduce (rank r ends the reduce-scatter
 * half owning segment r+1, which its allgather half sends first) and allgather; shift = -1 for
 * reduce_scatter, so that rank r ends owning block r.
 *
 * Steps s < rs_steps reduce: the receive lands in one of `nslots` scratch slots (slot u mod
 * nslots) and is reduced with this rank's own input chunk. Allreduce writes the result straight
 * into recvbuf and forwards from there (no sendbuf->recvbuf copy). Reduce_scatter has no user
 * buffer for partial sums, so it reduces in the slot and forwards from it: such a slot stays
 * busy until that forwarding send is done, K units later, hence K extra slots. The last reduce
 * step writes the final chunk (divided by n for avg before it travels on, so that every rank
 * ends with the same bits). Later steps receive straight into recvbuf.
 *
 * Dependencies, checked with in-order cursors (recvs_done, sends_done):
 *   send (s,c), s >= 1      after receive (s-1,c) is done and reduced;
 *   reduce receive u        after the slot's previous unit u-nslots is free;
 *   allreduce allgather receive (n-1+k, c), which overwrites the segment that send (k,c)
 *                           read, after send (k,c) is done (causally already true; cheap);
 *   at most nrecv_xfers receives and nsend_xfers sends in flight.
 * Every wait points at a smaller unit index on some rank, so the schedule cannot deadlock even
 * when a send completes only once its receive is posted.
 */

struct chorus_ring {
  chorus_sched_t s;
  chorus_ring_kind_t kind;
  int nranks, rank, next, prev; /* member indexes */
  size_t elem_bytes;
  chorus_dtype_t dtype;
  chorus_op_t op;
  chorus_reduce_fn reduce;
  const char* sendbuf;
  char* recvbuf;

  size_t seg_base_elems; /* segment i holds seg_base_elems + (i < seg_rem) elements */
  size_t seg_rem;
  int seg_shift;
  size_t max_seg_elems;
  size_t chunk_elems;
  size_t nchunks;  /* K: chunks per segment */
  int frame_every_step; /* variable-size blocks: chunk 0 of a step is posted even when empty */
  size_t rs_steps; /* the first rs_steps steps receive-and-reduce */
  size_t nunits;   /* steps * K */
  size_t first_unit; /* the allgather half of allreduce starts at its first unit */

  char* slots; /* nslots scratch chunks for reduce receives */
  size_t nslots, slot_bytes;
  int hold_for_forward; /* reduce_scatter: a slot is free only once forwarded */

  chorus_algo_xfer_t* recv_xfers; /* ring of nrecv_xfers, unit u at u % nrecv_xfers */
  chorus_algo_xfer_t* send_xfers; /* ring of nsend_xfers */
  size_t nrecv_xfers, nsend_xfers;
  size_t recvs_posted, recvs_done; /* recvs_done: units received and reduced, in order */
  size_t sends_posted, sends_done;

  int copy_pending; /* nranks == 1, or allgather's own block */
  char* copy_dst;
  const char* copy_src;
  size_t copy_bytes;
};
typedef struct chorus_ring ring_t;

/* ---- geometry ---- */

static int step_seg(const ring_t* g, size_t step, int offset) {
  int n = g->nranks;
  return chorus__mod(g->rank + g->seg_shift + offset - (int)(step % (size_t)n), n);
}
static int send_seg(const ring_t* g, size_t step) { return step_seg(g, step, 0); }
static int recv_seg(const ring_t* g, size_t step) { return step_seg(g, step, -1); }

/* Segment seg is block block_of[seg] of a block-layout buffer (reduce_scatter, allgather;
 * equal blocks); allreduce's segments are its own, in member order. */
static size_t seg_first_elem(const ring_t* g, int seg) {
  size_t i = (size_t)chorus__sched_block(&g->s, seg);
  if (g->s.counts) return g->s.displs[i];
  return i * g->seg_base_elems + chorus__min_sz(i, g->seg_rem);
}

static size_t seg_elems(const ring_t* g, int seg) {
  if (g->s.counts) return g->s.counts[chorus__sched_block(&g->s, seg)];
  return g->seg_base_elems + ((size_t)seg < g->seg_rem ? 1 : 0);
}

static size_t unit_elems(const ring_t* g, int seg, size_t chunk) {
  size_t total = seg_elems(g, seg), first = chunk * g->chunk_elems;
  return first >= total ? 0 : chorus__min_sz(g->chunk_elems, total - first);
}

/* Chunk `chunk` of segment `seg` of a buffer laid out as the n segments. */
static char* seg_chunk(const ring_t* g, const char* base, int seg, size_t chunk) {
  return (char*)base + (seg_first_elem(g, seg) + chunk * g->chunk_elems) * g->elem_bytes;
}

/* Chunk `chunk` of a buffer that holds one segment only (allgather input, reduce_scatter
 * output). */
static char* block_chunk(const ring_t* g, const char* base, size_t chunk) {
  return (char*)base + chunk * g->chunk_elems * g->elem_bytes;
}

static char* slot_of(const ring_t* g, size_t unit) {
  return g->slots + (unit % g->nslots) * g->slot_bytes;
}

/* ---- where each unit's bytes come from and go to ---- */

static const char* send_src(const ring_t* g, size_t unit) {
  size_t step = unit / g->nchunks, chunk = unit % g->nchunks;
  if (step == 0 && g->kind == CHORUS_RING_ALLGATHER) return block_chunk(g, g->sendbuf, chunk);
  if (step == 0) return seg_chunk(g, g->sendbuf, send_seg(g, 0), chunk);
  if (g->kind == CHORUS_RING_REDUCE_SCATTER) return slot_of(g, unit - g->nchunks);
  return seg_chunk(g, g->recvbuf, send_seg(g, step), chunk);
}

static char* recv_dst(const ring_t* g, size_t unit) {
  size_t step = unit / g->nchunks;
  if (step < g->rs_steps) return slot_of(g, unit);
  return seg_chunk(g, g->recvbuf, recv_seg(g, step), unit % g->nchunks);
}

/* Combines a received reduce-step chunk with this rank's own input chunk. */
static void reduce_unit(const ring_t* g, size_t unit) {
  size_t step = unit / g->nchunks, chunk = unit % g->nchunks;
  if (step >= g->rs_steps) return; /* allgather receives land in place */
  int seg = recv_seg(g, step);
  size_t elems = unit_elems(g, seg, chunk);
  if (elems == 0) return;
  int last = step + 1 == g->rs_steps;
  char* scratch = slot_of(g, unit);
  const char* mine = seg_chunk(g, g->sendbuf, seg, chunk);
  char* dst = scratch;
  if (g->kind == CHORUS_RING_ALLREDUCE) dst = seg_chunk(g, g->recvbuf, seg, chunk);
  else if (last) dst = block_chunk(g, g->recvbuf, chunk);
  g->reduce(dst, scratch, mine, elems);
  if (last) chorus__sched_avg_finish(&g->s, dst, elems);
}

/* ---- dependencies ---- */

static int slot_free(const ring_t* g, size_t unit) {
  if (g->recvs_done <= unit) return 0;
  if (!g->hold_for_forward || unit / g->nchunks + 1 >= g->rs_steps) return 1;
  return g->sends_done > unit + g->nchunks;
}

static int can_post_recv(const ring_t* g, size_t unit) {
  if (unit >= g->nunits || unit >= g->recvs_done + g->nrecv_xfers) return 0;
  size_t step = unit / g->nchunks;
  if (step < g->rs_steps) return unit < g->nslots || slot_free(g, unit - g->nslots);
  if (g->kind == CHORUS_RING_ALLREDUCE) {
    size_t overwritten_send = unit - (size_t)(g->nranks - 1) * g->nchunks;
    return g->sends_done > overwritten_send;
  }
  return 1;
}

static int can_post_send(const ring_t* g, size_t unit) {
  if (unit >= g->nunits || unit >= g->sends_done + g->nsend_xfers) return 0;
  return unit < g->nchunks || g->recvs_done > unit - g->nchunks;
}

/* ---- posting and reaping ---- */

static chorus_status_t post_unit(chorus_task_t* t, ring_t* g, chorus_algo_xfer_t* ax, int is_send, const char* buf,
                                 size_t nbytes, size_t unit) {
  int peer = is_send ? g->next : g->prev;
  if (g->frame_every_step && unit % g->nchunks == 0)
    return chorus__sched_post_frame(t, &g->s, ax, is_send, peer, buf, nbytes, (uint32_t)unit);
  return chorus__sched_post(t, &g->s, ax, is_send, peer, buf, nbytes, (uint32_t)unit);
}

static chorus_status_t post_recvs(chorus_task_t* t, ring_t* g, int* moved) {
  while (can_post_recv(g, g->recvs_posted)) {
    size_t unit = g->recvs_posted;
    size_t nbytes =
        unit_elems(g, recv_seg(g, unit / g->nchunks), unit % g->nchunks) * g->elem_bytes;
    chorus_algo_xfer_t* ax = &g->recv_xfers[unit % g->nrecv_xfers];
    chorus_status_t st = post_unit(t, g, ax, 0, recv_dst(g, unit), nbytes, unit);
    if (st < 0) return st;
    g->recvs_posted++;
    *moved = 1;
  }
  return CHORUS_OK;
}

static chorus_status_t post_sends(chorus_task_t* t, ring_t* g, int* moved) {
  while (can_post_send(g, g->sends_posted)) {
    size_t unit = g->sends_posted;
    size_t nbytes =
        unit_elems(g, send_seg(g, unit / g->nchunks), unit % g->nchunks) * g->elem_bytes;
    chorus_algo_xfer_t* ax = &g->send_xfers[unit % g->nsend_xfers];
    chorus_status_t st = post_unit(t, g, ax, 1, send_src(g, unit), nbytes, unit);
    if (st < 0) return st;
    g->sends_posted++;
    *moved = 1;
  }
  return CHORUS_OK;
}

static int reap_sends(ring_t* g) {
  int moved = 0;
  while (g->sends_done < g->sends_posted &&
         chorus__algo_done(&g->send_xfers[g->sends_done % g->nsend_xfers])) {
    g->sends_done++;
    moved = 1;
  }
  return moved;
}

/* One receive at a time, so that its forwarding send is posted before the next reduction. */
static int reap_one_recv(ring_t* g) {
  if (g->recvs_done == g->recvs_posted ||
      !chorus__algo_done(&g->recv_xfers[g->recvs_done % g->nrecv_xfers]))
    return 0;
  reduce_unit(g, g->recvs_done);
  g->recvs_done++;
  return 1;
}

chorus_status_t chorus__ring_step(chorus_task_t* t, ring_t* g) {
  int moved;
  do {
    moved = 0;
    chorus_status_t st = post_recvs(t, g, &moved);
    if (st == CHORUS_OK) st = post_sends(t, g, &moved);
    if (st < 0) return st;
    if (g->copy_pending) { /* after the first posts, so the copy overlaps the transfers */
      chorus__algo_copy(g->copy_dst, g->copy_src, g->copy_bytes);
      /* A one-member group's result is its input, divided when it is the whole avg. */
      if (g->nranks == 1 && g->kind != CHORUS_RING_ALLGATHER)
        chorus__sched_avg_finish(&g->s, g->copy_dst, g->copy_bytes / g->elem_bytes);
      g->copy_pending = 0;
      moved = 1;
    }
    moved |= reap_sends(g);
    moved |= reap_one_recv(g);
  } while (moved);
  if (g->recvs_done == g->nunits && g->sends_done == g->nunits) return CHORUS_OK;
  return CHORUS_INPROGRESS;
}

/* ---- set-up ---- */

static void set_geometry(ring_t* g) {
  size_t n = (size_t)g->nranks, count = g->s.count;
  size_t nsteps = n - 1;
  if (g->kind == CHORUS_RING_ALLREDUCE) {
    g->seg_base_elems = count / n;
    g->seg_rem = count % n;
    g->rs_steps = n - 1;
    nsteps = 2 * (n - 1);
  } else {
    g->seg_base_elems = count;
    g->rs_steps = g->kind == CHORUS_RING_REDUCE_SCATTER ? n - 1 : 0;
  }
  g->seg_shift = g->kind == CHORUS_RING_REDUCE_SCATTER ? -1 : 0;
  g->chunk_elems = chorus__sched_chunk_elems(&g->s);
  g->max_seg_elems = g->seg_base_elems + (g->seg_rem ? 1 : 0);
  if (g->s.counts) {
    g->max_seg_elems = 0;
    for (int i = 0; i < g->nranks; i++)
      if (seg_elems(g, i) > g->max_seg_elems) g->max_seg_elems = seg_elems(g, i);
  }
  g->nchunks = chorus__div_up(g->max_seg_elems, g->chunk_elems);
  g->frame_every_step = g->s.counts != NULL;
  if (g->frame_every_step && g->nchunks == 0) g->nchunks = 1; /* all blocks empty: one frame per step */
  g->nunits = nsteps * g->nchunks;
}

/* An allreduce half runs a range of the whole allreduce's units: every unit before its first
 * counts as done, which satisfies the dependencies the second half has on the first. */
static void set_half(ring_t* g, chorus_ring_kind_t half) {
  if (half == CHORUS_RING_ALLREDUCE_RS) {
    g->nunits = g->rs_steps * g->nchunks;
  } else if (half == CHORUS_RING_ALLREDUCE_AG) {
    g->first_unit = g->rs_steps * g->nchunks;
    g->recvs_posted = g->recvs_done = g->sends_posted = g->sends_done = g->first_unit;
  }
}

static void set_local_copy(ring_t* g) {
  /* The own block (allgather), the one block (reduce_scatter of one member), the vector. */
  int own = g->kind == CHORUS_RING_ALLGATHER ? g->rank : 0;
  size_t elems = g->kind == CHORUS_RING_ALLREDUCE ? g->s.count : seg_elems(g, own);
  size_t bytes = elems * g->elem_bytes;
  if (g->kind == CHORUS_RING_ALLGATHER) {
    g->copy_pending = 1;
    g->copy_dst = g->recvbuf + seg_first_elem(g, g->rank) * g->elem_bytes;
  } else if (g->nranks == 1) {
    g->copy_pending = 1;
    g->copy_dst = g->recvbuf;
  }
  g->copy_src = g->sendbuf;
  g->copy_bytes = bytes;
}

static chorus_status_t alloc_buffers(ring_t* g) {
  size_t window = CHORUS_RING_WINDOW, sends = CHORUS_RING_SENDS;
  g->nrecv_xfers = chorus__min_sz(window, g->nunits ? g->nunits : 1);
  g->nsend_xfers = chorus__min_sz(sends, g->nunits ? g->nunits : 1);
  g->recv_xfers = calloc(g->nrecv_xfers + g->nsend_xfers, sizeof(*g->recv_xfers));
  if (!g->recv_xfers) return CHORUS_ERR_NO_MEMORY;
  g->send_xfers = g->recv_xfers + g->nrecv_xfers;
  size_t rs_units = g->first_unit ? 0 : g->rs_steps * g->nchunks;
  if (rs_units == 0) return CHORUS_OK;
  g->hold_for_forward = g->kind == CHORUS_RING_REDUCE_SCATTER && g->rs_steps > 1;
  g->nslots = chorus__min_sz(window + (g->hold_for_forward ? g->nchunks : 0), rs_units);
  g->slot_bytes = chorus__min_sz(g->chunk_elems, g->max_seg_elems) * g->elem_bytes;
  g->slots = chorus__sched_scratch(&g->s, g->nslots * g->slot_bytes);
  if (!g->slots) return CHORUS_ERR_NO_MEMORY;
  return CHORUS_OK;
}

static void ring_free(ring_t* g) {
  if (!g) return;
  chorus__sched_scratch_free(&g->s, g->slots);
  free(g->recv_xfers);
  free(g);
}

chorus_status_t chorus__ring_start(const chorus_sched_t* s, chorus_ring_kind_t kind, ring_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  ring_t* g = calloc(1, sizeof(*g));
  if (!g) return CHORUS_ERR_NO_MEMORY;
  g->s = *s;
  g->kind = kind == CHORUS_RING_ALLREDUCE_RS || kind == CHORUS_RING_ALLREDUCE_AG ? CHORUS_RING_ALLREDUCE : kind;
  g->nranks = s->group.size;
  g->rank = s->group.me;
  g->next = (g->rank + 1) % g->nranks;
  g->prev = (g->rank + g->nranks - 1) % g->nranks;
  g->elem_bytes = s->elem_bytes;
  g->dtype = s->dtype;
  g->op = s->op;
  g->sendbuf = s->sendbuf;
  g->recvbuf = s->recvbuf;
  if (g->kind != CHORUS_RING_ALLGATHER) {
    g->reduce = chorus__algo_reduce_fn(g->dtype, g->op);
    if (!g->reduce) {
      free(g);
      return CHORUS_ERR_NOT_SUPPORTED;
    }
  }
  set_geometry(g);
  set_half(g, kind);
  if (kind == CHORUS_RING_ALLREDUCE_AG) { /* spreads finished values: nothing to copy or divide */
    g->sendbuf = g->recvbuf;
    g->s.avg_divisor = 0;
  }
  set_local_copy(g);
  chorus_status_t st = alloc_buffers(g);
  if (st < 0) {
    ring_free(g);
    return st;
  }
  *out = g;
  return CHORUS_OK;
}

size_t chorus__ring_units_done(const ring_t* g) { return g->recvs_done; }

void chorus__ring_free(ring_t* g) { ring_free(g); }

/* ---- the registry's adapters: the whole communicator on its host-ordered ring ---- */

chorus_status_t chorus__ring_init(chorus_task_t* t, chorus_ring_kind_t kind) {
  return chorus__ring_init_over(t, kind, chorus__topo_ring(t->topo, t->rank));
}

chorus_status_t chorus__ring_init_over(chorus_task_t* t, chorus_ring_kind_t kind, chorus_group_t ring) {
  chorus_sched_t s;
  chorus__sched_of_task(t, ring, &s);
  /* Block collectives keep their layout: the member at ring position i owns its rank's block. */
  if (kind != CHORUS_RING_ALLREDUCE) s.block_of = s.group.ranks;
  if (chorus__coll_is_v(t->args.coll)) { /* rank i's block: recvcounts[i] elements at rdispls[i] */
    s.counts = t->args.recvcounts;
    s.displs = t->args.rdispls;
  }
  ring_t* g = NULL;
  chorus_status_t st = chorus__ring_start(&s, kind, &g);
  t->state = g;
  return st;
}

chorus_status_t chorus__ring_progress(chorus_task_t* t) {
  chorus_status_t st = chorus__ring_step(t, t->state);
  t->step = chorus__ring_units_done(t->state);
  return st;
}

void chorus__ring_fini(chorus_task_t* t) {
  ring_free(t->state);
  t->state = NULL;
}
