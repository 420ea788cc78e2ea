/*
 * conn.c - the glue between algorithms and transports: stamps each posted transfer with the
 * frame header of its task (communicator id, operation signature, sequence number, tag) and
 * hands it to the peer's transport. Also the `self` transport (rank to itself), the frame
 * checks, the transfer queues, and the verdict after a timeout (who never posted the
 * operation), from the signatures same-host ranks publish and the status frames peers send.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/comm.h"
#include "transport/transport.h"

/* How long a rank that timed out waits for its peers' status frames. */
#define VERDICT_WAIT_MS 1000

static void fill_header(const chorus_task_t* t, chorus_xfer_t* x) {
  chorus_frame_hdr_t* h = &x->hdr;
  memset(h, 0, sizeof(*h));
  h->magic = CHORUS_FRAME_MAGIC;
  h->version = CHORUS_PROTO_VERSION;
  h->comm_id = t->comm->comm_id;
  h->tag = x->tag;
  h->nbytes = x->nbytes;
  h->seq = x->seq;
  h->dtype = (uint8_t)t->args.dtype;
  h->coll = (uint8_t)t->args.coll;
  h->op = (uint8_t)t->args.op;
  h->root = chorus__task_root_word(t);
  /* allgatherv, reduce_scatterv: what every rank must agree on is the whole counts vector
   * (frame.h); the other variable-size calls give each frame's word when they post it. */
  int whole_vector = t->args.coll == CH_COLL_ALLGATHERV || t->args.coll == CH_COLL_REDUCE_SCATTERV;
  h->count = whole_vector ? t->args.vsig : t->args.count;
}

static chorus_status_t post(chorus_task_t* t, int peer, void* buf, size_t nbytes, uint32_t tag,
                            chorus_xfer_t* x, int is_send, const uint64_t* word) {
  chorus_transport_t* tp = &t->comm->tp;
  if (peer < 0 || peer >= tp->nranks) return CHORUS_ERR_INTERNAL;
  memset(x, 0, sizeof(*x));
  x->task = t;
  x->buf = buf;
  x->nbytes = x->wire_bytes = nbytes;
  x->tag = tag;
  x->peer = peer;
  x->is_send = is_send;
  x->seq = t->seq;
  fill_header(t, x);
  if (word) x->hdr.count = *word;
  if (tp->peers[peer].is_self) return chorus__self_post(tp, x);
  return chorus__stream_post(tp, x);
}

chorus_status_t chorus__conn_isend(chorus_task_t* t, int peer, const void* buf, size_t nbytes,
                                   uint32_t tag, chorus_xfer_t* x) {
  return post(t, peer, (void*)buf, nbytes, tag, x, 1, NULL);
}

chorus_status_t chorus__conn_irecv(chorus_task_t* t, int peer, void* buf, size_t nbytes,
                                   uint32_t tag, chorus_xfer_t* x) {
  return post(t, peer, buf, nbytes, tag, x, 0, NULL);
}

chorus_status_t chorus__conn_post_word(chorus_task_t* t, int is_send, int peer, void* buf, size_t nbytes,
                                       uint32_t tag, uint64_t word, chorus_xfer_t* x) {
  return post(t, peer, buf, nbytes, tag, x, is_send, &word);
}

/* A point-to-point transfer: its header carries the message itself (count and dtype of the
 * message, the user's tag, the pair's message number); match.c decides the frame kind. */
static void p2p_prepare(chorus_task_t* t, int peer, void* buf, size_t nbytes, int tag, chorus_xfer_t* x,
                        int is_send) {
  memset(x, 0, sizeof(*x));
  x->task = t;
  x->buf = buf;
  x->nbytes = nbytes;
  x->peer = peer;
  x->is_send = is_send;
  x->p2p = 1;
  x->any_tag = tag == CHORUS_ANY_TAG;
  x->tag = x->any_tag ? 0 : (uint32_t)tag;
  x->seq = is_send ? t->send_seq : t->recv_seq;
  chorus_frame_hdr_t* h = &x->hdr;
  h->magic = CHORUS_FRAME_MAGIC;
  h->version = CHORUS_PROTO_VERSION;
  h->comm_id = t->comm->comm_id;
  h->coll = CHORUS_FRAME_MSG;
  h->dtype = (uint8_t)t->args.dtype;
  h->tag = x->tag;
  h->seq = x->seq;
  h->nbytes = nbytes;
  h->count = t->dtype_size ? nbytes / t->dtype_size : 0;
}

chorus_status_t chorus__conn_p2p_send(chorus_task_t* t, int peer, const void* buf, size_t nbytes, int tag,
                                      chorus_xfer_t* x) {
  p2p_prepare(t, peer, (void*)buf, nbytes, tag, x, 1);
  return chorus__match_post_send(&t->comm->tp, x);
}

chorus_status_t chorus__conn_p2p_recv(chorus_task_t* t, int peer, void* buf, size_t capacity, int tag,
                                      chorus_xfer_t* x) {
  p2p_prepare(t, peer, buf, capacity, tag, x, 0);
  return chorus__match_post_recv(&t->comm->tp, x);
}

/* ---- self transport: a send and a receive to oneself meet in two queues ---- */

static void xfer_complete(chorus_xfer_t* x) { __atomic_store_n(&x->done, 1, __ATOMIC_RELEASE); }

chorus_status_t chorus__self_post(chorus_transport_t* tp, chorus_xfer_t* x) {
  chorus_peer_t* me = &tp->peers[x->peer];
  chorus_xfer_queue_t* mine = x->is_send ? &me->self_sendq : &me->self_recvq;
  chorus_xfer_queue_t* other = x->is_send ? &me->self_recvq : &me->self_sendq;
  chorus_xfer_t* match = chorus__xq_head(other);
  if (!match) return chorus__xq_push(mine, x) ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
  chorus_xfer_t* send = x->is_send ? x : match;
  chorus_xfer_t* recv = x->is_send ? match : x;
  char why[CHORUS_FRAME_WHY_LEN];
  chorus_status_t st = chorus__frame_check(&send->hdr, &recv->hdr, why, sizeof(why));
  if (st < 0) {
    snprintf(tp->err, sizeof(tp->err), "a send of rank %d to itself does not match its receive: %s",
             tp->rank, why);
    return st;
  }
  if (send->nbytes) memcpy(recv->buf, send->buf, send->nbytes);
  chorus__xq_pop(other);
  xfer_complete(send);
  xfer_complete(recv);
  return CHORUS_OK;
}

/* ---- frames ---- */

void chorus__frame_describe(const chorus_frame_hdr_t* h, char* out, size_t outlen) {
  const char* dt = chorus_dtype_name((chorus_dtype_t)h->dtype);
  if (h->coll == CHORUS_FRAME_MSG || h->coll == CHORUS_FRAME_RTS || h->coll == CHORUS_FRAME_DATA) {
    snprintf(out, outlen, "point-to-point message%s #%llu (%llu x %.15s, tag %u, %llu bytes)",
             h->coll == CHORUS_FRAME_RTS ? " offer" : h->coll == CHORUS_FRAME_DATA ? " data" : "",
             (unsigned long long)h->seq, (unsigned long long)h->count, dt ? dt : "?", h->tag,
             (unsigned long long)h->nbytes);
    return;
  }
  const char* op = chorus_op_name((chorus_op_t)h->op);
  /* The count word of the variable-size calls (frame.h) says what it is; collectives without a
   * root carry a fused group's shape there (task.h). */
  char count[40];
  if (h->coll == CH_COLL_ALLGATHERV || h->coll == CH_COLL_REDUCE_SCATTERV)
    snprintf(count, sizeof(count), "counts hash %016llx", (unsigned long long)h->count);
  else if (h->coll == CH_COLL_ALLTOALLV)
    snprintf(count, sizeof(count), "%llu expected back", (unsigned long long)h->count);
  else
    snprintf(count, sizeof(count), "count %llu", (unsigned long long)h->count);
  int shape = !chorus__coll_rooted((chorus_coll_t)h->coll) && h->root != 0;
  snprintf(out, outlen, "%.15s #%llu (%s, %.15s, %.15s, %s %d, tag %u, %llu bytes)",
           chorus__coll_name((chorus_coll_t)h->coll), (unsigned long long)h->seq, count, dt ? dt : "?",
           op ? op : "?", shape ? "group" : "root", h->root, h->tag, (unsigned long long)h->nbytes);
}

chorus_status_t chorus__frame_check(const chorus_frame_hdr_t* got, const chorus_frame_hdr_t* want,
                                    char* why, size_t whylen) {
  if (got->magic == CHORUS_FRAME_ABORT_MAGIC && got->version == CHORUS_PROTO_VERSION &&
      got->comm_id == want->comm_id) {
    char g[CHORUS_FRAME_DESC_LEN], w[CHORUS_FRAME_DESC_LEN];
    chorus__frame_describe(got, g, sizeof(g));
    chorus__frame_describe(want, w, sizeof(w));
    snprintf(why, whylen, "mismatched calls: the peer runs %s and gave up on this rank's %s", g, w);
    return CHORUS_ERR_MISMATCH;
  }
  if (got->magic != CHORUS_FRAME_MAGIC) {
    snprintf(why, whylen, "received bytes that are not a Chorus frame (magic 0x%08x)", got->magic);
    return CHORUS_ERR_PROTOCOL;
  }
  if (got->version != CHORUS_PROTO_VERSION) {
    snprintf(why, whylen, "received a frame of protocol version %u, this rank speaks %u",
             got->version, CHORUS_PROTO_VERSION);
    return CHORUS_ERR_PROTOCOL;
  }
  if (got->comm_id != want->comm_id) {
    snprintf(why, whylen, "received a frame of another communicator (id %016llx, expected %016llx)",
             (unsigned long long)got->comm_id, (unsigned long long)want->comm_id);
    return CHORUS_ERR_PROTOCOL;
  }
  if (got->coll != want->coll || got->seq != want->seq || got->tag != want->tag ||
      got->nbytes != want->nbytes || got->count != want->count || got->dtype != want->dtype ||
      got->op != want->op || got->root != want->root) {
    char g[CHORUS_FRAME_DESC_LEN], w[CHORUS_FRAME_DESC_LEN];
    chorus__frame_describe(got, g, sizeof(g));
    chorus__frame_describe(want, w, sizeof(w));
    snprintf(why, whylen, "mismatched calls: the peer sent %s, this rank expected %s", g, w);
    return CHORUS_ERR_MISMATCH;
  }
  return CHORUS_OK;
}

/* ---- queues: growable rings of transfer pointers ---- */

int chorus__xq_push(chorus_xfer_queue_t* q, chorus_xfer_t* x) {
  if (q->count == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 16;
    chorus_xfer_t** items = malloc(cap * sizeof(*items));
    if (!items) return -1;
    for (size_t i = 0; i < q->count; i++) items[i] = q->items[(q->head + i) % q->cap];
    free(q->items);
    q->items = items;
    q->head = 0;
    q->cap = cap;
  }
  q->items[(q->head + q->count) % q->cap] = x;
  q->count++;
  return 0;
}

void chorus__xq_pop(chorus_xfer_queue_t* q) {
  q->head = (q->head + 1) % q->cap;
  q->count--;
}

void chorus__xq_free(chorus_xfer_queue_t* q) {
  free(q->items);
  memset(q, 0, sizeof(*q));
}

/* ---- memory semantics ---- */

static chorus_transport_t* tp_of(const chorus_task_t* t) { return &t->comm->tp; }

int chorus__conn_shm_avail(const chorus_task_t* t) {
  const chorus_transport_t* tp = tp_of(t);
  return tp->shm.base != NULL && tp->shm_all_local;
}

int chorus__conn_shm_host(const chorus_task_t* t, int* nlocal, int* me) {
  const chorus_transport_t* tp = tp_of(t);
  if (!tp->shm.base) return 0;
  *nlocal = tp->shm.nlocal;
  *me = tp->shm.my_local;
  return 1;
}

/* The communicator rank of local index l. */
static int rank_of_local(const chorus_task_t* t, int local) { return tp_of(t)->local_ranks[local]; }

chorus_shm_ctl_t* chorus__conn_shm_ctl(const chorus_task_t* t, int local) {
  return chorus__shm_ctl(&tp_of(t)->shm, local);
}

char* chorus__conn_shm_slot(const chorus_task_t* t, int local, int which) {
  return chorus__shm_slot(&tp_of(t)->shm, local, which);
}

size_t chorus__conn_shm_slot_bytes(const chorus_task_t* t) { return tp_of(t)->shm.slot_bytes; }

size_t chorus__conn_shm_stream_bytes(const chorus_task_t* t) { return t->comm->shm_stream_bytes; }

uint64_t chorus__conn_shm_next_ids(chorus_task_t* t, uint64_t n) {
  uint64_t base = tp_of(t)->shm_epoch;
  tp_of(t)->shm_epoch += n;
  return base;
}

void chorus__conn_shm_signal(chorus_task_t* t) {
  chorus_transport_t* tp = tp_of(t);
  for (int i = 0; i < tp->shm.nlocal; i++)
    if (i != tp->shm.my_local)
      chorus__shm_bell_ring(chorus__shm_bell(&tp->shm, i), tp->local_wakefd ? tp->local_wakefd[i] : -1);
}

void chorus__conn_shm_publish(chorus_task_t* t, int f, uint64_t value) {
  /* Sequentially consistent: a peer about to sleep either sees it or is woken (shm.c). */
  __atomic_store_n(&chorus__conn_shm_ctl(t, tp_of(t)->shm.my_local)->flag[f], value, __ATOMIC_SEQ_CST);
  chorus__conn_shm_signal(t);
}

/* Signature words: sequence number, then everything that must agree across ranks. */
static void signature_of(const chorus_task_t* t, uint64_t sig[CHORUS_SIG_WORDS]) {
  const chorus_coll_args_t* a = &t->args;
  uint64_t algo_hash = 1469598103934665603ull;
  for (const char* c = t->algo ? t->algo->name : ""; *c; c++) algo_hash = (algo_hash ^ (uint8_t)*c) * 1099511628211ull;
  sig[0] = t->seq + 1; /* 0 means "nothing published yet" */
  sig[1] = (uint64_t)a->coll | (uint64_t)a->dtype << 8 | (uint64_t)a->op << 16 |
           (uint64_t)(uint32_t)chorus__task_root_word(t) << 32;
  sig[2] = a->count;
  sig[3] = algo_hash;
  /* Variable-size calls: the counts hash that every rank must agree on (allgatherv,
   * reduce_scatterv; 0 for the others, whose counts differ per rank by design and are checked
   * pair by pair in their frames). */
  sig[4] = ((a->recvcount ^ a->vsig) & ((1ull << 56) - 1)) | (uint64_t)t->variant << 56;
}

void chorus__conn_publish_signature(chorus_task_t* t) {
  signature_of(t, t->sig);
  /* Also when the communicator spans hosts: the other ranks of the host read it for verdicts. */
  if (!tp_of(t)->shm.base) return;
  if (chorus__coll_is_p2p(t->args.coll)) return; /* point-to-point sequence numbers are per pair, not comm-wide */
  /* A seqlock: sig[0] is 0 while the other words change. The release stores keep the zero
   * ahead of every new word, so a reader that sees a new word and then sig[0] again sees the
   * zero or the new value, never the old one (no fences: ThreadSanitizer does not model them). */
  chorus_shm_ctl_t* me = chorus__shm_ctl(&tp_of(t)->shm, tp_of(t)->shm.my_local);
  __atomic_store_n(&me->sig[0], 0, __ATOMIC_RELAXED);
  for (int i = 1; i < CHORUS_SIG_WORDS; i++) __atomic_store_n(&me->sig[i], t->sig[i], __ATOMIC_RELEASE);
  __atomic_store_n(&me->sig[0], t->sig[0], __ATOMIC_RELEASE);
}

/* Reads rank's signature; 0 when it is being rewritten (then it is not this task's any more). */
static int read_signature(const chorus_shm_ctl_t* c, uint64_t out[CHORUS_SIG_WORDS]) {
  out[0] = __atomic_load_n(&c->sig[0], __ATOMIC_ACQUIRE);
  for (int i = 1; i < CHORUS_SIG_WORDS; i++) out[i] = __atomic_load_n(&c->sig[i], __ATOMIC_ACQUIRE);
  return out[0] != 0 && __atomic_load_n(&c->sig[0], __ATOMIC_ACQUIRE) == out[0];
}

static void describe_signature(const uint64_t* sig, char* out, size_t len) {
  chorus_coll_t coll = (chorus_coll_t)(sig[1] & 0xff);
  const char* dt = chorus_dtype_name((chorus_dtype_t)((sig[1] >> 8) & 0xff));
  const char* op = chorus_op_name((chorus_op_t)((sig[1] >> 16) & 0xff));
  snprintf(out, len, "%s #%llu (count %llu, %s, %s, root %d)", chorus__coll_name(coll),
           (unsigned long long)(sig[0] - 1), (unsigned long long)sig[2], dt ? dt : "?", op ? op : "?",
           (int)(uint32_t)(sig[1] >> 32));
}

/* 1 (and *st = ERR_MISMATCH with a sentence) when rank publishes another operation under this
 * task's sequence number. */
static int signature_conflicts(chorus_task_t* t, int local, const chorus_shm_ctl_t* c, chorus_status_t* st) {
  const uint64_t* mine = t->sig;
  uint64_t theirs[CHORUS_SIG_WORDS];
  if (!read_signature(c, theirs) || theirs[0] != mine[0] || memcmp(mine, theirs, sizeof(theirs)) == 0) return 0;
  char a[160], b[160];
  describe_signature(theirs, a, sizeof(a));
  describe_signature(mine, b, sizeof(b));
  const char* why = theirs[3] != mine[3] ? " (or another algorithm)"
                    : (theirs[4] >> 56) != (mine[4] >> 56) ? " (registered memory on one side only)" : "";
  snprintf(tp_of(t)->err, sizeof(tp_of(t)->err), "mismatched calls: rank %d runs %s, this rank runs %s%s",
           rank_of_local(t, local), a, b, why);
  *st = CHORUS_ERR_MISMATCH;
  return 1;
}

static void local_verdict(chorus_task_t* t, int skip, int culprits_only, char* out, size_t outlen,
                          chorus_blame_t* blame);

/* The closed-peer and mismatch checks of a wait on local rank `local`; `reached` says the
 * awaited data is there, which calls for the signature check before it is used. */
static int peer_check(chorus_task_t* t, int local, int reached, chorus_status_t* st) {
  const chorus_shm_ctl_t* c = chorus__conn_shm_ctl(t, local);
  /* A peer that runs another operation under this sequence number would never publish, or
   * would publish other data: check before using its data, and now and then while waiting
   * (often enough to fail fast, rarely enough to keep polling cheap). */
  if ((reached || (++t->polls & 63) == 0) && signature_conflicts(t, local, c, st)) return 0;
  if (reached) return 1;
  int rank = rank_of_local(t, local);
  const chorus_peer_t* p = &tp_of(t)->peers[rank];
  if (p->nsocks && p->socks[0].peer_closed) {
    /* A peer that found a mismatch closes its connections: say mismatch, as it does. */
    if (signature_conflicts(t, local, c, st)) return 0;
    char* err = tp_of(t)->err;
    size_t len = (size_t)snprintf(err, sizeof(tp_of(t)->err), "rank %d (host %s) exited or failed during a "
                                  "shared-memory %s", rank, p->host, chorus__coll_name(t->args.coll));
    /* It may have timed out on a rank that stopped or never came, the likelier cause: name it. */
    char culprits[300];
    local_verdict(t, rank, 1, culprits, sizeof(culprits), NULL);
    if (culprits[0] && len < sizeof(tp_of(t)->err))
      snprintf(err + len, sizeof(tp_of(t)->err) - len, "; verdict: %s", culprits);
    *st = CHORUS_ERR_REMOTE;
    return 0;
  }
  return 1;
}

int chorus__conn_shm_reached(chorus_task_t* t, int local, int f, uint64_t want, chorus_status_t* st) {
  int reached = __atomic_load_n(&chorus__conn_shm_ctl(t, local)->flag[f], __ATOMIC_SEQ_CST) >= want;
  return peer_check(t, local, reached, st) && reached;
}

int chorus__conn_shm_peer_ok(chorus_task_t* t, int local, chorus_status_t* st) {
  return peer_check(t, local, 0, st);
}

chorus_status_t chorus__conn_shm_mismatch(chorus_task_t* t, int local) {
  chorus_status_t st = CHORUS_OK;
  if (!signature_conflicts(t, local, chorus__conn_shm_ctl(t, local), &st))
    snprintf(tp_of(t)->err, sizeof(tp_of(t)->err), "mismatched calls: rank %d runs another operation than this rank's %s #%llu",
             rank_of_local(t, local), chorus__coll_name(t->args.coll), (unsigned long long)t->seq);
  return CHORUS_ERR_MISMATCH;
}

uint64_t* chorus__conn_shm_ll(const chorus_task_t* t, int local, int which) {
  return chorus__conn_shm_ctl(t, local)->ll[which];
}

uint64_t* chorus__conn_shm_ll_last(const chorus_task_t* t) { return &tp_of(t)->shm_ll_last; }

/* ---- zero-copy on registered memory ---- */

int chorus__conn_zc_eligible(chorus_task_t* t, const void* send, size_t send_bytes, const void* recv,
                             size_t recv_bytes) {
  chorus_window_t* list = tp_of(t)->windows;
  if (!list) { /* nothing registered: the common case, answered at once */
    t->variant = 0;
    return 0;
  }
  size_t soff = 0, roff = 0;
  chorus_window_t* sw = send_bytes ? chorus__window_find(list, send, send_bytes, &soff) : NULL;
  chorus_window_t* rw = recv_bytes ? chorus__window_find(list, recv, recv_bytes, &roff) : NULL;
  int ok = list && (!send_bytes || sw) && (!recv_bytes || rw);
  t->variant = ok;
  t->zc[0] = sw ? sw->index : UINT64_MAX;
  t->zc[1] = soff;
  t->zc[2] = rw ? rw->index : UINT64_MAX;
  t->zc[3] = roff;
  return ok;
}

void chorus__conn_zc_publish(chorus_task_t* t) {
  chorus_shm_ctl_t* me = chorus__conn_shm_ctl(t, tp_of(t)->shm.my_local);
  for (int i = 0; i < 4; i++) __atomic_store_n(&me->zc[i], t->zc[i], __ATOMIC_RELAXED);
}

static char* zc_peer(chorus_task_t* t, int local, int which) {
  const chorus_shm_ctl_t* c = chorus__conn_shm_ctl(t, local);
  uint64_t index = __atomic_load_n(&c->zc[2 * which], __ATOMIC_RELAXED);
  uint64_t off = __atomic_load_n(&c->zc[2 * which + 1], __ATOMIC_RELAXED);
  for (chorus_window_t* w = tp_of(t)->windows; w; w = w->next)
    if (w->index == index) return (char*)w->peer_base[local] + off;
  return NULL;
}

char* chorus__conn_zc_send(chorus_task_t* t, int local) { return zc_peer(t, local, 0); }
char* chorus__conn_zc_recv(chorus_task_t* t, int local) { return zc_peer(t, local, 1); }

/* ---- verdict across hosts: status frames (frame.h) ---- */

/* Index in this host's segment of every rank (its local index), -1 for the ranks of other
 * hosts and for all without a segment. */
static void local_indexes(const chorus_comm_t* comm, int* idx) {
  const chorus_topo_t* topo = &comm->topo;
  int mine = topo->host_of[comm->rank];
  for (int r = 0; r < comm->nranks; r++)
    idx[r] = comm->tp.shm.base && topo->host_of[r] == mine && topo->local_of[r] < comm->tp.shm.nlocal ? topo->local_of[r] : -1;
}

/* A status frame about `rank`, another rank of this host (index idx in its segment), from what
 * it publishes there (second hand: collectives started, the last one's signature, how long its
 * engine has stood still); 0 when it cannot be read. */
static int status_from_signature(const chorus_transport_t* tp, int rank, int idx, chorus_frame_hdr_t* h) {
  if (idx < 0 || rank == tp->rank) return 0;
  const chorus_shm_ctl_t* c = chorus__shm_ctl(&tp->shm, idx);
  uint64_t sig[CHORUS_SIG_WORDS] = {0};
  int ok = 0, zero = 0;
  for (int tries = 0; tries < 100 && !ok; tries++) {
    ok = read_signature(c, sig);
    zero += sig[0] == 0;
  }
  if (!ok && zero < 100) return 0; /* always being rewritten: leave it */
  if (!ok) memset(sig, 0, sizeof(sig)); /* nothing published yet */
  memset(h, 0, sizeof(*h));
  h->magic = CHORUS_FRAME_STATUS_MAGIC;
  h->version = CHORUS_PROTO_VERSION;
  h->comm_id = tp->comm_id;
  h->tag = (uint32_t)rank | CHORUS_STATUS_SECONDHAND;
  h->seq = sig[0]; /* collectives started: the last one is number sig[0] - 1 */
  h->coll = (uint8_t)(sig[1] & 0xff);
  h->dtype = (uint8_t)((sig[1] >> 8) & 0xff);
  h->op = (uint8_t)((sig[1] >> 16) & 0xff);
  h->root = (int32_t)(uint32_t)(sig[1] >> 32);
  h->count = sig[2];
  h->nbytes = chorus__shm_beat_age_ns(c, chorus__now_ns()) / 1000000;
  return 1;
}

/* This rank's own status (first hand). comm->mu held. */
static void own_status(chorus_comm_t* comm, chorus_frame_hdr_t* h) {
  memset(h, 0, sizeof(*h));
  h->magic = CHORUS_FRAME_STATUS_MAGIC;
  h->version = CHORUS_PROTO_VERSION;
  h->comm_id = comm->comm_id;
  h->tag = (uint32_t)comm->rank | (comm->head || comm->p2p_head ? CHORUS_STATUS_IN_CALL : 0);
  h->seq = comm->coll_posted;
  h->nbytes = comm->coll_done;
  if (comm->coll_posted) {
    const chorus_coll_args_t* a = &comm->last_coll;
    h->coll = (uint8_t)a->coll;
    h->dtype = (uint8_t)a->dtype;
    h->op = (uint8_t)a->op;
    h->root = a->root;
    h->count = a->count;
  }
}

/* Sends `to` what this rank knows: first the other ranks of its host as they publish themselves
 * (which `to` cannot see), then its own status with `flags`, so that once `to` has the latter it
 * has the former too (one stream, in order). */
static void send_status(chorus_comm_t* comm, const int* idx, int to, uint32_t flags) {
  chorus_transport_t* tp = &comm->tp;
  chorus_frame_hdr_t h;
  for (int r = 0; r < tp->nranks && idx; r++)
    if (r != to && status_from_signature(tp, r, idx[r], &h)) chorus__transport_send_status(tp, to, &h);
  own_status(comm, &h);
  h.tag |= flags;
  chorus__transport_send_status(tp, to, &h);
}

void chorus__conn_status_answer(void* ctx, int asker) {
  chorus_comm_t* comm = ctx;
  int* idx = malloc((size_t)comm->nranks * sizeof(int));
  if (idx) local_indexes(comm, idx);
  send_status(comm, idx, asker, 0); /* without the indexes (no memory): its own status only */
  free(idx);
}

/* "allreduce #4 (count 1, int32, max, root 0)", or "nothing yet", from a status frame. */
static void describe_last(const chorus_frame_hdr_t* h, char* out, size_t len) {
  if (!h->seq) {
    snprintf(out, len, "nothing yet");
    return;
  }
  const char* dt = chorus_dtype_name((chorus_dtype_t)h->dtype);
  const char* op = chorus_op_name((chorus_op_t)h->op);
  snprintf(out, len, "%s #%llu (count %llu, %s, %s, root %d)", chorus__coll_name((chorus_coll_t)h->coll),
           (unsigned long long)(h->seq - 1), (unsigned long long)h->count, dt ? dt : "?", op ? op : "?", h->root);
}

/* Appends to out (length *len, capacity outlen), truncating. */
__attribute__((format(printf, 4, 5))) static void cat(char* out, size_t* len, size_t outlen, const char* fmt, ...) {
  if (*len + 1 >= outlen) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(out + *len, outlen - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len = *len + (size_t)n < outlen ? *len + (size_t)n : outlen - 1;
}

/* Appends "rank 1" or "ranks 1, 2, 5-7": the ranks flagged in set. Returns how many. */
static int cat_ranks(char* out, size_t* len, size_t outlen, const char* set, int n) {
  int count = 0, first = 1;
  for (int r = 0; r < n; r++) count += set[r];
  cat(out, len, outlen, "rank%s ", count > 1 ? "s" : "");
  for (int r = 0; r < n; r++) {
    if (!set[r]) continue;
    int e = r;
    while (e + 1 < n && set[e + 1]) e++;
    const char* sep = first ? "" : ", ";
    if (e > r + 1) cat(out, len, outlen, "%s%d-%d", sep, r, e);
    else if (e == r + 1) cat(out, len, outlen, "%s%d, %d", sep, r, e);
    else cat(out, len, outlen, "%s%d", sep, r);
    first = 0;
    r = e;
  }
  return count;
}

/* A heartbeat that stood still this long means a stopped rank (or one stuck in a single long
 * step): 5 times the longest sleep of a waiting engine (progress.c), half the shortest timeout,
 * so a rank that waits too is not taken for one. */
#define STALE_MS 500

/* Culprit kinds are the blame kinds (conn.h), so that give-up frames carry them as they are. */
enum {
  V_WAITING = 100,
  V_FINISHED,
  V_GAVE_UP, /* it sent a give-up frame: it waited too, then broke */
  V_UNKNOWN,
  V_NEVER = CHORUS_BLAME_NEVER,
  V_STUCK = CHORUS_BLAME_STUCK,
  V_SILENT_POSTED = CHORUS_BLAME_SILENT_POSTED,
  V_SILENT = CHORUS_BLAME_SILENT,
  V_GONE = CHORUS_BLAME_GONE
};

/* What the verdict on one operation is made of. */
typedef struct {
  const chorus_transport_t* tp;
  const chorus_rank_status_t* st; /* per rank */
  const char* coll;
  unsigned long long k; /* the operation's sequence number */
  int asked;            /* every rank was asked for its status (across hosts) */
  double waited;        /* for their answers, seconds */
} verdict_in_t;

/* What rank's status says about operation #k. First hand, it counts the collectives the rank
 * posted and completed; second hand, those it started, and how long its engine stood still. */
static int classify(const chorus_rank_status_t* rs, uint64_t k, int asked) {
  const chorus_frame_hdr_t* h = &rs->hdr;
  if (rs->gave_up && (!rs->gave_up_hdr.seq || rs->gave_up_hdr.seq >= k + 1)) return V_GAVE_UP;
  if (rs->have == 2) return h->seq <= k ? V_NEVER : h->nbytes > k ? V_FINISHED : V_WAITING;
  if (rs->gone) return V_GONE;
  if (!rs->have) return asked ? V_SILENT : V_UNKNOWN;
  if (h->seq <= k) return V_NEVER;
  if (h->seq == k + 1 && h->nbytes >= STALE_MS) return V_STUCK;
  if (asked) return V_SILENT_POSTED; /* and it did not answer */
  return h->seq == k + 1 ? V_WAITING : V_FINISHED;
}

/* Appends what rank r (host `host`) did about operation `coll` #k, as a culprit of kind `kind`
 * (V_NEVER to V_GONE); stood_s: how long a stuck rank stood still, or a silent one was waited
 * for (0: unknown). The verdict's details (its last operation, whether it answers) are the
 * caller's. */
static void cat_blame(char* out, size_t* len, size_t outlen, const char* sep, int r, const char* host, int kind,
                      const char* coll, unsigned long long k, double stood_s) {
  if (kind == V_NEVER)
    cat(out, len, outlen, "%srank %d (host %s) never posted %s #%llu", sep, r, host, coll, k);
  else if (kind == V_STUCK)
    cat(out, len, outlen, "%srank %d (host %s) posted %s #%llu and has not moved for %.1f s: stopped or stuck", sep,
        r, host, coll, k, stood_s);
  else if (kind == V_SILENT_POSTED)
    cat(out, len, outlen, "%srank %d (host %s) posted %s #%llu but does not answer (stopped, or stuck outside "
        "Chorus)", sep, r, host, coll, k);
  else if (kind == V_GONE)
    cat(out, len, outlen, "%srank %d (host %s) closed its connection (it exited or failed)", sep, r, host);
  else if (stood_s > 0)
    cat(out, len, outlen, "%srank %d (host %s) did not answer within %.1f s (dead, stopped, unreachable, or outside "
        "any Chorus call)", sep, r, host, stood_s);
  else
    cat(out, len, outlen, "%srank %d (host %s) did not answer (dead, stopped, unreachable, or outside any Chorus "
        "call)", sep, r, host);
}

/* Appends the sentence about rank r, which holds the operation up (kind V_NEVER to V_GONE). */
static void cat_culprit(const verdict_in_t* v, int r, int kind, const char* sep, char* out, size_t* len,
                        size_t outlen) {
  const chorus_rank_status_t* rs = &v->st[r];
  const char* host = v->tp->peers[r].host;
  cat_blame(out, len, outlen, sep, r, host, kind, v->coll, v->k, kind == V_SILENT ? v->waited : (double)rs->hdr.nbytes / 1e3);
  if (kind == V_NEVER) {
    char last[160];
    describe_last(&rs->hdr, last, sizeof(last));
    cat(out, len, outlen, " (its last operation: %s)%s", last, rs->have == 2 || !v->asked ? "" : " and does not answer");
  }
}

/* A rank this rank could not hear from (silent, gone, unknown) may be named by the verdict of
 * a rank that gave up (its give-up frame, about operation k): that rank's sender, or -1. */
static int blamed_by_give_up(const verdict_in_t* v, int r) {
  for (int q = 0; q < v->tp->nranks; q++) {
    const chorus_rank_status_t* rs = &v->st[q];
    int kind = CHORUS_GAVE_UP_KIND(rs->gave_up_hdr.nbytes);
    if (rs->gave_up && rs->gave_up_hdr.root == r && rs->gave_up_hdr.seq == v->k + 1 &&
        (kind == V_NEVER || kind == V_STUCK || kind == V_SILENT_POSTED))
      return q;
  }
  return -1;
}

/* Writes the verdict: a sentence for each rank that holds the operation up, then (unless
 * culprits_only) the ranks that wait too, those that gave up and those that finished it. Leaves
 * out this rank and `skip`. kind and set: scratch of nranks entries. blame (may be NULL): the
 * first culprit. */
static void write_verdict(const verdict_in_t* v, int* kind, char* set, int skip, int culprits_only, char* out,
                          size_t outlen, chorus_blame_t* blame) {
  int n = v->tp->nranks, parts = 0;
  size_t len = 0;
  out[0] = '\0';
  if (blame) *blame = (chorus_blame_t){-1, 0, 0, -1, CHORUS_OK};
  for (int r = 0; r < n; r++) {
    kind[r] = r == v->tp->rank || r == skip ? V_UNKNOWN : classify(&v->st[r], v->k, v->asked);
    int told_by = kind[r] == V_SILENT || kind[r] == V_GONE ? blamed_by_give_up(v, r) : -1;
    uint32_t stood_ms = kind[r] == V_STUCK ? (uint32_t)v->st[r].hdr.nbytes : 0;
    if (told_by >= 0) { /* what a rank that gave up saw of it: more than silence */
      const chorus_frame_hdr_t* g = &v->st[told_by].gave_up_hdr;
      kind[r] = CHORUS_GAVE_UP_KIND(g->nbytes);
      stood_ms = CHORUS_GAVE_UP_STOOD_MS(g->nbytes);
      cat_blame(out, &len, outlen, parts++ ? "; " : "", r, v->tp->peers[r].host, kind[r], v->coll, v->k, stood_ms / 1e3);
      cat(out, &len, outlen, " (the verdict of rank %d, which gave up on it)", told_by);
    } else if (kind[r] != V_WAITING && kind[r] != V_FINISHED && kind[r] != V_GAVE_UP && kind[r] != V_UNKNOWN) {
      cat_culprit(v, r, kind[r], parts++ ? "; " : "", out, &len, outlen);
    } else {
      continue;
    }
    if (blame && blame->rank < 0) *blame = (chorus_blame_t){r, kind[r], stood_ms, -1, CHORUS_OK};
  }
  for (int pass = 0; pass < 3 && !culprits_only; pass++) {
    int want = pass == 0 ? V_WAITING : pass == 1 ? V_GAVE_UP : V_FINISHED, any = 0;
    for (int r = 0; r < n; r++) any |= set[r] = (char)(kind[r] == want);
    if (!any) continue;
    if (parts++) cat(out, &len, outlen, "; ");
    int count = cat_ranks(out, &len, outlen, set, n);
    if (pass == 0) cat(out, &len, outlen, " posted %s #%llu and wait%s too", v->coll, v->k, count > 1 ? "" : "s");
    else if (pass == 1) cat(out, &len, outlen, " waited for %s #%llu too and gave up", v->coll, v->k);
    else cat(out, &len, outlen, " finished %s #%llu", v->coll, v->k);
  }
}

/* The verdict from this host's segment alone, which every rank of the communicator maps: no
 * rank is asked. */
static void local_verdict(chorus_task_t* t, int skip, int culprits_only, char* out, size_t outlen,
                          chorus_blame_t* blame) {
  const chorus_transport_t* tp = tp_of(t);
  int n = tp->nranks;
  chorus_rank_status_t* st = calloc((size_t)n, sizeof(*st));
  int* kind = calloc((size_t)n, sizeof(int));
  char* set = calloc((size_t)n, 1);
  out[0] = '\0';
  int* idx = calloc((size_t)n, sizeof(int));
  if (st && kind && set && idx) {
    local_indexes(t->comm, idx);
    for (int r = 0; r < n; r++) st[r].have = status_from_signature(tp, r, idx[r], &st[r].hdr);
    verdict_in_t v = {tp, st, chorus__coll_name(t->args.coll), (unsigned long long)t->seq, 0, 0.0};
    write_verdict(&v, kind, set, skip, culprits_only, out, outlen, blame);
  }
  free(st);
  free(kind);
  free(set);
  free(idx);
}

void chorus__conn_verdict(chorus_task_t* t, char* out, size_t outlen, chorus_blame_t* blame) {
  out[0] = '\0';
  *blame = (chorus_blame_t){-1, 0, 0, -1, CHORUS_OK};
  if (chorus__coll_is_p2p(t->args.coll)) return; /* their sequence numbers are per pair */
  if (chorus__conn_shm_avail(t)) { /* one host: every rank publishes itself in shared memory */
    local_verdict(t, -1, 0, out, outlen, blame);
    return;
  }
  chorus_comm_t* comm = t->comm;
  chorus_transport_t* tp = &comm->tp;
  int n = tp->nranks;
  int* kind = calloc((size_t)n, sizeof(int));
  char* set = calloc((size_t)n, 1);
  int* idx = calloc((size_t)n, sizeof(int));
  if (n >= 2 && kind && set && idx) {
    local_indexes(comm, idx);
    uint64_t t0 = chorus__now_ns();
    for (int p = 0; p < n; p++)
      if (p != tp->rank) send_status(comm, idx, p, CHORUS_STATUS_ASK);
    chorus__transport_gather_status(tp, VERDICT_WAIT_MS);
    double waited = (double)(chorus__now_ns() - t0) / 1e9;
    for (int r = 0; r < n; r++) {
      chorus_rank_status_t* rs = &tp->status[r];
      chorus_frame_hdr_t seen;
      /* A rank of this host that did not answer: read what it publishes, rather than trust an
       * older report from another host. */
      if (r != tp->rank && rs->have < 2 && status_from_signature(tp, r, idx[r], &seen)) {
        rs->hdr = seen;
        rs->have = 1;
        rs->via = tp->rank;
      }
    }
    verdict_in_t v = {tp, tp->status, chorus__coll_name(t->args.coll), (unsigned long long)t->seq, 1, waited};
    write_verdict(&v, kind, set, -1, 0, out, outlen, blame);
  }
  free(kind);
  free(set);
  free(idx);
}

/* ---- give-up frames (frame.h) ---- */

int chorus__conn_explain_mismatch(chorus_task_t* t, int rank) {
  const chorus_topo_t* topo = t->topo;
  const chorus_transport_t* tp = tp_of(t);
  if (!tp->shm.base || topo->host_of[rank] != topo->host_of[t->rank]) return 0;
  chorus_status_t st = CHORUS_OK;
  return signature_conflicts(t, topo->local_of[rank], chorus__conn_shm_ctl(t, topo->local_of[rank]), &st);
}

void chorus__conn_give_up_frame(const chorus_task_t* t, uint64_t comm_id, int rank, chorus_status_t st,
                                const chorus_blame_t* blame, chorus_frame_hdr_t* h) {
  memset(h, 0, sizeof(*h));
  h->magic = CHORUS_FRAME_STATUS_MAGIC;
  h->version = CHORUS_PROTO_VERSION;
  h->comm_id = comm_id;
  h->tag = (uint32_t)rank | CHORUS_STATUS_GAVE_UP;
  h->root = blame->rank;
  int relayed = blame->origin >= 0 && blame->origin != rank;
  h->nbytes = CHORUS_GAVE_UP_NBYTES(relayed ? blame->origin_status : st, blame->rank >= 0 ? blame->kind : 0,
                                    relayed ? blame->origin : -1, blame->stood_ms);
  if (!t || chorus__coll_is_p2p(t->args.coll)) return; /* point-to-point numbers are per pair */
  h->seq = t->seq + 1;
  h->coll = (uint8_t)t->args.coll;
  h->dtype = (uint8_t)t->args.dtype;
  h->op = (uint8_t)t->args.op;
  h->count = t->args.count;
}

void chorus__conn_describe_give_up(const chorus_transport_t* tp, char* out, size_t outlen, chorus_blame_t* blame) {
  const chorus_frame_hdr_t* h = &tp->gave_up;
  int sender = tp->gave_up_from, kind = CHORUS_GAVE_UP_KIND(h->nbytes), origin = CHORUS_GAVE_UP_ORIGIN(h->nbytes);
  int from = origin >= 0 ? origin : sender; /* the rank that gave up first, as far as anyone knows */
  const char* coll = chorus__coll_name((chorus_coll_t)h->coll);
  size_t len = 0;
  out[0] = '\0';
  if (CHORUS_GAVE_UP_STATUS(h->nbytes) == CHORUS_ERR_MISMATCH && h->seq) { /* its call, as it ran it */
    const char* dt = chorus_dtype_name((chorus_dtype_t)h->dtype);
    const char* op = chorus_op_name((chorus_op_t)h->op);
    char count[32] = ""; /* a variable-size call's frames carry a word of their own there */
    if (!chorus__coll_is_v((chorus_coll_t)h->coll)) snprintf(count, sizeof(count), "count %llu, ", (unsigned long long)h->count);
    cat(out, &len, outlen, "mismatched calls: rank %d (host %s) runs %s #%llu (%s%s, %s) and gave up", from,
        tp->peers[from].host, coll, (unsigned long long)(h->seq - 1), count, dt ? dt : "?", op ? op : "?");
  } else {
    cat(out, &len, outlen, "rank %d (host %s) gave up", from, tp->peers[from].host);
    if (h->seq) cat(out, &len, outlen, " on %s #%llu", coll, (unsigned long long)(h->seq - 1));
    cat(out, &len, outlen, " (%s)", chorus_status_name((chorus_status_t)CHORUS_GAVE_UP_STATUS(h->nbytes)));
  }
  if (from != sender) cat(out, &len, outlen, ", as rank %d (host %s) passed on", sender, tp->peers[sender].host);
  *blame = (chorus_blame_t){-1, 0, 0, from, (chorus_status_t)CHORUS_GAVE_UP_STATUS(h->nbytes)};
  if (h->root < 0 || kind < V_NEVER || kind > V_GONE) return;
  blame->rank = h->root;
  blame->kind = kind;
  blame->stood_ms = CHORUS_GAVE_UP_STOOD_MS(h->nbytes);
  cat(out, &len, outlen, "; its verdict: ");
  cat_blame(out, &len, outlen, "", h->root, tp->peers[h->root].host, kind, coll,
            (unsigned long long)(h->seq ? h->seq - 1 : 0), blame->stood_ms / 1e3);
}
