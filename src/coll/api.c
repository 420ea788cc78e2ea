/*
 * api.c - the public collective and point-to-point calls. Each packs its arguments and goes
 * through one path, under the communicator's lock: check, select, init the algorithm, stamp
 * sequence numbers, queue; blocking calls then drive it to the end in the caller's thread.
 */
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "core/live.h"
#include "core/log.h"

/* Fields that do not take part in a call are zeroed so frame signatures compare equal. */
static void normalise(chorus_coll_args_t* a) {
  if (!chorus__coll_reduces(a->coll)) a->op = CHORUS_SUM;
  if (!chorus__coll_rooted(a->coll) && !chorus__coll_is_p2p(a->coll)) a->root = 0;
  if (a->coll == CH_COLL_BARRIER) a->dtype = CHORUS_UINT8;
}

/* Collectives are numbered per communicator; point-to-point messages per ordered pair (the
 * number names a large message's rendezvous, match.h), receives per source for the log. */
static void stamp_sequence(chorus_comm_t* comm, chorus_task_t* t) {
  const chorus_coll_args_t* a = &t->args;
  if (!chorus__coll_is_p2p(a->coll)) {
    t->seq = t->send_seq = t->recv_seq = comm->next_seq++;
    return;
  }
  int dst = (a->coll == CH_COLL_RECV) ? -1 : a->root;
  int has_src = a->coll != CH_COLL_SEND;
  int src = a->coll == CH_COLL_RECV ? a->root : a->peer;
  if (dst >= 0) t->send_seq = comm->p2p_send_seq[dst]++;
  if (has_src) t->recv_seq = src == CHORUS_ANY_SOURCE ? comm->p2p_any_seq++ : comm->p2p_recv_seq[src]++;
  t->seq = dst >= 0 ? t->send_seq : t->recv_seq;
}

/* "chorus_allreduce", for messages about the call itself. */
static const char* const call_names[CH_COLL_COUNT] = {
#define CHORUS_XX_(name, str) "chorus_" str,
    CHORUS_COLL_MAP(CHORUS_XX_)
#undef CHORUS_XX_
};

/* Fills in a task for call a on comm: everything but the algorithm's own state. */
static void task_prepare(chorus_task_t* t, chorus_comm_t* comm, const chorus_coll_args_t* a, int blocking,
                         int internal) {
  t->args = *a;
  t->comm = comm;
  t->rank = comm->rank;
  t->nranks = comm->nranks;
  t->topo = &comm->topo;
  t->cost = &comm->cost;
  t->dtype_size = chorus_dtype_size(a->dtype);
  t->chunk_bytes = comm->msg_chunk_bytes;
  t->pipe_unit_bytes = comm->chunk_bytes;
  t->spins_long = chorus__cost_latency_bound(&comm->cost, (double)a->count * (double)t->dtype_size);
  t->cpu_per_rank = !comm->oversubscribed;
  t->blocking = blocking;
  t->internal = internal;
  t->got_src = -1; /* no message matched yet */
}

/* Selects and prepares the algorithm, stamps the sequence numbers and queues t; a blocking call
 * also runs it to the end. comm->mu held. *queued says whether t went into the queue (if not,
 * its algorithm state is released here). */
static chorus_status_t post(chorus_comm_t* comm, chorus_task_t* t, int* queued, int drive_first);

/* chorus_group_end queues its calls whole, under one hold of the lock: none drives first. */
chorus_status_t chorus__coll_post(chorus_comm_t* comm, chorus_task_t* t) {
  int queued;
  return post(comm, t, &queued, 0);
}

/* A non-blocking collective whose buffers are at most this many bytes may be driven by the
 * thread that posts it before the background thread takes over (core/progress.c,
 * chorus__engine_post): handing every call to that thread costs its wake-up, and the waiting
 * caller's, each time, several microseconds on shared cores (2 ranks, post then wait,
 * `chorus-perf allreduce -z 1`: 8 B 3.7 us against 0.59 blocking, 4 KiB 7.8 against 1.9,
 * 2026-12-06). Larger calls return at once: a pass of theirs may copy for long, and their
 * callers post them to overlap. Not point-to-point operations (an irecv posted before its isend
 * would hold the isend back for the whole spin), nor variable-size ones. */
#define DRIVE_FIRST_MAX_BYTES (256u * 1024u)

static int drives_first(const chorus_comm_t* comm, const chorus_task_t* t) {
  if (t->blocking || chorus__coll_is_p2p(t->args.coll) || chorus__coll_is_v(t->args.coll)) return 0;
  size_t send_bytes, recv_bytes;
  chorus__args_buffer_bytes(comm, &t->args, t->dtype_size, &send_bytes, &recv_bytes);
  return send_bytes <= DRIVE_FIRST_MAX_BYTES && recv_bytes <= DRIVE_FIRST_MAX_BYTES;
}

void chorus__coll_prepare(chorus_task_t* t, chorus_comm_t* comm, const chorus_coll_args_t* a) {
  task_prepare(t, comm, a, 0, 0);
}

static chorus_status_t post(chorus_comm_t* comm, chorus_task_t* t, int* queued, int drive_first) {
  *queued = 0;
  chorus_status_t st = CHORUS_OK;
  chorus__compression_resolve(comm, t);
  if (t->internal) t->algo = chorus__algo_find(t->args.coll, NULL);
  else st = chorus__select(comm, t);
  if (st >= 0) st = t->algo->init(t);
  if (st < 0) {
    if (st == CHORUS_ERR_NO_MEMORY)
      chorus__comm_set_error(comm, "%s: out of memory preparing algorithm %s", chorus__coll_name(t->args.coll),
                             t->algo ? t->algo->name : "?");
    return st;
  }
  stamp_sequence(comm, t);
  /* Not the library's own exchanges (the link probe's): a line each made the probe time the log
   * instead of the link (2 ranks on one host: alpha 16-36 us with CHORUS_LOG_LEVEL=info or debug,
   * 1.1-1.3 without), and so made the choices differ with the log level. */
  if (!t->internal)
    CH_INFO(COLL, comm->rank, "%s #%llu: %zu x %s, op %s, root %d, algo %s", chorus__coll_name(t->args.coll),
            (unsigned long long)t->seq, t->args.count, chorus_dtype_name(t->args.dtype), chorus_op_name(t->args.op),
            t->args.root, t->algo->name);
  if (t->blocking) {
    st = chorus__engine_run(comm, t, queued);
  } else {
    st = chorus__engine_post(comm, t, drive_first);
    *queued = st >= 0;
  }
  if (!*queued && t->algo->fini) t->algo->fini(t);
  return st;
}

/* A message's source, tag and count, once a receive matched one. */
static void fill_info(const chorus_task_t* t, chorus_msg_info_t* info) {
  info->source = t->got_src;
  info->tag = t->got_tag;
  info->count = t->got_count;
}

static chorus_status_t start_call(chorus_comm_t* comm, chorus_coll_args_t a, int blocking, int internal,
                                  chorus_req_t** out, chorus_msg_info_t* info) {
  /* A NULL, destroyed or never-created communicator: refused without touching its memory. */
  if (!chorus__live_check(comm, call_names[a.coll])) return CHORUS_ERR_INVALID_ARG;
  if (!blocking && !out) {
    chorus__comm_set_error(comm, "%s: the request pointer is NULL", chorus__coll_name(a.coll));
    return CHORUS_ERR_INVALID_ARG;
  }
  if (out) *out = NULL;
  normalise(&a);
  pthread_mutex_lock(&comm->mu);
  if (__atomic_load_n(&comm->broken, __ATOMIC_ACQUIRE) || __atomic_load_n(&comm->abort_requested, __ATOMIC_ACQUIRE)) {
    /* Keep the sentence of the original failure: it is what the user needs. */
    pthread_mutex_unlock(&comm->mu);
    return CHORUS_ERR_COMM_BROKEN;
  }
  chorus_status_t st = chorus__args_check(comm, &a);
  if (st >= 0 && (a.zip_given || a.residual)) st = chorus__compression_check_opts(comm, &a);
  void* vec = NULL;
  if (st >= 0 && chorus__coll_is_v(a.coll)) st = chorus__vargs_prepare(comm, &a, &vec);
  if (st < 0) {
    pthread_mutex_unlock(&comm->mu);
    CH_INFO(COLL, comm->rank, "%s", comm->last_error);
    return st;
  }
  /* A blocking call's request lives exactly as long as the call: on this stack. In a group,
   * every call gets one on the heap, posted by chorus_group_end. */
  int grouped = !internal && chorus__group_open();
  chorus_req_t on_stack, *req = &on_stack;
  if (!blocking || grouped) req = chorus__engine_new_req(comm);
  else memset(req, 0, sizeof(*req));
  if (!req) {
    pthread_mutex_unlock(&comm->mu);
    free(vec);
    return CHORUS_ERR_NO_MEMORY;
  }
  if (grouped) {
    task_prepare(&req->task, comm, &a, 0, 0);
    st = chorus__group_add(comm, req, blocking, info);
    pthread_mutex_unlock(&comm->mu);
    if (st < 0) {
      free(req);
      return st;
    }
    if (!blocking) *out = req;
    return CHORUS_OK;
  }
  task_prepare(&req->task, comm, &a, blocking, internal);
  req->task.vec = vec; /* from here the task owns it: the engine frees it when the task ends */
  int queued;
  st = post(comm, &req->task, &queued, drives_first(comm, &req->task));
  if (blocking && info && req->task.got_src >= 0) fill_info(&req->task, info);
  pthread_mutex_unlock(&comm->mu);
  if (!queued) free(vec);
  if (blocking) return st;
  if (!queued) {
    free(req);
    return st;
  }
  *out = req;
  return CHORUS_OK;
}

static chorus_status_t start(chorus_comm_t* comm, chorus_coll_args_t a, int blocking, chorus_req_t** out) {
  return start_call(comm, a, blocking, 0, out, NULL);
}

CHORUS_API chorus_status_t chorus_test(chorus_req_t* req, int* done) {
  if (!req || !done) return CHORUS_ERR_INVALID_ARG;
  if (__atomic_load_n(&req->deferred, __ATOMIC_ACQUIRE)) { /* its group is still open */
    *done = 0;
    return CHORUS_INPROGRESS;
  }
  *done = chorus__engine_test(req->task.comm, &req->task);
  return *done ? req->task.status : CHORUS_INPROGRESS;
}

CHORUS_API chorus_status_t chorus_wait(chorus_req_t* req) {
  if (!req) return CHORUS_ERR_INVALID_ARG;
  if (__atomic_load_n(&req->deferred, __ATOMIC_ACQUIRE)) {
    chorus_comm_t* comm = req->task.comm;
    pthread_mutex_lock(&comm->mu);
    chorus__comm_set_error(comm, "chorus_wait: the request belongs to a group that is still open (call "
                           "chorus_group_end first)");
    pthread_mutex_unlock(&comm->mu);
    return CHORUS_ERR_INVALID_USAGE;
  }
  return chorus__engine_wait(req->task.comm, &req->task);
}

CHORUS_API chorus_status_t chorus_req_info(chorus_req_t* req, chorus_msg_info_t* info) {
  if (!req || !info) return CHORUS_ERR_INVALID_ARG;
  chorus_coll_t c = req->task.args.coll;
  if (c != CH_COLL_RECV && c != CH_COLL_SENDRECV) return CHORUS_ERR_INVALID_ARG;
  chorus_status_t st = __atomic_load_n(&req->task.status, __ATOMIC_ACQUIRE);
  if (st == CHORUS_INPROGRESS || __atomic_load_n(&req->deferred, __ATOMIC_ACQUIRE)) return CHORUS_INPROGRESS;
  if (req->task.got_src < 0) return st < 0 ? st : CHORUS_ERR_INTERNAL;
  fill_info(&req->task, info);
  return CHORUS_OK;
}

CHORUS_API void chorus_req_free(chorus_req_t* req) {
  if (req) chorus__engine_release(req->task.comm, req);
}

/* ---- the calls ---- */

#define ARGS(coll_, send_, recv_, count_, dtype_, op_, root_) \
  (chorus_coll_args_t) { .coll = (coll_), .sendbuf = (send_), .recvbuf = (recv_), .count = (count_), \
                         .dtype = (dtype_), .op = (op_), .root = (root_) }
#define P2P_ARGS(coll_, send_, recv_, count_, dtype_, peer_, tag_) \
  (chorus_coll_args_t) { .coll = (coll_), .sendbuf = (send_), .recvbuf = (recv_), .count = (count_), \
                         .dtype = (dtype_), .op = CHORUS_SUM, .root = (peer_), .tag = (tag_) }

CHORUS_API chorus_status_t chorus_allreduce(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op, chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_ALLREDUCE, s, r, n, dt, op, 0), 1, NULL);
}
CHORUS_API chorus_status_t chorus_iallreduce(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_ALLREDUCE, s, r, n, dt, op, 0), 0, q);
}
/* The options of chorus_allreduce_ex in the call's arguments (copied: opts need not outlive it). */
static chorus_coll_args_t allreduce_ex_args(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op,
                                            const chorus_allreduce_opts_t* opts) {
  chorus_coll_args_t a = ARGS(CH_COLL_ALLREDUCE, s, r, n, dt, op, 0);
  if (opts && opts->compression) {
    a.zip_given = 1;
    a.zip = *opts->compression;
  }
  if (opts) a.residual = opts->residual;
  return a;
}
CHORUS_API chorus_status_t chorus_allreduce_ex(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op,
                                               const chorus_allreduce_opts_t* opts, chorus_comm_t* c) {
  return start(c, allreduce_ex_args(s, r, n, dt, op, opts), 1, NULL);
}
CHORUS_API chorus_status_t chorus_iallreduce_ex(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op,
                                                const chorus_allreduce_opts_t* opts, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, allreduce_ex_args(s, r, n, dt, op, opts), 0, q);
}
CHORUS_API chorus_status_t chorus_broadcast(const void* s, void* r, size_t n, chorus_dtype_t dt, int root, chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_BROADCAST, s, r, n, dt, CHORUS_SUM, root), 1, NULL);
}
CHORUS_API chorus_status_t chorus_ibroadcast(const void* s, void* r, size_t n, chorus_dtype_t dt, int root, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_BROADCAST, s, r, n, dt, CHORUS_SUM, root), 0, q);
}
CHORUS_API chorus_status_t chorus_reduce(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op, int root, chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_REDUCE, s, r, n, dt, op, root), 1, NULL);
}
CHORUS_API chorus_status_t chorus_ireduce(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op, int root, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_REDUCE, s, r, n, dt, op, root), 0, q);
}
CHORUS_API chorus_status_t chorus_allgather(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_ALLGATHER, s, r, n, dt, CHORUS_SUM, 0), 1, NULL);
}
CHORUS_API chorus_status_t chorus_iallgather(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_ALLGATHER, s, r, n, dt, CHORUS_SUM, 0), 0, q);
}
CHORUS_API chorus_status_t chorus_reduce_scatter(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op, chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_REDUCE_SCATTER, s, r, n, dt, op, 0), 1, NULL);
}
CHORUS_API chorus_status_t chorus_ireduce_scatter(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_op_t op, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_REDUCE_SCATTER, s, r, n, dt, op, 0), 0, q);
}
CHORUS_API chorus_status_t chorus_alltoall(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_ALLTOALL, s, r, n, dt, CHORUS_SUM, 0), 1, NULL);
}
CHORUS_API chorus_status_t chorus_ialltoall(const void* s, void* r, size_t n, chorus_dtype_t dt, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_ALLTOALL, s, r, n, dt, CHORUS_SUM, 0), 0, q);
}
CHORUS_API chorus_status_t chorus_gather(const void* s, void* r, size_t n, chorus_dtype_t dt, int root, chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_GATHER, s, r, n, dt, CHORUS_SUM, root), 1, NULL);
}
CHORUS_API chorus_status_t chorus_igather(const void* s, void* r, size_t n, chorus_dtype_t dt, int root, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_GATHER, s, r, n, dt, CHORUS_SUM, root), 0, q);
}
CHORUS_API chorus_status_t chorus_scatter(const void* s, void* r, size_t n, chorus_dtype_t dt, int root, chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_SCATTER, s, r, n, dt, CHORUS_SUM, root), 1, NULL);
}
CHORUS_API chorus_status_t chorus_iscatter(const void* s, void* r, size_t n, chorus_dtype_t dt, int root, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_SCATTER, s, r, n, dt, CHORUS_SUM, root), 0, q);
}
CHORUS_API chorus_status_t chorus_barrier(chorus_comm_t* c) {
  return start(c, ARGS(CH_COLL_BARRIER, NULL, NULL, 0, CHORUS_UINT8, CHORUS_SUM, 0), 1, NULL);
}
CHORUS_API chorus_status_t chorus_ibarrier(chorus_comm_t* c, chorus_req_t** q) {
  return start(c, ARGS(CH_COLL_BARRIER, NULL, NULL, 0, CHORUS_UINT8, CHORUS_SUM, 0), 0, q);
}
CHORUS_API chorus_status_t chorus_send(const void* b, size_t n, chorus_dtype_t dt, int peer, chorus_comm_t* c) {
  return start(c, P2P_ARGS(CH_COLL_SEND, b, NULL, n, dt, peer, 0), 1, NULL);
}
CHORUS_API chorus_status_t chorus_isend(const void* b, size_t n, chorus_dtype_t dt, int peer, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, P2P_ARGS(CH_COLL_SEND, b, NULL, n, dt, peer, 0), 0, q);
}
CHORUS_API chorus_status_t chorus_recv(void* b, size_t n, chorus_dtype_t dt, int peer, chorus_comm_t* c) {
  return start(c, P2P_ARGS(CH_COLL_RECV, NULL, b, n, dt, peer, 0), 1, NULL);
}
CHORUS_API chorus_status_t chorus_irecv(void* b, size_t n, chorus_dtype_t dt, int peer, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, P2P_ARGS(CH_COLL_RECV, NULL, b, n, dt, peer, 0), 0, q);
}
CHORUS_API chorus_status_t chorus_send_tag(const void* b, size_t n, chorus_dtype_t dt, int peer, int tag, chorus_comm_t* c) {
  return start(c, P2P_ARGS(CH_COLL_SEND, b, NULL, n, dt, peer, tag), 1, NULL);
}
CHORUS_API chorus_status_t chorus_isend_tag(const void* b, size_t n, chorus_dtype_t dt, int peer, int tag, chorus_comm_t* c,
                                            chorus_req_t** q) {
  return start(c, P2P_ARGS(CH_COLL_SEND, b, NULL, n, dt, peer, tag), 0, q);
}
CHORUS_API chorus_status_t chorus_recv_tag(void* b, size_t n, chorus_dtype_t dt, int peer, int tag, chorus_comm_t* c,
                                           chorus_msg_info_t* info) {
  return start_call(c, P2P_ARGS(CH_COLL_RECV, NULL, b, n, dt, peer, tag), 1, 0, NULL, info);
}
CHORUS_API chorus_status_t chorus_irecv_tag(void* b, size_t n, chorus_dtype_t dt, int peer, int tag, chorus_comm_t* c,
                                            chorus_req_t** q) {
  return start(c, P2P_ARGS(CH_COLL_RECV, NULL, b, n, dt, peer, tag), 0, q);
}

/* The variable-size calls: arrays as given, checked and copied by start_call. */
static chorus_coll_args_t v_args(chorus_coll_t coll, const void* s, const size_t* sc, const size_t* sd, void* r,
                                 const size_t* rc, const size_t* rd, size_t n, chorus_dtype_t dt, chorus_op_t op,
                                 int root) {
  chorus_coll_args_t a = ARGS(coll, s, r, n, dt, op, root);
  a.sendcounts = sc;
  a.sdispls = sd;
  a.recvcounts = rc;
  a.rdispls = rd;
  return a;
}
#define V_ALLGATHERV v_args(CH_COLL_ALLGATHERV, s, NULL, NULL, r, rc, rd, n, dt, CHORUS_SUM, 0)
#define V_REDUCE_SCATTERV v_args(CH_COLL_REDUCE_SCATTERV, s, NULL, NULL, r, rc, NULL, 0, dt, op, 0)
#define V_ALLTOALLV v_args(CH_COLL_ALLTOALLV, s, sc, sd, r, rc, rd, 0, dt, CHORUS_SUM, 0)
#define V_GATHERV v_args(CH_COLL_GATHERV, s, NULL, NULL, r, rc, rd, n, dt, CHORUS_SUM, root)
#define V_SCATTERV v_args(CH_COLL_SCATTERV, s, sc, sd, r, NULL, NULL, n, dt, CHORUS_SUM, root)

CHORUS_API chorus_status_t chorus_allgatherv(const void* s, size_t n, void* r, const size_t* rc, const size_t* rd, chorus_dtype_t dt, chorus_comm_t* c) {
  return start(c, V_ALLGATHERV, 1, NULL);
}
CHORUS_API chorus_status_t chorus_iallgatherv(const void* s, size_t n, void* r, const size_t* rc, const size_t* rd, chorus_dtype_t dt, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, V_ALLGATHERV, 0, q);
}
CHORUS_API chorus_status_t chorus_reduce_scatterv(const void* s, void* r, const size_t* rc, chorus_dtype_t dt, chorus_op_t op, chorus_comm_t* c) {
  return start(c, V_REDUCE_SCATTERV, 1, NULL);
}
CHORUS_API chorus_status_t chorus_ireduce_scatterv(const void* s, void* r, const size_t* rc, chorus_dtype_t dt, chorus_op_t op, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, V_REDUCE_SCATTERV, 0, q);
}
CHORUS_API chorus_status_t chorus_alltoallv(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc, const size_t* rd, chorus_dtype_t dt, chorus_comm_t* c) {
  return start(c, V_ALLTOALLV, 1, NULL);
}
CHORUS_API chorus_status_t chorus_ialltoallv(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc, const size_t* rd, chorus_dtype_t dt, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, V_ALLTOALLV, 0, q);
}
CHORUS_API chorus_status_t chorus_gatherv(const void* s, size_t n, void* r, const size_t* rc, const size_t* rd, chorus_dtype_t dt, int root, chorus_comm_t* c) {
  return start(c, V_GATHERV, 1, NULL);
}
CHORUS_API chorus_status_t chorus_igatherv(const void* s, size_t n, void* r, const size_t* rc, const size_t* rd, chorus_dtype_t dt, int root, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, V_GATHERV, 0, q);
}
CHORUS_API chorus_status_t chorus_scatterv(const void* s, const size_t* sc, const size_t* sd, void* r, size_t n, chorus_dtype_t dt, int root, chorus_comm_t* c) {
  return start(c, V_SCATTERV, 1, NULL);
}
CHORUS_API chorus_status_t chorus_iscatterv(const void* s, const size_t* sc, const size_t* sd, void* r, size_t n, chorus_dtype_t dt, int root, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, V_SCATTERV, 0, q);
}

static chorus_coll_args_t sendrecv_args(const void* s, size_t sn, int dst, void* r, size_t rn, int src, chorus_dtype_t dt) {
  chorus_coll_args_t a = ARGS(CH_COLL_SENDRECV, s, r, sn, dt, CHORUS_SUM, dst);
  a.recvcount = rn;
  a.peer = src;
  return a;
}
CHORUS_API chorus_status_t chorus_sendrecv(const void* s, size_t sn, int dst, void* r, size_t rn, int src, chorus_dtype_t dt, chorus_comm_t* c) {
  return start(c, sendrecv_args(s, sn, dst, r, rn, src, dt), 1, NULL);
}
CHORUS_API chorus_status_t chorus_isendrecv(const void* s, size_t sn, int dst, void* r, size_t rn, int src, chorus_dtype_t dt, chorus_comm_t* c, chorus_req_t** q) {
  return start(c, sendrecv_args(s, sn, dst, r, rn, src, dt), 0, q);
}

chorus_status_t chorus__sendrecv_internal(const void* s, size_t sn, int dst, void* r, size_t rn, int src,
                                          chorus_comm_t* c) {
  return start_call(c, sendrecv_args(s, sn, dst, r, rn, src, CHORUS_UINT8), 1, 1, NULL, NULL);
}
