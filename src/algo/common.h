/*
 * common.h - small helpers shared by the algorithm files: a transfer that knows when it carried
 * nothing (collectives skip zero-byte chunks on both sides, since both sides compute the same
 * sizes), local copies, the reduction kernel for an op, and the integer log used by the cost
 * formulas. Internal to src/algo.
 */
#ifndef CHORUS_ALGO_COMMON_H
#define CHORUS_ALGO_COMMON_H

#include <string.h>

#include "algo/algo.h"

/* A posted transfer, or a zero-byte one that was never posted and counts as done. */
typedef struct {
  chorus_xfer_t x;
  int skipped;
} chorus_algo_xfer_t;

/* Posts a send (is_send = 1) or a receive, unless nbytes is 0: both ends of a collective agree
 * on every size, so both skip the same empty chunks and the per-pair FIFO stays aligned. */
static inline chorus_status_t chorus__algo_post(chorus_task_t* t, chorus_algo_xfer_t* ax,
                                                int is_send, int peer, const void* buf,
                                                size_t nbytes, uint32_t tag) {
  memset(ax, 0, sizeof(*ax));
  if (nbytes == 0) {
    ax->skipped = 1;
    return CHORUS_OK;
  }
  if (is_send) return chorus__conn_isend(t, peer, buf, nbytes, tag, &ax->x);
  return chorus__conn_irecv(t, peer, (void*)buf, nbytes, tag, &ax->x);
}

/* chorus__algo_post to or from group member `member` of schedule s, with s's tag base. */
static inline chorus_status_t chorus__sched_post(chorus_task_t* t, const chorus_sched_t* s, chorus_algo_xfer_t* ax,
                                                 int is_send, int member, const void* buf, size_t nbytes,
                                                 uint32_t tag) {
  return chorus__algo_post(t, ax, is_send, chorus__group_rank(&s->group, member), buf, nbytes, s->tag_base + tag);
}

/* Posts a transfer of a variable-size call, even an empty one: its frame is how the two ends
 * check that they agree on the counts (frame.h), with `word` as its count word. */
static inline chorus_status_t chorus__algo_post_word(chorus_task_t* t, chorus_algo_xfer_t* ax, int is_send, int peer,
                                                     const void* buf, size_t nbytes, uint32_t tag, uint64_t word) {
  memset(ax, 0, sizeof(*ax));
  return chorus__conn_post_word(t, is_send, peer, (void*)buf, nbytes, tag, word, &ax->x);
}

/* chorus__sched_post that posts an empty transfer too (allgatherv, reduce_scatterv: its frame
 * carries the counts hash, frame.h). */
static inline chorus_status_t chorus__sched_post_frame(chorus_task_t* t, const chorus_sched_t* s,
                                                       chorus_algo_xfer_t* ax, int is_send, int member,
                                                       const void* buf, size_t nbytes, uint32_t tag) {
  memset(ax, 0, sizeof(*ax));
  int peer = chorus__group_rank(&s->group, member);
  if (is_send) return chorus__conn_isend(t, peer, buf, nbytes, s->tag_base + tag, &ax->x);
  return chorus__conn_irecv(t, peer, (void*)buf, nbytes, s->tag_base + tag, &ax->x);
}

/* Chunks of at most s->chunk_bytes, in whole elements (at least one). */
static inline size_t chorus__sched_chunk_elems(const chorus_sched_t* s) {
  size_t elems = s->elem_bytes ? s->chunk_bytes / s->elem_bytes : 0;
  return elems ? elems : 1;
}

/* Divides a finished chunk for AVG when this schedule is the one that divides. */
static inline void chorus__sched_avg_finish(const chorus_sched_t* s, void* dst, size_t elems) {
  if (s->op == CHORUS_AVG && s->avg_divisor > 0) chorus__reduce_avg_finish(dst, elems, s->dtype, s->avg_divisor);
}

static inline int chorus__algo_done(const chorus_algo_xfer_t* ax) {
  return ax->skipped || chorus__xfer_done(&ax->x);
}

static inline int chorus__algo_all_done(const chorus_algo_xfer_t* ax, int nx) {
  for (int i = 0; i < nx; i++)
    if (!chorus__algo_done(&ax[i])) return 0;
  return 1;
}

/* The block of member m in a block-layout buffer (s->block_of, or m). */
static inline int chorus__sched_block(const chorus_sched_t* s, int m) {
  return s->block_of ? s->block_of[m] : m;
}

/* Posts the blocks (block_bytes each, block b at base + b * block_bytes) of members first,
 * first+1, ..., first+cnt-1 (mod group size) to or from member peer: one transfer per run of
 * those members whose blocks are adjacent in the buffer, in member order, so that both ends,
 * walking the same members, post the same transfers. Uses ax[0 .. *nposted). */
static inline chorus_status_t chorus__sched_post_blocks(chorus_task_t* t, const chorus_sched_t* s,
                                                        chorus_algo_xfer_t* ax, int* nposted, int is_send,
                                                        int peer, const char* base, size_t block_bytes,
                                                        int first, int cnt, uint32_t tag) {
  int n = s->group.size, k = 0;
  for (int i = 0; i < cnt;) {
    int b0 = chorus__sched_block(s, (first + i) % n), len = 1;
    while (i + len < cnt && chorus__sched_block(s, (first + i + len) % n) == b0 + len) len++;
    chorus_status_t st = chorus__sched_post(t, s, &ax[k++], is_send, peer, base + (size_t)b0 * block_bytes,
                                            (size_t)len * block_bytes, tag);
    if (st < 0) {
      *nposted = k;
      return st;
    }
    i += len;
  }
  *nposted = k;
  return CHORUS_OK;
}

/* Copies src to dst unless they are the same bytes (an in-place call); memmove so that a
 * caller's overlapping in-place layout (e.g. scatter with recvbuf == sendbuf) stays correct. */
static inline void chorus__algo_copy(void* dst, const void* src, size_t nbytes) {
  if (dst != src && nbytes) memmove(dst, src, nbytes);
}

/* The element-wise kernel for op; AVG sums here and divides once at the end. */
static inline chorus_reduce_fn chorus__algo_reduce_fn(chorus_dtype_t dtype, chorus_op_t op) {
  return chorus__reduce_fn(dtype, op == CHORUS_AVG ? CHORUS_SUM : op);
}

/* supported() of every reducing algorithm: a kernel exists for (dtype, op). */
static inline int chorus__algo_reduce_supported(const chorus_task_t* t) {
  return chorus__algo_reduce_fn(t->args.dtype, t->args.op) != NULL;
}

/* ceil(log2(n)) for n >= 1: rounds of a binomial tree or a dissemination barrier. */
static inline int chorus__ceil_log2(int n) {
  int rounds = 0;
  while (n > 1 && (1L << rounds) < (long)n) rounds++;
  return rounds;
}

/* Chunks of at most chunk_bytes (rounded down to whole elements, at least one element). */
static inline size_t chorus__chunk_elems(const chorus_task_t* t) {
  size_t elems = t->dtype_size ? t->chunk_bytes / t->dtype_size : 0;
  return elems ? elems : 1;
}

static inline size_t chorus__div_up(size_t a, size_t b) { return a / b + (a % b != 0); }

/* Whether the call's root is the first rank of its host: trees and chains rooted there over the
 * host-ordered ring keep their nearest members inside the root's host. */
static inline int chorus__root_first_on_host(const chorus_task_t* t) {
  int root = t->args.root;
  return root >= 0 && root < t->nranks && t->topo->local_of[root] == 0;
}

/* ---- a fused group operation's members where they are (task.segs, sched.segs) ---- */

/* The member of segs[0..nsegs) that holds element e of the fused vector. */
static inline size_t chorus__segs_find(const chorus_seg_t* segs, size_t nsegs, size_t e) {
  size_t lo = 0, hi = nsegs;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (segs[mid].off <= e) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* Walks elements [first, first + m) of the fused vector member by member: *seg, *from (the
 * element in that member) and *n (how many) for each piece; returns 0 past the end. Start
 * with *seg = chorus__segs_find(segs, nsegs, first) and *done = 0. */
static inline int chorus__segs_next(const chorus_seg_t* segs, size_t first, size_t m, size_t* seg, size_t* done,
                                    size_t* from, size_t* n) {
  if (*done >= m) return 0;
  const chorus_seg_t* g = &segs[*seg];
  *from = first + *done - g->off;
  *n = g->count - *from < m - *done ? g->count - *from : m - *done;
  return 1;
}
#define CHORUS_SEGS_FOR_EACH(segs, nsegs, first, m, seg, done, from, n)                               \
  for (size_t seg = chorus__segs_find(segs, nsegs, first), done = 0, from = 0, n = 0;                 \
       chorus__segs_next(segs, first, m, &seg, &done, &from, &n); done += n, seg++)
#define CHORUS_SEG_FOR_EACH(t, first, m, seg, done, from, n) \
  CHORUS_SEGS_FOR_EACH((t)->segs, (t)->nsegs, first, m, seg, done, from, n)

/* Copies elements [first, first + m) of the members' inputs (es bytes each) into dst. */
static inline void chorus__segs_gather(const chorus_seg_t* segs, size_t nsegs, size_t es, char* dst, size_t first,
                                       size_t m) {
  CHORUS_SEGS_FOR_EACH(segs, nsegs, first, m, seg, done, from, n)
  memcpy(dst + done * es, (const char*)segs[seg].send + from * es, n * es);
}

#endif /* CHORUS_ALGO_COMMON_H */
