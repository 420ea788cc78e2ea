/*
 * perf_opts.h - the command line of chorus-perf: the table of collectives it measures (name,
 * whether it reduces, how "size" maps to its count, its busbw factor) and the flags, parsed and
 * checked before any communicator exists, so bad usage exits 2 at once. Included once, by
 * chorus-perf.c only (static functions: the tool stays one CMake source).
 */
#ifndef CHORUS_PERF_OPTS_H
#define CHORUS_PERF_OPTS_H

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"

#define EXIT_BAD_USAGE 2
/* Algorithms -a may list for one run (interleaved in one process, a communicator each); the
 * usage error names the figure. */
#define PERF_MAX_CONTENDERS 24

/* ---- the collectives, as nccl-tests' struct testColl ---- */

typedef enum {
  PC_ALLREDUCE, PC_BROADCAST, PC_REDUCE, PC_ALLGATHER, PC_REDUCE_SCATTER,
  PC_ALLTOALL, PC_GATHER, PC_SCATTER, PC_SENDRECV, PC_BARRIER, PC_COUNT
} perf_coll_t;

typedef enum { BUS_ALLREDUCE, BUS_N_MINUS_1, BUS_ONE, BUS_NONE } bus_factor_t;

typedef struct {
  const char* name;
  int reduces;        /* takes a reduction op */
  int blocked;        /* "size" is nranks blocks of the per-rank count */
  int rooted;         /* takes a root */
  bus_factor_t bus;
} perf_coll_info_t;

static const perf_coll_info_t coll_info[PC_COUNT] = {
  [PC_ALLREDUCE] = {"allreduce", 1, 0, 0, BUS_ALLREDUCE},
  [PC_BROADCAST] = {"broadcast", 0, 0, 1, BUS_ONE},
  [PC_REDUCE] = {"reduce", 1, 0, 1, BUS_ONE},
  [PC_ALLGATHER] = {"allgather", 0, 1, 0, BUS_N_MINUS_1},
  [PC_REDUCE_SCATTER] = {"reduce_scatter", 1, 1, 0, BUS_N_MINUS_1},
  [PC_ALLTOALL] = {"alltoall", 0, 1, 0, BUS_N_MINUS_1},
  [PC_GATHER] = {"gather", 0, 1, 1, BUS_N_MINUS_1},
  [PC_SCATTER] = {"scatter", 0, 1, 1, BUS_N_MINUS_1},
  [PC_SENDRECV] = {"sendrecv", 0, 0, 0, BUS_ONE},
  [PC_BARRIER] = {"barrier", 0, 0, 0, BUS_NONE},
};

static double bus_factor(perf_coll_t coll, int nranks) {
  switch (coll_info[coll].bus) {
    case BUS_ALLREDUCE: return 2.0 * (nranks - 1) / nranks;
    case BUS_N_MINUS_1: return (double)(nranks - 1) / nranks;
    case BUS_ONE: return 1.0;
    default: return 0.0;
  }
}

/* ---- options ---- */

typedef struct {
  int run_coll[PC_COUNT]; /* 1 for each collective to run */
  int all_colls;
  size_t min_bytes, max_bytes;
  size_t step_factor;     /* sizes multiply by this... */
  size_t step_bytes;      /* ...or, when nonzero, grow by this */
  int iters, warmup;
  int check, inplace, nonblocking, corrupt;
  int zero_permille; /* -Z */
  int isolated; /* -B: 1, a barrier after every timed call, timed apart; 2, calls entered
                 * together at a moment on the machine's clock, timed to the last exit */
  int registered; /* -R: buffers from chorus_mem_alloc */
  int dtype_all, op_all;
  chorus_dtype_t dtype;
  chorus_op_t op;
  int root;
  const char* algo;       /* -a, as given */
  /* -a split at commas: one entry, or the contenders of an interleaved run ("auto": none
   * forced). Point into algo_text. */
  const char* contenders[PERF_MAX_CONTENDERS];
  int ncontenders;
  char algo_text[1024];
  int rounds;             /* -k */
  const char* json_path;  /* -J */
} perf_opts_t;

static void usage(FILE* out) {
  fprintf(out,
    "usage: chorus-perf COLLECTIVE [flags]   (run under chorus-run)\n"
    "COLLECTIVE: allreduce broadcast reduce allgather reduce_scatter alltoall gather scatter\n"
    "            sendrecv barrier, or all (each in turn)\n"
    "  -b BYTES  smallest size (K/M/G suffixes, powers of 1024)      [8]\n"
    "  -e BYTES  largest size                                         [64M]\n"
    "  -f N      multiply the size by N each step (N >= 2)            [2]\n"
    "  -i BYTES  add BYTES each step instead of -f\n"
    "  -n N      timed iterations                                     [20]\n"
    "  -w N      warm-up iterations                                   [5]\n"
    "  -c 0|1    check one untimed call per row bitwise               [1]\n"
    "  -d TYPE   int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64,\n"
    "            or all                                               [float32]\n"
    "  -o OP     sum prod max min avg, or all                         [sum]\n"
    "  -r ROOT   root of broadcast, reduce, gather, scatter           [0]\n"
    "  -a NAME   force algorithm NAME (CHORUS_ALGO=COLLECTIVE:NAME); one collective only.\n"
    "            A list A,B,... (\"auto\": the automatic choice) times them interleaved in one\n"
    "            job, a communicator each, taking turns call batch by call batch\n"
    "  -k N      rounds: time each size N times (per algorithm, in turns, each round in\n"
    "            another order, so that no algorithm always follows the same one); the row\n"
    "            shows the median and a \"# rounds\" line every round's time      [1]\n"
    "  -z 0|1    0: blocking calls; 1: post the i-variant and wait     [0]\n"
    "  -B 0|1|2  1: a barrier after every timed call, outside its time (each call alone, as\n"
    "            OSU's broadcast and reduce time them; 0: calls back to back, where ranks of a\n"
    "            rooted collective may run ahead into the next call); 2: each call alone,\n"
    "            every rank entering it at one moment the ranks agree on, timed from then to the\n"
    "            last rank's exit (ranks that share one clock only: one machine, or hosts\n"
    "            emulated on one)                                      [0]\n"
    "  -R 0|1    1: buffers from chorus_mem_alloc (registered memory: zero-copy on one host) [0]\n"
    "  -p 0|1    0: out of place; 1: in place (sendrecv: always out of place) [0]\n"
    "  -J FILE   also write the run's parameters and every row as JSON to FILE\n"
    "  -x 0|1    self-test of the check: corrupt one output element per checked call\n"
    "  -Z N      N per mille of each rank's input elements are 0, at random (not with prod):\n"
    "            inputs like sparse gradients, which CHORUS_ZEROS sends shorter  [0]\n"
    "  -h        this help\n"
    "size: bytes of the largest buffer per rank (allgather, gather: the receive buffer;\n"
    "reduce_scatter, scatter, alltoall: the send buffer); count = size / dtype size. Sizes that\n"
    "do not divide evenly are skipped. time: average per iteration, maximum over ranks (-B 2:\n"
    "the average over calls of each call's time to its last rank's exit).\n"
    "Exit status: 0 when every row has #wrong 0; 1 after wrong results or a failed call;\n"
    "2 for bad usage.\n");
}

static int bad_usage(const char* what, const char* value) {
  fprintf(stderr, "chorus-perf: %s: '%s' (see chorus-perf -h)\n", what, value);
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

static int parse_dtype(const char* text, perf_opts_t* o) {
  if (strcmp(text, "all") == 0) return o->dtype_all = 1, 0;
  for (int d = 0; d < CHORUS_DTYPE_COUNT; d++) {
    if (strcmp(text, chorus_dtype_name((chorus_dtype_t)d)) == 0) {
      o->dtype = (chorus_dtype_t)d;
      o->dtype_all = 0; /* the last -d wins */
      return 0;
    }
  }
  return -1;
}

static int parse_op(const char* text, perf_opts_t* o) {
  if (strcmp(text, "all") == 0) return o->op_all = 1, 0;
  for (int op = 0; op < CHORUS_OP_COUNT; op++) {
    if (strcmp(text, chorus_op_name((chorus_op_t)op)) == 0) {
      o->op = (chorus_op_t)op;
      o->op_all = 0;
      return 0;
    }
  }
  return -1;
}

static int parse_collective(const char* text, perf_opts_t* o) {
  for (int c = 0; c < PC_COUNT; c++) {
    int match = strcmp(text, "all") == 0 || strcmp(text, coll_info[c].name) == 0;
    o->run_coll[c] = match;
  }
  o->all_colls = strcmp(text, "all") == 0;
  for (int c = 0; c < PC_COUNT; c++) {
    if (o->run_coll[c]) return 0;
  }
  return -1;
}

/* -a NAME or -a A,B,...: every name non-empty, at most PERF_MAX_CONTENDERS, no repeats. */
static int parse_algos(const char* arg, perf_opts_t* o) {
  if (strlen(arg) >= sizeof o->algo_text) return bad_usage("-a list too long", arg);
  o->algo = arg;
  snprintf(o->algo_text, sizeof o->algo_text, "%s", arg);
  o->ncontenders = 0;
  char* text = o->algo_text;
  for (;;) {
    char* comma = strchr(text, ',');
    if (comma) *comma = '\0';
    if (text[0] == '\0') return bad_usage("empty algorithm name in -a", arg);
    if (o->ncontenders == PERF_MAX_CONTENDERS) return bad_usage("more than 24 algorithms in -a", arg);
    for (int i = 0; i < o->ncontenders; i++) {
      if (strcmp(o->contenders[i], text) == 0) return bad_usage("algorithm named twice in -a", text);
    }
    o->contenders[o->ncontenders++] = text;
    if (!comma) return 0;
    text = comma + 1;
  }
}

static int parse_flag(int flag, const char* arg, perf_opts_t* o) {
  int n = 0;
  switch (flag) {
    case 'b': return parse_bytes(arg, &o->min_bytes) ? bad_usage("bad -b size", arg) : 0;
    case 'e': return parse_bytes(arg, &o->max_bytes) ? bad_usage("bad -e size", arg) : 0;
    case 'f':
      if (parse_int(arg, 2, 1 << 20, &n)) return bad_usage("-f needs an integer >= 2", arg);
      o->step_factor = (size_t)n;
      return 0;
    case 'i':
      if (parse_bytes(arg, &o->step_bytes) || o->step_bytes == 0) {
        return bad_usage("bad -i step", arg);
      }
      return 0;
    case 'n': return parse_int(arg, 1, 1 << 30, &o->iters) ? bad_usage("-n needs >= 1", arg) : 0;
    case 'w': return parse_int(arg, 0, 1 << 30, &o->warmup) ? bad_usage("-w needs >= 0", arg) : 0;
    case 'c': return parse_int(arg, 0, 1, &o->check) ? bad_usage("-c needs 0 or 1", arg) : 0;
    case 'z': return parse_int(arg, 0, 1, &o->nonblocking) ? bad_usage("-z needs 0 or 1", arg) : 0;
    case 'B': return parse_int(arg, 0, 2, &o->isolated) ? bad_usage("-B needs 0, 1 or 2", arg) : 0;
    case 'p': return parse_int(arg, 0, 1, &o->inplace) ? bad_usage("-p needs 0 or 1", arg) : 0;
    case 'R': return parse_int(arg, 0, 1, &o->registered) ? bad_usage("-R needs 0 or 1", arg) : 0;
    case 'x': return parse_int(arg, 0, 1, &o->corrupt) ? bad_usage("-x needs 0 or 1", arg) : 0;
    case 'Z': return parse_int(arg, 0, 1000, &o->zero_permille) ? bad_usage("-Z needs 0..1000", arg) : 0;
    case 'r': return parse_int(arg, 0, 1 << 30, &o->root) ? bad_usage("bad -r root", arg) : 0;
    case 'd': return parse_dtype(arg, o) ? bad_usage("unknown dtype", arg) : 0;
    case 'o': return parse_op(arg, o) ? bad_usage("unknown op", arg) : 0;
    case 'a': return parse_algos(arg, o);
    case 'k': return parse_int(arg, 1, 1000, &o->rounds) ? bad_usage("-k needs 1..1000", arg) : 0;
    case 'J': o->json_path = arg; return 0;
    default: return -1;
  }
}

/* Returns 0 to run, 1 after -h, -1 on bad usage (already reported). */
static int parse_args(int argc, char** argv, perf_opts_t* o) {
  *o = (perf_opts_t){.min_bytes = 8, .max_bytes = 64u << 20, .step_factor = 2, .iters = 20,
                     .warmup = 5, .check = 1, .dtype = CHORUS_FLOAT32, .op = CHORUS_SUM,
                     .rounds = 1};
  opterr = 0;
  int flag;
  while ((flag = getopt(argc, argv, ":b:e:f:i:n:w:c:d:o:r:a:k:z:B:p:R:x:Z:J:h")) != -1) {
    if (flag == 'h') return usage(stdout), 1;
    if (flag == '?') return bad_usage("unknown flag", argv[optind - 1]);
    if (flag == ':') return bad_usage("flag needs a value", argv[optind - 1]);
    if (parse_flag(flag, optarg, o) != 0) return -1;
  }
  if (optind != argc - 1) {
    fprintf(stderr, "chorus-perf: give exactly one COLLECTIVE (see chorus-perf -h)\n");
    return -1;
  }
  if (parse_collective(argv[optind], o) != 0) return bad_usage("unknown collective", argv[optind]);
  if (o->min_bytes > o->max_bytes) return bad_usage("-b is larger than -e", "");
  if (o->algo != NULL && o->all_colls) return bad_usage("-a needs a single collective, not", "all");
  /* Registered memory belongs to one communicator; the contenders have one each. */
  if (o->ncontenders > 1 && o->registered) return bad_usage("-R 1 takes a single -a algorithm, not", o->algo);
  return 0;
}

#endif /* CHORUS_PERF_OPTS_H */
