/*
 * sag/broadcast.c - scatter + allgather broadcast (van de Geijn) for large messages; the
 * registry entry runs it over the host-ordered ring.
 *
 * Steps: v = (member - root) mod n; the buffer is n blocks of b = ceil(count / n) elements
 * (the last ones shorter or empty), block j at elements j*b. Scatter: binomial tree in v; the
 * subtree of v > 0 is v .. v + lowbit(v) - 1 (capped at n); v receives its subtree's blocks
 * from v - lowbit(v) straight into recvbuf, then sends each child v + m (m = powers of two below
 * lowbit(v), all below n for the root, largest first) the blocks of its subtree. Allgather:
 * n-1 ring steps s: send block v - s to v+1, receive block v - s - 1 from v-1 into recvbuf.
 * Every transfer is cut into chunks of at most chunk_bytes, CHORUS_SAG_WINDOW in flight; the
 * root copies sendbuf to recvbuf first (unless in place) and sends from recvbuf.
 * Bytes per rank (N = count * elem bytes): scatter: at most (n-1)/n * N (the root), allgather
 * (n-1)/n * N sent and received.
 *
 * Cost (alpha-beta, L = ceil(log2 n)): T = (L + n - 1) * alpha + 2(n-1)/n * N / beta (scatter
 * (n-1)/n * N out of the root, ring (n-1)/n * N per link); 0 for n = 1.
 */
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "algo/common.h"
#include "algo/sag/sag.h"

#define SAG_MAX_CHILDREN 32

/* One chunked transfer of `bytes` with one peer. */
typedef struct {
  int peer, is_send;
  char* buf;
  size_t bytes, chunk, nchunks, posted, done;
  uint32_t tag0;
  chorus_algo_xfer_t x[CHORUS_SAG_WINDOW];
} stream_t;

struct chorus_sag {
  chorus_sched_t s;
  int n, v;
  size_t b; /* elements per block */
  int stage; /* 0 scatter receive, 1 scatter sends, 2 + s ring step s, 2 + n-1 done */
  int copied, started;
  int nchildren;
  int child_v[SAG_MAX_CHILDREN];
  stream_t recv, sends[SAG_MAX_CHILDREN];
};
typedef struct chorus_sag sag_t;

static int member_of(const sag_t* g, int v) { return (v + g->s.root) % g->n; }

/* Byte range of blocks [a, e). */
static size_t blk_byte(const sag_t* g, int j) {
  return chorus__min_sz((size_t)j * g->b, g->s.count) * g->s.elem_bytes;
}

static void stream_begin(const sag_t* g, stream_t* st, int peer_v, int is_send, int a, int e, uint32_t tag0) {
  memset(st, 0, sizeof(*st));
  st->peer = member_of(g, peer_v);
  st->is_send = is_send;
  st->buf = (char*)g->s.recvbuf + blk_byte(g, a);
  st->bytes = blk_byte(g, e) - blk_byte(g, a);
  st->chunk = chorus__sched_chunk_elems(&g->s) * g->s.elem_bytes;
  st->nchunks = chorus__div_up(st->bytes, st->chunk);
  st->tag0 = tag0;
}

/* Posts and reaps; 1 when finished. */
static int stream_step(chorus_task_t* t, const sag_t* g, stream_t* st, chorus_status_t* err) {
  const size_t w = CHORUS_SAG_WINDOW;
  for (;;) {
    int moved = 0;
    while (st->posted < st->nchunks && st->posted < st->done + w) {
      size_t i = st->posted, len = chorus__min_sz(st->chunk, st->bytes - i * st->chunk);
      chorus_status_t rc = chorus__sched_post(t, &g->s, &st->x[i % w], st->is_send, st->peer,
                                              st->buf + i * st->chunk, len, st->tag0 + (uint32_t)i);
      if (rc < 0) {
        *err = rc;
        return 0;
      }
      st->posted++;
      moved = 1;
    }
    while (st->done < st->posted && chorus__algo_done(&st->x[st->done % w])) {
      st->done++;
      moved = 1;
    }
    if (!moved) break;
  }
  return st->done == st->nchunks;
}

static int lowbit(int v) { return v & -v; }

static void begin_stage(sag_t* g) {
  int n = g->n, v = g->v;
  if (g->stage == 0) {
    if (v > 0) {
      int e = v + lowbit(v) < n ? v + lowbit(v) : n;
      stream_begin(g, &g->recv, v - lowbit(v), 0, v, e, 0);
    }
  } else if (g->stage == 1) {
    for (int j = 0; j < g->nchildren; j++) {
      int c = g->child_v[j], m = lowbit(c);
      stream_begin(g, &g->sends[j], c, 1, c, c + m < n ? c + m : n, 0);
    }
  } else if (g->stage - 2 < n - 1) {
    int s = g->stage - 2;
    uint32_t tag0 = (uint32_t)(s + 1) << 20;
    int out = chorus__mod(v - s, n), in = chorus__mod(v - s - 1, n);
    stream_begin(g, &g->sends[0], (v + 1) % n, 1, out, out + 1, tag0);
    stream_begin(g, &g->recv, (v + n - 1) % n, 0, in, in + 1, tag0);
  }
}

chorus_status_t chorus__sag_bcast_step(chorus_task_t* t, sag_t* g) {
  if (!g->copied) {
    if (g->v == 0) chorus__algo_copy(g->s.recvbuf, g->s.sendbuf, g->s.count * g->s.elem_bytes);
    g->copied = 1;
  }
  while (g->stage < 2 + g->n - 1) {
    if (!g->started) {
      begin_stage(g);
      g->started = 1;
    }
    chorus_status_t err = CHORUS_OK;
    int fin = 1;
    if (g->stage == 0) {
      if (g->v > 0) fin = stream_step(t, g, &g->recv, &err);
    } else if (g->stage == 1) {
      for (int j = 0; j < g->nchildren; j++) fin &= stream_step(t, g, &g->sends[j], &err);
    } else {
      fin = stream_step(t, g, &g->recv, &err);
      fin &= stream_step(t, g, &g->sends[0], &err);
    }
    if (err < 0) return err;
    if (!fin) return CHORUS_INPROGRESS;
    g->stage++;
    g->started = 0;
  }
  return CHORUS_OK;
}

chorus_status_t chorus__sag_bcast_start(const chorus_sched_t* s, sag_t** out) {
  *out = NULL;
  if (s->group.size < 1 || s->group.me < 0 || s->elem_bytes == 0) return CHORUS_ERR_INVALID_ARG;
  sag_t* g = calloc(1, sizeof(*g));
  if (!g) return CHORUS_ERR_NO_MEMORY;
  g->s = *s;
  g->n = s->group.size;
  g->v = chorus__mod(s->group.me - s->root, g->n);
  g->b = chorus__div_up(s->count, (size_t)g->n);
  int top = g->v ? lowbit(g->v) : 1;
  if (!g->v)
    while (top < g->n) top <<= 1;
  for (int m = top >> 1; m > 0; m >>= 1)
    if (g->v + m < g->n) g->child_v[g->nchildren++] = g->v + m;
  *out = g;
  return CHORUS_OK;
}

size_t chorus__sag_bcast_stage(const sag_t* g) { return (size_t)g->stage; }

void chorus__sag_bcast_free(sag_t* g) { free(g); }

/* ---- the registry entry: the whole communicator on its host-ordered ring ---- */

static chorus_status_t sag_broadcast_init(chorus_task_t* t) {
  chorus_sched_t s;
  chorus__sched_of_task(t, chorus__topo_ring(t->topo, t->rank), &s);
  sag_t* g = NULL;
  chorus_status_t st = chorus__sag_bcast_start(&s, &g);
  t->state = g;
  return st;
}

static chorus_status_t sag_broadcast_progress(chorus_task_t* t) {
  chorus_status_t st = chorus__sag_bcast_step(t, t->state);
  t->step = chorus__sag_bcast_stage(t->state);
  return st;
}

static void sag_broadcast_fini(chorus_task_t* t) {
  chorus__sag_bcast_free(t->state);
  t->state = NULL;
}

static double sag_broadcast_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  double n = t->nranks, bytes = (double)t->args.count * (double)t->dtype_size;
  return (chorus__ceil_log2(t->nranks) + n - 1.0) * cx->flat.alpha_us +
         2.0 * (n - 1.0) / n * bytes / cx->flat.bytes_per_us;
}

const chorus_algo_t chorus__algo_sag_broadcast = {
    .name = "sag",
    .desc = "scatter + allgather (van de Geijn): binomial scatter of n blocks, ring allgather, 2(n-1)/n of the data",
    .coll = CH_COLL_BROADCAST,
    .supported = NULL,
    .cost_us = sag_broadcast_cost_us,
    .init = sag_broadcast_init,
    .progress = sag_broadcast_progress,
    .fini = sag_broadcast_fini,
};
