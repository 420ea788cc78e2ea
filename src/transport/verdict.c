/*
 * verdict.c - what a rank says after a timeout: which ranks never posted the operation, stand
 * still inside it, went silent or are gone, from the signatures same-host ranks publish
 * (conn.c) and the status frames ranks on other hosts answer with (frame.h); and the give-up
 * frames a rank whose communicator broke sends its peers, and what a receiver makes of them.
 */
#include "transport/verdict.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/comm.h"
#include "transport/transport.h"

/* How long a rank that timed out waits for its peers' status frames. */
#define VERDICT_WAIT_MS 1000

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
    ok = chorus__conn_read_signature(c, sig);
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
  char op[24];
  chorus__frame_op_desc(h->op, op, sizeof(op));
  snprintf(out, len, "%s #%llu (count %llu, %s, %s, root %d)", chorus__coll_name((chorus_coll_t)h->coll),
           (unsigned long long)(h->seq - 1), (unsigned long long)h->count, dt ? dt : "?", op, h->root);
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
void chorus__conn_local_verdict(chorus_task_t* t, int skip, int culprits_only, char* out, size_t outlen,
                          chorus_blame_t* blame) {
  const chorus_transport_t* tp = (&t->comm->tp);
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
    chorus__conn_local_verdict(t, -1, 0, out, outlen, blame);
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
  h->op = chorus__task_op_byte(t);
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
    char op[24];
    chorus__frame_op_desc(h->op, op, sizeof(op));
    char count[32] = ""; /* a variable-size call's frames carry a word of their own there */
    if (!chorus__coll_is_v((chorus_coll_t)h->coll)) snprintf(count, sizeof(count), "count %llu, ", (unsigned long long)h->count);
    cat(out, &len, outlen, "mismatched calls: rank %d (host %s) runs %s #%llu (%s%s, %s) and gave up", from,
        tp->peers[from].host, coll, (unsigned long long)(h->seq - 1), count, dt ? dt : "?", op);
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
