/*
 * dbtree/allreduce.c - double binary tree allreduce (NCCL style); the registry entry runs it
 * over the host-ordered ring.
 *
 * Trees: positions 1..n; position v with lowest set bit b has children v - b/2 and v + h (h the
 * largest power of two below b with v + h <= n); the root is the largest power of two <= n. Odd
 * positions are leaves. Tree A puts member i at position i+1 (inner: odd members), tree B at
 * position i (member 0 at n; inner: even members), so no member is inner in both.
 * Data: the first half of the buffer goes through tree A, the second through tree B, each cut
 * into K chunks; unit u = 2c + t is chunk c of tree t. Per unit: a member receives the unit
 * from each child (scratch slots), reduces own + child 0 + child 1 (always this order) into
 * recvbuf, sends it to its parent; the root divides it for avg: it is final; final units go
 * down: received from the parent into recvbuf, sent to the children. Chunk c+1 goes up while
 * chunk c comes down. Between two members the transfers of both trees share one FIFO, so each
 * member posts its sends to a peer, and its receives from it, in increasing u on every peer
 * (both ends compute the same sequence); CHORUS_DBTREE_WINDOW in flight per peer and direction.
 * Every wait is on a unit <= u, so the schedule cannot deadlock. Tag = u.
 * Bytes per rank (N = count * elem bytes): inner in its tree: N received and N/2 sent going
 * up, N/2 received and N sent going down; as a leaf of the other tree N/2 each way: about 2N
 * sent and 2N received in all, over up to 6 peers; N/2 * children elements reduced.
 *
 * Cost (alpha-beta, D = floor(log2 n) tree depth, K chunks per tree of size S = N / 2K):
 * T = 2 * (D + K) * alpha + (2D * S + 2N) / beta; 0 for n = 1.
 */
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "algo/dbtree/dbtree.h"

#define W CHORUS_DBTREE_WINDOW
#define MAX_PEERS 6

enum { U_REDUCED = 1, U_FINAL = 2, U_UPSENT = 4 };

typedef struct {
  int member;
  size_t su, ru;                 /* next unit to consider sending / receiving */
  size_t sposted, sdone, rposted, rdone;
  chorus_algo_xfer_t sx[W], rx[W];
  size_t s_unit[W], r_unit[W];
  int s_up[W], r_up[W]; /* the transfer goes up its tree */
  int r_child[W];       /* up receives: index of the child in its tree */
  int busy[W];          /* receive entry (and slot) in use */
  char* slots;          /* W chunks */
} peer_t;

struct chorus_dbtree {
  chorus_sched_t s;
  int n, me;
  int parent[2], nch[2], ch[2][2];
  chorus_reduce_fn reduce;
  size_t eb, half, chunk_elems, slot_bytes, nunits, reduced;
  int copied;
  int npeers;
  peer_t peers[MAX_PEERS];
  unsigned char* ustate;  /* U_* flags per unit */
  unsigned char* arrived; /* child pieces here per unit */
  char** slot_of;         /* per unit and child: the slot holding it */
  int* entry_of;          /* per unit and child: peer * W + entry, to free it */
};
typedef struct chorus_dbtree dbt_t;

static int pos_of(int n, int t, int m) { return t == 0 ? m + 1 : (m == 0 ? n : m); }
static int mem_of(int n, int t, int p) { return t == 0 ? p - 1 : (p == n ? 0 : p); }

/* Children of position v in the tree over 1..n (0: none). */
static void pos_children(int n, int v, int* left, int* right) {
  int b = v & -v;
  *left = *right = 0;
  if (b < 2) return;
  *left = v - b / 2;
  for (int h = b / 2; h >= 1; h /= 2)
    if (v + h <= n) {
      *right = v + h;
      return;
    }
}

static void build_tree(dbt_t* d, int t) {
  int n = d->n, me = pos_of(n, t, d->me), l, r;
  d->parent[t] = -1;
  d->nch[t] = 0;
  for (int v = 1; v <= n; v++) {
    pos_children(n, v, &l, &r);
    if (l == me || r == me) d->parent[t] = mem_of(n, t, v);
  }
  pos_children(n, me, &l, &r);
  if (l) d->ch[t][d->nch[t]++] = mem_of(n, t, l);
  if (r) d->ch[t][d->nch[t]++] = mem_of(n, t, r);
}

static size_t unit_first(const dbt_t* d, size_t u) {
  return (u % 2 ? d->half : 0) + (u / 2) * d->chunk_elems;
}
static size_t unit_elems(const dbt_t* d, size_t u) {
  size_t len = u % 2 ? d->s.count - d->half : d->half, first = (u / 2) * d->chunk_elems;
  return first >= len ? 0 : chorus__min_sz(d->chunk_elems, len - first);
}
static char* unit_buf(const dbt_t* d, size_t u) { return (char*)d->s.recvbuf + unit_first(d, u) * d->eb; }

static int child_index(const dbt_t* d, int t, int member) {
  for (int j = 0; j < d->nch[t]; j++)
    if (d->ch[t][j] == member) return j;
  return -1;
}

/* The message of unit u between this member and p: 1 up (p is my parent when I send / my child
 * when I receive), 0 down, -1 none. */
static int send_kind(const dbt_t* d, const peer_t* p, size_t u) {
  int t = (int)(u % 2);
  if (d->parent[t] == p->member) return 1;
  return child_index(d, t, p->member) >= 0 ? 0 : -1;
}
static int recv_kind(const dbt_t* d, const peer_t* p, size_t u) {
  int t = (int)(u % 2);
  if (child_index(d, t, p->member) >= 0) return 1;
  return d->parent[t] == p->member ? 0 : -1;
}

static chorus_status_t post_peer(chorus_task_t* t, dbt_t* d, peer_t* p, int* moved) {
  for (;;) { /* sends, in unit order */
    while (p->su < d->nunits && send_kind(d, p, p->su) < 0) p->su++;
    if (p->su == d->nunits || p->sposted - p->sdone >= W) break;
    size_t u = p->su;
    int up = send_kind(d, p, u);
    if (!(d->ustate[u] & (up ? U_REDUCED : U_FINAL))) break;
    size_t e = p->sposted % W;
    chorus_status_t st = chorus__sched_post(t, &d->s, &p->sx[e], 1, p->member, unit_buf(d, u),
                                            unit_elems(d, u) * d->eb, (uint32_t)u);
    if (st < 0) return st;
    p->s_unit[e] = u;
    p->s_up[e] = up;
    p->sposted++;
    p->su++;
    *moved = 1;
  }
  for (;;) { /* receives, in unit order */
    while (p->ru < d->nunits && recv_kind(d, p, p->ru) < 0) p->ru++;
    if (p->ru == d->nunits || p->rposted - p->rdone >= W) break;
    size_t u = p->ru, e = p->rposted % W;
    int up = recv_kind(d, p, u);
    if (p->busy[e] || (!up && !(d->ustate[u] & U_UPSENT))) break;
    char* dst = up ? p->slots + e * d->slot_bytes : unit_buf(d, u);
    chorus_status_t st = chorus__sched_post(t, &d->s, &p->rx[e], 0, p->member, dst,
                                            unit_elems(d, u) * d->eb, (uint32_t)u);
    if (st < 0) return st;
    p->r_unit[e] = u;
    p->r_up[e] = up;
    p->busy[e] = 1;
    if (up) {
      int j = child_index(d, (int)(u % 2), p->member);
      d->slot_of[u * 2 + (size_t)j] = dst;
      d->entry_of[u * 2 + (size_t)j] = (int)((p - d->peers) * W + (int)e);
    }
    p->rposted++;
    p->ru++;
    *moved = 1;
  }
  return CHORUS_OK;
}

static int reap_peer(dbt_t* d, peer_t* p) {
  int moved = 0;
  while (p->sdone < p->sposted && chorus__algo_done(&p->sx[p->sdone % W])) {
    size_t e = p->sdone % W;
    if (p->s_up[e]) d->ustate[p->s_unit[e]] |= U_UPSENT;
    p->sdone++;
    moved = 1;
  }
  while (p->rdone < p->rposted && chorus__algo_done(&p->rx[p->rdone % W])) {
    size_t e = p->rdone % W, u = p->r_unit[e];
    if (p->r_up[e]) {
      d->arrived[u]++;
    } else {
      d->ustate[u] |= U_FINAL;
      p->busy[e] = 0;
    }
    p->rdone++;
    moved = 1;
  }
  return moved;
}

static int reduce_ready(dbt_t* d) {
  int moved = 0;
  while (d->reduced < d->nunits) {
    size_t u = d->reduced;
    int t = (int)(u % 2);
    if (d->arrived[u] < d->nch[t]) break;
    char* dst = unit_buf(d, u);
    size_t elems = unit_elems(d, u);
    for (int j = 0; j < d->nch[t]; j++) {
      if (elems) d->reduce(dst, dst, d->slot_of[u * 2 + (size_t)j], elems);
      int ent = d->entry_of[u * 2 + (size_t)j];
      d->peers[ent / W].busy[ent % W] = 0;
    }
    d->ustate[u] |= U_REDUCED;
    if (d->parent[t] < 0) {
      chorus__sched_avg_finish(&d->s, dst, elems);
      d->ustate[u] |= U_FINAL | U_UPSENT;
    }
    d->reduced++;
    moved = 1;
  }
  return moved;
}

static int finished(const dbt_t* d) {
  if (d->reduced < d->nunits) return 0;
  for (size_t u = 0; u < d->nunits; u++)
    if (!(d->ustate[u] & U_FINAL)) return 0;
  for (int i = 0; i < d->npeers; i++) {
    const peer_t* p = &d->peers[i];
    if (p->su < d->nunits || p->ru < d->nunits || p->sdone < p->sposted || p->rdone < p->rposted) return 0;
  }
  return 1;
}

chorus_status_t chorus__dbtree_allreduce_step(chorus_task_t* t, dbt_t* d) {
  if (!d->copied) {
    chorus__algo_copy(d->s.recvbuf, d->s.sendbuf, d->s.count * d->eb);
    d->copied = 1;
  }
  int moved;
  do {
    moved = reduce_ready(d);
    for (int i = 0; i < d->npeers; i++) {
      chorus_status_t st = post_peer(t, d, &d->peers[i], &moved);
      if (st < 0) return st;
      moved |= reap_peer(d, &d->peers[i]);
    }
  } while (moved);
  return finished(d) ? CHORUS_OK : CHORUS_INPROGRESS;
}

static void add_peer(dbt_t* d, int m) {
  if (m < 0) return;
  for (int i = 0; i < d->npeers; i++)
    if (d->peers[i].member == m) return;
  d->peers[d->npeers++].member = m;
}

void chorus__dbtree_allreduce_free(dbt_t* d) {
  if (!d) return;
  for (int i = 0; i < d->npeers; i++) chorus__sched_scratch_free(&d->s, d->peers[i].slots);
  free(d->ustate);
  free(d->slot_of);
  free(d->entry_of);
  free(d);
}

chorus_status_t chorus__dbtree_allreduce_start(const chorus_sched_t* s, dbt_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  chorus_reduce_fn fn = chorus__algo_reduce_fn(s->dtype, s->op);
  if (!fn) return CHORUS_ERR_NOT_SUPPORTED;
  dbt_t* d = calloc(1, sizeof(*d));
  if (!d) return CHORUS_ERR_NO_MEMORY;
  d->s = *s;
  d->reduce = fn;
  d->n = s->group.size;
  d->me = s->group.me;
  d->eb = s->elem_bytes;
  d->half = (s->count + 1) / 2;
  d->chunk_elems = chorus__sched_chunk_elems(s);
  d->nunits = 2 * chorus__div_up(d->half, d->chunk_elems);
  for (int t = 0; t < 2; t++) {
    build_tree(d, t);
    add_peer(d, d->parent[t]);
    for (int j = 0; j < d->nch[t]; j++) add_peer(d, d->ch[t][j]);
  }
  d->slot_bytes = chorus__min_sz(d->chunk_elems, d->half ? d->half : 1) * d->eb;
  d->ustate = calloc(2 * d->nunits + 1, 1);
  d->arrived = d->ustate + d->nunits;
  d->slot_of = calloc(2 * d->nunits + 1, sizeof(*d->slot_of));
  d->entry_of = calloc(2 * d->nunits + 1, sizeof(*d->entry_of));
  int ok = d->ustate && d->slot_of && d->entry_of;
  for (int i = 0; i < d->npeers && ok; i++) {
    d->peers[i].slots = chorus__sched_scratch(&d->s, W * d->slot_bytes);
    ok = d->peers[i].slots != NULL;
  }
  if (!ok) {
    chorus__dbtree_allreduce_free(d);
    return CHORUS_ERR_NO_MEMORY;
  }
  *out = d;
  return CHORUS_OK;
}

size_t chorus__dbtree_allreduce_units_done(const dbt_t* d) { return d->reduced; }

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t dbtree_allreduce_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  dbt_t* d = NULL;
  chorus_status_t st = chorus__dbtree_allreduce_start(&s, &d);
  t->state = d;
  return st;
}

static chorus_status_t dbtree_allreduce_progress(chorus_task_t* t) {
  chorus_status_t st = chorus__dbtree_allreduce_step(t, t->state);
  t->step = chorus__dbtree_allreduce_units_done(t->state);
  return st;
}

static void dbtree_allreduce_fini(chorus_task_t* t) {
  chorus__dbtree_allreduce_free(t->state);
  t->state = NULL;
}

static double dbtree_allreduce_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  int depth = 0;
  while ((2 << depth) <= t->nranks) depth++;
  double bytes = (double)t->args.count * (double)t->dtype_size;
  double chunk = (double)(chorus__chunk_elems(t) * t->dtype_size);
  double k = bytes / 2.0 > chunk ? bytes / 2.0 / chunk : 1.0, piece = bytes / 2.0 / k;
  return 2.0 * (depth + k) * cx->spread.alpha_us + (2.0 * depth * piece + 2.0 * bytes) / cx->spread.bytes_per_us;
}

const chorus_algo_t chorus__algo_dbtree_allreduce = {
    .name = "dbtree",
    .desc = "double binary tree (NCCL style): half the data up and down each of two complementary trees, chunk-pipelined",
    .coll = CH_COLL_ALLREDUCE,
    .supported = chorus__algo_reduce_supported,
    .cost_us = dbtree_allreduce_cost_us,
    .init = dbtree_allreduce_init,
    .progress = dbtree_allreduce_progress,
    .fini = dbtree_allreduce_fini,
};
