/*
 * shm/group.c - the memory-semantics reduce-scatter, allgather, reduce and broadcast over one
 * host's group (group.h), as engines a two-level algorithm runs as its intra-host phases.
 *
 * Reduce-scatter, n members, pieces of at most P elements per chunk (a slot holds n of them):
 *   1. copy-in: member r copies piece k of every other member's piece into its slot  ARRIVED
 *   2. reduce:  member r combines piece k of its own piece from its send buffer and
 *               from every other member's slot, into its receive buffer              DONE
 * Bytes per member for a buffer of S bytes: (n-1)/n S copied in, S read and S/n written by the
 * reduction. The ring reduce-scatter over the shared rings moves each of its (n-1)/n S twice
 * (into the ring, out of it into a scratch) before it reduces, and hands over n-1 times.
 * Allgather, pieces of at most one slot per chunk:
 *   1. copy-in:  member r copies piece k of its own piece into its slot             ARRIVED
 *   2. copy-out: member r copies piece k of every other member's piece out           DONE
 * Bytes per member: S/n copied in, (n-1)/n S copied out.
 * Reduce to a root, chunks of one slot: every other member copies its chunk into its slot
 * (S), the root combines its own with n-1 slots (n S read, S written).
 * Broadcast from a root, chunks of one slot: the root copies in (S), the others copy out (S).
 * Cost: 2 flag waits per chunk + those bytes at memory speed (shm.h, chorus__shm_cost_us).
 * Every piece is combined by one member in a fixed order, so all members end with the same bits.
 * A list of pieces (sched.segs: a fused group operation's members, a two-level phase's view of
 * the user's blocks) is read and written where the pieces are: the reduce-scatter gathers its
 * input from their send pointers (and combines its own piece from them piece by piece) and the
 * allgather scatters its output into their receive pointers (and, with no send buffer, stages
 * its own piece from where it already is), so no one packs them into one vector and unpacks it
 * (two passes over all the data).
 */
#include "algo/shm/group.h"

#include <stdlib.h>

#include "algo/shm/shm.h"

enum { GROUP_RS, GROUP_AG, GROUP_REDUCE, GROUP_BCAST };

struct chorus_shm_group {
  chorus_shm_op_t op;
  int kind;
  const char* sendbuf;
  char* recvbuf;
  size_t es;
  chorus_op_t redop;
  chorus_dtype_t dtype;
  int avg_divisor;
  int root;      /* reduce, broadcast */
  size_t* first; /* per member, elements (reduce, broadcast: the whole buffer for everyone) */
  size_t* len;
  const chorus_seg_t* segs; /* RS input, AG output: a fused operation's members (sched.segs) */
  size_t nsegs, seg_at;
};

int chorus__shm_group_ok(const chorus_task_t* t, const chorus_sched_t* s) {
  int nlocal = 0, me = -1;
  return chorus__conn_shm_host(t, &nlocal, &me) && nlocal == s->group.size && me == s->group.me &&
         chorus__conn_shm_slot_bytes(t) / ((size_t)nlocal * s->elem_bytes) > 0;
}

/* Elements of member i's piece in chunk k. */
static size_t piece_len(const chorus_shm_group_t* g, int i, size_t k) {
  size_t from = k * g->op.chunk_elems;
  return g->len[i] > from ? chorus__min_sz(g->len[i] - from, g->op.chunk_elems) : 0;
}

/* Member i's piece of chunk k in a buffer laid out as the whole: its first element, and its
 * byte offset. */
static size_t piece_first(const chorus_shm_group_t* g, int i, size_t k) { return g->first[i] + k * g->op.chunk_elems; }
static size_t piece_off(const chorus_shm_group_t* g, int i, size_t k) { return piece_first(g, i, k) * g->es; }

/* The RS input: m elements from element e of the send buffer (nothing to do when dst is that
 * place: in place), or of the fused members'. */
static void rs_input(const chorus_shm_group_t* g, char* dst, size_t e, size_t m) {
  if (g->segs) chorus__segs_gather(g->segs, g->nsegs, g->es, dst, g->seg_at + e, m);
  else chorus__algo_copy(dst, g->sendbuf + e * g->es, m * g->es);
}

/* The AG output: m elements from src to element e of the receive buffer (nothing to do when
 * src is that place: in place), or of the fused members'. */
static void ag_output(const chorus_shm_group_t* g, size_t e, const char* src, size_t m) {
  if (!g->segs) {
    if (g->recvbuf + e * g->es != src) chorus__shm_copy_out(&g->op, g->recvbuf + e * g->es, src, m * g->es);
    return;
  }
  CHORUS_SEGS_FOR_EACH(g->segs, g->nsegs, g->seg_at + e, m, seg, done, from, n)
  chorus__shm_copy_out(&g->op, (char*)g->segs[seg].recv + from * g->es, src + done * g->es, n * g->es);
}

static chorus_status_t start(chorus_task_t* t, const chorus_sched_t* s, const size_t* first, const size_t* len,
                             size_t touched_bytes, int kind, chorus_shm_group_t** out) {
  *out = NULL;
  int n = s->group.size;
  chorus_shm_group_t* g = calloc(1, sizeof(*g));
  size_t* arrays = calloc(2 * (size_t)n, sizeof(size_t));
  if (!g || !arrays) {
    free(g);
    free(arrays);
    return CHORUS_ERR_NO_MEMORY;
  }
  g->first = arrays;
  g->len = arrays + n;
  size_t longest = 0;
  for (int i = 0; i < n; i++) {
    g->first[i] = first[i];
    g->len[i] = len[i];
    if (len[i] > longest) longest = len[i];
  }
  g->kind = kind;
  g->sendbuf = s->sendbuf;
  g->recvbuf = s->recvbuf;
  g->es = s->elem_bytes;
  g->redop = s->op;
  g->dtype = s->dtype;
  g->avg_divisor = s->avg_divisor;
  g->root = s->root;
  if (kind == GROUP_RS || kind == GROUP_AG) {
    g->segs = s->segs;
    g->nsegs = s->nsegs;
    g->seg_at = s->seg_at;
  }
  size_t slot = chorus__conn_shm_slot_bytes(t);
  size_t per_chunk = kind == GROUP_RS ? slot / ((size_t)n * g->es) : slot / g->es;
  int reduces = kind == GROUP_RS || kind == GROUP_REDUCE;
  chorus_reduce_fn reduce = reduces ? chorus__algo_reduce_fn(s->dtype, s->op) : NULL;
  if (per_chunk == 0 || (reduces && !reduce)) {
    chorus__shm_group_free(g);
    return CHORUS_ERR_NOT_SUPPORTED;
  }
  /* A call of one chunk packs its pieces as tightly as they allow, so that its data can move
   * within the slots (chorus__shm_op_rotate). */
  if (longest && longest < per_chunk) per_chunk = longest;
  chorus__shm_op_setup(t, &g->op, n, s->group.me, longest, per_chunk, touched_bytes, reduce);
  chorus__shm_op_rotate(t, &g->op, (kind == GROUP_RS ? (size_t)n : 1u) * per_chunk * g->es);
  *out = g;
  return CHORUS_OK;
}

chorus_status_t chorus__shm_group_rs_start(chorus_task_t* t, const chorus_sched_t* s, const size_t* first,
                                           const size_t* len, size_t touched_bytes, chorus_shm_group_t** out) {
  return start(t, s, first, len, touched_bytes, GROUP_RS, out);
}

chorus_status_t chorus__shm_group_ag_start(chorus_task_t* t, const chorus_sched_t* s, const size_t* first,
                                           const size_t* len, size_t touched_bytes, chorus_shm_group_t** out) {
  return start(t, s, first, len, touched_bytes, GROUP_AG, out);
}

/* Reduce and broadcast: every member's piece is the whole buffer. */
static chorus_status_t start_whole(chorus_task_t* t, const chorus_sched_t* s, int kind, chorus_shm_group_t** out) {
  size_t* whole = calloc(2 * (size_t)s->group.size, sizeof(size_t));
  if (!whole) return CHORUS_ERR_NO_MEMORY;
  for (int i = 0; i < s->group.size; i++) whole[s->group.size + i] = s->count;
  chorus_status_t st = start(t, s, whole, whole + s->group.size, s->count * s->elem_bytes, kind, out);
  free(whole);
  return st;
}

chorus_status_t chorus__shm_group_reduce_start(chorus_task_t* t, const chorus_sched_t* s, chorus_shm_group_t** out) {
  return start_whole(t, s, GROUP_REDUCE, out);
}

chorus_status_t chorus__shm_group_bcast_start(chorus_task_t* t, const chorus_sched_t* s, chorus_shm_group_t** out) {
  return start_whole(t, s, GROUP_BCAST, out);
}

/* RS copy-in: the other members' pieces of chunk k, each at its member's place in my slot. */
static void rs_stage(chorus_task_t* t, chorus_shm_group_t* g, char* slot) {
  (void)t;
  chorus_shm_op_t* s = &g->op;
  for (int i = 0; i < s->n; i++) {
    size_t m = piece_len(g, i, s->k);
    if (i != s->me && m) rs_input(g, slot + (size_t)i * s->chunk_elems * g->es, piece_first(g, i, s->k), m);
  }
}

/* dst = my own input (m elements from element e) op other: from the send buffer, or member by
 * member from a fused operation's. */
static void rs_combine_own(const chorus_shm_group_t* g, char* dst, size_t e, const char* other, size_t m) {
  if (!g->segs) {
    g->op.reduce(dst, g->sendbuf + e * g->es, other, m);
    return;
  }
  CHORUS_SEGS_FOR_EACH(g->segs, g->nsegs, g->seg_at + e, m, seg, done, from, n)
  g->op.reduce(dst + done * g->es, (const char*)g->segs[seg].send + from * g->es, other + done * g->es, n);
}

/* RS reduce: my piece of chunk k, my own input first (in place it is the output, read before it
 * is written), then every other member's in member order. */
static void rs_reduce(chorus_task_t* t, chorus_shm_group_t* g, int which) {
  chorus_shm_op_t* s = &g->op;
  size_t m = piece_len(g, s->me, s->k), at = (size_t)s->me * s->chunk_elems * g->es, e = piece_first(g, s->me, s->k);
  if (!m) return;
  char* dst = g->recvbuf + e * g->es;
  if (s->n == 1) rs_input(g, dst, e, m);
  for (int i = 0, combined = 0; i < s->n; i++) {
    if (i == s->me) continue;
    const char* theirs = chorus__shm_op_slot(t, s, i, which) + at;
    if (combined++) s->reduce(dst, dst, theirs, m);
    else rs_combine_own(g, dst, e, theirs, m);
  }
  if (g->redop == CHORUS_AVG && g->avg_divisor > 0) chorus__reduce_avg_finish(dst, m, g->dtype, g->avg_divisor);
}

/* AG copy-in: my piece of chunk k into my slot, and into my own output when it is elsewhere
 * (with pieces and no send buffer it is in place, where the pieces say). */
static void ag_stage(chorus_shm_group_t* g, char* slot) {
  chorus_shm_op_t* s = &g->op;
  size_t m = piece_len(g, s->me, s->k), off = piece_off(g, s->me, s->k);
  if (!m) return;
  if (g->segs && !g->sendbuf) {
    chorus__segs_gather(g->segs, g->nsegs, g->es, slot, g->seg_at + piece_first(g, s->me, s->k), m);
    return;
  }
  chorus__shm_stage_copy(slot, g->sendbuf + off, m * g->es);
  ag_output(g, piece_first(g, s->me, s->k), g->sendbuf + off, m);
}

static void ag_copy_out(chorus_task_t* t, chorus_shm_group_t* g, int which) {
  chorus_shm_op_t* s = &g->op;
  for (int i = 0; i < s->n; i++) {
    size_t m = piece_len(g, i, s->k);
    if (i != s->me && m) ag_output(g, piece_first(g, i, s->k), chorus__shm_op_slot(t, s, i, which), m);
  }
}

/* Reduce: the root combines its own chunk and every other member's, in member order. */
static void reduce_combine(chorus_task_t* t, chorus_shm_group_t* g, int which) {
  chorus_shm_op_t* s = &g->op;
  size_t m = piece_len(g, s->me, s->k), off = piece_off(g, s->me, s->k);
  if (!m) return;
  char* dst = g->recvbuf + off;
  if (s->n == 1) chorus__algo_copy(dst, g->sendbuf + off, m * g->es);
  for (int i = 0, combined = 0; i < s->n; i++) {
    if (i == s->me) continue;
    s->reduce(dst, combined++ ? dst : g->sendbuf + off, chorus__shm_op_slot(t, s, i, which), m);
  }
  if (g->redop == CHORUS_AVG && g->avg_divisor > 0) chorus__reduce_avg_finish(dst, m, g->dtype, g->avg_divisor);
}

/* Reduce and broadcast: stage 0 of the member that writes its slot (every non-root for a
 * reduce, the root for a broadcast); 1 when it may go on. */
static int rooted_stage(chorus_task_t* t, chorus_shm_group_t* g, uint64_t id, int which, chorus_status_t* st) {
  chorus_shm_op_t* s = &g->op;
  int writes = (g->kind == GROUP_REDUCE) != (s->me == g->root);
  size_t m = piece_len(g, s->me, s->k), off = piece_off(g, s->me, s->k);
  if (writes) {
    if (!chorus__shm_slot_free(t, s, st)) return 0;
    chorus__shm_stage_copy(chorus__shm_op_slot(t, s, s->me, which), g->sendbuf + off, m * g->es);
    if (g->kind == GROUP_BCAST) chorus__algo_copy(g->recvbuf + off, g->sendbuf + off, m * g->es);
  }
  chorus__conn_shm_publish(t, SHM_ARRIVED, id);
  chorus__shm_advance(t, s, 1);
  return 1;
}

/* Reduce and broadcast: stage 1, the member that reads (the root of a reduce, the others of a
 * broadcast); 1 when done with the chunk. */
static int rooted_read(chorus_task_t* t, chorus_shm_group_t* g, uint64_t id, int which, chorus_status_t* st) {
  chorus_shm_op_t* s = &g->op;
  int is_root = s->me == g->root;
  if (g->kind == GROUP_REDUCE && is_root) {
    if (!chorus__shm_all_reached(t, s, SHM_ARRIVED, id, st)) return 0;
    reduce_combine(t, g, which);
  } else if (g->kind == GROUP_BCAST && !is_root) {
    if (!chorus__shm_reached(t, s, g->root, SHM_ARRIVED, id, st)) return 0;
    size_t m = piece_len(g, s->me, s->k), off = piece_off(g, s->me, s->k);
    chorus__shm_copy_out(s, g->recvbuf + off, chorus__shm_op_slot(t, s, g->root, which), m * g->es);
  }
  return 1;
}

static chorus_status_t rooted_step(chorus_task_t* t, chorus_shm_group_t* g) {
  chorus_shm_op_t* s = &g->op;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    if (s->stage == 0) CHORUS_SHM_WAIT(rooted_stage(t, g, id, which, &st), st);
    CHORUS_SHM_WAIT(rooted_read(t, g, id, which, &st), st);
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    chorus__shm_advance(t, s, 0);
  }
  return CHORUS_OK;
}

chorus_status_t chorus__shm_group_step(chorus_task_t* t, chorus_shm_group_t* g) {
  if (g->kind == GROUP_REDUCE || g->kind == GROUP_BCAST) return rooted_step(t, g);
  chorus_shm_op_t* s = &g->op;
  chorus_status_t st = CHORUS_OK;
  while (s->k < s->nchunks) {
    uint64_t id = chorus__shm_id(s);
    int which = (int)(id & 1);
    if (s->stage == 0) {
      CHORUS_SHM_WAIT(chorus__shm_slot_free(t, s, &st), st);
      char* slot = chorus__shm_op_slot(t, s, s->me, which);
      if (g->kind == GROUP_RS) rs_stage(t, g, slot);
      else ag_stage(g, slot);
      chorus__conn_shm_publish(t, SHM_ARRIVED, id);
      chorus__shm_advance(t, s, 1);
    }
    CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
    if (g->kind == GROUP_RS) rs_reduce(t, g, which);
    else ag_copy_out(t, g, which);
    chorus__conn_shm_publish(t, SHM_DONE, id);
    s->k++;
    chorus__shm_advance(t, s, 0);
  }
  return CHORUS_OK;
}

void chorus__shm_group_free(chorus_shm_group_t* g) {
  if (!g) return;
  free(g->first);
  free(g);
}
