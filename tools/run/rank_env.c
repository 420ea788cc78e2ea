/*
 * rank_env.c - the environment chorus-run hands to every rank: its own environment minus the
 * names it sets, the per-rank variables (CHORUS_RANK..., RANK..., GROUP_RANK...), and the
 * job-wide defaults (a free port for the store, a random secret, MASTER_ADDR/PORT) unless the
 * user set them, or with --master-addr the addresses every node of a multi-node job shares.
 */
#ifndef _GNU_SOURCE /* also set by CMake for the whole project */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "run.h"

extern char** environ;

const char* const kRankVars[NRANK_VARS] = {"CHORUS_RANK", "CHORUS_SIZE", "CHORUS_LOCAL_RANK",
                                           "CHORUS_LOCAL_SIZE", "RANK", "WORLD_SIZE",
                                           "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                           "GROUP_WORLD_SIZE", "NODE_RANK"};
const char* const kDefaultVars[NDEFAULT_VARS] = {"CHORUS_ADDR", "CHORUS_SECRET", "MASTER_ADDR",
                                                 "MASTER_PORT"};


static int name_matches(const char* assignment, const char* name) {
  size_t n = strlen(name);
  return strncmp(assignment, name, n) == 0 && assignment[n] == '=';
}

static int set_by_x(const options_t* o, const char* name) {
  for (int i = 0; i < o->nset_vars; i++)
    if (name_matches(o->set_vars[i], name)) return 1;
  return 0;
}

static int user_has(const options_t* o, const char* name) {
  return getenv(name) != NULL || set_by_x(o, name);
}

/* An environment entry is dropped if chorus-run or -x provides that name itself. */
static int env_entry_replaced(const options_t* o, const char* entry, const int* defaults_set) {
  for (size_t i = 0; i < NRANK_VARS; i++)
    if (name_matches(entry, kRankVars[i])) return 1;
  for (size_t i = 0; i < NDEFAULT_VARS; i++)
    if (defaults_set[i] && name_matches(entry, kDefaultVars[i])) return 1;
  const char* eq = strchr(entry, '=');
  if (!eq) return 0;
  char name[256];
  size_t n = (size_t)(eq - entry);
  if (n >= sizeof name) return 0;
  memcpy(name, entry, n);
  name[n] = '\0';
  return set_by_x(o, name);
}

/* A free port, bound by port 0 on the wildcard address with SO_REUSEADDR. The socket is held
 * (not listening) until the job ends: the kernel then gives that port to no outgoing connection
 * and to no other program's bind, while rank 0's listener, which also sets SO_REUSEADDR (the
 * library's store and PyTorch's TCPStore both do), binds it beside the held socket. Closed at
 * once, the port could become the source port of any connection on the machine before rank 0
 * listens, seconds later; under the test suite's load PyTorch's TCPStore then failed with
 * "address already in use". */
static int find_free_port(int* sock_out) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  int one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof a;
  if (setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(s, (struct sockaddr*)&a, sizeof a) != 0 ||
      getsockname(s, (struct sockaddr*)&a, &len) != 0) {
    close(s);
    return -1;
  }
  *sock_out = s;
  return ntohs(a.sin_port);
}

static int random_hex(char* out, size_t nbytes) {
  unsigned char raw[SECRET_BYTES];
  if (nbytes > sizeof raw) return -1;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t got = read(fd, raw, nbytes);
  close(fd);
  if (got != (ssize_t)nbytes) return -1;
  for (size_t i = 0; i < nbytes; i++) sprintf(out + 2 * i, "%02x", raw[i]);
  return 0;
}

/* Fills default_vars[i] for each default the user did not set; defaults_set[i] says which.
 * With --master-addr the store and PyTorch addresses are the options' (only -x overrides
 * them), and a job of several nodes gets no random secret: every node's chorus-run would draw
 * another. CHORUS_SECRET from the environment is passed on; without it the library derives
 * one from CHORUS_ADDR, the same on every node. */
static int make_default_vars(const options_t* o, rank_env_t* env, int* defaults_set) {
  for (size_t i = 0; i < NDEFAULT_VARS; i++) defaults_set[i] = !user_has(o, kDefaultVars[i]);
  if (o->master_addr) {
    for (size_t i = 0; i < NDEFAULT_VARS; i++)
      if (i != 1) defaults_set[i] = !set_by_x(o, kDefaultVars[i]);
    if (o->nnodes > 1) defaults_set[1] = 0;
    snprintf(env->default_vars[0], VAR_BYTES, "CHORUS_ADDR=%s:%d", o->master_addr, o->master_port);
    snprintf(env->default_vars[2], VAR_BYTES, "MASTER_ADDR=%s", o->master_addr);
    snprintf(env->default_vars[3], VAR_BYTES, "MASTER_PORT=%d", o->master_port + 1);
  }
  char hex[2 * SECRET_BYTES + 1];
  if (defaults_set[1] && random_hex(hex, SECRET_BYTES) != 0) {
    say(PROG ": cannot read /dev/urandom for CHORUS_SECRET: %s", strerror(errno));
    return -1;
  }
  snprintf(env->default_vars[1], VAR_BYTES, "CHORUS_SECRET=%s", defaults_set[1] ? hex : "");
  if (o->master_addr) return 0;
  int* socks = env->held_port_socks;
  int store_port = defaults_set[0] ? find_free_port(&socks[0]) : 0;
  int port_errno = errno;
  int master_port = store_port >= 0 && defaults_set[3] ? find_free_port(&socks[1]) : 0;
  if (master_port < 0) port_errno = errno;
  if (store_port < 0 || master_port < 0) {
    say(PROG ": cannot find and hold a free port: %s", strerror(port_errno));
    return -1;
  }
  snprintf(env->default_vars[0], VAR_BYTES, "CHORUS_ADDR=127.0.0.1:%d", store_port);
  snprintf(env->default_vars[2], VAR_BYTES, "MASTER_ADDR=127.0.0.1");
  snprintf(env->default_vars[3], VAR_BYTES, "MASTER_PORT=%d", master_port);
  return 0;
}

/* Builds inherited environment (minus replaced names) + chorus-run's variables + -x ones. */
int make_rank_env(const options_t* o, rank_env_t* env) {
  int defaults_set[NDEFAULT_VARS];
  for (size_t i = 0; i < NHELD_PORTS; i++) env->held_port_socks[i] = -1;
  if (make_default_vars(o, env, defaults_set) != 0) return -1;
  size_t ninherited = 0;
  while (environ[ninherited]) ninherited++;
  size_t cap = ninherited + NRANK_VARS + NDEFAULT_VARS + (size_t)o->nset_vars + 1, n = 0;
  env->envp = calloc(cap, sizeof(char*));
  if (!env->envp) return -1;
  for (size_t i = 0; i < ninherited; i++)
    if (!env_entry_replaced(o, environ[i], defaults_set)) env->envp[n++] = environ[i];
  for (size_t i = 0; i < NRANK_VARS; i++)
    if (!set_by_x(o, kRankVars[i])) env->envp[n++] = env->rank_vars[i];
  for (size_t i = 0; i < NDEFAULT_VARS; i++)
    if (defaults_set[i]) env->envp[n++] = env->default_vars[i];
  for (int i = 0; i < o->nset_vars; i++) {
    const char* eq = strchr(o->set_vars[i], '=');
    int later_wins = 0; /* -x A=1 -x A=2: the last one counts */
    for (int j = i + 1; j < o->nset_vars; j++)
      if (strncmp(o->set_vars[j], o->set_vars[i], (size_t)(eq - o->set_vars[i]) + 1) == 0)
        later_wins = 1;
    if (!later_wins) env->envp[n++] = o->set_vars[i];
  }
  env->envp[n] = NULL;
  return 0;
}

int global_rank(const options_t* o, int local) {
  return o->numbering == NUMBER_RR ? local * o->nnodes + o->node_rank : o->rank_base + local;
}

void set_rank_vars(rank_env_t* env, const options_t* o, int local) {
  int rank = global_rank(o, local), size = o->job_size;
  const int values[NRANK_VARS] = {rank, size, local, o->nranks, rank, size, local, o->nranks,
                                  o->node_rank, o->nnodes, o->node_rank};
  for (size_t i = 0; i < NRANK_VARS; i++)
    snprintf(env->rank_vars[i], VAR_BYTES, "%s=%d", kRankVars[i], values[i]);
}

void free_rank_env(rank_env_t* env) {
  free(env->envp);
  env->envp = NULL;
  for (size_t i = 0; i < NHELD_PORTS; i++) {
    if (env->held_port_socks[i] >= 0) close(env->held_port_socks[i]);
    env->held_port_socks[i] = -1;
  }
}
