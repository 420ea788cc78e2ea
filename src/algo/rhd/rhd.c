/*
 * rhd.c - the recursive halving-doubling engine behind rhd allreduce and reduce_scatter.
 *
 * Members: p = 2^k <= n < 2p, r = n - p. Fold: member 2i (i < r) sends its vector to 2i+1,
 * which reduces it (own + received) and acts as new rank i; member j >= 2r is new rank j - r.
 * New rank q stands for the members mfirst(q) .. mfirst(q+1)-1 (mfirst(q) = 2q for q < r, else
 * q + r): p segments, each the blocks of those members, so every range of segments is a
 * contiguous range of the work buffer, which is laid out in member order.
 *
 * Halving round i = 1..k (mask m = p >> i): exchange with new rank q ^ m; keep the half of the
 * current range on q's side of the mask, send the other half, reduce the received half into the
 * work buffer (own + received). After k rounds new rank q owns segment q fully reduced (divided
 * for avg there, before it travels). Allreduce then runs k doubling rounds (mask 1, 2, ..):
 * exchange the owned aligned range of m segments with q ^ m, received straight into place.
 * Unfold: allreduce: 2i+1 sends the whole result to 2i; reduce_scatter: it sends block 2i.
 *
 * Large messages are cut into passes (columns) so scratch stays bounded: allreduce runs the
 * whole schedule on consecutive pieces of n * chunk elements of recvbuf (the work buffer);
 * reduce_scatter on column q (elements q*c .. q*c+c-1, c = chunk elements) of every block,
 * copied into a member-ordered work buffer of n * c elements, member me's block copied out to
 * recvbuf at the end of the pass. Scratch: one receive slot of a whole piece (the fold receives
 * the whole piece), plus the work buffer for reduce_scatter. Each round is one send and one
 * receive per member, tag = pass * 64 + round; both sides compute every size, so empty
 * transfers are skipped on both.
 */
#include "algo/rhd/rhd.h"

#include <stdlib.h>
#include <string.h>

#include "algo/common.h"

#define RHD_TAG_ROUNDS 64u

typedef struct {
  int send_to, recv_from; /* member indexes, -1: none */
  const char* send_buf;
  size_t send_bytes;
  char* recv_buf;
  size_t recv_bytes;
  char* reduce_dst; /* NULL: the receive lands in place */
  size_t reduce_elems;
} round_t;

struct chorus_rhd {
  chorus_sched_t s;
  chorus_rhd_kind_t kind;
  int n, me, p, k, r, q; /* q: new rank, -1 for a folded (even) member of the first 2r */
  size_t eb;
  chorus_reduce_fn reduce;
  size_t piece_elems; /* allreduce: elements per pass; reduce_scatter: column width */
  size_t npasses, pass;
  int nrounds, round, posted, copied;
  size_t cur_elems; /* this pass: allreduce piece length, reduce_scatter column width */
  char* work;       /* this pass's work buffer */
  char* ws;         /* reduce_scatter work buffer, n * piece_elems */
  char* slot;       /* receive scratch, one piece */
  round_t cur;
  chorus_algo_xfer_t sx, rx;
};
typedef struct chorus_rhd rhd_t;

static int block_of(const rhd_t* h, int i) { return h->s.block_of ? h->s.block_of[i] : i; }
static int mfirst(const rhd_t* h, int q) { return q < h->r ? 2 * q : q + h->r; }
static int member_of(const rhd_t* h, int q) { return q < h->r ? 2 * q + 1 : q + h->r; }

/* First element of member i's block in this pass's work buffer (i = n: the end). */
static size_t blk_off(const rhd_t* h, int i) {
  size_t L = h->cur_elems, n = (size_t)h->n;
  if (h->kind == CHORUS_RHD_REDUCE_SCATTER) return (size_t)i * L;
  return (size_t)i * (L / n) + chorus__min_sz((size_t)i, L % n);
}
static size_t seg_off(const rhd_t* h, int q) { return blk_off(h, mfirst(h, q)); }
static char* at(const rhd_t* h, size_t elem) { return h->work + elem * h->eb; }

static void pass_begin(rhd_t* h) {
  size_t first = h->pass * h->piece_elems;
  h->cur_elems = chorus__min_sz(h->piece_elems, h->s.count - first);
  if (h->kind == CHORUS_RHD_ALLREDUCE) {
    h->work = (char*)h->s.recvbuf + first * h->eb;
    return;
  }
  h->work = h->ws;
  for (int i = 0; i < h->n; i++)
    memcpy(at(h, blk_off(h, i)),
           (const char*)h->s.sendbuf + ((size_t)block_of(h, i) * h->s.count + first) * h->eb,
           h->cur_elems * h->eb);
}

static void pass_end(rhd_t* h) {
  if (h->kind != CHORUS_RHD_REDUCE_SCATTER) return;
  chorus__algo_copy((char*)h->s.recvbuf + h->pass * h->piece_elems * h->eb, at(h, blk_off(h, h->me)),
                    h->cur_elems * h->eb);
}

/* Sends segments [a, b) to new rank q's member; receives segments [c, d) from it. */
static void exchange(rhd_t* h, round_t* rd, int peer_q, int a, int b, int c, int d, int reduce) {
  rd->send_to = rd->recv_from = member_of(h, peer_q);
  rd->send_buf = at(h, seg_off(h, a));
  rd->send_bytes = (seg_off(h, b) - seg_off(h, a)) * h->eb;
  size_t elems = seg_off(h, d) - seg_off(h, c);
  rd->recv_bytes = elems * h->eb;
  if (reduce) {
    rd->recv_buf = h->slot;
    rd->reduce_dst = at(h, seg_off(h, c));
    rd->reduce_elems = elems;
  } else {
    rd->recv_buf = at(h, seg_off(h, c));
  }
}

static void round_setup(rhd_t* h, int ri, round_t* rd) {
  memset(rd, 0, sizeof(*rd));
  rd->send_to = rd->recv_from = -1;
  size_t total = blk_off(h, h->n);
  if (ri == 0) { /* fold */
    if (h->me >= 2 * h->r) return;
    if (h->me % 2 == 0) {
      rd->send_to = h->me + 1;
      rd->send_buf = h->work;
      rd->send_bytes = total * h->eb;
    } else {
      rd->recv_from = h->me - 1;
      rd->recv_buf = h->slot;
      rd->recv_bytes = total * h->eb;
      rd->reduce_dst = h->work;
      rd->reduce_elems = total;
    }
    return;
  }
  if (ri == h->nrounds - 1) { /* unfold */
    if (h->me >= 2 * h->r) return;
    int all = h->kind == CHORUS_RHD_ALLREDUCE;
    int even = h->me - (h->me % 2);
    size_t lo = all ? 0 : blk_off(h, even), hi = all ? total : blk_off(h, even + 1);
    if (h->me % 2) {
      rd->send_to = h->me - 1;
      rd->send_buf = at(h, lo);
      rd->send_bytes = (hi - lo) * h->eb;
    } else {
      rd->recv_from = h->me + 1;
      rd->recv_buf = at(h, lo);
      rd->recv_bytes = (hi - lo) * h->eb;
    }
    return;
  }
  if (h->q < 0) return;
  if (ri <= h->k) { /* halving */
    int m = h->p >> ri, lo = h->q & ~(2 * m - 1);
    if (h->q & m) exchange(h, rd, h->q ^ m, lo, lo + m, lo + m, lo + 2 * m, 1);
    else exchange(h, rd, h->q ^ m, lo + m, lo + 2 * m, lo, lo + m, 1);
    return;
  }
  int m = 1 << (ri - h->k - 1); /* doubling */
  int mine = h->q & ~(m - 1), theirs = (h->q ^ m) & ~(m - 1);
  exchange(h, rd, h->q ^ m, mine, mine + m, theirs, theirs + m, 0);
}

chorus_status_t chorus__rhd_step(chorus_task_t* t, rhd_t* h) {
  if (!h->copied) {
    if (h->kind == CHORUS_RHD_ALLREDUCE)
      chorus__algo_copy(h->s.recvbuf, h->s.sendbuf, h->s.count * h->eb);
    h->copied = 1;
  }
  while (h->pass < h->npasses) {
    if (!h->posted) {
      if (h->round == 0) pass_begin(h);
      if (h->round == h->k + 1 && h->q >= 0) /* segment q is final: divide before it travels */
        chorus__sched_avg_finish(&h->s, at(h, seg_off(h, h->q)), seg_off(h, h->q + 1) - seg_off(h, h->q));
      round_setup(h, h->round, &h->cur);
      uint32_t tag = (uint32_t)(h->pass * RHD_TAG_ROUNDS + (size_t)h->round);
      memset(&h->rx, 0, sizeof(h->rx));
      memset(&h->sx, 0, sizeof(h->sx));
      h->rx.skipped = h->sx.skipped = 1;
      chorus_status_t st = CHORUS_OK;
      if (h->cur.recv_from >= 0)
        st = chorus__sched_post(t, &h->s, &h->rx, 0, h->cur.recv_from, h->cur.recv_buf, h->cur.recv_bytes, tag);
      if (st == CHORUS_OK && h->cur.send_to >= 0)
        st = chorus__sched_post(t, &h->s, &h->sx, 1, h->cur.send_to, h->cur.send_buf, h->cur.send_bytes, tag);
      if (st < 0) return st;
      h->posted = 1;
    }
    if (!chorus__algo_done(&h->rx) || !chorus__algo_done(&h->sx)) return CHORUS_INPROGRESS;
    if (h->cur.reduce_dst && h->cur.reduce_elems)
      h->reduce(h->cur.reduce_dst, h->cur.reduce_dst, h->slot, h->cur.reduce_elems);
    h->posted = 0;
    if (++h->round == h->nrounds) {
      pass_end(h);
      h->round = 0;
      h->pass++;
    }
  }
  return CHORUS_OK;
}

chorus_status_t chorus__rhd_start(const chorus_sched_t* s, chorus_rhd_kind_t kind, rhd_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  chorus_reduce_fn fn = chorus__algo_reduce_fn(s->dtype, s->op);
  if (!fn) return CHORUS_ERR_NOT_SUPPORTED;
  rhd_t* h = calloc(1, sizeof(*h));
  if (!h) return CHORUS_ERR_NO_MEMORY;
  h->s = *s;
  h->kind = kind;
  h->reduce = fn;
  h->n = s->group.size;
  h->me = s->group.me;
  h->eb = s->elem_bytes;
  h->p = 1;
  while (2 * h->p <= h->n) {
    h->p *= 2;
    h->k++;
  }
  h->r = h->n - h->p;
  h->q = h->me < 2 * h->r ? (h->me % 2 ? h->me / 2 : -1) : h->me - h->r;
  h->nrounds = 2 + h->k + (kind == CHORUS_RHD_ALLREDUCE ? h->k : 0);
  size_t c = chorus__sched_chunk_elems(s);
  h->piece_elems = kind == CHORUS_RHD_ALLREDUCE ? c * (size_t)h->n : c;
  h->npasses = chorus__div_up(s->count, h->piece_elems);
  if (h->npasses) {
    size_t width = chorus__min_sz(h->piece_elems, s->count);
    size_t piece = kind == CHORUS_RHD_ALLREDUCE ? width : width * (size_t)h->n;
    h->slot = chorus__sched_scratch(s, piece * h->eb * (kind == CHORUS_RHD_ALLREDUCE ? 1 : 2));
    if (!h->slot) {
      free(h);
      return CHORUS_ERR_NO_MEMORY;
    }
    if (kind == CHORUS_RHD_REDUCE_SCATTER) h->ws = h->slot + piece * h->eb;
  }
  *out = h;
  return CHORUS_OK;
}

void chorus__rhd_free(rhd_t* h) {
  if (h) chorus__sched_scratch_free(&h->s, h->slot);
  free(h);
}

/* ---- the registry's adapters: the whole communicator on its host-ordered ring ---- */

chorus_status_t chorus__rhd_init(chorus_task_t* t, chorus_rhd_kind_t kind) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  if (kind == CHORUS_RHD_REDUCE_SCATTER) s.block_of = s.group.ranks;
  rhd_t* h = NULL;
  chorus_status_t st = chorus__rhd_start(&s, kind, &h);
  t->state = h;
  return st;
}

chorus_status_t chorus__rhd_progress(chorus_task_t* t) {
  rhd_t* h = t->state;
  chorus_status_t st = chorus__rhd_step(t, h);
  t->step = h->pass * (size_t)h->nrounds + (size_t)h->round;
  return st;
}

void chorus__rhd_fini(chorus_task_t* t) {
  chorus__rhd_free(t->state);
  t->state = NULL;
}
