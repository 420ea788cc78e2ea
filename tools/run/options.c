/*
 * options.c - chorus-run's command line: the help text, and the parsing and checking of every
 * option into options_t (run.h). Bad usage ends the program with status 2 and a sentence.
 */
#ifndef _GNU_SOURCE /* also set by CMake for the whole project */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run.h"

#define MAX_RANKS 1024
#define MAX_NODES 65536
#define MAX_JOB_RANKS (1 << 20)
#define DEFAULT_MASTER_PORT 29500 /* torchrun's */
#define DEFAULT_GRACE_SEC 3.0
/* Survivors of a failed rank usually notice within milliseconds (their connections close) and
 * report the library's error; this lets them, and still ends a hung job within seconds. */
#define DEFAULT_TERM_DELAY_SEC 2.0
#define MAX_SECONDS 1e7               /* upper bound accepted for any SEC option */

static const char kHelp[] =
    "Usage: chorus-run [options] -n N prog [args...]\n"
    "       chorus-run --nnodes H --node-rank I --master-addr A [--master-port P] [options]\n"
    "                  -n N prog [args...]           (on each of H hosts, I = 0..H-1)\n"
    "Start N ranks of `prog args...` on this host and wait for all of them.\n"
    "\n"
    "Options:\n"
    "  -n N              number of ranks on this host, 1..1024 (required)\n"
    "  -n N0,N1,...      with --nnodes H: H counts, the ranks of every host in host order (for\n"
    "                    hosts of unequal rank counts; the same list on every host): host I\n"
    "                    runs N_I ranks, numbered after those of hosts 0..I-1\n"
    "  --nnodes H        the job spans H hosts, each running its own chorus-run with the same\n"
    "                    H, N, A, P and prog (default 1); the job has H*N ranks (the sum of\n"
    "                    the counts with -n N0,N1,...)\n"
    "  --node-rank I     this host's number, 0..H-1 (required when H > 1)\n"
    "  --master-addr A   host name or address of node 0, reachable from every host (required\n"
    "                    when H > 1): rank 0 serves the bootstrap store at A:P\n"
    "  --master-port P   the store's port, 1..65534 (default 29500); PyTorch gets P+1\n"
    "  --numbering host|rr  how ranks are numbered across hosts: host (default) gives node I\n"
    "                    ranks I*N .. I*N+N-1, as torchrun does; rr deals them round robin,\n"
    "                    local rank l of node I being rank l*H+I\n"
    "  --prefix          prefix every output line of rank r with \"[r] \"; stdout stays stdout,\n"
    "                    stderr stays stderr; a last line without a newline is completed with\n"
    "                    one when the rank exits; lines longer than 32 KiB are relayed in pieces\n"
    "  --timeout SEC     end the whole job after SEC seconds (SIGTERM, then SIGKILL after the\n"
    "                    grace period) and exit with status 124\n"
    "  --grace SEC       seconds between SIGTERM (or a forwarded signal) and SIGKILL (default 3)\n"
    "  --term-delay SEC  when a rank fails, give the other ranks SEC seconds to end by\n"
    "                    themselves (e.g. to report the error their communicator raised) before\n"
    "                    they get SIGTERM (default 2; 0: at once)\n"
    "  --bind core|none  core: pin local rank l to CPU (B + l) mod C of the C CPUs chorus-run\n"
    "                    may use (B: the ranks of the hosts before this one, I*N; 0 without\n"
    "                    --nnodes), so that spinning ranks do not share a core or migrate\n"
    "                    (like mpirun's --bind-to core) and the nodes of a job run on one\n"
    "                    machine spread over it; the default when N is at most C or a\n"
    "                    multiple of C, else none (uneven ranks stay free for the scheduler to\n"
    "                    balance)\n"
    "  -x VAR=VAL        set VAR=VAL in every rank (repeatable; wins over every variable below)\n"
    "  -h, --help        show this text\n"
    "Options must come before prog; `--` ends them.\n"
    "\n"
    "Environment of local rank l (l = 0..N-1) on node I, job rank r (see --numbering), job\n"
    "size S (H*N, or the sum of -n N0,N1,...; N is then this node's count):\n"
    "  CHORUS_RANK=r CHORUS_SIZE=S CHORUS_LOCAL_RANK=l CHORUS_LOCAL_SIZE=N\n"
    "  CHORUS_ADDR=127.0.0.1:PORT   free port for the bootstrap store that rank 0 serves\n"
    "                               (with --master-addr: A:P)\n"
    "  CHORUS_SECRET=HEX            32 random hex characters, the same in every rank (not set\n"
    "                               when H > 1, see below)\n"
    "  RANK=r WORLD_SIZE=S LOCAL_RANK=l LOCAL_WORLD_SIZE=N            (for PyTorch)\n"
    "  GROUP_RANK=I GROUP_WORLD_SIZE=H NODE_RANK=I                    (as torchrun, Lightning)\n"
    "  MASTER_ADDR=127.0.0.1 MASTER_PORT=PORT2   (another free port)  (for PyTorch)\n"
    "                               (with --master-addr: A and P+1)\n"
    "The two free ports stay bound (SO_REUSEADDR, not listening) until the job ends, so that\n"
    "nothing else takes them first; a rank that listens on one must set SO_REUSEADDR, as\n"
    "PyTorch's TCPStore and the library's store do (or set CHORUS_ADDR / MASTER_PORT itself:\n"
    "chorus-run then picks and holds none).\n"
    "CHORUS_ADDR, CHORUS_SECRET, MASTER_ADDR and MASTER_PORT already set in chorus-run's\n"
    "environment (or with -x) are passed unchanged, except that --master-addr sets the three\n"
    "addresses (only -x wins over it). A job of several hosts should set the same\n"
    "CHORUS_SECRET on every host; without one the library derives the secret from CHORUS_ADDR,\n"
    "which keeps out strays, not attackers. Every other variable is inherited.\n"
    "Each host's chorus-run watches only its own ranks: when one fails it ends them, and the\n"
    "ranks on other hosts get errors from the library (their connections close).\n"
    "Under Slurm (srun) or Open MPI (mpirun) start the program itself, one process per rank:\n"
    "the library reads SLURM_PROCID/SLURM_NTASKS or OMPI_COMM_WORLD_RANK/SIZE and the store\n"
    "address from CHORUS_ADDR or MASTER_ADDR/MASTER_PORT.\n"
    "\n"
    "Processes and signals:\n"
    "  Each rank runs in its own process group, so a Ctrl-C on the terminal reaches only\n"
    "  chorus-run, which forwards it once to every rank. Ranks read stdin from /dev/null.\n"
    "  Each rank gets SIGKILL if chorus-run dies (PR_SET_PDEATHSIG), so killing chorus-run,\n"
    "  even with SIGKILL, leaves no rank behind. chorus-run signals only the ranks it started,\n"
    "  not their own children. Ctrl-Z (SIGTSTP) stops chorus-run only, not the ranks.\n"
    "  SIGINT, SIGTERM, SIGHUP: forwarded to every rank; ranks still running after the grace\n"
    "  period get SIGKILL; a second such signal sends SIGKILL at once. chorus-run then dies of\n"
    "  the first signal it received. Signals ignored when chorus-run starts stay ignored.\n"
    "  When a rank exits non-zero or dies of a signal, chorus-run prints one line naming it,\n"
    "  sends SIGTERM to the other ranks (after --term-delay), SIGKILL after the grace period.\n"
    "  Each SIGTERM or forwarded signal is followed by SIGCONT, so a stopped rank acts on it.\n"
    "\n"
    "Exit status: 0 when every rank exited 0; else the first failed rank's exit status, or\n"
    "128+signal if it was killed by a signal; 124 on --timeout; 2 on bad usage; 127 (126) when\n"
    "prog cannot be found (executed); 1 on other launcher errors.\n";

static void usage_error(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  say(PROG ": %s\nTry '" PROG " --help' for more information.", msg);
  exit(EXIT_USAGE);
}

static int parse_int(const char* s, long lo, long hi, long* out) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end != '\0' || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

static double parse_seconds(const char* opt, const char* s, int allow_zero) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !isfinite(v) || v < 0 || v > MAX_SECONDS ||
      (!allow_zero && v == 0))
    usage_error("%s needs a number of seconds %s, got '%s'", opt,
                allow_zero ? ">= 0" : "> 0", s);
  return v;
}

/* ---- command line ---- */

static void add_set_var(options_t* o, char* assignment) {
  const char* eq = strchr(assignment, '=');
  if (!eq || eq == assignment) usage_error("-x needs VAR=VAL, got '%s'", assignment);
  for (const char* c = assignment; c < eq; c++)
    if (!(*c == '_' || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') ||
          (c > assignment && *c >= '0' && *c <= '9')))
      usage_error("-x: '%.*s' is not a valid variable name", (int)(eq - assignment), assignment);
  char** grown = realloc(o->set_vars, sizeof(char*) * (size_t)(o->nset_vars + 1));
  if (!grown) usage_error("out of memory");
  o->set_vars = grown;
  o->set_vars[o->nset_vars++] = assignment;
}

/* -n N0,N1,...: one count per node, each in 1..MAX_RANKS; this node runs its own, numbered
 * after the ranks of the nodes before it (host numbering only: round robin over nodes of
 * different sizes has no natural order). */
static void set_node_counts(options_t* o) {
  const char* at = o->node_counts;
  long total = 0;
  int i = 0;
  for (; *at; i++) {
    char* end;
    errno = 0;
    long v = *at >= '0' && *at <= '9' ? strtol(at, &end, 10) : -1;
    if (v < 0) end = (char*)at;
    if (errno || end == at || (*end != ',' && *end != '\0') || v < 1 || v > MAX_RANKS || i >= o->nnodes)
      usage_error("-n %s: expected %d counts of ranks in 1..%d, one per host (--nnodes), separated by commas",
                  o->node_counts, o->nnodes, MAX_RANKS);
    if (i < o->node_rank) o->rank_base += (int)v;
    if (i == o->node_rank) o->nranks = (int)v;
    total += v;
    at = *end ? end + 1 : end;
    if (*end && !*at) usage_error("-n %s: a count is missing after the last comma", o->node_counts);
  }
  if (i != o->nnodes)
    usage_error("-n %s has %d counts, but --nnodes is %d", o->node_counts, i, o->nnodes);
  if (o->numbering == NUMBER_RR)
    usage_error("--numbering rr needs the same -n on every host, not a list (%s)", o->node_counts);
  if (total > MAX_JOB_RANKS) usage_error("-n %s is more than %d ranks", o->node_counts, MAX_JOB_RANKS);
  o->job_size = (int)total;
}

/* The multi-node options make sense together or not at all. */
static void check_nodes(options_t* o) {
  if (o->node_rank >= o->nnodes)
    usage_error("--node-rank %d is not in 0..%d (--nnodes %d)", o->node_rank, o->nnodes - 1,
                o->nnodes);
  if (o->nnodes > 1 && o->node_rank < 0)
    usage_error("--nnodes %d needs --node-rank (this host's number, 0..%d)", o->nnodes,
                o->nnodes - 1);
  if (o->nnodes > 1 && !o->master_addr)
    usage_error("--nnodes %d needs --master-addr (node 0's address, reachable from every host)",
                o->nnodes);
  if (o->master_addr) {
    size_t len = strlen(o->master_addr);
    if (len == 0 || len > MASTER_ADDR_MAX || strpbrk(o->master_addr, ": \t\n/"))
      usage_error("--master-addr needs a host name or IPv4 address, got '%s'", o->master_addr);
  } else if (o->master_port >= 0) {
    usage_error("--master-port needs --master-addr");
  }
  if (o->node_rank < 0) o->node_rank = 0;
  if (o->node_counts) {
    set_node_counts(o);
  } else {
    if ((long)o->nnodes * o->nranks > MAX_JOB_RANKS)
      usage_error("--nnodes %d x -n %d ranks is more than %d", o->nnodes, o->nranks, MAX_JOB_RANKS);
    o->rank_base = o->node_rank * o->nranks;
    o->job_size = o->nnodes * o->nranks;
  }
  if (o->master_port < 0) o->master_port = DEFAULT_MASTER_PORT;
}

void parse_options(int argc, char** argv, options_t* o) {
  enum { OPT_PREFIX = 256, OPT_TIMEOUT, OPT_GRACE, OPT_TERM_DELAY, OPT_BIND, OPT_NNODES,
         OPT_NODE_RANK, OPT_MASTER_ADDR, OPT_MASTER_PORT, OPT_NUMBERING };
  static const struct option longopts[] = {
      {"prefix", no_argument, NULL, OPT_PREFIX},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"grace", required_argument, NULL, OPT_GRACE},
      {"term-delay", required_argument, NULL, OPT_TERM_DELAY},
      {"bind", required_argument, NULL, OPT_BIND},
      {"nnodes", required_argument, NULL, OPT_NNODES},
      {"node-rank", required_argument, NULL, OPT_NODE_RANK},
      {"master-addr", required_argument, NULL, OPT_MASTER_ADDR},
      {"master-port", required_argument, NULL, OPT_MASTER_PORT},
      {"numbering", required_argument, NULL, OPT_NUMBERING},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  memset(o, 0, sizeof *o);
  o->grace_sec = DEFAULT_GRACE_SEC;
  o->term_delay_sec = DEFAULT_TERM_DELAY_SEC;
  o->nnodes = 1;
  o->node_rank = -1;
  o->master_port = -1;
  opterr = 0; /* our own messages, without argv[0]'s path */
  long n;
  int c;
  /* '+': stop at the first non-option, which is prog; its arguments are not ours. */
  while ((c = getopt_long(argc, argv, "+:hn:x:", longopts, NULL)) != -1) {
    switch (c) {
      case 'h': fputs(kHelp, stdout); exit(0);
      case 'n':
        if (strchr(optarg, ',')) { /* one count per node: checked against --nnodes later */
          o->node_counts = optarg;
          o->nranks = -1;
          break;
        }
        o->node_counts = NULL;
        if (parse_int(optarg, 1, MAX_RANKS, &n) != 0)
          usage_error("-n needs a number of ranks in 1..%d, got '%s'", MAX_RANKS, optarg);
        o->nranks = (int)n;
        break;
      case 'x': add_set_var(o, optarg); break;
      case OPT_PREFIX: o->prefix = 1; break;
      case OPT_TIMEOUT: o->timeout_sec = parse_seconds("--timeout", optarg, 0); break;
      case OPT_GRACE: o->grace_sec = parse_seconds("--grace", optarg, 1); break;
      case OPT_TERM_DELAY: o->term_delay_sec = parse_seconds("--term-delay", optarg, 1); break;
      case OPT_BIND:
        if (strcmp(optarg, "core") == 0) o->bind = BIND_CORE;
        else if (strcmp(optarg, "none") == 0) o->bind = BIND_NONE;
        else usage_error("--bind needs core or none, got '%s'", optarg);
        break;
      case OPT_NNODES:
        if (parse_int(optarg, 1, MAX_NODES, &n) != 0)
          usage_error("--nnodes needs a number of hosts in 1..%d, got '%s'", MAX_NODES, optarg);
        o->nnodes = (int)n;
        break;
      case OPT_NODE_RANK:
        if (parse_int(optarg, 0, MAX_NODES - 1, &n) != 0)
          usage_error("--node-rank needs a host number >= 0, got '%s'", optarg);
        o->node_rank = (int)n;
        break;
      case OPT_MASTER_ADDR: o->master_addr = optarg; break;
      case OPT_MASTER_PORT:
        if (parse_int(optarg, 1, 65534, &n) != 0)
          usage_error("--master-port needs a port in 1..65534 (PyTorch gets port+1), got '%s'",
                      optarg);
        o->master_port = (int)n;
        break;
      case OPT_NUMBERING:
        if (strcmp(optarg, "host") == 0) o->numbering = NUMBER_HOST;
        else if (strcmp(optarg, "rr") == 0) o->numbering = NUMBER_RR;
        else usage_error("--numbering needs host or rr, got '%s'", optarg);
        break;
      case ':': usage_error("option '%s' needs a value", argv[optind - 1]);
      default:
        if (optopt && optopt < 256) usage_error("unknown option '-%c'", optopt);
        usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (o->nranks == 0) usage_error("the number of ranks (-n N) is required");
  if (o->node_counts && o->nnodes == 1)
    usage_error("-n %s: a list of counts needs --nnodes (one count per host)", o->node_counts);
  check_nodes(o);
  if (optind >= argc) usage_error("no program given");
  o->prog_argv = argv + optind;
}

/* ---- signals ---- */
