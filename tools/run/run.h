/*
 * run.h - what the launcher's files share: the parsed options and the environment handed to
 * each rank (built by rank_env.c, used by chorus-run.c when it starts the ranks).
 */
#ifndef CHORUS_RUN_H
#define CHORUS_RUN_H

#include <stddef.h>

#define PROG "chorus-run"

/* ---- options ---- */

typedef struct {
  int nranks;            /* -n: ranks on this node */
  const char* node_counts; /* -n N0,N1,...: ranks of every node, in node order (NULL: N each) */
  int rank_base;         /* the job rank of this node's first rank (host numbering) */
  int job_size;          /* ranks in the whole job */
  int nnodes;            /* --nnodes (1: a single-node job) */
  int node_rank;         /* --node-rank, in [0, nnodes) */
  const char* master_addr; /* --master-addr: where rank 0 serves the store; NULL: loopback */
  int master_port;       /* --master-port (the store; PyTorch's MASTER_PORT is one more) */
  int numbering;         /* NUMBER_HOST or NUMBER_RR (--numbering) */
  int prefix;
  double timeout_sec;    /* 0: no timeout */
  double grace_sec;      /* between SIGTERM and SIGKILL */
  double term_delay_sec; /* between a rank failure and SIGTERM to the others */
  int bind;              /* BIND_AUTO, BIND_CORE or BIND_NONE (--bind) */
  char** set_vars;       /* -x VAR=VAL, in command-line order */
  int nset_vars;
  char** prog_argv;      /* NULL-terminated, points into argv */
} options_t;

enum { BIND_AUTO, BIND_CORE, BIND_NONE };

#define EXIT_USAGE 2 /* bad command line */

/* Parses the command line into o (options.c); prints help and exits 0 for --help, and exits
 * EXIT_USAGE with a sentence on bad usage. */
void parse_options(int argc, char** argv, options_t* o);
enum { NUMBER_HOST, NUMBER_RR };

/* The job-wide rank of local rank `local` on this node: NUMBER_HOST numbers the ranks of a
 * node consecutively (node i holds i*L .. i*L+L-1, as torchrun does; with -n N0,N1,... node i
 * holds the N_i ranks after those of nodes 0..i-1), NUMBER_RR deals them round robin (local
 * rank l of node i is l*H + i). */
int global_rank(const options_t* o, int local);

/* ---- environment of the ranks ---- */

/* Names chorus-run always sets per rank or per job (kRankVars), and names it sets only when the
 * user has not (kDefaultVars: the user's value wins). Defined in rank_env.c. */
#define NRANK_VARS 11
#define NDEFAULT_VARS 4
#define VAR_BYTES 320 /* "LOCAL_WORLD_SIZE=1024", "CHORUS_ADDR=" + a 255-byte name + ":65535" */
#define MASTER_ADDR_MAX 255
#define SECRET_BYTES 16 /* CHORUS_SECRET: 32 hex characters */
extern const char* const kRankVars[NRANK_VARS];
extern const char* const kDefaultVars[NDEFAULT_VARS];

#define NHELD_PORTS 2 /* the store's and PyTorch's */
typedef struct {
  char** envp;                           /* NULL-terminated, handed to execvpe */
  char rank_vars[NRANK_VARS][VAR_BYTES]; /* rewritten before each fork */
  char default_vars[NDEFAULT_VARS][VAR_BYTES];
  int held_port_socks[NHELD_PORTS];      /* the chosen free ports, held until the job ends */
} rank_env_t;

/* Builds the environment every rank inherits (chorus-run's own, minus the names above, plus
 * the job-wide defaults and -x); 0 on success, -1 after saying why. */
int make_rank_env(const options_t* o, rank_env_t* env);
/* Frees the environment and releases the held ports. */
void free_rank_env(rank_env_t* env);
/* Rewrites the per-rank variables for local rank `local` of this node. */
void set_rank_vars(rank_env_t* env, const options_t* o, int local);
/* Prints one line to stderr (the launcher's messages). */
void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* CHORUS_RUN_H */
