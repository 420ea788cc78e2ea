/*
 * progress.c - the progress engine. Collectives of a communicator run strictly in posting order,
 * one at a time (like operations on one NCCL stream), which keeps the per-pair order of their
 * frames equal to the posting order on both sides. Point-to-point operations are matched by
 * source and tag instead (transport/match.h), so they all progress at once, beside the running
 * collective: a receive never waits behind a send. Exactly one thread at a time holds the right to
 * drive progress: a blocking caller drives its own call inline (no hand-off on the latency
 * path); the background thread drives non-blocking work when nobody else does. A driver spins
 * for CHORUS_SPIN_US (across hosts, longer for a latency-bound call that its caller drives: the
 * background thread keeps the short spin; tune.c; on one host whose ranks outnumber the CPUs
 * they may run on, longer, yielding between polls: comm.h), then sleeps in epoll, so oversubscribed ranks do not
 * burn cores.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/log.h"

/* How long a waiter polls without yielding before sched_yield and then sleep; it reads the
 * clock (as costly as a poll here) once every CLOCK_POLLS polls meanwhile. */
#define BUSY_POLL_NS 3000ull
#define CLOCK_POLLS 16

/* The most a call's predicted time lengthens its waits' spin (chorus__engine_spin_ns). */
#define CALL_SPIN_MAX_US 1000.0

/* Freed requests a communicator keeps for reuse: 4096 of them hold 2.3 MB. */
#define SPARE_REQS_MAX 4096u

/* Calls that move at least this many bytes per block get a fresh clock reading when they end
 * (their last pass may have copied for a long time); smaller ones keep the pass's reading,
 * as a clock read costs a tenth of a small call. */
#define FRESH_END_BYTES (64u * 1024u)

/* No progress for this long: a stalled engine (transport.h, `stalled`). Well under the
 * shortest timeout (1 s), well over any hand-over between ranks. */
#define STALLED_NS (250ull * 1000000ull)

/* Longest single sleep: bounds how late a timeout or an abort is noticed. */
#define MAX_SLEEP_MS 100

static void req_unlink_free(chorus_comm_t* comm, chorus_req_t* req) {
  if (req->live_prev) req->live_prev->live_next = req->live_next;
  else comm->live = req->live_next;
  if (req->live_next) req->live_next->live_prev = req->live_prev;
  /* Kept for the next non-blocking or grouped calls, which then allocate nothing (a blocking
   * call's request is on its caller's stack): as many as were in use at once, up to a bound. */
  if (comm->nspare < SPARE_REQS_MAX) {
    req->live_next = comm->spare_reqs;
    comm->spare_reqs = req;
    comm->nspare++;
  } else {
    free(req);
  }
}

chorus_req_t* chorus__engine_new_req(chorus_comm_t* comm) {
  chorus_req_t* req = comm->spare_reqs;
  if (!req) return calloc(1, sizeof(*req));
  comm->spare_reqs = req->live_next;
  comm->nspare--;
  memset(req, 0, sizeof(*req));
  return req;
}

void chorus__engine_free_spare_reqs(chorus_comm_t* comm) {
  while (comm->spare_reqs) {
    chorus_req_t* next = comm->spare_reqs->live_next;
    free(comm->spare_reqs);
    comm->spare_reqs = next;
  }
  comm->nspare = 0;
}

/* Wakes the threads waiting on cv (none, on the latency path of a single-threaded caller). */
static void wake_waiters(chorus_comm_t* comm) {
  if (comm->cv_waiters) pthread_cond_broadcast(&comm->cv);
}

/* Anything queued: collectives or point-to-point. */
static int engine_busy(const chorus_comm_t* comm) { return comm->head || comm->p2p_head; }

/* Takes t out of its queue: a collective is the head of its queue, a point-to-point task is
 * anywhere in its list. */
static void task_unlink(chorus_comm_t* comm, chorus_task_t* t) {
  if (!chorus__coll_is_p2p(t->args.coll)) {
    comm->head = t->next;
    if (!comm->head) comm->tail = NULL;
  } else {
    if (t->prev) t->prev->next = t->next;
    else comm->p2p_head = t->next;
    if (t->next) t->next->prev = t->prev;
    else comm->p2p_tail = t->prev;
  }
  t->next = t->prev = NULL;
}

/* Ends task t with status st. mu held; now dates the end in the flight recorder. */
static void task_finish(chorus_comm_t* comm, chorus_task_t* t, chorus_status_t st, uint64_t now) {
  if (st == CHORUS_OK && !chorus__coll_is_p2p(t->args.coll)) comm->coll_done = t->seq + 1;
  task_unlink(comm, t);
  if (t->algo && t->algo->fini) t->algo->fini(t);
  t->state = NULL;
  free(t->vec);
  t->vec = NULL;
  chorus__trace_finished(comm, t, st, now);
  if (t->on_done) t->on_done(t, st);
  __atomic_store_n(&t->status, st, __ATOMIC_RELEASE);
  if (!t->internal) /* as its start (coll/api.c) */
    CH_DEBUG(COLL, comm->rank, "%s #%llu done: %s in %.1f us", chorus__coll_name(t->args.coll),
             (unsigned long long)t->seq, chorus_status_name(st), (double)(chorus__now_ns() - t->post_ns) / 1e3);
  chorus_req_t* req = (chorus_req_t*)t;
  if (req->user_released) req_unlink_free(comm, req);
  wake_waiters(comm);
}

/* Breaks the communicator (logging the error when `log`) and fails every queued task. Peers
 * are told first (a give-up frame each, naming the operation and whom this rank blames), so
 * that those waiting on other ranks do not wait for their own timeouts. */
static void engine_break(chorus_comm_t* comm, chorus_status_t st, int log) {
  if (!comm->broken) {
    comm->broken = 1;
    comm->broken_status = st;
    chorus_frame_hdr_t give_up;
    chorus__conn_give_up_frame(comm->head, comm->comm_id, comm->rank, st, &comm->blame, &give_up);
    chorus__transport_give_up(&comm->tp, &give_up);
    chorus__transport_shutdown(&comm->tp);
    if (log) CH_WARN(comm->rank, "%s", comm->last_error);
  }
  uint64_t now = chorus__now_ns();
  while (comm->head) task_finish(comm, comm->head, st, now);
  while (comm->p2p_head) task_finish(comm, comm->p2p_head, st, now);
}

void chorus__engine_fail(chorus_comm_t* comm, chorus_status_t st) { engine_break(comm, st, 1); }

/* "rank 3", "any rank" */
static void describe_rank(int r, char* out, size_t len) {
  if (r == CHORUS_ANY_SOURCE) snprintf(out, len, "any rank");
  else snprintf(out, len, "rank %d", r);
}

/* "allreduce #12 (1048576 x float32, sum, algo ring) on rank 3"; for point to point
 * "recv #4 (16 x int32 from rank 1, tag 7) on rank 0". */
static void describe_task(const chorus_comm_t* comm, const chorus_task_t* t, char* out, size_t len) {
  const chorus_coll_args_t* a = &t->args;
  if (chorus__coll_is_p2p(a->coll)) {
    char src[32], tag[24];
    describe_rank(a->coll == CH_COLL_SENDRECV ? a->peer : a->root, src, sizeof(src));
    if (a->tag == CHORUS_ANY_TAG) snprintf(tag, sizeof(tag), "any tag");
    else snprintf(tag, sizeof(tag), "tag %d", a->tag);
    if (a->coll == CH_COLL_SEND)
      snprintf(out, len, "send #%llu (%zu x %s to rank %d, %s) on rank %d", (unsigned long long)t->seq, a->count,
               chorus_dtype_name(a->dtype), a->root, tag, comm->rank);
    else if (a->coll == CH_COLL_RECV)
      snprintf(out, len, "recv #%llu (%zu x %s from %s, %s) on rank %d", (unsigned long long)t->seq, a->count,
               chorus_dtype_name(a->dtype), src, tag, comm->rank);
    else
      snprintf(out, len, "sendrecv #%llu (%zu x %s to rank %d, %zu from %s, %s) on rank %d",
               (unsigned long long)t->seq, a->count, chorus_dtype_name(a->dtype), a->root, a->recvcount, src, tag,
               comm->rank);
    return;
  }
  const char* op = chorus_op_name(a->op);
  snprintf(out, len, "%s #%llu (%zu x %s%s%s, algo %s) on rank %d", chorus__coll_name(a->coll),
           (unsigned long long)t->seq, a->count, chorus_dtype_name(a->dtype),
           op ? ", " : "", op ? op : "", t->algo ? t->algo->name : "?", comm->rank);
}

/* Fails t (and the communicator) with st and the transport's sentence. */
static void fail_with_transport_error(chorus_comm_t* comm, chorus_task_t* t, chorus_status_t st) {
  char what[200];
  describe_task(comm, t, what, sizeof(what));
  chorus__comm_set_error(comm, "%s failed: %s", what, comm->tp.err[0] ? comm->tp.err : chorus_status_str(st));
  chorus__engine_fail(comm, st);
}

/* A peer gave up (its give-up frame arrived): the collective it gave up on, and every later
 * one, can never complete. An older running collective may still (the peer did its part), so
 * it goes on. 1 when the communicator broke. */
static int fail_if_peer_gave_up(chorus_comm_t* comm) {
  const chorus_frame_hdr_t* h = &comm->tp.gave_up;
  chorus_task_t* t = comm->head ? comm->head : comm->p2p_head;
  if (comm->tp.gave_up_from < 0 || comm->broken) return 0;
  if (comm->head && h->seq && comm->head->seq + 1 < h->seq) return 0;
  char why[600];
  chorus__conn_describe_give_up(&comm->tp, why, sizeof(why), &comm->blame);
  int mismatch = CHORUS_GAVE_UP_STATUS(h->nbytes) == CHORUS_ERR_MISMATCH;
  if (comm->head && mismatch && chorus__conn_explain_mismatch(comm->head, comm->tp.gave_up_from)) {
    fail_with_transport_error(comm, comm->head, CHORUS_ERR_MISMATCH); /* the sentence that names both calls */
    return 1;
  }
  if (t) {
    char what[200];
    describe_task(comm, t, what, sizeof(what));
    chorus__comm_set_error(comm, "%s failed: %s", what, why);
  } else {
    chorus__comm_set_error(comm, "communicator broken on rank %d: %s", comm->rank, why);
  }
  /* Mismatched calls are every involved rank's verdict; anything else is a peer's failure. */
  engine_break(comm, mismatch ? CHORUS_ERR_MISMATCH : CHORUS_ERR_REMOTE, 1);
  return 1;
}

static void fail_task_error(chorus_comm_t* comm, chorus_task_t* t, chorus_status_t st) {
  /* A peer's give-up frame, read on the way to this error, says why its connection closed;
   * a mismatch this rank saw itself names both calls, which is more. */
  if (st != CHORUS_ERR_MISMATCH && fail_if_peer_gave_up(comm)) return;
  fail_with_transport_error(comm, t, st);
}

/* A point-to-point task that failed alone (a truncated message, another dtype): it ends with
 * its error and the communicator goes on. */
static void fail_task_alone(chorus_comm_t* comm, chorus_task_t* t, chorus_status_t st, uint64_t now) {
  char what[200];
  describe_task(comm, t, what, sizeof(what));
  chorus__comm_set_error(comm, "%s failed: %s", what, comm->tp.err[0] ? comm->tp.err : chorus_status_str(st));
  CH_INFO(COLL, comm->rank, "%s", comm->last_error);
  comm->tp.err[0] = '\0';
  task_finish(comm, t, st, now);
}

/* Whether point-to-point task t has business with rank `peer`. */
static int p2p_involves(const chorus_task_t* t, int peer) {
  const chorus_coll_args_t* a = &t->args;
  if (a->coll == CH_COLL_SEND) return a->root == peer;
  if (a->coll == CH_COLL_RECV) return a->root == peer || a->root == CHORUS_ANY_SOURCE;
  return a->root == peer || a->peer == peer || a->peer == CHORUS_ANY_SOURCE;
}

/* The task a transport error is reported against: the running collective, else the oldest
 * point-to-point operation with the failed peer, else the oldest one. */
static chorus_task_t* blamed_task(chorus_comm_t* comm) {
  if (comm->head) return comm->head;
  for (chorus_task_t* t = comm->p2p_head; t; t = t->next)
    if (p2p_involves(t, comm->tp.err_peer)) return t;
  return comm->p2p_head;
}

/* The timeout sentence of a point-to-point operation: what it waits for. */
static void fail_timeout_p2p(chorus_comm_t* comm, chorus_task_t* t, uint64_t idle_ns) {
  const chorus_coll_args_t* a = &t->args;
  char what[200], src[32];
  describe_task(comm, t, what, sizeof(what));
  int from = a->coll == CH_COLL_SENDRECV ? a->peer : a->root;
  describe_rank(from, src, sizeof(src));
  const char* src_host = from >= 0 ? comm->tp.peers[from].host : "";
  const char* dst_host = comm->tp.peers[a->root >= 0 ? a->root : comm->rank].host;
  if (a->coll == CH_COLL_SEND)
    chorus__comm_set_error(comm, "%s timed out: no progress for %.1f s while sending to rank %d (host %s), "
                           "which did not post the matching receive or does not read", what, (double)idle_ns / 1e9,
                           a->root, dst_host);
  else
    chorus__comm_set_error(comm, "%s timed out: no progress for %.1f s while waiting for a message from %s%s%s%s",
                           what, (double)idle_ns / 1e9, src, from >= 0 ? " (host " : "", src_host,
                           from >= 0 ? ")" : "");
  CH_WARN(comm->rank, "%s", comm->last_error);
  engine_break(comm, CHORUS_ERR_TIMEOUT, 0);
}

static void fail_timeout(chorus_comm_t* comm, uint64_t idle_ns) {
  chorus_task_t* t = comm->head;
  if (!t) {
    fail_timeout_p2p(comm, comm->p2p_head, idle_ns);
    return;
  }
  char what[200];
  describe_task(comm, t, what, sizeof(what));
  int is_send = 0;
  size_t left = 0;
  int peer = chorus__transport_pending_peer(&comm->tp, &is_send, &left);
  if (peer >= 0)
    chorus__comm_set_error(comm, "%s timed out: no progress for %.1f s while %s %zu more bytes %s rank %d (host %s)",
                           what, (double)idle_ns / 1e9, is_send ? "sending" : "waiting to receive",
                           left, is_send ? "to" : "from", peer, comm->tp.peers[peer].host);
  else
    chorus__comm_set_error(comm, "%s timed out: no progress for %.1f s", what, (double)idle_ns / 1e9);
  /* The timeout sentence first, then the verdict (which may take up to a second to gather
   * from the peers) as a line of its own, and both in the error message. */
  CH_WARN(comm->rank, "%s", comm->last_error);
  char verdict[700];
  chorus__conn_verdict(t, verdict, sizeof(verdict), &comm->blame);
  if (verdict[0]) {
    CH_WARN(comm->rank, "verdict on %s #%llu: %s", chorus__coll_name(t->args.coll), (unsigned long long)t->seq,
            verdict);
    size_t len = strlen(comm->last_error);
    snprintf(comm->last_error + len, sizeof(comm->last_error) - len, "; verdict: %s", verdict);
  }
  engine_break(comm, CHORUS_ERR_TIMEOUT, 0);
}

/* A task starts: dated, published (collectives) and recorded. */
static void task_start(chorus_comm_t* comm, chorus_task_t* t, uint64_t now) {
  t->start_ns = now;
  comm->last_activity_ns = now;
  if (t->on_start) t->on_start(t);
  chorus__conn_publish_signature(t);
  chorus__trace_started(comm, t);
}

/* Runs the head collectives as far as they go. -1 when one failed (the communicator broke). */
static int run_collectives(chorus_comm_t* comm, uint64_t now) {
  int moved = 0;
  while (comm->head) {
    chorus_task_t* t = comm->head;
    if (!t->start_ns) task_start(comm, t, now);
    int phase_before = t->phase;
    size_t step_before = t->step;
    chorus_status_t st = t->algo->progress(t);
    /* Memory-semantics algorithms advance without moving transport bytes: their phase or step
     * moving is activity too, for the timeout. */
    if (t->phase != phase_before || t->step != step_before) comm->last_activity_ns = now;
    if (st == CHORUS_INPROGRESS) break;
    if (st < 0) {
      fail_task_error(comm, t, st);
      return -1;
    }
    task_finish(comm, t, CHORUS_OK, t->args.count * t->dtype_size >= FRESH_END_BYTES ? chorus__now_ns() : now);
    moved++;
  }
  return moved;
}

/* Advances every point-to-point task, in posting order (their first pass posts their messages,
 * so messages to one peer leave in posting order). -1 when the communicator broke. */
static int run_p2p(chorus_comm_t* comm, uint64_t now) {
  int moved = 0;
  chorus_task_t* next;
  for (chorus_task_t* t = comm->p2p_head; t; t = next) {
    next = t->next;
    if (!t->start_ns) task_start(comm, t, now);
    chorus_status_t st = t->algo->progress(t);
    if (st == CHORUS_INPROGRESS) continue;
    moved++;
    if (st >= 0) task_finish(comm, t, CHORUS_OK, now);
    else if (t->local_fail) fail_task_alone(comm, t, st, now);
    else {
      fail_task_error(comm, t, st);
      return -1;
    }
  }
  return moved;
}

/* One pass: move bytes, then let the tasks advance. mu held; now is the caller's recent clock
 * reading (one per pass is most of what a spinning waiter does). Returns transfers moved. */
static int progress_pass(chorus_comm_t* comm, uint64_t now) {
  int moved = 0;
  comm->tp.err[0] = '\0';
  comm->tp.err_peer = -1;
  /* Every pass, also a waiter's after each (bounded) sleep: so its peers' verdicts can tell
   * it from a rank that stopped. */
  chorus__transport_beat(&comm->tp, now);
  /* Standing still this long, it reads its peers' frames ahead of their receives, so that a
   * question of a peer that timed out (a status frame behind them) gets its answer. */
  comm->tp.stalled = engine_busy(comm) && now - comm->last_activity_ns > STALLED_NS;
  chorus_status_t st = chorus__transport_progress(&comm->tp, &moved);
  /* Before a transport error: a peer that gave up and then closed its sockets explains it. */
  if (fail_if_peer_gave_up(comm)) return 1;
  if (st < 0 && engine_busy(comm)) {
    fail_task_error(comm, blamed_task(comm), st);
    return 1;
  }
  if (moved) comm->last_activity_ns = now;
  int n = run_collectives(comm, now);
  if (n < 0) return 1;
  moved += n;
  if (comm->p2p_head) {
    n = run_p2p(comm, now);
    if (n < 0) return 1;
    moved += n;
  }
  return moved;
}

static int target_pending(const chorus_comm_t* comm, const chorus_task_t* target) {
  if (target) return __atomic_load_n(&target->status, __ATOMIC_ACQUIRE) == CHORUS_INPROGRESS;
  return engine_busy(comm) && !comm->bg_stop;
}

/* A waiter's spin state: restarted whenever something moved or it slept. */
typedef struct {
  uint64_t start;       /* when the spin began (0: not yet read) */
  unsigned idle_polls;  /* passes that moved nothing */
  int yielding;         /* past the busy poll: sched_yield between passes */
} spin_t;

/* The communicator's spin, but where every rank of the machine has a CPU of its own (and
 * CHORUS_SPIN_US is not set) at least twice the call's predicted time, up to CALL_SPIN_MAX_US.
 * Inside a call the awaited peers are mostly copying for it, and they are done within about that
 * time; a sleep in between costs the wake-up of a halted virtual CPU, tens of microseconds. 2
 * ranks, 1 MiB broadcasts read straight from the root's buffer (about 48 us): the root slept
 * after 50 us and the calls took 48-79 us, 47-49 with a 1000 us spin (2026-12-07,
 * docs/compare.md run 23). A call whose peer is late (still computing) costs its core at most
 * that spin more before it sleeps. */
uint64_t chorus__engine_spin_ns(const chorus_comm_t* comm, const chorus_task_t* target) {
  double us = target && target->spins_long ? comm->spin_small_us : comm->spin_us;
  if (target && comm->spin_by_link && !comm->oversubscribed && !comm->machine_crowded) {
    double call_us = 2.0 * target->predicted_us < CALL_SPIN_MAX_US ? 2.0 * target->predicted_us : CALL_SPIN_MAX_US;
    if (call_us > us) us = call_us;
  }
  return (uint64_t)(us * 1000.0);
}

/* Drives progress until target ends (or, with target NULL, the queue is empty). Called with mu
 * held and the driving role taken; mu is released while sleeping. hand_over_ns > 0: instead of
 * sleeping, returns once its spin (at most that long) ran out without progress. */
static void drive(chorus_comm_t* comm, const chorus_task_t* target, uint64_t now, uint64_t hand_over_ns) {
  spin_t spin = {0};
  uint64_t spin_for_ns = chorus__engine_spin_ns(comm, target);
  if (hand_over_ns && hand_over_ns < spin_for_ns) spin_for_ns = hand_over_ns;
  while (target_pending(comm, target)) {
    if (__atomic_load_n(&comm->abort_requested, __ATOMIC_ACQUIRE) && engine_busy(comm)) {
      chorus__comm_set_error(comm, "communicator aborted by chorus_comm_abort on rank %d", comm->rank);
      chorus__engine_fail(comm, CHORUS_ERR_COMM_BROKEN);
      continue;
    }
    if (progress_pass(comm, now)) {
      if (!target_pending(comm, target)) break;
      spin = (spin_t){0};
      now = chorus__now_ns();
      continue;
    }
    if (++spin.idle_polls % CLOCK_POLLS != 0 && !spin.yielding && !comm->oversubscribed) {
      /* A peer on another core usually answers within a microsecond: poll again at once
       * (the pass may start a task with a clock reading a few polls old). */
      pthread_mutex_unlock(&comm->mu);
      __builtin_ia32_pause();
      pthread_mutex_lock(&comm->mu);
      continue;
    }
    now = chorus__now_ns();
    uint64_t timeout_ns = (uint64_t)comm->timeout_sec * CHORUS_NS_PER_SEC;
    if (engine_busy(comm) && now - comm->last_activity_ns >= timeout_ns) {
      fail_timeout(comm, now - comm->last_activity_ns);
      continue;
    }
    if (!spin.start) spin.start = now;
    if (now - spin.start >= spin_for_ns) {
      if (hand_over_ns) return;
      /* Sleep. Arm the doorbell first and look once more: a peer that publishes after this
       * look rings a doorbell whose value was already read, so the sleep returns at once
       * instead of losing the wake-up. */
      uint32_t seen = chorus__transport_arm(&comm->tp);
      if (progress_pass(comm, now)) {
        chorus__transport_disarm(&comm->tp);
        spin = (spin_t){0};
        now = chorus__now_ns();
        continue;
      }
      uint64_t until_timeout_ms = (comm->last_activity_ns + timeout_ns - now) / 1000000 + 1;
      __atomic_store_n(&comm->sleeping, 1, __ATOMIC_RELEASE);
      pthread_mutex_unlock(&comm->mu);
      chorus__transport_wait(&comm->tp, until_timeout_ms < MAX_SLEEP_MS ? (int)until_timeout_ms : MAX_SLEEP_MS, seen);
      pthread_mutex_lock(&comm->mu);
      __atomic_store_n(&comm->sleeping, 0, __ATOMIC_RELEASE);
      spin.idle_polls = 0; /* keeps spin.start: still past the spin time, it sleeps again */
      spin.yielding = 0;
      now = chorus__now_ns();
      continue;
    }
    /* Other ranks may need this core: after a short busy poll, yield between polls until the
     * spin time is up. */
    spin.yielding = comm->oversubscribed || now - spin.start >= BUSY_POLL_NS;
    pthread_mutex_unlock(&comm->mu);
    if (spin.yielding) sched_yield();
    else __builtin_ia32_pause();
    pthread_mutex_lock(&comm->mu);
  }
}

/* Waits on cv (counting the waiters in *waiters) at most ms milliseconds. mu held. */
static void timed_wait_on(chorus_comm_t* comm, pthread_cond_t* cv, int* waiters, int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += (long)ms * 1000000L;
  ts.tv_sec += ts.tv_nsec / 1000000000L;
  ts.tv_nsec %= 1000000000L;
  (*waiters)++;
  pthread_cond_timedwait(cv, &comm->mu, &ts);
  (*waiters)--;
}

static void timed_cond_wait(chorus_comm_t* comm, int ms) { timed_wait_on(comm, &comm->cv, &comm->cv_waiters, ms); }

/* The background thread waits on a condition of its own, woken only when it has work to take
 * over (non-blocking work posted, or queued work that a driver left): not on every blocking
 * call's post and completion, which its caller drives itself. On two cores its wake-ups took
 * the CPU from the ranks: once a communicator had run a non-blocking call or a group, its
 * 4 KiB blocking allreduces took 5-7 us instead of about 2. */
static void wake_bg(chorus_comm_t* comm) {
  if (comm->bg_waiting) pthread_cond_signal(&comm->bg_cv);
}

/* Drives progress toward target if no other thread does; otherwise waits a little for that
 * thread to finish a task or give the role up. mu held. */
static void drive_or_wait(chorus_comm_t* comm, const chorus_task_t* target, uint64_t now) {
  if (comm->progressing) {
    timed_cond_wait(comm, MAX_SLEEP_MS);
    return;
  }
  comm->progressing = 1;
  drive(comm, target, now, 0);
  comm->progressing = 0;
  wake_waiters(comm);
  if (engine_busy(comm) && !comm->bg_held) wake_bg(comm); /* work left that nobody waits for */
}

static void* bg_main(void* arg) {
  chorus_comm_t* comm = arg;
  pthread_setname_np(pthread_self(), "chorus-progress");
  pthread_mutex_lock(&comm->mu);
  while (!comm->bg_stop) {
    if (engine_busy(comm) && !comm->progressing) drive_or_wait(comm, NULL, chorus__now_ns());
    else timed_wait_on(comm, &comm->bg_cv, &comm->bg_waiting, MAX_SLEEP_MS);
  }
  pthread_mutex_unlock(&comm->mu);
  return NULL;
}

/* Queues t (and wakes the background thread for a non-blocking one when wake_bg_now). mu held. */
static chorus_status_t enqueue(chorus_comm_t* comm, chorus_task_t* t, uint64_t now, int wake_bg_now) {
  if (comm->broken) return CHORUS_ERR_COMM_BROKEN;
  if (!t->blocking && !comm->bg_started) {
    int rc = pthread_create(&comm->bg_thread, NULL, bg_main, comm);
    if (rc != 0) {
      /* The call has used its sequence number and shared-memory ids already: without it this
       * rank's later calls would not line up with the peers' any more. */
      chorus__comm_set_error(comm, "cannot start the progress thread: %s", strerror(rc));
      engine_break(comm, CHORUS_ERR_SYSTEM, 1);
      return CHORUS_ERR_SYSTEM;
    }
    comm->bg_started = 1;
  }
  t->status = CHORUS_INPROGRESS;
  t->post_ns = now;
  /* A communicator that was idle starts its timeout clock now. */
  if (!engine_busy(comm)) comm->last_activity_ns = now;
  t->next = t->prev = NULL;
  if (!chorus__coll_is_p2p(t->args.coll)) {
    comm->coll_posted = t->seq + 1;
    comm->last_coll = t->args;
    if (comm->tail) comm->tail->next = t;
    else comm->head = t;
    comm->tail = t;
  } else {
    t->prev = comm->p2p_tail;
    if (comm->p2p_tail) comm->p2p_tail->next = t;
    else comm->p2p_head = t;
    comm->p2p_tail = t;
  }
  chorus__trace_posted(comm, t);
  if (!t->blocking) { /* a blocking call's request is on its caller's stack, gone when it returns */
    chorus_req_t* req = (chorus_req_t*)t;
    req->live_next = comm->live;
    if (comm->live) comm->live->live_prev = req;
    comm->live = req;
  }
  if (__atomic_load_n(&comm->sleeping, __ATOMIC_ACQUIRE)) chorus__transport_wake(&comm->tp);
  if (wake_bg_now && !t->blocking && !t->caller_drives) wake_bg(comm); /* a blocking call's caller drives it */
  return CHORUS_OK;
}

/* A call its poster drives first (chorus__engine_post) is handed to the background thread once
 * this long passes without progress, whatever CHORUS_SPIN_US says: the poster returns soon. */
#define DRIVE_FIRST_MAX_US 50u

/* Before t is queued: whether the engine lets its poster drive it first. Only when nothing else
 * is queued or being driven, and where every rank has a CPU (a spinning poster would take the
 * core from the ranks it waits for). */
static int poster_may_drive(const chorus_comm_t* comm) {
  return !comm->oversubscribed && comm->spin_us > 0 && !comm->progressing && !comm->bg_held && !comm->head &&
         !comm->p2p_head;
}

chorus_status_t chorus__engine_post(chorus_comm_t* comm, chorus_task_t* t, int drive_first) {
  uint64_t now = chorus__now_ns();
  drive_first = drive_first && poster_may_drive(comm);
  chorus_status_t st = enqueue(comm, t, now, !drive_first);
  if (st < 0 || !drive_first) return st;
  comm->progressing = 1;
  drive(comm, t, now, (uint64_t)DRIVE_FIRST_MAX_US * 1000ull);
  comm->progressing = 0;
  wake_waiters(comm);
  if (engine_busy(comm) && !comm->bg_held) wake_bg(comm); /* not done: the background thread goes on */
  return CHORUS_OK;
}

chorus_status_t chorus__engine_run(chorus_comm_t* comm, chorus_task_t* t, int* queued) {
  uint64_t now = chorus__now_ns();
  chorus_status_t st = enqueue(comm, t, now, 1);
  *queued = st >= 0;
  if (st >= 0) {
    for (;;) { /* the clock is read again only when the call goes on */
      drive_or_wait(comm, t, now);
      if (__atomic_load_n(&t->status, __ATOMIC_ACQUIRE) != CHORUS_INPROGRESS) break;
      now = chorus__now_ns();
    }
    st = t->status;
  }
  return st;
}

chorus_status_t chorus__engine_wait(chorus_comm_t* comm, chorus_task_t* t) {
  pthread_mutex_lock(&comm->mu);
  while (__atomic_load_n(&t->status, __ATOMIC_ACQUIRE) == CHORUS_INPROGRESS) drive_or_wait(comm, t, chorus__now_ns());
  chorus_status_t st = t->status;
  pthread_mutex_unlock(&comm->mu);
  return st;
}

int chorus__engine_test(chorus_comm_t* comm, chorus_task_t* t) {
  pthread_mutex_lock(&comm->mu);
  if (t->status == CHORUS_INPROGRESS && !comm->progressing) {
    comm->progressing = 1;
    progress_pass(comm, chorus__now_ns());
    comm->progressing = 0;
    wake_waiters(comm);
    if (engine_busy(comm)) wake_bg(comm);
  }
  int done = t->status != CHORUS_INPROGRESS;
  pthread_mutex_unlock(&comm->mu);
  return done;
}

void chorus__engine_release(chorus_comm_t* comm, chorus_req_t* req) {
  pthread_mutex_lock(&comm->mu);
  if (req->task.status == CHORUS_INPROGRESS) req->user_released = 1;
  else req_unlink_free(comm, req);
  pthread_mutex_unlock(&comm->mu);
}

void chorus__engine_release_done(chorus_comm_t* comm, chorus_req_t* const* reqs, size_t n) {
  pthread_mutex_lock(&comm->mu);
  for (size_t i = 0; i < n; i++) req_unlink_free(comm, reqs[i]);
  pthread_mutex_unlock(&comm->mu);
}

void chorus__engine_hold_bg(chorus_comm_t* comm, int hold) {
  pthread_mutex_lock(&comm->mu);
  comm->bg_held += hold ? 1 : -1;
  if (!comm->bg_held && engine_busy(comm) && !comm->progressing) wake_bg(comm);
  pthread_mutex_unlock(&comm->mu);
}

void chorus__engine_attach(chorus_comm_t* comm, chorus_req_t* req) {
  req->task.status = CHORUS_INPROGRESS;
  req->live_prev = NULL;
  req->live_next = comm->live;
  if (comm->live) comm->live->live_prev = req;
  comm->live = req;
}

void chorus__engine_complete(chorus_comm_t* comm, chorus_req_t* req, chorus_status_t st) {
  __atomic_store_n(&req->task.status, st, __ATOMIC_RELEASE);
  if (req->user_released) req_unlink_free(comm, req);
  wake_waiters(comm);
}

void chorus__engine_drain(chorus_comm_t* comm) {
  pthread_mutex_lock(&comm->mu);
  while (engine_busy(comm)) drive_or_wait(comm, NULL, chorus__now_ns());
  comm->bg_stop = 1;
  wake_waiters(comm);
  if (comm->bg_waiting) pthread_cond_broadcast(&comm->bg_cv);
  int started = comm->bg_started;
  pthread_mutex_unlock(&comm->mu);
  if (started) pthread_join(comm->bg_thread, NULL);
  pthread_mutex_lock(&comm->mu);
  while (comm->live) req_unlink_free(comm, comm->live);
  chorus__engine_free_spare_reqs(comm);
  pthread_mutex_unlock(&comm->mu);
}
