/*
 * chorus-perf.c - the Chorus benchmark, in the style of nccl-tests. For each collective, dtype,
 * op and message size it times the call (average per iteration, the maximum over ranks), prints
 * algbw and busbw, and with -c 1 first checks one untimed call bitwise against results every
 * rank computes on its own (perf_check.h; flags in perf_opts.h). Run under the launcher, e.g.
 *   chorus-run -n 4 chorus-perf allreduce -b 8 -e 64M -f 2 -c 1
 * With -a A,B,... it compares algorithms inside one job: a communicator per contender (split from
 * the first, so all share its processes, placement and measured links), timed in turns, which
 * launch-to-launch noise on a shared machine cannot bias.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"
#include "perf_check.h"
#include "perf_opts.h"

/* ---- one call ---- */

typedef struct {
  perf_coll_t coll;
  void* send;
  void* recv;
  size_t count; /* the count argument of the call */
  chorus_dtype_t dtype;
  chorus_op_t op;
  int root, rank, nranks;
} perf_call_t;

static chorus_status_t post_call(const perf_call_t* c, chorus_comm_t* comm, chorus_req_t** req) {
  int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
  const void* sb = c->send;
  void* rb = c->recv;
  size_t n = c->count;
  chorus_dtype_t dt = c->dtype;
  switch (c->coll) {
    case PC_ALLREDUCE: return chorus_iallreduce(sb, rb, n, dt, c->op, comm, req);
    case PC_BROADCAST: return chorus_ibroadcast(sb, rb, n, dt, c->root, comm, req);
    case PC_REDUCE: return chorus_ireduce(sb, rb, n, dt, c->op, c->root, comm, req);
    case PC_ALLGATHER: return chorus_iallgather(sb, rb, n, dt, comm, req);
    case PC_REDUCE_SCATTER: return chorus_ireduce_scatter(sb, rb, n, dt, c->op, comm, req);
    case PC_ALLTOALL: return chorus_ialltoall(sb, rb, n, dt, comm, req);
    case PC_GATHER: return chorus_igather(sb, rb, n, dt, c->root, comm, req);
    case PC_SCATTER: return chorus_iscatter(sb, rb, n, dt, c->root, comm, req);
    case PC_SENDRECV: return chorus_isendrecv(sb, n, next, rb, n, prev, dt, comm, req);
    case PC_BARRIER: return chorus_ibarrier(comm, req);
    default: return CHORUS_ERR_INVALID_ARG;
  }
}

static chorus_status_t blocking_call(const perf_call_t* c, chorus_comm_t* comm) {
  int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
  const void* sb = c->send;
  void* rb = c->recv;
  size_t n = c->count;
  chorus_dtype_t dt = c->dtype;
  switch (c->coll) {
    case PC_ALLREDUCE: return chorus_allreduce(sb, rb, n, dt, c->op, comm);
    case PC_BROADCAST: return chorus_broadcast(sb, rb, n, dt, c->root, comm);
    case PC_REDUCE: return chorus_reduce(sb, rb, n, dt, c->op, c->root, comm);
    case PC_ALLGATHER: return chorus_allgather(sb, rb, n, dt, comm);
    case PC_REDUCE_SCATTER: return chorus_reduce_scatter(sb, rb, n, dt, c->op, comm);
    case PC_ALLTOALL: return chorus_alltoall(sb, rb, n, dt, comm);
    case PC_GATHER: return chorus_gather(sb, rb, n, dt, c->root, comm);
    case PC_SCATTER: return chorus_scatter(sb, rb, n, dt, c->root, comm);
    case PC_SENDRECV: return chorus_sendrecv(sb, n, next, rb, n, prev, dt, comm);
    case PC_BARRIER: return chorus_barrier(comm);
    default: return CHORUS_ERR_INVALID_ARG;
  }
}

static chorus_status_t run_call(const perf_call_t* c, chorus_comm_t* comm, int nonblocking) {
  if (!nonblocking) return blocking_call(c, comm);
  chorus_req_t* req = NULL;
  chorus_status_t st = post_call(c, comm, &req);
  if (st < 0) return st;
  st = chorus_wait(req);
  chorus_req_free(req);
  return st;
}

/* Points send/recv into the two buffers. In place follows chorus.h: the same buffer, or for
 * allgather/gather the caller's slot of recvbuf, for reduce_scatter recvbuf = sendbuf + rank's
 * block, and for scatter (root only) recvbuf = root's block of sendbuf. */
static void bind_buffers(perf_call_t* c, char* send_base, char* recv_base, int inplace) {
  size_t block_bytes = c->count * chorus_dtype_size(c->dtype);
  c->send = send_base;
  c->recv = recv_base;
  if (!inplace || c->coll == PC_SENDRECV) return;
  switch (c->coll) {
    case PC_ALLGATHER:
    case PC_GATHER: c->send = recv_base + (size_t)c->rank * block_bytes; break;
    case PC_REDUCE_SCATTER: c->recv = send_base + (size_t)c->rank * block_bytes; break;
    case PC_SCATTER:
      if (c->rank == c->root) c->recv = send_base + (size_t)c->root * block_bytes;
      break;
    default: c->send = recv_base; break;
  }
}

/* ---- the check of one call ---- */

/* Elements of the output buffer (sentinel-filled before the call). */
static size_t output_count(const perf_call_t* c) {
  int whole = c->coll == PC_ALLGATHER || c->coll == PC_GATHER || c->coll == PC_ALLTOALL;
  return whole ? c->count * (size_t)c->nranks : c->count;
}

/* Elements of this rank's input, or 0 where its send buffer is not read. */
static size_t input_count(const perf_call_t* c) {
  switch (c->coll) {
    case PC_REDUCE_SCATTER:
    case PC_ALLTOALL: return c->count * (size_t)c->nranks;
    case PC_SCATTER: return c->rank == c->root ? c->count * (size_t)c->nranks : 0;
    case PC_BARRIER: return 0;
    default: return c->count;
  }
}

/* Sentinel over the outputs, then this rank's pattern over its inputs (in place, the inputs
 * lie inside the output buffer and overwrite part of the sentinel). */
static void prepare_check(const perf_call_t* c, const perf_pattern_t* p, int inplace) {
  memset(c->recv, PAT_SENTINEL_BYTE, output_count(c) * p->elem_bytes);
  if (c->coll == PC_BROADCAST && inplace && c->rank != c->root) return; /* send is the output */
  region_fill(c->send, input_count(c), p->input[c->rank], p->elem_bytes, 0);
}

/* Wrong elements of this rank's outputs, plus out of place any changed input element. */
static uint64_t count_wrong(const perf_call_t* c, const perf_pattern_t* p, int inplace) {
  size_t eb = p->elem_bytes, n = c->count, me = (size_t)c->rank;
  int prev = (c->rank + c->nranks - 1) % c->nranks;
  uint64_t wrong = 0;
  switch (c->coll) {
    case PC_ALLREDUCE: wrong = region_count_wrong(c->recv, n, p->reduced, eb, 0); break;
    case PC_REDUCE:
      if (c->rank == c->root) wrong = region_count_wrong(c->recv, n, p->reduced, eb, 0);
      break;
    case PC_REDUCE_SCATTER: wrong = region_count_wrong(c->recv, n, p->reduced, eb, me * n); break;
    case PC_BROADCAST: wrong = region_count_wrong(c->recv, n, p->input[c->root], eb, 0); break;
    case PC_SCATTER: wrong = region_count_wrong(c->recv, n, p->input[c->root], eb, me * n); break;
    case PC_SENDRECV: wrong = region_count_wrong(c->recv, n, p->input[prev], eb, 0); break;
    case PC_ALLGATHER:
    case PC_GATHER:
    case PC_ALLTOALL:
      if (c->coll == PC_GATHER && c->rank != c->root) break;
      for (int r = 0; r < c->nranks; r++) {
        size_t first = c->coll == PC_ALLTOALL ? me * n : 0; /* block `me` of rank r's send */
        char* block = (char*)c->recv + (size_t)r * n * eb;
        wrong += region_count_wrong(block, n, p->input[r], eb, first);
      }
      break;
    default: break;
  }
  if (!inplace) { /* the send buffer is const: it must come back unchanged */
    wrong += region_count_wrong(c->send, input_count(c), p->input[c->rank], eb, 0);
  }
  return wrong;
}

/* The -x self-test: flip one bit of one element that this rank checks. */
static void corrupt_output(const perf_call_t* c) {
  int checker = (c->coll == PC_REDUCE || c->coll == PC_GATHER) ? c->root : 0;
  if (c->rank == checker && output_count(c) > 0 && c->coll != PC_BARRIER) {
    ((unsigned char*)c->recv)[0] ^= 0x01;
  }
}

/* ---- rows, output ---- */

typedef struct {
  perf_coll_t coll;
  size_t size_bytes, count;
  const char* type;
  const char* redop;
  const char* algo;
  double time_us, algbw_gbps, busbw_gbps;
  uint64_t wrong;
} perf_row_t;

/* One algorithm of the run: its label (NULL for the job's communicator, whose label per
 * collective forced_algo reads) and the communicator whose CHORUS_ALGO forces it. */
typedef struct {
  const char* label;
  chorus_comm_t* comm;
  double round_us[1000]; /* this row's time in each round (-k) */
  int skipped;           /* this row: the algorithm cannot serve the call */
} perf_contender_t;

typedef struct {
  perf_opts_t opts;
  chorus_comm_t* comm; /* the job's; with several contenders it only coordinates */
  perf_contender_t contender[PERF_MAX_CONTENDERS];
  int ncontenders;
  int rank, nranks;
  char* send_base;
  char* recv_base;
  size_t buffer_bytes;
  perf_pattern_t pattern;
  FILE* json;
  int json_rows;
  double busbw_sum;
  int busbw_rows;
  uint64_t wrong_total;
  uint64_t late_calls; /* -B 2: rank-calls of the row that reached their start time late */
  char host[256];
  char version[32];
  double create_ms; /* chorus_comm_init_env of the job's communicator on rank 0 */
} perf_ctx_t;

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The algorithm CHORUS_ALGO forces for this collective ("ring" or "allreduce:ring,..."), or
 * "auto". */
static const char* forced_algo(perf_coll_t coll, char* out, size_t out_bytes) {
  const char* env = getenv("CHORUS_ALGO");
  snprintf(out, out_bytes, "auto");
  if (env == NULL) return out;
  char list[512];
  snprintf(list, sizeof list, "%s", env);
  char* save = NULL;
  for (char* item = strtok_r(list, ", ", &save); item; item = strtok_r(NULL, ", ", &save)) {
    char* colon = strchr(item, ':');
    if (colon == NULL) snprintf(out, out_bytes, "%s", item);
    else if ((size_t)(colon - item) == strlen(coll_info[coll].name) &&
             strncmp(item, coll_info[coll].name, (size_t)(colon - item)) == 0)
      snprintf(out, out_bytes, "%s", colon + 1);
  }
  return out;
}

static void json_string(FILE* f, const char* key, const char* value, const char* sep) {
  fprintf(f, "\"%s\": \"", key);
  for (const char* s = value; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fprintf(f, "\"%s", sep);
}

static void json_open(perf_ctx_t* ctx, int argc, char** argv) {
  const perf_opts_t* o = &ctx->opts;
  FILE* f = ctx->json;
  char command[1024] = "";
  for (int i = 0; i < argc; i++) {
    size_t used = strlen(command);
    snprintf(command + used, sizeof command - used, "%s%s", i ? " " : "", argv[i]);
  }
  const char* algo_env = getenv("CHORUS_ALGO");
  const char* nsocks_env = getenv("CHORUS_NSOCKS_PER_PEER");
  fprintf(f, "{\"params\": {");
  json_string(f, "command", command, ", ");
  json_string(f, "host", ctx->host, ", ");
  json_string(f, "chorus_version", ctx->version, ", ");
  fprintf(f, "\"create_ms\": %.3f, ", ctx->create_ms);
  fprintf(f, "\"nranks\": %d, \"min_bytes\": %zu, \"max_bytes\": %zu, \"step_factor\": %zu, ",
          ctx->nranks, o->min_bytes, o->max_bytes, o->step_bytes ? 0 : o->step_factor);
  fprintf(f, "\"step_bytes\": %zu, \"iters\": %d, \"warmup\": %d, \"check\": %d, ", o->step_bytes,
          o->iters, o->warmup, o->check);
  fprintf(f, "\"inplace\": %d, \"nonblocking\": %d, \"isolated\": %d, \"root\": %d, \"zero_permille\": %d, ",
          o->inplace, o->nonblocking, o->isolated, o->root, o->zero_permille);
  json_string(f, "dtype", o->dtype_all ? "all" : chorus_dtype_name(o->dtype), ", ");
  json_string(f, "op", o->op_all ? "all" : chorus_op_name(o->op), ", ");
  json_string(f, "CHORUS_ALGO", algo_env ? algo_env : "", ", ");
  json_string(f, "CHORUS_NSOCKS_PER_PEER", nsocks_env ? nsocks_env : "", "");
  fprintf(f, "},\n \"rows\": [");
}

/* rounds_us: every round's time (-k > 1), else NULL. */
static void json_row(perf_ctx_t* ctx, const perf_row_t* row, size_t call_count, const double* rounds_us) {
  FILE* f = ctx->json;
  fprintf(f, "%s\n  {", ctx->json_rows++ ? "," : "");
  json_string(f, "collective", coll_info[row->coll].name, ", ");
  fprintf(f, "\"size_bytes\": %zu, \"count\": %zu, \"call_count\": %zu, ", row->size_bytes,
          row->count, call_count);
  json_string(f, "type", row->type, ", ");
  json_string(f, "redop", row->redop, ", ");
  json_string(f, "algo", row->algo, ", ");
  fprintf(f, "\"time_us\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, \"wrong\": %llu",
          row->time_us, row->algbw_gbps, row->busbw_gbps, (unsigned long long)row->wrong);
  if (rounds_us != NULL) {
    fprintf(f, ", \"rounds_us\": [");
    for (int r = 0; r < ctx->opts.rounds; r++) fprintf(f, "%s%.3f", r ? ", " : "", rounds_us[r]);
    fprintf(f, "]");
  }
  fprintf(f, "}");
}

static void json_close(perf_ctx_t* ctx, double avg_busbw, const char* status) {
  fprintf(ctx->json, "\n ],\n \"avg_busbw_gbps\": %.6f, \"wrong_total\": %llu, ", avg_busbw,
          (unsigned long long)ctx->wrong_total);
  json_string(ctx->json, "status", status, "}\n");
  fclose(ctx->json);
  ctx->json = NULL;
}

static void print_header(const perf_ctx_t* ctx, perf_coll_t coll) {
  const perf_opts_t* o = &ctx->opts;
  char algo[128];
  printf("#\n# collective: %s\n", coll_info[coll].name);
  printf("# nranks %d | dtype %s | op %s | root %d | iters %d | warmup %d | check %d | %s | %s%s\n",
         ctx->nranks, o->dtype_all ? "all" : chorus_dtype_name(o->dtype),
         coll_info[coll].reduces ? (o->op_all ? "all" : chorus_op_name(o->op)) : "none", o->root,
         o->iters, o->warmup, o->check, o->inplace ? "in place" : "out of place",
         o->nonblocking ? "non-blocking" : "blocking",
         o->isolated == 2 ? " | calls started together, timed to the last exit"
         : o->isolated    ? " | a barrier after each call"
                          : "");
  if (o->zero_permille) printf("# inputs: %d per mille of each rank's elements are 0\n", o->zero_permille);
  chorus_compression_opts_t zip = {CHORUS_COMPRESSION_NONE, 0, CHORUS_COMPRESSION_SCOPE_INTER_HOST};
  chorus_comm_get_compression(ctx->comm, &zip);
  size_t min_bytes = 0;
  chorus_comm_get_compression_min_bytes(ctx->comm, &min_bytes);
  char compression[96] = "none";
  const char* scope = zip.scope == CHORUS_COMPRESSION_SCOPE_ALL ? "every level" : "across hosts";
  if (zip.codec == CHORUS_COMPRESSION_TOPK)
    snprintf(compression, sizeof compression, "topk %g (%s, from %zu bytes)", zip.topk_fraction, scope, min_bytes);
  else if (zip.codec != CHORUS_COMPRESSION_NONE)
    snprintf(compression, sizeof compression, "%s (%s, from %zu bytes)", chorus_compression_name(zip.codec), scope,
             min_bytes);
  const char* algos = ctx->ncontenders > 1 ? o->algo : forced_algo(coll, algo, sizeof algo);
  printf("# host %s | chorus %s | algo %s | compression %s | communicator created in %.1f ms (rank 0)\n", ctx->host,
         ctx->version, algos, compression, ctx->create_ms);
  if (ctx->ncontenders > 1 || o->rounds > 1) {
    printf("# %d round(s), each algorithm in turn, the order changing from round to round; time: median over rounds\n",
           o->rounds);
  }
  printf("#\n");
  printf("#%12s %12s %9s %6s %13s %10s %12s %12s %7s\n", "size", "count", "type", "redop", "algo",
         "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  fflush(stdout);
}

static void print_row(const perf_row_t* r) {
  printf(" %12zu %12zu %9s %6s %13s %10.2f %12.3f %12.3f %7llu\n", r->size_bytes, r->count, r->type,
         r->redop, r->algo, r->time_us, r->algbw_gbps, r->busbw_gbps, (unsigned long long)r->wrong);
  fflush(stdout);
}

/* Reports a failed call on this rank and breaks the communicator so peers stop waiting. */
static const char* contender_label(const perf_ctx_t* ctx, int k, perf_coll_t coll, char* buf,
                                   size_t buf_bytes) {
  return ctx->contender[k].label ? ctx->contender[k].label : forced_algo(coll, buf, buf_bytes);
}

static int fail_call(perf_ctx_t* ctx, const char* what, int k, const perf_call_t* c,
                     size_t size_bytes, chorus_status_t st) {
  char algo[128];
  fprintf(stderr, "chorus-perf: rank %d: %s of %s (size %zu, %s, algo %s) failed: %s: %s\n",
          ctx->rank, what, coll_info[c->coll].name, size_bytes, chorus_dtype_name(c->dtype),
          contender_label(ctx, k, c->coll, algo, sizeof algo), chorus_status_name(st),
          chorus_comm_last_error(ctx->contender[k].comm));
  if (ctx->json != NULL) json_close(ctx, 0.0, chorus_status_name(st));
  return -1;
}

/* ---- measuring one row ---- */

/* The call's count for a row of `size_bytes`, or 0 when the size does not divide evenly. */
static size_t call_count_for(perf_coll_t coll, size_t size_bytes, size_t elem_bytes, int nranks) {
  size_t unit = elem_bytes * (coll_info[coll].blocked ? (size_t)nranks : 1);
  if (size_bytes == 0 || size_bytes % unit != 0) return 0;
  return size_bytes / unit;
}

/* Runs the untimed checked call; sums wrong elements over ranks into *wrong. */
static chorus_status_t check_row(perf_ctx_t* ctx, chorus_comm_t* comm, const perf_call_t* c,
                                 uint64_t* wrong) {
  prepare_check(c, &ctx->pattern, ctx->opts.inplace);
  chorus_status_t st = run_call(c, comm, ctx->opts.nonblocking);
  if (st < 0) return st;
  if (ctx->opts.corrupt) corrupt_output(c);
  uint64_t local_wrong = count_wrong(c, &ctx->pattern, ctx->opts.inplace);
  return chorus_allreduce(&local_wrong, wrong, 1, CHORUS_UINT64, CHORUS_SUM, comm);
}

/* -B 2: calls started together. After a barrier the ranks agree on a moment PERF_SYNC_MARGIN_US
 * ahead on the machine's one clock (CLOCK_MONOTONIC), every rank waits for it and enters the call
 * then, and the call's time runs from that moment to the last rank's exit (the synchronized start
 * of ReproMPI and of Hoefler et al.'s window-based timing). After a barrier alone ranks leave it
 * up to tens of microseconds apart on shared cores, and a rank that enters early counts its wait
 * for the others in its own time: small broadcasts on 4 emulated hosts x 2 ranks read up to 1.3x
 * apart in the order opposite to their latencies. A rank that reaches the moment only after it
 * passed (the margin was short) is counted, and the row says how many. */
#define PERF_SYNC_MARGIN_US 500.0

static void wait_until_us(double t) {
  while (now_us() < t) sched_yield();
}

/* The moment, agreed by a collective other than the one timed, so that a forced algorithm
 * (CHORUS_ALGO=broadcast:chain) does not carry it: the latest of every rank's proposal. */
static chorus_status_t agree_on_start(const perf_call_t* c, chorus_comm_t* comm, double* start) {
  double mine = now_us() + PERF_SYNC_MARGIN_US;
  if (c->coll == PC_ALLREDUCE) {
    *start = mine;
    return chorus_broadcast(start, start, 1, CHORUS_FLOAT64, 0, comm);
  }
  return chorus_allreduce(&mine, start, 1, CHORUS_FLOAT64, CHORUS_MAX, comm);
}

static chorus_status_t time_row_synced(perf_ctx_t* ctx, chorus_comm_t* comm, const perf_call_t* c,
                                       double* time_us, uint64_t* late) {
  int iters = ctx->opts.iters;
  double* starts = calloc(2 * (size_t)iters, sizeof(double));
  if (!starts) return CHORUS_ERR_NO_MEMORY;
  double* exits = starts + iters;
  uint64_t my_late = 0;
  chorus_status_t st = CHORUS_OK;
  for (int i = 0; i < ctx->opts.warmup && st >= 0; i++) st = run_call(c, comm, ctx->opts.nonblocking);
  for (int i = 0; i < iters && st >= 0; i++) {
    st = chorus_barrier(comm); /* the moment is named once every rank is out of the last call */
    if (st >= 0) st = agree_on_start(c, comm, &starts[i]);
    if (st < 0) break;
    if (now_us() > starts[i]) my_late++;
    wait_until_us(starts[i]);
    st = run_call(c, comm, ctx->opts.nonblocking);
    exits[i] = now_us();
  }
  if (st >= 0) st = chorus_allreduce(exits, exits, (size_t)iters, CHORUS_FLOAT64, CHORUS_MAX, comm);
  if (st >= 0) st = chorus_allreduce(&my_late, late, 1, CHORUS_UINT64, CHORUS_SUM, comm);
  double sum = 0.0;
  for (int i = 0; i < iters; i++) sum += exits[i] - starts[i];
  *time_us = sum / iters;
  free(starts);
  return st;
}

/* -B 2 compares clock readings of every rank: only ranks of one machine (one boot, one
 * CLOCK_MONOTONIC) may take part; across machines a rank would wait for a moment hours away.
 * 0 when they share it (the same boot id on every rank), -1 (rank 0 says why) otherwise. */
static int check_one_clock(perf_ctx_t* ctx) {
  char id[64] = "";
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(id, sizeof id, f)) id[0] = '\0';
    fclose(f);
  }
  uint64_t h = 1469598103934665603ull;
  for (const char* p = id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
  uint64_t lo = 0, hi = 0;
  chorus_status_t st = chorus_allreduce(&h, &lo, 1, CHORUS_UINT64, CHORUS_MIN, ctx->comm);
  if (st >= 0) st = chorus_allreduce(&h, &hi, 1, CHORUS_UINT64, CHORUS_MAX, ctx->comm);
  if (st >= 0 && lo == hi && id[0]) return 0;
  if (ctx->rank == 0)
    fprintf(stderr, "chorus-perf: -B 2 needs every rank on one machine (one clock): %s\n",
            st < 0 ? chorus_status_name(st) : !id[0] ? "cannot read /proc/sys/kernel/random/boot_id"
                                                     : "the ranks run on machines of different boot ids");
  return -1;
}

/* Times warmup + iters calls; *time_us gets the average per call, maximum over ranks. With -B
 * every call is followed by a barrier that is not timed, so each call starts with every rank
 * ready and no rank overlaps it with the next one; -B 2 starts them together and gets the
 * average over calls of each call's time to its last exit (above). */
static chorus_status_t time_row(perf_ctx_t* ctx, chorus_comm_t* comm, const perf_call_t* c,
                                double* time_us) {
  if (ctx->opts.isolated == 2) {
    uint64_t late = 0;
    chorus_status_t st = time_row_synced(ctx, comm, c, time_us, &late);
    ctx->late_calls += late;
    return st;
  }
  chorus_status_t st = CHORUS_OK;
  int nonblocking = ctx->opts.nonblocking;
  for (int i = 0; i < ctx->opts.warmup && st >= 0; i++) st = run_call(c, comm, nonblocking);
  if (st >= 0) st = chorus_barrier(comm);
  double local_us = 0.0, start_us = now_us();
  for (int i = 0; i < ctx->opts.iters && st >= 0; i++) {
    st = run_call(c, comm, nonblocking);
    if (!ctx->opts.isolated || st < 0) continue;
    local_us += now_us() - start_us;
    st = chorus_barrier(comm);
    start_us = now_us();
  }
  if (!ctx->opts.isolated) local_us = now_us() - start_us;
  local_us /= ctx->opts.iters;
  if (st < 0) return st;
  return chorus_allreduce(&local_us, time_us, 1, CHORUS_FLOAT64, CHORUS_MAX, comm);
}

static int compare_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median_of(const double* values, int n) {
  double sorted[1000];
  memcpy(sorted, values, (size_t)n * sizeof(double));
  qsort(sorted, (size_t)n, sizeof(double), compare_double);
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

/* The stride of round r of n contenders: the r-th number prime to n (1, then 2 or 3, ..., n - 1:
 * the list backwards). Round r starts r places along the list and steps by it, so that each
 * contender follows a different one from round to round. What ran just before a call matters:
 * on links shaped by a token bucket, 8 KiB allreduces on 4 emulated hosts x 1 rank took 52 us a
 * call right after the slow ring (its steps let the buckets refill) and 69 us after any other
 * contender, whatever the algorithm; with a fixed cyclic order one contender always got the
 * refilled buckets. */
static int round_stride(int n, int r) {
  int strides = 0;
  for (int s = 1; s < n; s++) strides += gcd(s, n) == 1;
  for (int s = 1, seen = 0; strides > 0 && s < n; s++)
    if (gcd(s, n) == 1 && seen++ == r % strides) return s;
  return 1;
}

/* Round r times every contender once, in the order round_stride gives. */
static chorus_status_t time_rounds(perf_ctx_t* ctx, const perf_call_t* c, int* failed_k) {
  int n = ctx->ncontenders;
  for (int r = 0; r < ctx->opts.rounds; r++) {
    int stride = round_stride(n, r);
    for (int j = 0; j < n; j++) {
      int k = (int)(((long)r + (long)j * stride) % n);
      perf_contender_t* who = &ctx->contender[k];
      if (who->skipped) continue;
      chorus_status_t st = time_row(ctx, who->comm, c, &who->round_us[r]);
      if (st < 0) return *failed_k = k, st;
    }
  }
  return CHORUS_OK;
}

/* "# rounds SIZE ALGO t1 t2 ...": every round's time, for scripts that want the spread. */
static void print_rounds(const perf_ctx_t* ctx, perf_coll_t coll, size_t size_bytes) {
  char algo[128];
  for (int k = 0; k < ctx->ncontenders; k++) {
    if (ctx->contender[k].skipped) continue;
    printf("# rounds %zu %s", size_bytes, contender_label(ctx, k, coll, algo, sizeof algo));
    for (int r = 0; r < ctx->opts.rounds; r++) printf(" %.2f", ctx->contender[k].round_us[r]);
    printf("\n");
  }
  fflush(stdout);
}

/* One row: check (if asked), time, print. Returns 0, or -1 after a failed call. */
static int run_row(perf_ctx_t* ctx, perf_coll_t coll, chorus_dtype_t dtype, chorus_op_t op,
                   size_t size_bytes, size_t call_count) {
  perf_call_t c = {.coll = coll, .count = call_count, .dtype = dtype, .op = op,
                   .root = ctx->opts.root, .rank = ctx->rank, .nranks = ctx->nranks};
  bind_buffers(&c, ctx->send_base, ctx->recv_base, ctx->opts.inplace);
  uint64_t wrong[PERF_MAX_CONTENDERS] = {0};
  for (int k = 0; k < ctx->ncontenders; k++) {
    perf_contender_t* who = &ctx->contender[k];
    chorus_status_t st = CHORUS_OK;
    who->skipped = 0;
    if (ctx->opts.check && coll != PC_BARRIER) st = check_row(ctx, who->comm, &c, &wrong[k]);
    else if (coll != PC_BARRIER) prepare_check(&c, &ctx->pattern, ctx->opts.inplace); /* no garbage */
    /* Among several, one that cannot serve this call (shm across hosts) leaves the row; the
     * choice is made before any message, the same on every rank. */
    if (ctx->ncontenders > 1 && st >= 0 && !ctx->opts.check) st = run_call(&c, who->comm, ctx->opts.nonblocking);
    if (ctx->ncontenders > 1 && st == CHORUS_ERR_NOT_SUPPORTED) {
      who->skipped = 1;
      if (ctx->rank == 0) printf("# %zu %s: not supported: %s\n", size_bytes, who->label, chorus_comm_last_error(who->comm));
      continue;
    }
    if (st < 0) return fail_call(ctx, "checked call", k, &c, size_bytes, st);
  }
  int failed_k = 0;
  char algo[128];
  ctx->late_calls = 0;
  chorus_status_t st = time_rounds(ctx, &c, &failed_k);
  if (st < 0) return fail_call(ctx, "timed call", failed_k, &c, size_bytes, st);

  for (int k = 0; k < ctx->ncontenders; k++) {
    if (ctx->contender[k].skipped) continue;
    double time_us = median_of(ctx->contender[k].round_us, ctx->opts.rounds);
    perf_row_t row = {.coll = coll, .size_bytes = size_bytes, .time_us = time_us, .wrong = wrong[k],
                      .algo = contender_label(ctx, k, coll, algo, sizeof algo)};
    row.count = coll == PC_BARRIER ? 0 : size_bytes / chorus_dtype_size(dtype);
    row.type = coll == PC_BARRIER ? "none" : chorus_dtype_name(dtype);
    row.redop = coll_info[coll].reduces ? chorus_op_name(op) : "none";
    row.algbw_gbps = time_us > 0 ? (double)size_bytes / time_us / 1e3 : 0;
    row.busbw_gbps = row.algbw_gbps * bus_factor(coll, ctx->nranks);
    ctx->wrong_total += wrong[k];
    if (coll != PC_BARRIER) ctx->busbw_sum += row.busbw_gbps, ctx->busbw_rows++;
    if (ctx->rank == 0) {
      print_row(&row);
      if (ctx->json != NULL)
        json_row(ctx, &row, call_count, ctx->opts.rounds > 1 ? ctx->contender[k].round_us : NULL);
    }
  }
  if (ctx->rank == 0 && ctx->opts.rounds > 1) print_rounds(ctx, coll, size_bytes);
  if (ctx->rank == 0 && ctx->late_calls) {
    long long timed = 0;
    for (int k = 0; k < ctx->ncontenders; k++) timed += !ctx->contender[k].skipped;
    printf("# %zu: %llu of %lld rank-calls reached their start time late (the %.0f us margin was short)\n", size_bytes,
           (unsigned long long)ctx->late_calls, timed * ctx->opts.iters * ctx->nranks * ctx->opts.rounds,
           PERF_SYNC_MARGIN_US);
  }
  return 0;
}

static size_t next_size(const perf_opts_t* o, size_t size_bytes) {
  size_t next = o->step_bytes ? size_bytes + o->step_bytes : size_bytes * o->step_factor;
  return next > size_bytes ? next : size_bytes + 1; /* 0 * factor would never grow */
}

/* Every size of one (collective, dtype, op). */
static int run_sizes(perf_ctx_t* ctx, perf_coll_t coll, chorus_dtype_t dtype, chorus_op_t op) {
  if (coll == PC_BARRIER) return run_row(ctx, coll, dtype, op, 0, 0);
  if (pattern_build(&ctx->pattern, dtype, op, ctx->nranks, ctx->opts.zero_permille) != 0) {
    fprintf(stderr, "chorus-perf: rank %d: out of memory for the input patterns\n", ctx->rank);
    return -1;
  }
  size_t elem_bytes = chorus_dtype_size(dtype);
  for (size_t s = ctx->opts.min_bytes; s <= ctx->opts.max_bytes; s = next_size(&ctx->opts, s)) {
    size_t count = call_count_for(coll, s, elem_bytes, ctx->nranks);
    if (count > 0 && run_row(ctx, coll, dtype, op, s, count) != 0) return -1;
    if (s > SIZE_MAX / (ctx->opts.step_factor + 1)) break;
  }
  return 0;
}

/* Every (dtype, op) of one collective; barrier runs once, data movers once per dtype. */
static int run_collective(perf_ctx_t* ctx, perf_coll_t coll) {
  const perf_opts_t* o = &ctx->opts;
  if (ctx->rank == 0) print_header(ctx, coll);
  int first_dtype = o->dtype_all ? 0 : (int)o->dtype;
  int last_dtype = (o->dtype_all && coll != PC_BARRIER) ? CHORUS_DTYPE_COUNT - 1 : first_dtype;
  int first_op = o->op_all ? 0 : (int)o->op;
  int last_op = (o->op_all && coll_info[coll].reduces) ? CHORUS_OP_COUNT - 1 : first_op;
  for (int d = first_dtype; d <= last_dtype; d++) {
    for (int op = first_op; op <= last_op; op++) {
      if (run_sizes(ctx, coll, (chorus_dtype_t)d, (chorus_op_t)op) != 0) return -1;
    }
  }
  return 0;
}

/* ---- set-up and main ---- */

static int setup(perf_ctx_t* ctx) {
  double started_us = now_us();
  chorus_status_t st = chorus_comm_init_env(&ctx->comm, NULL);
  if (st < 0) {
    fprintf(stderr, "chorus-perf: chorus_comm_init_env failed: %s (%s)\n", chorus_status_name(st),
            chorus_status_str(st));
    return -1;
  }
  /* Rank 0's own: a creation returns only once every rank is done with it, and gathering the
   * others' would be a collective of its own in the logs and sequence numbers of the run. */
  ctx->create_ms = (now_us() - started_us) / 1e3;
  chorus_comm_rank(ctx->comm, &ctx->rank);
  chorus_comm_size(ctx->comm, &ctx->nranks);
  if (gethostname(ctx->host, sizeof ctx->host - 1) != 0) snprintf(ctx->host, sizeof ctx->host, "?");
  int v = chorus_version();
  snprintf(ctx->version, sizeof ctx->version, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  /* Every buffer of a row holds at most `size` bytes; round up to whole cache lines. */
  ctx->buffer_bytes = ((ctx->opts.max_bytes > 64 ? ctx->opts.max_bytes : 64) + 63) & ~(size_t)63;
  if (ctx->opts.registered) {
    void *send = NULL, *recv = NULL;
    chorus_status_t rs = chorus_mem_alloc(ctx->comm, ctx->buffer_bytes, &send);
    if (rs == CHORUS_OK) rs = chorus_mem_alloc(ctx->comm, ctx->buffer_bytes, &recv);
    ctx->send_base = send;
    ctx->recv_base = recv;
    if (rs != CHORUS_OK) {
      fprintf(stderr, "chorus-perf: rank %d: chorus_mem_alloc failed: %s: %s\n", ctx->rank,
              chorus_status_name(rs), chorus_comm_last_error(ctx->comm));
      return -1;
    }
  } else {
    ctx->send_base = aligned_alloc(64, ctx->buffer_bytes);
    ctx->recv_base = aligned_alloc(64, ctx->buffer_bytes);
  }
  if (ctx->send_base == NULL || ctx->recv_base == NULL) {
    fprintf(stderr, "chorus-perf: rank %d: cannot allocate 2 x %zu bytes\n", ctx->rank,
            ctx->buffer_bytes);
    return -1;
  }
  return 0;
}

/* Sets CHORUS_ALGO to force `name` for the one collective -a allows ("auto": to `job_algo`, the
 * job's own setting, or unset). Returns setenv's status. */
static int force_algo(const perf_opts_t* o, const char* name, const char* job_algo) {
  if (strcmp(name, "auto") == 0) return job_algo ? setenv("CHORUS_ALGO", job_algo, 1) : unsetenv("CHORUS_ALGO");
  int coll = 0;
  while (coll < PC_COUNT - 1 && !o->run_coll[coll]) coll++; /* parse_args: -a takes one collective */
  char value[256];
  snprintf(value, sizeof value, "%s:%s", coll_info[coll].name, name);
  return setenv("CHORUS_ALGO", value, 1);
}

/* The contenders of -a A,B,...: a communicator each, split from the job's while CHORUS_ALGO
 * forces its algorithm ("auto": the job's own CHORUS_ALGO, or none). A single algorithm runs on
 * the job's communicator, forced before it was made (main). */
static int make_contenders(perf_ctx_t* ctx) {
  const perf_opts_t* o = &ctx->opts;
  if (o->ncontenders <= 1) {
    ctx->contender[0].label = NULL;
    ctx->contender[0].comm = ctx->comm;
    ctx->ncontenders = 1;
    return 0;
  }
  const char* job_algo = getenv("CHORUS_ALGO");
  char* saved = job_algo ? strdup(job_algo) : NULL;
  int failed = 0;
  for (int k = 0; k < o->ncontenders && !failed; k++) {
    perf_contender_t* who = &ctx->contender[k];
    who->label = o->contenders[k];
    force_algo(o, who->label, saved);
    chorus_status_t st = chorus_comm_split(ctx->comm, 0, ctx->rank, &who->comm);
    if (st < 0) {
      fprintf(stderr, "chorus-perf: rank %d: the communicator of -a %s failed: %s: %s\n", ctx->rank,
              who->label, chorus_status_name(st), chorus_comm_last_error(ctx->comm));
      failed = 1;
    } else {
      ctx->ncontenders = k + 1;
    }
  }
  force_algo(o, "auto", saved);
  free(saved);
  return failed ? -1 : 0;
}

static void teardown(perf_ctx_t* ctx, int failed) {
  for (int k = 0; k < ctx->ncontenders; k++) {
    chorus_comm_t* own = ctx->contender[k].comm;
    if (own == NULL || own == ctx->comm) continue;
    if (failed) chorus_comm_abort(own);
    chorus_comm_destroy(own);
  }
  if (failed && ctx->comm != NULL) chorus_comm_abort(ctx->comm);
  chorus_comm_destroy(ctx->comm);
  pattern_free(&ctx->pattern);
  if (!ctx->opts.registered) { /* registered memory goes with the communicator */
    free(ctx->send_base);
    free(ctx->recv_base);
  }
}

int main(int argc, char** argv) {
  static perf_ctx_t ctx;
  int parsed = parse_args(argc, argv, &ctx.opts);
  if (parsed != 0) return parsed > 0 ? 0 : EXIT_BAD_USAGE;
  /* One algorithm is forced on the job's communicator itself, before it is made. */
  if (ctx.opts.ncontenders == 1 && strcmp(ctx.opts.contenders[0], "auto") != 0)
    force_algo(&ctx.opts, ctx.opts.contenders[0], NULL);
  if (setup(&ctx) != 0 || make_contenders(&ctx) != 0) return teardown(&ctx, 1), 1;
  if (ctx.opts.isolated == 2 && check_one_clock(&ctx) != 0) {
    chorus_barrier(ctx.comm); /* let rank 0 say why before chorus-run stops the job */
    return teardown(&ctx, 0), EXIT_BAD_USAGE;
  }
  if (ctx.opts.root >= ctx.nranks) {
    if (ctx.rank == 0) {
      fprintf(stderr, "chorus-perf: -r %d: only %d ranks\n", ctx.opts.root, ctx.nranks);
    }
    chorus_barrier(ctx.comm); /* let rank 0 say why before chorus-run stops the job */
    return teardown(&ctx, 0), EXIT_BAD_USAGE;
  }
  if (ctx.rank == 0 && ctx.opts.json_path != NULL) {
    ctx.json = fopen(ctx.opts.json_path, "w");
    if (ctx.json != NULL) json_open(&ctx, argc, argv);
    else fprintf(stderr, "chorus-perf: cannot write %s: %s\n", ctx.opts.json_path, strerror(errno));
  }
  int failed = 0;
  for (int c = 0; c < PC_COUNT && !failed; c++) {
    if (ctx.opts.run_coll[c]) failed = run_collective(&ctx, (perf_coll_t)c) != 0;
  }
  double avg_busbw = ctx.busbw_rows ? ctx.busbw_sum / ctx.busbw_rows : 0.0;
  if (!failed && ctx.rank == 0) {
    printf("#\n# Wrong elements : %llu %s\n", (unsigned long long)ctx.wrong_total,
           ctx.wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth : %.3f\n#\n", avg_busbw);
    if (ctx.json != NULL) json_close(&ctx, avg_busbw, "CHORUS_OK");
  }
  /* A rank that exits non-zero makes chorus-run stop the others: wait until rank 0 has printed. */
  if (!failed) fflush(stdout), chorus_barrier(ctx.comm);
  teardown(&ctx, failed);
  return (failed || ctx.wrong_total > 0) ? 1 : 0;
}
