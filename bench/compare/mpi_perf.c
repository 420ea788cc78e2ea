/*
 * mpi_perf.c - the MPI twin of chorus-perf, for side-by-side figures against Open MPI and
 * MPICH: same flags (-b -e -f -n -w -c -d -x), same rows (size count type redop algo time algbw
 * busbw #wrong), same busbw factors and timing rule (average per iteration, maximum over ranks),
 * and a -c check against expected values each rank computes with plain loops. Depends on MPI
 * and libc only; built once per MPI (mpicc.openmpi, mpicc.mpich) by run.sh.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXIT_BAD_USAGE 2

/* ---- the collectives ---- */

typedef enum {
  MC_ALLREDUCE, MC_REDUCE_SCATTER, MC_ALLGATHER, MC_BROADCAST, MC_ALLTOALL, MC_REDUCE, MC_GATHER, MC_SCATTER, MC_COUNT
} mpi_coll_t;

typedef enum { BUS_ALLREDUCE, BUS_N_MINUS_1, BUS_ONE } bus_factor_t;

typedef struct {
  const char* name;
  int reduces; /* takes a reduction op */
  int blocked; /* "size" is nranks blocks of the per-rank count */
  bus_factor_t bus;
} mpi_coll_info_t;

static const mpi_coll_info_t coll_info[MC_COUNT] = {
  [MC_ALLREDUCE] = {"allreduce", 1, 0, BUS_ALLREDUCE},
  [MC_REDUCE_SCATTER] = {"reduce_scatter", 1, 1, BUS_N_MINUS_1},
  [MC_ALLGATHER] = {"allgather", 0, 1, BUS_N_MINUS_1},
  [MC_BROADCAST] = {"broadcast", 0, 0, BUS_ONE},
  [MC_ALLTOALL] = {"alltoall", 0, 1, BUS_N_MINUS_1},
  [MC_REDUCE] = {"reduce", 1, 0, BUS_ONE},
  [MC_GATHER] = {"gather", 0, 1, BUS_N_MINUS_1},
  [MC_SCATTER] = {"scatter", 0, 1, BUS_N_MINUS_1},
};

/* nccl-tests' factors: busbw = algbw * factor, comparable with the link speed. */
static double bus_factor(mpi_coll_t coll, int nranks) {
  switch (coll_info[coll].bus) {
    case BUS_ALLREDUCE: return 2.0 * (nranks - 1) / nranks;
    case BUS_N_MINUS_1: return (double)(nranks - 1) / nranks;
    default: return 1.0;
  }
}

/* ---- element types: each value is a small integer, exact in all of them ---- */

typedef enum { DT_FLOAT32, DT_FLOAT64, DT_INT32, DT_COUNT } dtype_t;

typedef struct {
  const char* name;
  size_t bytes;
} dtype_info_t;

static const dtype_info_t dtype_info[DT_COUNT] = {
  [DT_FLOAT32] = {"float32", 4}, [DT_FLOAT64] = {"float64", 8}, [DT_INT32] = {"int32", 4}};

static MPI_Datatype mpi_dtype(dtype_t dt) {
  switch (dt) {
    case DT_FLOAT64: return MPI_DOUBLE;
    case DT_INT32: return MPI_INT32_T;
    default: return MPI_FLOAT;
  }
}

/* Stores the integer v as one element of dt at out. */
static void store_value(dtype_t dt, int v, void* out) {
  switch (dt) {
    case DT_FLOAT64: { double x = v; memcpy(out, &x, 8); break; }
    case DT_INT32: { int32_t x = v; memcpy(out, &x, 4); break; }
    default: { float x = (float)v; memcpy(out, &x, 4); break; }
  }
}

/* ---- options ---- */

typedef struct {
  int run_coll[MC_COUNT];
  size_t min_bytes, max_bytes, step_factor;
  int iters, warmup, check, corrupt;
  dtype_t dtype;
} opts_t;

static void usage(FILE* out) {
  fprintf(out,
    "usage: mpi_perf COLLECTIVE [flags]   (run under mpirun)\n"
    "COLLECTIVE: allreduce reduce_scatter allgather broadcast alltoall reduce gather scatter, or all\n"
    "            (each in turn)\n"
    "  -b BYTES  smallest size (K/M/G suffixes, powers of 1024)      [8]\n"
    "  -e BYTES  largest size                                         [64M]\n"
    "  -f N      multiply the size by N each step (N >= 2)            [2]\n"
    "  -n N      timed iterations                                     [20]\n"
    "  -w N      warm-up iterations                                   [5]\n"
    "  -c 0|1    check one untimed call per row bitwise               [1]\n"
    "  -d TYPE   float32 float64 int32                                [float32]\n"
    "  -x 0|1    self-test of the check: corrupt one output element per checked call\n"
    "  -h        this help\n"
    "The op is always sum. size: bytes of the largest buffer per rank (allgather, gather: the\n"
    "receive buffer; reduce_scatter, alltoall, scatter: the send buffer); count = size / dtype size.\n"
    "Sizes that do not divide evenly are skipped. time: average per iteration, maximum over ranks.\n"
    "MPI calls: MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast (root 0),\n"
    "MPI_Alltoall, MPI_Reduce, MPI_Gather, MPI_Scatter (root 0); all out of place except MPI_Bcast,\n"
    "which has one buffer.\n");
}

static int bad_usage(const char* what, const char* value) {
  fprintf(stderr, "mpi_perf: %s: '%s' (see mpi_perf -h)\n", what, value);
  return -1;
}

/* Parses "64M" style byte counts (K, M, G: powers of 1024). Returns 0 or -1. */
static int parse_bytes(const char* text, size_t* bytes) {
  char* end = NULL;
  errno = 0;
  unsigned long long value = strtoull(text, &end, 10);
  if (errno != 0 || end == text || text[0] == '-') return -1;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  else if (*end == 'M' || *end == 'm') shift = 20;
  else if (*end == 'G' || *end == 'g') shift = 30;
  if (shift != 0) end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end != '\0' || value > (SIZE_MAX >> shift) >> 2) return -1;
  *bytes = (size_t)value << shift;
  return 0;
}

/* Parses a decimal integer in [lo, hi]. Returns 0 or -1. */
static int parse_int(const char* text, long lo, long hi, int* out) {
  char* end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < lo || value > hi) return -1;
  *out = (int)value;
  return 0;
}

static int parse_dtype(const char* text, opts_t* o) {
  for (int d = 0; d < DT_COUNT; d++) {
    if (strcmp(text, dtype_info[d].name) == 0) return o->dtype = (dtype_t)d, 0;
  }
  return -1;
}

static int parse_collective(const char* text, opts_t* o) {
  int any = 0;
  for (int c = 0; c < MC_COUNT; c++) {
    o->run_coll[c] = strcmp(text, "all") == 0 || strcmp(text, coll_info[c].name) == 0;
    any |= o->run_coll[c];
  }
  return any ? 0 : -1;
}

static int parse_flag(int flag, const char* arg, opts_t* o) {
  int n = 0;
  switch (flag) {
    case 'b': return parse_bytes(arg, &o->min_bytes) ? bad_usage("bad -b size", arg) : 0;
    case 'e': return parse_bytes(arg, &o->max_bytes) ? bad_usage("bad -e size", arg) : 0;
    case 'f':
      if (parse_int(arg, 2, 1 << 20, &n)) return bad_usage("-f needs an integer >= 2", arg);
      o->step_factor = (size_t)n;
      return 0;
    case 'n': return parse_int(arg, 1, 1 << 30, &o->iters) ? bad_usage("-n needs >= 1", arg) : 0;
    case 'w': return parse_int(arg, 0, 1 << 30, &o->warmup) ? bad_usage("-w needs >= 0", arg) : 0;
    case 'c': return parse_int(arg, 0, 1, &o->check) ? bad_usage("-c needs 0 or 1", arg) : 0;
    case 'x': return parse_int(arg, 0, 1, &o->corrupt) ? bad_usage("-x needs 0 or 1", arg) : 0;
    case 'd': return parse_dtype(arg, o) ? bad_usage("unknown dtype", arg) : 0;
    default: return -1;
  }
}

/* Returns 0 to run, 1 after -h, -1 on bad usage (already reported). */
static int parse_args(int argc, char** argv, opts_t* o) {
  *o = (opts_t){.min_bytes = 8, .max_bytes = 64u << 20, .step_factor = 2, .iters = 20,
                .warmup = 5, .check = 1, .dtype = DT_FLOAT32};
  opterr = 0;
  int flag;
  while ((flag = getopt(argc, argv, ":b:e:f:n:w:c:d:x:h")) != -1) {
    if (flag == 'h') return usage(stdout), 1;
    if (flag == '?') return bad_usage("unknown flag", argv[optind - 1]);
    if (flag == ':') return bad_usage("flag needs a value", argv[optind - 1]);
    if (parse_flag(flag, optarg, o) != 0) return -1;
  }
  if (optind != argc - 1) {
    fprintf(stderr, "mpi_perf: give exactly one COLLECTIVE (see mpi_perf -h)\n");
    return -1;
  }
  if (parse_collective(argv[optind], o) != 0) return bad_usage("unknown collective", argv[optind]);
  if (o->min_bytes > o->max_bytes) return bad_usage("-b is larger than -e", "");
  return 0;
}

/* ---- the expected values ----
 * Rank r's input element i is pattern(r, i % PERIOD): an integer in [-15, 15], so sums over up
 * to 64 ranks are exact in every type. The period is prime so that a block delivered at a
 * power-of-two offset from where it belongs does not line up with the pattern. */

#define PERIOD 61
#define CHUNK 4096              /* elements filled or compared per memcpy/memcmp */
#define SPAN (PERIOD + CHUNK)   /* a table row: any phase followed by a whole chunk */
#define SENTINEL_BYTE 0xA5      /* written over outputs: no value here has these bytes */

static int pattern(int r, int phase) {
  return (phase * 7 + r * 13 + (phase * r) % 5) % 31 - 15;
}

typedef struct {
  size_t elem_bytes;
  int nranks;
  unsigned char** input; /* input[r]: SPAN elements of rank r's pattern */
  unsigned char* summed; /* SPAN elements: the sum over ranks */
} tables_t;

static void tables_free(tables_t* t) {
  for (int r = 0; t->input != NULL && r < t->nranks; r++) free(t->input[r]);
  free(t->input);
  free(t->summed);
  memset(t, 0, sizeof *t);
}

static int tables_build(tables_t* t, dtype_t dt, int nranks) {
  t->elem_bytes = dtype_info[dt].bytes;
  t->nranks = nranks;
  t->input = calloc((size_t)nranks, sizeof *t->input);
  t->summed = malloc(SPAN * t->elem_bytes);
  if (t->input == NULL || t->summed == NULL) return -1;
  for (int r = 0; r < nranks; r++) {
    t->input[r] = malloc(SPAN * t->elem_bytes);
    if (t->input[r] == NULL) return -1;
    for (size_t i = 0; i < SPAN; i++) store_value(dt, pattern(r, (int)(i % PERIOD)), t->input[r] + i * t->elem_bytes);
  }
  for (size_t i = 0; i < SPAN; i++) {
    int sum = 0;
    for (int r = 0; r < nranks; r++) sum += pattern(r, (int)(i % PERIOD));
    store_value(dt, sum, t->summed + i * t->elem_bytes);
  }
  return 0;
}

/* Fills count elements with table[(first + k) % PERIOD]. */
static void region_fill(void* buf, size_t count, const unsigned char* table, size_t eb, size_t first) {
  for (size_t off = 0; off < count; off += CHUNK) {
    size_t n = count - off < CHUNK ? count - off : CHUNK;
    memcpy((char*)buf + off * eb, table + ((first + off) % PERIOD) * eb, n * eb);
  }
}

/* Elements of the region that differ bitwise from table[(first + k) % PERIOD]. */
static uint64_t region_wrong(const void* buf, size_t count, const unsigned char* table, size_t eb,
                             size_t first) {
  uint64_t wrong = 0;
  for (size_t off = 0; off < count; off += CHUNK) {
    size_t n = count - off < CHUNK ? count - off : CHUNK;
    const unsigned char* have = (const unsigned char*)buf + off * eb;
    const unsigned char* want = table + ((first + off) % PERIOD) * eb;
    if (memcmp(have, want, n * eb) == 0) continue;
    for (size_t k = 0; k < n; k++) wrong += memcmp(have + k * eb, want + k * eb, eb) != 0;
  }
  return wrong;
}

/* ---- one call ---- */

typedef struct {
  mpi_coll_t coll;
  char* send;
  char* recv;
  size_t count; /* per-rank block for blocked collectives, else the whole buffer */
  dtype_t dtype;
  int rank, nranks;
} call_t;

static int run_call(const call_t* c) {
  MPI_Datatype dt = mpi_dtype(c->dtype);
  int n = (int)c->count;
  switch (c->coll) {
    case MC_ALLREDUCE: return MPI_Allreduce(c->send, c->recv, n, dt, MPI_SUM, MPI_COMM_WORLD);
    case MC_REDUCE_SCATTER:
      return MPI_Reduce_scatter_block(c->send, c->recv, n, dt, MPI_SUM, MPI_COMM_WORLD);
    case MC_ALLGATHER: return MPI_Allgather(c->send, n, dt, c->recv, n, dt, MPI_COMM_WORLD);
    case MC_BROADCAST: return MPI_Bcast(c->recv, n, dt, 0, MPI_COMM_WORLD);
    case MC_ALLTOALL: return MPI_Alltoall(c->send, n, dt, c->recv, n, dt, MPI_COMM_WORLD);
    case MC_REDUCE: return MPI_Reduce(c->send, c->recv, n, dt, MPI_SUM, 0, MPI_COMM_WORLD);
    case MC_GATHER: return MPI_Gather(c->send, n, dt, c->recv, n, dt, 0, MPI_COMM_WORLD);
    case MC_SCATTER: return MPI_Scatter(c->send, n, dt, c->recv, n, dt, 0, MPI_COMM_WORLD);
    default: return MPI_ERR_OTHER;
  }
}

/* Elements of the send buffer that the call reads (broadcast: none, it has one buffer;
 * scatter: the root's blocks, none elsewhere). */
static size_t input_count(const call_t* c) {
  switch (c->coll) {
    case MC_REDUCE_SCATTER:
    case MC_ALLTOALL: return c->count * (size_t)c->nranks;
    case MC_SCATTER: return c->rank == 0 ? c->count * (size_t)c->nranks : 0;
    case MC_BROADCAST: return 0;
    default: return c->count;
  }
}

/* Elements of the receive buffer that the call writes (gather: the root's). */
static size_t output_count(const call_t* c) {
  if (c->coll == MC_GATHER) return c->rank == 0 ? c->count * (size_t)c->nranks : 0;
  int whole = c->coll == MC_ALLGATHER || c->coll == MC_ALLTOALL;
  return whole ? c->count * (size_t)c->nranks : c->count;
}

/* Sentinel over the output, this rank's pattern over its input (broadcast: root's buffer). */
static void prepare_check(const call_t* c, const tables_t* t) {
  memset(c->recv, SENTINEL_BYTE, output_count(c) * t->elem_bytes);
  if (c->coll == MC_BROADCAST && c->rank == 0) region_fill(c->recv, c->count, t->input[0], t->elem_bytes, 0);
  region_fill(c->send, input_count(c), t->input[c->rank], t->elem_bytes, 0);
}

/* Wrong output elements of this rank, plus any input element the call changed. */
static uint64_t count_wrong(const call_t* c, const tables_t* t) {
  size_t eb = t->elem_bytes, n = c->count, me = (size_t)c->rank;
  uint64_t wrong = 0;
  switch (c->coll) {
    case MC_ALLREDUCE: wrong = region_wrong(c->recv, n, t->summed, eb, 0); break;
    case MC_REDUCE_SCATTER: wrong = region_wrong(c->recv, n, t->summed, eb, me * n); break;
    case MC_BROADCAST: wrong = region_wrong(c->recv, n, t->input[0], eb, 0); break;
    case MC_REDUCE: /* the root's output; the others' receive buffers are not written */
      if (c->rank == 0) wrong = region_wrong(c->recv, n, t->summed, eb, 0);
      break;
    case MC_GATHER: /* the root's block r comes from rank r */
      for (int r = 0; c->rank == 0 && r < c->nranks; r++)
        wrong += region_wrong(c->recv + (size_t)r * n * eb, n, t->input[r], eb, 0);
      break;
    case MC_SCATTER: wrong = region_wrong(c->recv, n, t->input[0], eb, me * n); break; /* the root's block me */
    case MC_ALLGATHER:
    case MC_ALLTOALL:
      for (int r = 0; r < c->nranks; r++) { /* block r comes from rank r */
        size_t first = c->coll == MC_ALLTOALL ? me * n : 0;
        wrong += region_wrong(c->recv + (size_t)r * n * eb, n, t->input[r], eb, first);
      }
      break;
    default: break;
  }
  return wrong + region_wrong(c->send, input_count(c), t->input[c->rank], eb, 0);
}

/* ---- rows ---- */

typedef struct {
  opts_t opts;
  int rank, nranks;
  char* send_base;
  char* recv_base;
  tables_t tables;
  char library[16];  /* "openmpi", "mpich" or "mpi": the algo column */
  char version[128]; /* first line of MPI_Get_library_version */
  char host[256];
  uint64_t wrong_total;
  double busbw_sum;
  int busbw_rows;
} ctx_t;

static int fail_call(const ctx_t* ctx, const char* what, const call_t* c, size_t size_bytes, int rc) {
  char message[MPI_MAX_ERROR_STRING] = "";
  int len = 0;
  MPI_Error_string(rc, message, &len);
  fprintf(stderr, "mpi_perf: rank %d: %s of %s (size %zu, %s) failed: %s\n", ctx->rank, what,
          coll_info[c->coll].name, size_bytes, dtype_info[c->dtype].name, message);
  return -1;
}

/* Runs the untimed checked call; *wrong gets the wrong elements summed over ranks. */
static int check_row(ctx_t* ctx, const call_t* c, uint64_t* wrong) {
  prepare_check(c, &ctx->tables);
  int rc = run_call(c);
  if (rc != MPI_SUCCESS) return rc;
  if (ctx->opts.corrupt && ctx->rank == 0) c->recv[0] ^= 0x01;
  uint64_t local_wrong = count_wrong(c, &ctx->tables);
  return MPI_Allreduce(&local_wrong, wrong, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
}

/* Times warmup + iters calls; *time_us gets the average per call, maximum over ranks. */
static int time_row(const ctx_t* ctx, const call_t* c, double* time_us) {
  int rc = MPI_SUCCESS;
  for (int i = 0; i < ctx->opts.warmup && rc == MPI_SUCCESS; i++) rc = run_call(c);
  if (rc == MPI_SUCCESS) rc = MPI_Barrier(MPI_COMM_WORLD);
  double start_sec = MPI_Wtime();
  for (int i = 0; i < ctx->opts.iters && rc == MPI_SUCCESS; i++) rc = run_call(c);
  double local_us = (MPI_Wtime() - start_sec) * 1e6 / ctx->opts.iters;
  if (rc != MPI_SUCCESS) return rc;
  return MPI_Allreduce(&local_us, time_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

static void print_header(const ctx_t* ctx, mpi_coll_t coll) {
  const opts_t* o = &ctx->opts;
  printf("#\n# collective: %s\n", coll_info[coll].name);
  printf("# nranks %d | dtype %s | op %s | root 0 | iters %d | warmup %d | check %d | %s | blocking\n",
         ctx->nranks, dtype_info[o->dtype].name, coll_info[coll].reduces ? "sum" : "none",
         o->iters, o->warmup, o->check, coll == MC_BROADCAST ? "in place" : "out of place");
  printf("# host %s | mpi %s | algo %s\n#\n", ctx->host, ctx->version, ctx->library);
  printf("#%12s %12s %9s %6s %10s %10s %12s %12s %7s\n", "size", "count", "type", "redop", "algo",
         "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  fflush(stdout);
}

/* One row: check (if asked), time, print on rank 0. Returns 0, or -1 after a failed call. */
static int run_row(ctx_t* ctx, mpi_coll_t coll, size_t size_bytes, size_t call_count) {
  call_t c = {.coll = coll, .send = ctx->send_base, .recv = ctx->recv_base, .count = call_count,
              .dtype = ctx->opts.dtype, .rank = ctx->rank, .nranks = ctx->nranks};
  uint64_t wrong = 0;
  int rc = MPI_SUCCESS;
  if (ctx->opts.check) rc = check_row(ctx, &c, &wrong);
  else prepare_check(&c, &ctx->tables); /* defined inputs, no garbage */
  if (rc != MPI_SUCCESS) return fail_call(ctx, "checked call", &c, size_bytes, rc);
  double time_us = 0;
  rc = time_row(ctx, &c, &time_us);
  if (rc != MPI_SUCCESS) return fail_call(ctx, "timed call", &c, size_bytes, rc);
  double algbw_gbps = time_us > 0 ? (double)size_bytes / time_us / 1e3 : 0;
  double busbw_gbps = algbw_gbps * bus_factor(coll, ctx->nranks);
  ctx->wrong_total += wrong;
  ctx->busbw_sum += busbw_gbps;
  ctx->busbw_rows++;
  if (ctx->rank == 0) {
    printf(" %12zu %12zu %9s %6s %10s %10.2f %12.3f %12.3f %7llu\n", size_bytes,
           size_bytes / dtype_info[c.dtype].bytes, dtype_info[c.dtype].name,
           coll_info[coll].reduces ? "sum" : "none", ctx->library, time_us, algbw_gbps, busbw_gbps,
           (unsigned long long)wrong);
    fflush(stdout);
  }
  return 0;
}

/* The call's count for a row of size_bytes, or 0 when the size does not divide evenly (or the
 * count would not fit MPI's int). */
static size_t call_count_for(mpi_coll_t coll, size_t size_bytes, size_t elem_bytes, int nranks) {
  size_t unit = elem_bytes * (coll_info[coll].blocked ? (size_t)nranks : 1);
  if (size_bytes == 0 || size_bytes % unit != 0 || size_bytes / unit > INT32_MAX) return 0;
  return size_bytes / unit;
}

static int run_collective(ctx_t* ctx, mpi_coll_t coll) {
  const opts_t* o = &ctx->opts;
  if (ctx->rank == 0) print_header(ctx, coll);
  size_t elem_bytes = dtype_info[o->dtype].bytes;
  for (size_t s = o->min_bytes; s <= o->max_bytes; s = s * o->step_factor > s ? s * o->step_factor : s + 1) {
    size_t count = call_count_for(coll, s, elem_bytes, ctx->nranks);
    if (count > 0 && run_row(ctx, coll, s, count) != 0) return -1;
    if (s > SIZE_MAX / (o->step_factor + 1)) break;
  }
  return 0;
}

/* ---- set-up and main ---- */

/* Names the library for the algo column from MPI_Get_library_version's first line. */
static void identify_library(ctx_t* ctx) {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = "";
  int len = 0;
  MPI_Get_library_version(text, &len);
  text[strcspn(text, "\n,")] = '\0';
  for (char* t = text; *t; t++) *t = *t == '\t' ? ' ' : *t; /* MPICH: "MPICH Version:\t4.0.2" */
  snprintf(ctx->version, sizeof ctx->version, "%s", text);
  const char* name = "mpi";
  if (strncmp(text, "Open MPI", 8) == 0) name = "openmpi";
  else if (strncmp(text, "MPICH", 5) == 0) name = "mpich";
  snprintf(ctx->library, sizeof ctx->library, "%s", name);
}

static int setup(ctx_t* ctx) {
  MPI_Comm_rank(MPI_COMM_WORLD, &ctx->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ctx->nranks);
  /* Errors come back as return codes so that a failed call is reported with its row. */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  identify_library(ctx);
  if (gethostname(ctx->host, sizeof ctx->host - 1) != 0) snprintf(ctx->host, sizeof ctx->host, "?");
  size_t buffer_bytes = ((ctx->opts.max_bytes > 64 ? ctx->opts.max_bytes : 64) + 63) & ~(size_t)63;
  ctx->send_base = aligned_alloc(64, buffer_bytes);
  ctx->recv_base = aligned_alloc(64, buffer_bytes);
  if (ctx->send_base == NULL || ctx->recv_base == NULL ||
      tables_build(&ctx->tables, ctx->opts.dtype, ctx->nranks) != 0) {
    fprintf(stderr, "mpi_perf: rank %d: cannot allocate 2 x %zu bytes\n", ctx->rank, buffer_bytes);
    return -1;
  }
  return 0;
}

int main(int argc, char** argv) {
  static ctx_t ctx;
  int parsed = parse_args(argc, argv, &ctx.opts);
  if (parsed != 0) return parsed > 0 ? 0 : EXIT_BAD_USAGE;
  MPI_Init(&argc, &argv);
  int failed = setup(&ctx) != 0;
  for (int c = 0; c < MC_COUNT && !failed; c++) {
    if (ctx.opts.run_coll[c]) failed = run_collective(&ctx, (mpi_coll_t)c) != 0;
  }
  if (failed) MPI_Abort(MPI_COMM_WORLD, 1); /* peers may be blocked in a call: end them all */
  if (ctx.rank == 0) {
    double avg_busbw = ctx.busbw_rows ? ctx.busbw_sum / ctx.busbw_rows : 0.0;
    printf("#\n# Wrong elements : %llu %s\n", (unsigned long long)ctx.wrong_total,
           ctx.wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth : %.3f\n#\n", avg_busbw);
    fflush(stdout);
  }
  tables_free(&ctx.tables);
  free(ctx.send_base);
  free(ctx.recv_base);
  MPI_Finalize();
  return ctx.wrong_total > 0 ? 1 : 0;
}
