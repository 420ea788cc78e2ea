/*
 * conn.c - the glue between algorithms and transports: stamps each posted transfer with the
 * frame header of its task (communicator id, operation signature, sequence number, tag) and
 * hands it to the peer's transport. Also the `self` transport (rank to itself), the frame
 * checks, the transfer queues, the memory-semantics calls and the operation signatures that
 * same-host ranks publish (verdict.c writes the verdict after a timeout from them).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "core/comm.h"
#include "core/sysfile.h"
#include "transport/transport.h"
#include "transport/verdict.h"

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
  h->op = chorus__task_op_byte(t);
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
  char op[24];
  chorus__frame_op_desc(h->op, op, sizeof(op));
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
           op, shape ? "group" : "root", h->root, h->tag, (unsigned long long)h->nbytes);
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

void chorus__frame_op_desc(uint8_t op_byte, char* out, size_t outlen) {
  const char* op = chorus_op_name((chorus_op_t)(op_byte & 0x0f));
  const char* codec = chorus__codec_name((chorus_codec_kind_t)(op_byte >> 4));
  if (op_byte >> 4)
    snprintf(out, outlen, "%s+%s", op ? op : "?", codec ? codec : "?");
  else
    snprintf(out, outlen, "%s", op ? op : "?");
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

size_t chorus__conn_shm_slot_setting(const chorus_task_t* t) {
  return t->comm->shm_enabled ? t->comm->shm_slot_bytes : 0;
}

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
  const char* algo_name = t->algo ? t->algo->name : "";
  uint64_t algo_hash = chorus__fnv1a(algo_name, strlen(algo_name), CHORUS_FNV_START);
  sig[0] = t->seq + 1; /* 0 means "nothing published yet" */
  sig[1] = (uint64_t)a->coll | (uint64_t)a->dtype << 8 | (uint64_t)chorus__task_op_byte(t) << 16 |
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

int chorus__conn_read_signature(const chorus_shm_ctl_t* c, uint64_t out[CHORUS_SIG_WORDS]) {
  out[0] = __atomic_load_n(&c->sig[0], __ATOMIC_ACQUIRE);
  for (int i = 1; i < CHORUS_SIG_WORDS; i++) out[i] = __atomic_load_n(&c->sig[i], __ATOMIC_ACQUIRE);
  return out[0] != 0 && __atomic_load_n(&c->sig[0], __ATOMIC_ACQUIRE) == out[0];
}

static void describe_signature(const uint64_t* sig, char* out, size_t len) {
  chorus_coll_t coll = (chorus_coll_t)(sig[1] & 0xff);
  const char* dt = chorus_dtype_name((chorus_dtype_t)((sig[1] >> 8) & 0xff));
  char op[24];
  chorus__frame_op_desc((uint8_t)((sig[1] >> 16) & 0xff), op, sizeof(op));
  snprintf(out, len, "%s #%llu (count %llu, %s, %s, root %d)", chorus__coll_name(coll),
           (unsigned long long)(sig[0] - 1), (unsigned long long)sig[2], dt ? dt : "?", op,
           (int)(uint32_t)(sig[1] >> 32));
}

/* 1 (and *st = ERR_MISMATCH with a sentence) when rank publishes another operation under this
 * task's sequence number. */
static int signature_conflicts(chorus_task_t* t, int local, const chorus_shm_ctl_t* c, chorus_status_t* st) {
  const uint64_t* mine = t->sig;
  uint64_t theirs[CHORUS_SIG_WORDS];
  if (!chorus__conn_read_signature(c, theirs) || theirs[0] != mine[0] || memcmp(mine, theirs, sizeof(theirs)) == 0) return 0;
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
    chorus__conn_local_verdict(t, rank, 1, culprits, sizeof(culprits), NULL);
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

chorus_shm_slots_use_t* chorus__conn_shm_slots_use(const chorus_task_t* t) { return &tp_of(t)->shm_slots_use; }

/* ---- zero-copy on registered memory ---- */

int chorus__conn_zc_eligible(chorus_task_t* t, const void* send, size_t send_bytes, const void* recv,
                             size_t recv_bytes) {
  chorus_window_t* list = tp_of(t)->windows;
  if (!list) { /* nothing registered: the common case, answered at once */
    t->variant = CHORUS_VARIANT_STAGED;
    return 0;
  }
  size_t soff = 0, roff = 0;
  chorus_window_t* sw = send_bytes ? chorus__window_find(list, send, send_bytes, &soff) : NULL;
  chorus_window_t* rw = recv_bytes ? chorus__window_find(list, recv, recv_bytes, &roff) : NULL;
  int ok = list && (!send_bytes || sw) && (!recv_bytes || rw);
  t->variant = ok ? CHORUS_VARIANT_ZC : CHORUS_VARIANT_STAGED;
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

/* ---- single-copy reads of a local peer's memory ---- */

int chorus__conn_cma_avail(const chorus_task_t* t) { return tp_of(t)->shm.cma; }

int chorus__conn_cma_any_cpus(const chorus_task_t* t) { return tp_of(t)->shm.cma_any_cpus; }

void chorus__conn_cma_use(chorus_task_t* t, const void* send, void* recv) {
  t->variant = CHORUS_VARIANT_CMA;
  t->zc[0] = (uint64_t)(uintptr_t)send;
  t->zc[1] = 0;
  t->zc[2] = (uint64_t)(uintptr_t)recv;
  t->zc[3] = 0;
}

chorus_status_t chorus__conn_cma_read_send(chorus_task_t* t, int local, size_t off, void* dst, size_t len) {
  chorus_transport_t* tp = tp_of(t);
  int32_t pid = __atomic_load_n(&chorus__shm_bell(&tp->shm, local)->pid, __ATOMIC_RELAXED);
  uint64_t at = __atomic_load_n(&chorus__conn_shm_ctl(t, local)->zc[0], __ATOMIC_RELAXED) + off;
  size_t done = 0;
  while (done < len) { /* a read may stop short (at a page the kernel could not pin at once) */
    struct iovec mine = {(char*)dst + done, len - done}, theirs = {(void*)(uintptr_t)(at + done), len - done};
    ssize_t n = process_vm_readv(pid, &mine, 1, &theirs, 1, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      int gone = n < 0 && errno == ESRCH; /* the peer exited */
      snprintf(tp->err, sizeof(tp->err), "rank %d: cannot read rank %d's buffer (process_vm_readv of %zu bytes: %s)",
               t->rank, rank_of_local(t, local), len - done,
               gone ? "the process is gone" : n < 0 ? strerror(errno) : "read nothing");
      tp->err_peer = rank_of_local(t, local);
      return gone ? CHORUS_ERR_REMOTE : CHORUS_ERR_SYSTEM;
    }
    done += (size_t)n;
  }
  return CHORUS_OK;
}

/* ---- mismatches named from the shared-memory signatures ---- */

int chorus__conn_explain_mismatch(chorus_task_t* t, int rank) {
  const chorus_topo_t* topo = t->topo;
  const chorus_transport_t* tp = tp_of(t);
  if (!tp->shm.base || topo->host_of[rank] != topo->host_of[t->rank]) return 0;
  chorus_status_t st = CHORUS_OK;
  return signature_conflicts(t, topo->local_of[rank], chorus__conn_shm_ctl(t, topo->local_of[rank]), &st);
}
