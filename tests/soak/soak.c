/*
 * soak.c - a seeded randomised soak test: thousands of mixed collectives (random kind, size,
 * dtype, op, root, in-place, blocking or overlapped non-blocking) over several communicators
 * of one group of ranks (threads of this process) that force different algorithm families and
 * transports, plus splits that run their own operations, every result checked bitwise against
 * the independent reference of tests/harness/ref.c. Every rank derives the same schedule from
 * the seed alone; a failure prints the seed, the operation and how to reproduce it.
 *
 * Usage: chorus-soak [--seed S] [--ops N] [--seconds T] [--ranks R] [--quiet] [--inject-fault K]
 *   --ops N      stop after N operations per rank (default 2000; 0: no limit)
 *   --seconds T  stop after T seconds (default 0: no limit); ranks agree on when to stop
 *   --inject-fault K  flips a bit of rank 0's result of operation K before it is checked, to
 *                show that the checks catch a wrong result (the run must then fail)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chorus.h"
#include "ref.h"

/* ---- settings ---- */

#define MAX_RANKS 16
#define MAX_PENDING 6           /* non-blocking operations a rank keeps in flight */
#define VOTE_EVERY_OPS 64       /* ranks agree on stopping at this period */
#define SPLIT_EVERY_OPS 100     /* a split event, on average, this often */
#define SPLIT_OPS_MAX 12        /* operations run on each split communicator */
#define STREAM_SCHEDULE 0xc0ffeeu /* rng streams: the main schedule, split plans, split ops */
#define STREAM_SPLIT_PLAN 0x5b1a7u
#define STREAM_SPLIT_LEN 0x5b1a8u
#define MAX_ELEMS ((size_t)1 << 18)
#define ARENA_BYTES ((size_t)8 << 20) /* registered memory per rank: send half, recv half */
#define OP_TIMEOUT_SEC 120
#define PROGRESS_EVERY_SEC 5.0

typedef struct {
  uint64_t seed;
  long max_ops;
  double max_seconds;
  int nranks;
  int quiet;
  long inject_fault_op; /* -1: none */
} soak_opts_t;

/* The communicators every rank holds: the same group, different algorithms and transports. */
typedef struct {
  const char* name;
  const char* algo;        /* CHORUS_ALGO at init ("" = the cost model chooses) */
  const char* buff_size;   /* CHORUS_BUFF_SIZE: small values force many pipeline chunks */
  const char* shm_disable; /* CHORUS_SHM_DISABLE */
  const char* slot_size;   /* CHORUS_SHM_SLOT_SIZE */
  int nsocks;
  int registered; /* some operations use chorus_mem_alloc buffers */
} comm_setup_t;

enum { COMM_DEFAULT, COMM_MSG, COMM_SHM, COMM_TCP, NCOMMS };
static const comm_setup_t kComms[NCOMMS] = {
    {"default", "", "262144", "0", "1048576", 1, 0},
    {"msg", "allreduce:ring,allgather:ring,reduce_scatter:ring,broadcast:binomial,reduce:binomial,barrier:dissemination",
     "4096", "0", "1048576", 1, 0},
    {"shm", "allreduce:shm,reduce_scatter:shm,allgather:shm,broadcast:shm,reduce:shm,barrier:shm", "65536", "0",
     "65536", 1, 1},
    {"tcp", "", "16384", "1", "1048576", 3, 0},
};

/* ---- deterministic randomness: every rank draws the same numbers ---- */

typedef struct {
  uint64_t state;
} rng_t;

static rng_t rng_for(uint64_t seed, uint64_t stream, uint64_t index) {
  rng_t r = {ref_mix64(seed ^ ref_mix64(stream * 0x9e3779b97f4a7c15ull + index))};
  return r;
}

static uint64_t rng_next(rng_t* r) { return ref_mix64(r->state += 0x9e3779b97f4a7c15ull); }
static uint64_t rng_below(rng_t* r, uint64_t n) { return n ? rng_next(r) % n : 0; }

/* ---- one operation ---- */

enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL, K_GATHER,
       K_SCATTER, K_BARRIER, K_SENDRECV, NKINDS };
static const char* const kKindNames[NKINDS] = {"allreduce", "broadcast", "reduce", "allgather",
                                               "reduce_scatter", "alltoall", "gather", "scatter",
                                               "barrier", "sendrecv"};

typedef struct {
  int kind;
  chorus_dtype_t dtype;
  chorus_op_t op;
  size_t count; /* per the API's meaning for the kind */
  int root;     /* or the sendrecv shift */
  int in_place;
  int nonblocking;
  int registered;
  uint64_t data_seed;
} op_desc_t;

/* Mostly small and medium sizes, some large; 0 included. */
static size_t draw_count(rng_t* r) {
  uint64_t p = rng_below(r, 100);
  size_t limit = p < 15 ? 9 : p < 55 ? 1025 : p < 93 ? 65537 : MAX_ELEMS + 1;
  return (size_t)rng_below(r, limit);
}

static op_desc_t draw_op(uint64_t seed, uint64_t stream, uint64_t index, int nranks, int allow_nonblocking,
                         int allow_registered) {
  rng_t r = rng_for(seed, stream, index);
  op_desc_t d = {0};
  d.kind = (int)rng_below(&r, NKINDS);
  d.dtype = (chorus_dtype_t)rng_below(&r, CHORUS_DTYPE_COUNT);
  d.op = (chorus_op_t)rng_below(&r, CHORUS_OP_COUNT);
  d.count = draw_count(&r);
  int per_rank_blocks = d.kind == K_ALLGATHER || d.kind == K_REDUCE_SCATTER || d.kind == K_ALLTOALL ||
                        d.kind == K_GATHER || d.kind == K_SCATTER;
  if (per_rank_blocks) d.count /= (size_t)nranks; /* buffers of count x nranks in all */
  d.root = (int)rng_below(&r, (uint64_t)nranks);
  d.in_place = rng_below(&r, 3) == 0;
  d.nonblocking = allow_nonblocking && rng_below(&r, 3) == 0;
  d.registered = allow_registered && !d.nonblocking && rng_below(&r, 2) == 0;
  d.data_seed = rng_next(&r);
  return d;
}

static void describe_op(const op_desc_t* d, char* out, size_t outlen) {
  snprintf(out, outlen, "%s count=%zu %s %s root/shift=%d%s%s%s", kKindNames[d->kind], d->count,
           chorus_dtype_name(d->dtype), chorus_op_name(d->op), d->root, d->in_place ? " in-place" : "",
           d->nonblocking ? " non-blocking" : "", d->registered ? " registered-memory" : "");
}

/* Elements of the send and receive buffers this rank needs for d. */
static void buffer_elems(const op_desc_t* d, int rank, int n, size_t* send_elems, size_t* recv_elems) {
  size_t c = d->count, all = c * (size_t)n;
  switch (d->kind) {
    case K_ALLREDUCE: case K_BROADCAST: case K_REDUCE: case K_SENDRECV:
      *send_elems = c, *recv_elems = c; break;
    case K_ALLGATHER: *send_elems = c, *recv_elems = all; break;
    case K_REDUCE_SCATTER: *send_elems = all, *recv_elems = c; break;
    case K_ALLTOALL: *send_elems = all, *recv_elems = all; break;
    case K_GATHER: *send_elems = c, *recv_elems = rank == d->root ? all : 0; break;
    case K_SCATTER: *send_elems = rank == d->root ? all : 0, *recv_elems = c; break;
    default: *send_elems = *recv_elems = 0; break;
  }
}

/* An operation's buffers and request, kept until it is checked. */
typedef struct {
  op_desc_t d;
  uint64_t index;
  int comm_index; /* -1: a split communicator */
  chorus_comm_t* comm;
  char* send;
  char* recv;
  int owns_buffers; /* 0 for registered memory (the rank's arena) */
  chorus_req_t* req;
} inflight_t;

typedef struct {
  int rank, nranks;
  const soak_opts_t* opts;
  chorus_comm_t* comms[NCOMMS];
  char* arena[NCOMMS]; /* registered memory, where kComms[c].registered */
  inflight_t pending[MAX_PENDING];
  int npending;
  long ops_done;
  long not_supported;
  long failures;
  long splits;
  long nonblocking, registered, in_place; /* coverage counts */
} rank_state_t;

static pthread_mutex_t print_mu = PTHREAD_MUTEX_INITIALIZER;

static void report_failure(rank_state_t* rs, const inflight_t* f, const char* what) {
  char desc[256];
  describe_op(&f->d, desc, sizeof(desc));
  pthread_mutex_lock(&print_mu);
  fprintf(stderr,
          "SOAK FAILURE seed=%llu rank %d of %d, comm %s, op #%llu (%s): %s\n"
          "  reproduce: chorus-soak --seed %llu --ranks %d --ops %ld\n",
          (unsigned long long)rs->opts->seed, rs->rank, rs->nranks,
          f->comm_index >= 0 ? kComms[f->comm_index].name : "split", (unsigned long long)f->index, desc, what,
          (unsigned long long)rs->opts->seed, rs->nranks, rs->ops_done + 1);
  pthread_mutex_unlock(&print_mu);
  rs->failures++;
}

/* ---- inputs and expected results, from the reference ---- */

static int is_reduction(int kind) { return kind == K_ALLREDUCE || kind == K_REDUCE || kind == K_REDUCE_SCATTER; }

static void fill_inputs(inflight_t* f, int rank, int n) {
  const op_desc_t* d = &f->d;
  size_t es = chorus_dtype_size(d->dtype), send_elems, recv_elems;
  buffer_elems(d, rank, n, &send_elems, &recv_elems);
  if (recv_elems) memset(f->recv, 0xa5, recv_elems * es); /* a result never written cannot pass */
  if (is_reduction(d->kind)) ref_fill_reduce_input(f->send, send_elems, d->dtype, d->op, n, rank, 0, d->data_seed);
  else if (send_elems) ref_fill_bytes(f->send, send_elems * es, rank, d->data_seed, 0);
}

/* Where the call's send and receive buffers are (in-place variants point into recv). */
static void call_buffers(const inflight_t* f, int rank, const void** send, void** recv) {
  const op_desc_t* d = &f->d;
  size_t es = chorus_dtype_size(d->dtype);
  *send = f->send;
  *recv = f->recv;
  if (!d->in_place) return;
  switch (d->kind) {
    case K_ALLREDUCE: case K_BROADCAST:
      *send = f->recv; break;
    case K_REDUCE:
      if (rank == d->root) *send = f->recv;
      break;
    case K_ALLGATHER: *send = f->recv + (size_t)rank * d->count * es; break;
    case K_REDUCE_SCATTER: *recv = f->send + (size_t)rank * d->count * es; break; /* its own block */
    default: break;
  }
}

/* In-place calls take their input from the receive buffer: copy it there first. */
static void stage_in_place(inflight_t* f, int rank) {
  const op_desc_t* d = &f->d;
  size_t es = chorus_dtype_size(d->dtype);
  if (!d->in_place) return;
  switch (d->kind) {
    case K_ALLREDUCE: memcpy(f->recv, f->send, d->count * es); break;
    case K_BROADCAST: if (rank == d->root) memcpy(f->recv, f->send, d->count * es); break;
    case K_REDUCE: if (rank == d->root) memcpy(f->recv, f->send, d->count * es); break;
    case K_ALLGATHER: memcpy(f->recv + (size_t)rank * d->count * es, f->send, d->count * es); break;
    default: break;
  }
}

static chorus_status_t post(inflight_t* f, int rank, chorus_req_t** req) {
  const op_desc_t* d = &f->d;
  const void* s;
  void* r;
  call_buffers(f, rank, &s, &r);
  chorus_comm_t* c = f->comm;
  int n = 0;
  chorus_comm_size(c, &n);
  switch (d->kind) {
    case K_ALLREDUCE: return chorus_iallreduce(s, r, d->count, d->dtype, d->op, c, req);
    case K_BROADCAST: return chorus_ibroadcast(s, r, d->count, d->dtype, d->root, c, req);
    case K_REDUCE: return chorus_ireduce(s, r, d->count, d->dtype, d->op, d->root, c, req);
    case K_ALLGATHER: return chorus_iallgather(s, r, d->count, d->dtype, c, req);
    case K_REDUCE_SCATTER: return chorus_ireduce_scatter(s, r, d->count, d->dtype, d->op, c, req);
    case K_ALLTOALL: return chorus_ialltoall(s, r, d->count, d->dtype, c, req);
    case K_GATHER: return chorus_igather(s, r, d->count, d->dtype, d->root, c, req);
    case K_SCATTER: return chorus_iscatter(s, r, d->count, d->dtype, d->root, c, req);
    case K_BARRIER: return chorus_ibarrier(c, req);
    case K_SENDRECV: {
      int shift = 1 + d->root % (n > 1 ? n - 1 : 1);
      return chorus_isendrecv(s, d->count, (rank + shift) % n, r, d->count, (rank - shift + n) % n, d->dtype, c,
                              req);
    }
  }
  return CHORUS_ERR_INTERNAL;
}

/* Compares got with want element-wise; describes the first difference. 0 when equal. */
static int compare(const char* got, const char* want, size_t elems, chorus_dtype_t dt, size_t index0, char* why,
                   size_t whylen) {
  size_t es = chorus_dtype_size(dt);
  if (elems == 0 || memcmp(got, want, elems * es) == 0) return 0;
  for (size_t i = 0; i < elems; i++)
    if (memcmp(got + i * es, want + i * es, es) != 0) {
      char g[64], w[64];
      ref_format_elem(g, sizeof(g), got + i * es, dt);
      ref_format_elem(w, sizeof(w), want + i * es, dt);
      snprintf(why, whylen, "element %zu is %s, expected %s", index0 + i, g, w);
      return 1;
    }
  return 0;
}

/* Checks the result of a completed operation; 0 when right. */
static int verify(const inflight_t* f, int rank, int n, char* why, size_t whylen) {
  const op_desc_t* d = &f->d;
  size_t es = chorus_dtype_size(d->dtype), c = d->count, blk = c * es;
  const char* result = f->recv;
  if (d->kind == K_REDUCE_SCATTER && d->in_place) result = f->send + (size_t)rank * blk;
  size_t want_bytes = (d->kind == K_ALLGATHER || d->kind == K_ALLTOALL || d->kind == K_GATHER) ? blk * (size_t)n : blk;
  char* want = malloc(want_bytes ? want_bytes : 1);
  if (!want) {
    snprintf(why, whylen, "out of memory for the reference");
    return 1;
  }
  int bad = 0;
  switch (d->kind) {
    case K_ALLREDUCE:
      ref_reduce_expected(want, c, d->dtype, d->op, n, 0, d->data_seed);
      bad = compare(result, want, c, d->dtype, 0, why, whylen);
      break;
    case K_REDUCE:
      if (rank != d->root) break;
      ref_reduce_expected(want, c, d->dtype, d->op, n, 0, d->data_seed);
      bad = compare(result, want, c, d->dtype, 0, why, whylen);
      break;
    case K_REDUCE_SCATTER:
      ref_reduce_expected(want, c, d->dtype, d->op, n, (size_t)rank * c, d->data_seed);
      bad = compare(result, want, c, d->dtype, (size_t)rank * c, why, whylen);
      break;
    case K_BROADCAST:
      ref_fill_bytes(want, blk, d->root, d->data_seed, 0);
      bad = compare(result, want, c, d->dtype, 0, why, whylen);
      break;
    case K_ALLGATHER: case K_GATHER:
      if (d->kind == K_GATHER && rank != d->root) break;
      for (int j = 0; j < n; j++) ref_fill_bytes(want + (size_t)j * blk, blk, j, d->data_seed, 0);
      bad = compare(result, want, c * (size_t)n, d->dtype, 0, why, whylen);
      break;
    case K_ALLTOALL: /* block j came from rank j, which sent its block `rank` */
      for (int j = 0; j < n; j++) ref_fill_bytes(want + (size_t)j * blk, blk, j, d->data_seed, (size_t)rank * blk);
      bad = compare(result, want, c * (size_t)n, d->dtype, 0, why, whylen);
      break;
    case K_SCATTER:
      ref_fill_bytes(want, blk, d->root, d->data_seed, (size_t)rank * blk);
      bad = compare(result, want, c, d->dtype, 0, why, whylen);
      break;
    case K_SENDRECV: {
      int shift = 1 + d->root % (n > 1 ? n - 1 : 1);
      ref_fill_bytes(want, blk, (rank - shift + n) % n, d->data_seed, 0);
      bad = compare(result, want, c, d->dtype, 0, why, whylen);
      break;
    }
    default: break;
  }
  free(want);
  return bad;
}

/* ---- running operations ---- */

/* Sets up buffers (heap, or the comm's registered arena) and posts; 0 when posted. */
static int start_op(rank_state_t* rs, inflight_t* f, int rank, int n, char* arena) {
  size_t es = chorus_dtype_size(f->d.dtype), send_elems, recv_elems;
  buffer_elems(&f->d, rank, n, &send_elems, &recv_elems);
  /* The same decision on every rank: a bound that does not depend on the rank. */
  size_t max_bytes = f->d.count * (size_t)n * es;
  if (f->d.registered && arena && max_bytes <= ARENA_BYTES / 2) {
    f->send = arena;
    f->recv = arena + ARENA_BYTES / 2;
    f->owns_buffers = 0;
  } else {
    f->d.registered = 0;
    f->send = malloc(send_elems * es + 64);
    f->recv = malloc(recv_elems * es + 64);
    f->owns_buffers = 1;
    if (!f->send || !f->recv) {
      report_failure(rs, f, "out of memory for buffers");
      return -1;
    }
  }
  fill_inputs(f, rank, n);
  stage_in_place(f, rank);
  chorus_status_t st = post(f, rank, &f->req);
  if (st == CHORUS_ERR_NOT_SUPPORTED && f->comm_index >= 0 && kComms[f->comm_index].algo[0]) {
    rs->not_supported++; /* a forced algorithm that cannot serve this call: allowed */
    return -1;
  }
  if (st != CHORUS_OK) {
    char why[600];
    snprintf(why, sizeof(why), "posting returned %s: %s", chorus_status_name(st), chorus_comm_last_error(f->comm));
    report_failure(rs, f, why);
    return -1;
  }
  return 0;
}

static void release(inflight_t* f) {
  if (f->owns_buffers) {
    free(f->send);
    free(f->recv);
  }
  f->send = f->recv = NULL;
}

/* --inject-fault: flips the lowest bit of the last byte of the result this rank checks. */
static void inject_fault(inflight_t* f, int rank) {
  size_t es = chorus_dtype_size(f->d.dtype), send_elems, recv_elems;
  buffer_elems(&f->d, rank, 1, &send_elems, &recv_elems);
  char* result = f->d.kind == K_REDUCE_SCATTER && f->d.in_place ? f->send : f->recv;
  if (f->d.count && f->d.kind != K_BARRIER && !(f->d.kind == K_REDUCE && rank != f->d.root))
    result[f->d.count * es - 1] ^= 1;
  else
    fprintf(stderr, "soak: operation %ld has no result on rank 0 to corrupt; pick another\n", (long)f->index);
}

static void finish_op(rank_state_t* rs, inflight_t* f, int rank, int n) {
  chorus_status_t st = chorus_wait(f->req);
  chorus_req_free(f->req);
  f->req = NULL;
  char why[600];
  if (rank == 0 && f->comm_index >= 0 && (long)f->index == rs->opts->inject_fault_op) inject_fault(f, rank);
  if (st != CHORUS_OK) {
    snprintf(why, sizeof(why), "returned %s: %s", chorus_status_name(st), chorus_comm_last_error(f->comm));
    report_failure(rs, f, why);
  } else if (verify(f, rank, n, why, sizeof(why))) {
    report_failure(rs, f, why);
  }
  release(f);
}

static void run_op(rank_state_t* rs, inflight_t* f, int rank, int n, char* arena) {
  if (start_op(rs, f, rank, n, arena) != 0) {
    release(f);
    return;
  }
  rs->registered += f->d.registered;
  finish_op(rs, f, rank, n);
}

static void finish_oldest_pending(rank_state_t* rs) {
  inflight_t* f = &rs->pending[0];
  finish_op(rs, f, rs->rank, rs->nranks);
  memmove(&rs->pending[0], &rs->pending[1], (size_t)(rs->npending - 1) * sizeof(inflight_t));
  rs->npending--;
}

/* ---- splits ---- */

/* Split event k on base communicator c: colors and keys for every rank, from the seed. */
static void split_plan(const rank_state_t* rs, uint64_t k, int* colors, int* keys) {
  rng_t r = rng_for(rs->opts->seed, STREAM_SPLIT_PLAN, k);
  int ncolors = 1 + (int)rng_below(&r, 3);
  for (int i = 0; i < rs->nranks; i++) {
    colors[i] = rng_below(&r, 6) == 0 ? CHORUS_SPLIT_NOCOLOR : (int)rng_below(&r, (uint64_t)ncolors);
    keys[i] = (int)rng_below(&r, 4);
  }
}

static void run_split(rank_state_t* rs, uint64_t k, int c) {
  int colors[MAX_RANKS], keys[MAX_RANKS];
  split_plan(rs, k, colors, keys);
  int me = rs->rank, color = colors[me];
  chorus_comm_t* sub = NULL;
  inflight_t f = {.index = k, .comm_index = -1, .comm = rs->comms[c]};
  chorus_status_t st = chorus_comm_split(rs->comms[c], color, keys[me], &sub);
  if (st != CHORUS_OK) {
    char why[600];
    snprintf(why, sizeof(why), "chorus_comm_split returned %s: %s", chorus_status_name(st),
             chorus_comm_last_error(rs->comms[c]));
    report_failure(rs, &f, why);
    return;
  }
  rs->splits++;
  if (color == CHORUS_SPLIT_NOCOLOR) {
    if (sub) report_failure(rs, &f, "a rank without color got a communicator");
    return;
  }
  /* Its rank must be its position by (key, old rank) among its color. */
  int want_rank = 0, want_size = 0;
  for (int i = 0; i < rs->nranks; i++) {
    if (colors[i] != color) continue;
    want_size++;
    if (keys[i] < keys[me] || (keys[i] == keys[me] && i < me)) want_rank++;
  }
  int sub_rank = -1, sub_size = -1;
  chorus_comm_rank(sub, &sub_rank);
  chorus_comm_size(sub, &sub_size);
  if (sub_rank != want_rank || sub_size != want_size) {
    char why[128];
    snprintf(why, sizeof(why), "split gave rank %d of %d, expected %d of %d", sub_rank, sub_size, want_rank, want_size);
    report_failure(rs, &f, why);
  } else {
    rng_t r = rng_for(rs->opts->seed, STREAM_SPLIT_LEN, k);
    int nops = 1 + (int)rng_below(&r, SPLIT_OPS_MAX);
    for (int i = 0; i < nops; i++) {
      inflight_t g = {.index = (uint64_t)i, .comm_index = -1, .comm = sub};
      /* Streams >= 2^32 are the split communicators': (event, color). */
      g.d = draw_op(rs->opts->seed, ((k + 1) << 32) + (uint64_t)color, (uint64_t)i, sub_size, 0, 0);
      run_op(rs, &g, sub_rank, sub_size, NULL);
    }
  }
  st = chorus_comm_destroy(sub);
  if (st != CHORUS_OK) report_failure(rs, &f, "destroying the split communicator failed");
}

/* ---- the rank's main loop ---- */

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Every rank votes to stop (time is up, or it saw a failure); the max decides for all. */
static int vote_stop(rank_state_t* rs, double t_end) {
  int32_t stop = (t_end > 0 && now_sec() >= t_end) || rs->failures > 0;
  chorus_status_t st = chorus_allreduce(&stop, &stop, 1, CHORUS_INT32, CHORUS_MAX, rs->comms[COMM_DEFAULT]);
  if (st != CHORUS_OK) {
    inflight_t f = {.comm_index = COMM_DEFAULT, .comm = rs->comms[COMM_DEFAULT]};
    report_failure(rs, &f, "the stop vote failed");
    return 1;
  }
  return stop;
}

static void print_progress(const rank_state_t* rs, double t0, double* next_print) {
  if (rs->rank != 0 || rs->opts->quiet) return;
  double t = now_sec();
  if (t < *next_print) return;
  *next_print = t + PROGRESS_EVERY_SEC;
  pthread_mutex_lock(&print_mu);
  printf("soak: seed %llu: %ld ops, %ld splits in %.1f s\n", (unsigned long long)rs->opts->seed, rs->ops_done,
         rs->splits, t - t0);
  fflush(stdout);
  pthread_mutex_unlock(&print_mu);
}

static void* rank_main(void* arg) {
  rank_state_t* rs = arg;
  const soak_opts_t* o = rs->opts;
  double t0 = now_sec(), next_print = t0 + PROGRESS_EVERY_SEC;
  double t_end = o->max_seconds > 0 ? t0 + o->max_seconds : 0;
  uint64_t split_no = 0;
  for (int c = 0; c < NCOMMS; c++) { /* collective: every rank allocates its arena */
    if (!kComms[c].registered) continue;
    chorus_status_t st = chorus_mem_alloc(rs->comms[c], ARENA_BYTES, (void**)&rs->arena[c]);
    if (st != CHORUS_OK) {
      inflight_t f = {.comm_index = c, .comm = rs->comms[c]};
      report_failure(rs, &f, "chorus_mem_alloc failed");
      rs->arena[c] = NULL;
    }
  }
  for (uint64_t i = 0;; i++) {
    if (i % VOTE_EVERY_OPS == 0 && i > 0 && vote_stop(rs, t_end)) break;
    if (o->max_ops > 0 && rs->ops_done >= o->max_ops) break;
    rng_t r = rng_for(o->seed, STREAM_SCHEDULE, i);
    int c = (int)rng_below(&r, NCOMMS);
    if (rng_below(&r, SPLIT_EVERY_OPS) == 0) {
      run_split(rs, split_no++, c);
      continue;
    }
    inflight_t f = {.index = i, .comm_index = c, .comm = rs->comms[c]};
    f.d = draw_op(o->seed, (uint64_t)c, i, rs->nranks, 1, kComms[c].registered);
    rs->ops_done++;
    rs->nonblocking += f.d.nonblocking;
    rs->in_place += f.d.in_place;
    if (f.d.nonblocking) {
      if (rs->npending == MAX_PENDING) finish_oldest_pending(rs);
      if (start_op(rs, &f, rs->rank, rs->nranks, NULL) == 0) rs->pending[rs->npending++] = f;
      else release(&f);
    } else {
      run_op(rs, &f, rs->rank, rs->nranks, rs->arena[c]);
    }
    /* Now and then, complete the oldest overlapped operation. */
    if (rs->npending && rng_below(&r, 4) == 0) finish_oldest_pending(rs);
    print_progress(rs, t0, &next_print);
  }
  while (rs->npending) finish_oldest_pending(rs);
  for (int c = 0; c < NCOMMS; c++)
    if (rs->arena[c]) chorus_mem_free(rs->comms[c], rs->arena[c]);
  return NULL;
}

/* ---- set-up: communicators are made with their environment, one at a time ---- */

typedef struct {
  int rank, nranks;
  const chorus_unique_id_t* id;
  chorus_comm_t* comm;
  chorus_status_t st;
} init_arg_t;

static void* init_main(void* arg) {
  init_arg_t* a = arg;
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = OP_TIMEOUT_SEC;
  cfg.name = "soak";
  a->st = chorus_comm_init(&a->comm, a->nranks, a->rank, a->id, &cfg);
  return NULL;
}

static int make_comms(rank_state_t* rs, int n) {
  for (int c = 0; c < NCOMMS; c++) {
    const comm_setup_t* s = &kComms[c];
    setenv("CHORUS_ALGO", s->algo, 1);
    setenv("CHORUS_BUFF_SIZE", s->buff_size, 1);
    setenv("CHORUS_SHM_DISABLE", s->shm_disable, 1);
    setenv("CHORUS_SHM_SLOT_SIZE", s->slot_size, 1);
    char nsocks[16];
    snprintf(nsocks, sizeof(nsocks), "%d", s->nsocks);
    setenv("CHORUS_NSOCKS_PER_PEER", nsocks, 1);
    /* Without the link probe every socket carries parts (on loopback the probe would use one). */
    setenv("CHORUS_TUNE", s->nsocks > 1 ? "0" : "1", 1);
    chorus_unique_id_t id;
    if (chorus_get_unique_id(&id) != CHORUS_OK) return -1;
    init_arg_t args[MAX_RANKS];
    pthread_t tids[MAX_RANKS];
    for (int r = 0; r < n; r++) {
      args[r] = (init_arg_t){.rank = r, .nranks = n, .id = &id};
      pthread_create(&tids[r], NULL, init_main, &args[r]);
    }
    int bad = 0;
    for (int r = 0; r < n; r++) {
      pthread_join(tids[r], NULL);
      rs[r].comms[c] = args[r].comm;
      if (args[r].st != CHORUS_OK) {
        fprintf(stderr, "soak: rank %d: creating communicator %s failed: %s\n", r, s->name,
                chorus_status_name(args[r].st));
        bad = 1;
      }
    }
    if (bad) return -1;
  }
  return 0;
}

static void destroy_comms(rank_state_t* rs, int n) {
  for (int r = 0; r < n; r++)
    for (int c = 0; c < NCOMMS; c++)
      if (rs[r].comms[c] && chorus_comm_destroy(rs[r].comms[c]) != CHORUS_OK) rs[r].failures++;
}

static void usage(const char* prog) {
  fprintf(stderr, "usage: %s [--seed S] [--ops N] [--seconds T] [--ranks R (2..%d)] [--quiet] [--inject-fault K]\n",
          prog, MAX_RANKS);
  exit(2);
}

static soak_opts_t parse_args(int argc, char** argv) {
  soak_opts_t o = {.seed = (uint64_t)time(NULL), .max_ops = 2000, .max_seconds = 0, .nranks = 4,
                   .inject_fault_op = -1};
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--quiet") == 0) {
      o.quiet = 1;
      continue;
    }
    if (!v) usage(argv[0]);
    char* end = NULL;
    if (strcmp(a, "--seed") == 0) o.seed = strtoull(v, &end, 0);
    else if (strcmp(a, "--ops") == 0) o.max_ops = strtol(v, &end, 10);
    else if (strcmp(a, "--seconds") == 0) o.max_seconds = strtod(v, &end);
    else if (strcmp(a, "--ranks") == 0) o.nranks = (int)strtol(v, &end, 10);
    else if (strcmp(a, "--inject-fault") == 0) o.inject_fault_op = strtol(v, &end, 10);
    else usage(argv[0]);
    if (!end || *end != '\0') usage(argv[0]);
    i++;
  }
  if (o.nranks < 2 || o.nranks > MAX_RANKS || o.max_ops < 0 || o.max_seconds < 0) usage(argv[0]);
  if (o.max_ops == 0 && o.max_seconds == 0) usage(argv[0]); /* it must end */
  return o;
}

int main(int argc, char** argv) {
  soak_opts_t o = parse_args(argc, argv);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("soak: seed %llu, %d ranks, %ld ops, %.0f s (0 = no limit)\n", (unsigned long long)o.seed, o.nranks,
         o.max_ops, o.max_seconds);
  rank_state_t* rs = calloc((size_t)o.nranks, sizeof(*rs));
  if (!rs) return 1;
  for (int r = 0; r < o.nranks; r++) rs[r] = (rank_state_t){.rank = r, .nranks = o.nranks, .opts = &o};
  double t0 = now_sec();
  if (make_comms(rs, o.nranks) != 0) {
    fprintf(stderr, "SOAK FAILURE seed=%llu: communicators could not be created\n", (unsigned long long)o.seed);
    return 1;
  }
  pthread_t tids[MAX_RANKS];
  for (int r = 0; r < o.nranks; r++) pthread_create(&tids[r], NULL, rank_main, &rs[r]);
  for (int r = 0; r < o.nranks; r++) pthread_join(tids[r], NULL);
  destroy_comms(rs, o.nranks);
  long failures = 0, not_supported = 0;
  for (int r = 0; r < o.nranks; r++) {
    failures += rs[r].failures;
    not_supported += rs[r].not_supported;
  }
  printf("soak: seed %llu: %ld ops (%ld non-blocking, %ld in place, %ld on registered memory) and %ld splits per "
         "rank in %.1f s, %ld refused by a forced algorithm, %ld failures\n",
         (unsigned long long)o.seed, rs[0].ops_done, rs[0].nonblocking, rs[0].in_place, rs[0].registered,
         rs[0].splits, now_sec() - t0, not_supported, failures);
  if (failures) printf("soak: FAILED; reproduce with: %s --seed %llu --ranks %d --ops %ld\n", argv[0],
                       (unsigned long long)o.seed, o.nranks, rs[0].ops_done);
  free(rs);
  return failures ? 1 : 0;
}
