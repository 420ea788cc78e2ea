/*
 * group.c - grouped calls (chorus_group_start / chorus_group_end, as ncclGroupStart/End).
 *
 * Calls made while the thread's group is open are checked and kept, not posted. At the
 * outermost chorus_group_end the calls of each communicator are posted together, fused where
 * that saves wire operations: every rank's group holds the same collectives, so every rank
 * forms the same fused operations, in the same order. A fused operation is an ordinary task
 * over a packed buffer (packed here, unpacked when it ends, by its on_done hook) whose
 * members' requests complete with it. Its signature carries a hash of the group's shape in
 * place of the root (task.h), so ranks whose groups differ get ERR_MISMATCH instead of
 * results cut at the wrong places. Point-to-point calls are posted as they are: they progress
 * together anyway (progress.c).
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/live.h"
#include "core/log.h"

typedef struct {
  chorus_req_t* req;
  int blocking;            /* group_end waits for it, reports its status and frees it */
  chorus_msg_info_t* info; /* a blocking receive's info, filled at group_end */
} member_t;

/* The calling thread's group: nesting depth and the calls gathered. */
static __thread int group_depth;
static __thread member_t* group_calls;
static __thread size_t group_ncalls, group_cap;

int chorus__group_open(void) { return group_depth > 0; }

int chorus__group_holds(const chorus_comm_t* comm) {
  for (size_t i = 0; i < group_ncalls; i++)
    if (group_calls[i].req->task.comm == comm) return 1;
  return 0;
}

chorus_status_t chorus__group_add(chorus_comm_t* comm, chorus_req_t* req, int blocking, chorus_msg_info_t* info) {
  if (group_ncalls == group_cap) {
    size_t cap = group_cap ? group_cap * 2 : 16;
    member_t* calls = realloc(group_calls, cap * sizeof(*calls));
    if (!calls) {
      chorus__comm_set_error(comm, "%s in a group: out of memory", chorus__coll_name(req->task.args.coll));
      return CHORUS_ERR_NO_MEMORY;
    }
    group_calls = calls;
    group_cap = cap;
  }
  req->task.status = CHORUS_INPROGRESS;
  __atomic_store_n(&req->deferred, 1, __ATOMIC_RELEASE);
  group_calls[group_ncalls++] = (member_t){req, blocking, info};
  return CHORUS_OK;
}

CHORUS_API chorus_status_t chorus_group_start(void) {
  group_depth++;
  return CHORUS_OK;
}

/* ---- fused operations ---- */

/* A fused operation: its members and the packed buffer they share. */
typedef struct {
  chorus_comm_t* comm;
  char* pack;    /* allreduce: the packed vector (in place); allgather: send part, then receive part */
  size_t total;  /* elements of the fused call's count */
  size_t n;
  chorus_seg_t* segs; /* allreduce: the members' buffers, for algorithms that take them as they are */
  size_t nsegs;
  chorus_req_t* members[];
} fused_t;

/* Which calls fuse with which: same kind and, for allreduce, same dtype, op and compression
 * (calls the communicator's setting leaves exact for their size fuse only with each other, and
 * their fused operation, larger than any of them, stays exact too); allgather, same dtype.
 * 0: not fused. Under comm->mu. */
static uint64_t fuse_key(const chorus_comm_t* comm, const chorus_task_t* t) {
  const chorus_coll_args_t* a = &t->args;
  switch (a->coll) {
    case CH_COLL_ALLREDUCE: /* a call with its own compression or residual runs on its own */
      if (a->zip_given || a->residual) return 0;
      return 1 | (uint64_t)a->dtype << 8 | (uint64_t)a->op << 16 | (uint64_t)chorus__compression_exact_by_size(comm, a) << 24;
    case CH_COLL_ALLGATHER: return 2 | (uint64_t)a->dtype << 8;
    case CH_COLL_BARRIER: return 3;
    default: return 0;
  }
}

/* Bytes a call adds to a fused operation (its largest buffer). */
static size_t fused_bytes(const chorus_task_t* t) {
  size_t b = t->args.count * t->dtype_size;
  return t->args.coll == CH_COLL_ALLGATHER ? b * (size_t)t->nranks : b;
}

/* Bytes of the caller's buffers a call reads and writes (task.h). */
static size_t touched_by(const chorus_task_t* t) {
  size_t b = t->args.count * t->dtype_size;
  return chorus__touched_bytes(t->args.sendbuf, b, t->args.recvbuf, fused_bytes(t));
}

/* The shape of a communicator's group: its collectives' kinds, dtypes, ops, roots and counts
 * in order (never 0). */
static uint32_t group_shape(member_t* const* calls, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    const chorus_coll_args_t* a = &calls[i]->req->task.args;
    if (chorus__coll_is_p2p(a->coll)) continue;
    uint64_t words[3] = {(uint64_t)a->coll | (uint64_t)a->dtype << 8 | (uint64_t)a->op << 16,
                         (uint64_t)(uint32_t)a->root, a->count};
    for (int w = 0; w < 3; w++) h = (h ^ words[w]) * 1099511628211ull;
  }
  uint32_t shape = (uint32_t)(h ^ (h >> 32));
  return shape ? shape : 1;
}

static void fused_unpack(const fused_t* f, const chorus_task_t* t) {
  size_t es = t->dtype_size, off = 0;
  for (size_t i = 0; i < f->n; i++) {
    const chorus_coll_args_t* a = &f->members[i]->task.args;
    size_t bytes = a->count * es;
    if (a->coll == CH_COLL_ALLREDUCE && bytes) {
      memcpy(a->recvbuf, f->pack + off * es, bytes);
    } else if (a->coll == CH_COLL_ALLGATHER && bytes) {
      const char* recv = f->pack + f->total * es; /* rank r's block holds every member's part */
      for (int r = 0; r < t->nranks; r++)
        memcpy((char*)a->recvbuf + (size_t)r * bytes, recv + ((size_t)r * f->total + off) * es, bytes);
    }
    off += a->count;
  }
}

/* The fused task starts: its members' inputs go into the packed buffer now, so that they are
 * still in cache when it runs. */
static void fused_start(chorus_task_t* t) {
  fused_t* f = t->on_done_arg;
  if (t->algo->takes_segments && t->segs) return; /* it reads the members where they are */
  size_t es = t->dtype_size, off = 0;
  for (size_t i = 0; i < f->n; i++) {
    const chorus_coll_args_t* a = &f->members[i]->task.args;
    if (a->count) memcpy(f->pack + off * es, a->sendbuf, a->count * es);
    off += a->count;
  }
}

/* The fused task ended: its members get the result and its status. */
static void fused_done(chorus_task_t* t, chorus_status_t st) {
  fused_t* f = t->on_done_arg;
  if (st == CHORUS_OK && !(t->algo->takes_segments && t->segs)) fused_unpack(f, t);
  for (size_t i = 0; i < f->n; i++) chorus__engine_complete(f->comm, f->members[i], st);
  chorus__scratch_give(f->comm, f->pack);
  free(f->segs);
  free(f);
}

/* Ends calls that could not be posted with st. */
static void fail_calls(chorus_comm_t* comm, chorus_req_t* const* reqs, size_t n, chorus_status_t st) {
  for (size_t i = 0; i < n; i++) {
    chorus__engine_attach(comm, reqs[i]);
    chorus__engine_complete(comm, reqs[i], st);
  }
}

/* Posts one call as it is (with the group's shape when it is a fused piece of one call). With
 * `drives`, the caller of chorus_group_end drives the communicator's operations while it waits
 * for its blocking calls (no hand-off to the background thread, which takes over only what is
 * left then); without (no blocking call there), the background thread runs them at once. */
static void post_single(chorus_comm_t* comm, chorus_req_t* req, int drives) {
  __atomic_store_n(&req->deferred, 0, __ATOMIC_RELEASE);
  req->task.caller_drives = drives;
  chorus_status_t st = chorus__coll_post(comm, &req->task);
  if (st < 0) fail_calls(comm, &req, 1, st);
}

/* Posts n calls of one fuse key as one operation over a packed buffer; bucket_bytes: what all
 * the calls of their key touch (touched_by). */
static void post_fused(chorus_comm_t* comm, chorus_req_t* const* reqs, size_t n, uint32_t shape, size_t bucket_bytes,
                       int drives) {
  const chorus_task_t* t0 = &reqs[0]->task;
  size_t es = t0->dtype_size, total = 0;
  for (size_t i = 0; i < n; i++) total += reqs[i]->task.args.count;
  int gather = t0->args.coll == CH_COLL_ALLGATHER;
  size_t pack_elems = gather ? total * (1 + (size_t)t0->nranks) : t0->args.coll == CH_COLL_ALLREDUCE ? total : 0;
  fused_t* f = calloc(1, sizeof(*f) + n * sizeof(chorus_req_t*));
  chorus_req_t* fused = calloc(1, sizeof(*fused));
  char* pack = pack_elems ? chorus__scratch_take(comm, pack_elems * es) : NULL;
  chorus_seg_t* segs = t0->args.coll == CH_COLL_ALLREDUCE ? calloc(n, sizeof(*segs)) : NULL;
  for (size_t i = 0; i < n; i++) __atomic_store_n(&reqs[i]->deferred, 0, __ATOMIC_RELEASE);
  if (!f || !fused || (pack_elems && !pack) || (t0->args.coll == CH_COLL_ALLREDUCE && !segs)) {
    free(f);
    free(fused);
    chorus__scratch_give(comm, pack);
    free(segs);
    chorus__comm_set_error(comm, "chorus_group_end: out of memory fusing %zu %ss", n, chorus__coll_name(t0->args.coll));
    fail_calls(comm, reqs, n, CHORUS_ERR_NO_MEMORY);
    return;
  }
  for (size_t i = 0, off = 0; i < n; i++) {
    const chorus_coll_args_t* a = &reqs[i]->task.args;
    f->members[i] = reqs[i];
    if (segs && a->count) segs[f->nsegs++] = (chorus_seg_t){a->sendbuf, a->recvbuf, off, a->count};
    off += a->count;
  }
  f->comm = comm;
  f->pack = pack;
  f->total = total;
  f->n = n;
  f->segs = segs;
  chorus_coll_args_t a = {.coll = t0->args.coll, .sendbuf = pack, .recvbuf = gather ? pack + total * es : pack,
                          .count = total, .dtype = t0->args.dtype, .op = t0->args.op, .shape = shape};
  if (a.coll == CH_COLL_BARRIER) a.dtype = CHORUS_UINT8;
  if (chorus__compression_exact_by_size(comm, &t0->args)) {
    a.zip_given = 1; /* as its members would have gone: uncompressed */
    a.zip = (chorus_compression_opts_t){.codec = CHORUS_COMPRESSION_NONE};
  }
  chorus__coll_prepare(&fused->task, comm, &a);
  if (f->nsegs) {
    fused->task.segs = f->segs;
    fused->task.nsegs = f->nsegs;
  }
  fused->task.group_bytes = bucket_bytes;
  /* The members are waited on, but they wait as long as the fused operation does. */
  for (size_t i = 0; i < n; i++) reqs[i]->task.spins_long = fused->task.spins_long;
  fused->task.on_start = fused_start;
  fused->task.on_done = fused_done;
  fused->task.caller_drives = drives;
  fused->task.on_done_arg = f;
  fused->user_released = 1; /* the engine frees it when it ends */
  for (size_t i = 0; i < n; i++) chorus__engine_attach(comm, reqs[i]);
  chorus_status_t st = chorus__coll_post(comm, &fused->task);
  /* Its selection is made: the members' waits spin as long as its own would (progress.c). It
   * cannot have ended yet, since the engine runs only under comm->mu, which this thread holds. */
  for (size_t i = 0; st >= 0 && i < n; i++) reqs[i]->task.predicted_us = fused->task.predicted_us;
  if (st < 0) { /* never queued: its members end here */
    for (size_t i = 0; i < n; i++) chorus__engine_complete(comm, reqs[i], st);
    chorus__scratch_give(comm, pack);
    free(segs);
    free(f);
    free(fused);
  }
}

/* Posts the calls of one fuse key in pieces of at most CHORUS_GROUP_FUSE_BYTES (a call is never
 * split; a piece of one call runs on the call's own buffers). */
static void post_bucket(chorus_comm_t* comm, chorus_req_t** reqs, size_t n, uint32_t shape, int drives) {
  size_t limit = comm->group_fuse_bytes, bucket_bytes = 0;
  for (size_t i = 0; i < n; i++) bucket_bytes += touched_by(&reqs[i]->task);
  for (size_t first = 0; first < n;) {
    size_t end = first + 1, bytes = fused_bytes(&reqs[first]->task);
    while (end < n && bytes + fused_bytes(&reqs[end]->task) <= limit) bytes += fused_bytes(&reqs[end++]->task);
    if (end - first == 1) {
      reqs[first]->task.args.shape = shape;
      post_single(comm, reqs[first], drives);
    } else {
      post_fused(comm, reqs + first, end - first, shape, bucket_bytes, drives);
    }
    first = end;
  }
}

/* Posts a communicator's calls of the group (calls[0..n), in the order they were made). Returns
 * whether some are blocking: then chorus_group_end's caller drives them. */
static int post_comm(chorus_comm_t* comm, member_t** calls, size_t n) {
  chorus_req_t** bucket = malloc(n * sizeof(*bucket));
  char* done = calloc(n, 1);
  int drives = 0;
  for (size_t i = 0; i < n; i++) drives |= calls[i]->blocking;
  pthread_mutex_lock(&comm->mu);
  chorus_status_t refused = CHORUS_OK;
  if (__atomic_load_n(&comm->broken, __ATOMIC_ACQUIRE) || __atomic_load_n(&comm->abort_requested, __ATOMIC_ACQUIRE))
    refused = CHORUS_ERR_COMM_BROKEN;
  else if (!bucket || !done) {
    chorus__comm_set_error(comm, "chorus_group_end: out of memory");
    refused = CHORUS_ERR_NO_MEMORY;
  }
  if (refused < 0) {
    for (size_t i = 0; i < n; i++) {
      __atomic_store_n(&calls[i]->req->deferred, 0, __ATOMIC_RELEASE);
      fail_calls(comm, &calls[i]->req, 1, refused);
    }
  }
  uint32_t shape = refused < 0 ? 0 : group_shape(calls, n);
  for (size_t i = 0; i < n && refused == CHORUS_OK; i++) {
    if (done[i]) continue;
    uint64_t key = comm->group_fuse_bytes ? fuse_key(comm, &calls[i]->req->task) : 0;
    size_t nb = 0;
    for (size_t j = i; j < n && key; j++)
      if (!done[j] && fuse_key(comm, &calls[j]->req->task) == key) {
        bucket[nb++] = calls[j]->req;
        done[j] = 1;
      }
    if (nb >= 2) post_bucket(comm, bucket, nb, shape, drives);
    else post_single(comm, calls[i]->req, drives);
    done[i] = 1;
  }
  pthread_mutex_unlock(&comm->mu);
  free(bucket);
  free(done);
  return drives;
}

/* A blocking call's status once it has ended. The members of a fused operation end together,
 * so after the first wait the others have ended already: their status is read without taking
 * the communicator's lock (it is stored last, with release order). */
static chorus_status_t wait_call(chorus_req_t* req) {
  chorus_status_t st = __atomic_load_n(&req->task.status, __ATOMIC_ACQUIRE);
  return st == CHORUS_INPROGRESS ? chorus__engine_wait(req->task.comm, &req->task) : st;
}

/* Frees the ended blocking calls ended[0..n), a communicator's run of them under one lock. */
static void release_ended(member_t* const* ended, size_t n) {
  chorus_req_t* run[64];
  for (size_t i = 0; i < n;) {
    chorus_comm_t* comm = ended[i]->req->task.comm;
    size_t k = 0;
    while (i < n && k < 64 && ended[i]->req->task.comm == comm) run[k++] = ended[i++]->req;
    chorus__engine_release_done(comm, run, k);
  }
}

CHORUS_API chorus_status_t chorus_group_end(void) {
  if (group_depth == 0) return CHORUS_ERR_INVALID_USAGE;
  if (--group_depth > 0) return CHORUS_OK;
  size_t n = group_ncalls;
  member_t* calls = group_calls;
  group_calls = NULL;
  group_ncalls = group_cap = 0;
  member_t** mine = malloc((n ? n : 1) * sizeof(*mine));
  char* posted = calloc(n ? n : 1, 1);
  chorus_comm_t** comms = malloc((n ? n : 1) * sizeof(*comms));
  char* drives = calloc(n ? n : 1, 1); /* per communicator: its blocking calls are waited for here */
  size_t ncomms = 0;
  chorus_status_t first = CHORUS_OK;
  if (!mine || !posted || !comms || !drives) first = CHORUS_ERR_NO_MEMORY;
  /* Each communicator's calls, communicators in the order of their first call. */
  for (size_t i = 0; i < n && first == CHORUS_OK; i++) {
    if (posted[i]) continue;
    chorus_comm_t* comm = calls[i].req->task.comm;
    comms[ncomms++] = comm;
    size_t k = 0;
    for (size_t j = i; j < n; j++)
      if (!posted[j] && calls[j].req->task.comm == comm) {
        mine[k++] = &calls[j];
        posted[j] = 1;
      }
    drives[ncomms - 1] = (char)post_comm(comm, mine, k);
  }
  /* The blocking calls end here: their status, the first error returned. This thread drives
   * the group's operations from one wait to the next. */
  for (size_t k = 0; k < ncomms; k++)
    if (drives[k]) chorus__engine_hold_bg(comms[k], 1);
  size_t nended = 0;
  for (size_t i = 0; i < n; i++) {
    if (!calls[i].blocking) continue;
    chorus_req_t* req = calls[i].req;
    int was_posted = posted && posted[i];
    chorus_status_t st = was_posted ? wait_call(req) : CHORUS_ERR_NO_MEMORY;
    if (st < 0 && first == CHORUS_OK) first = st;
    if (calls[i].info && req->task.got_src >= 0) {
      calls[i].info->source = req->task.got_src;
      calls[i].info->tag = req->task.got_tag;
      calls[i].info->count = req->task.got_count;
    }
    if (was_posted && mine) mine[nended++] = &calls[i];
    else free(req);
  }
  release_ended(mine, nended);
  /* What the group left running (its non-blocking calls) goes to the background threads. */
  for (size_t k = 0; k < ncomms; k++)
    if (drives[k]) chorus__engine_hold_bg(comms[k], 0);
  free(comms);
  free(drives);
  free(mine);
  free(posted);
  free(calls);
  return first;
}
