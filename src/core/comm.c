/*
 * comm.c - communicator lifecycle: settings, connection and topology, split, destroy, abort,
 * queries and the last-error sentence. Creation from a store lives in bootstrap.c.
 */
#include "core/comm.h"

#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "coll/coll.h"
#include "core/clock.h"
#include "core/cache.h"
#include "core/live.h"
#include "core/log.h"
#include "core/param.h"
#include "core/sysfile.h"

void chorus__comm_set_error(chorus_comm_t* comm, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(comm->last_error, sizeof(comm->last_error), fmt, ap);
  va_end(ap);
}

/* CHORUS_GROUP_FUSE_BYTES=-1 until the topology is known. */
#define GROUP_FUSE_BY_TOPOLOGY SIZE_MAX
/* CHORUS_SHM_STREAM_BYTES=-1 until the ranks on this machine are known. */
#define STREAM_BY_MACHINE SIZE_MAX
/* The largest chunk the sockets of a TCP peer scale CHORUS_BUFF_SIZE to. */
#define MSG_CHUNK_MAX_BYTES ((size_t)64 << 20)

/* "16K", "1M", "0": bytes with an optional binary suffix; 0 when malformed. */
static int parse_bytes(const char* txt, size_t* out) {
  char* end = NULL;
  unsigned long long v = strtoull(txt, &end, 10);
  if (end == txt) return 0;
  unsigned shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  else if (*end == 'M' || *end == 'm') shift = 20;
  else if (*end == 'G' || *end == 'g') shift = 30;
  if (shift) end++;
  if (*end || (shift && v > (~0ull >> shift))) return 0;
  *out = (size_t)(v << shift);
  return 1;
}

/* Parses "name[/sub][@lo-hi]" into rule (algo not yet resolved). */
static int parse_rule(char* body, chorus_algo_rule_t* rule) {
  memset(rule, 0, sizeof(*rule));
  rule->hi = SIZE_MAX;
  char* at = strchr(body, '@');
  if (at) {
    *at = '\0';
    char* dash = strchr(at + 1, '-');
    if (!dash) return 0;
    *dash = '\0';
    if (!parse_bytes(at + 1, &rule->lo)) return 0;
    if (dash[1] && !parse_bytes(dash + 1, &rule->hi)) return 0;
    if (rule->hi <= rule->lo) return 0;
  }
  char* slash = strchr(body, '/');
  if (slash) {
    *slash = '\0';
    if (!slash[1] || strlen(slash + 1) >= sizeof(rule->sub)) return 0;
    snprintf(rule->sub, sizeof(rule->sub), "%s", slash + 1);
  }
  if (!body[0] || strlen(body) >= sizeof(rule->name)) return 0;
  snprintf(rule->name, sizeof(rule->name), "%s", body);
  return 1;
}

/* Appends rule to collective c, resolving its algorithm; 0 when c has no such algorithm, -1
 * when it is there but takes no such inner engine, -2 when the list is full. */
static int add_rule(chorus_comm_t* comm, int c, const chorus_algo_rule_t* rule) {
  if (comm->nrules[c] == CHORUS_MAX_ALGO_RULES) return -2;
  chorus_algo_rule_t* r = &comm->rules[c][comm->nrules[c]];
  *r = *rule;
  r->algo = chorus__algo_find((chorus_coll_t)c, rule->name);
  if (r->algo && rule->sub[0] && !chorus__algo_has_sub(r->algo, rule->sub)) return -1;
  comm->nrules[c]++;
  return r->algo != NULL;
}

/* CHORUS_ALGO: items separated by ',' or ';', applied left to right (the last that matches a
 * call wins): "name" for every collective that has it ("ring"; the others fail at call time),
 * "collective:name" ("allreduce:ring"), either with an inner engine ("allreduce:hier/rhd")
 * and a byte range of count x dtype size ("allreduce:rd@0-16K"); a bare "name@range" goes to
 * the collective named last ("allreduce:rd@0-16K,hier@16K-;broadcast:binomial"). */
static chorus_status_t parse_algo_spec(chorus_comm_t* comm, const char* spec, char* err, size_t errlen) {
  snprintf(comm->algo_spec, sizeof(comm->algo_spec), "%s", spec);
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", spec);
  int current = -1;
  for (char *save = NULL, *tok = strtok_r(buf, ",;", &save); tok; tok = strtok_r(NULL, ",;", &save)) {
    char* colon = strchr(tok, ':');
    char* body = colon ? colon + 1 : tok;
    if (colon) {
      *colon = '\0';
      current = chorus__coll_from_name(tok);
      if (current < 0) {
        snprintf(err, errlen, "CHORUS_ALGO=%s: \"%s\" is not a collective", spec, tok);
        return CHORUS_ERR_INVALID_ARG;
      }
    }
    int ranged = strchr(body, '@') != NULL;
    chorus_algo_rule_t rule;
    if (!parse_rule(body, &rule) || (ranged && !colon && current < 0)) {
      snprintf(err, errlen, "CHORUS_ALGO=%s: cannot read \"%s\" (name[/inner][@lo-hi], e.g. allreduce:rd@0-16K)",
               spec, body);
      return CHORUS_ERR_INVALID_ARG;
    }
    int found = 0, bad_sub = 0, full = 0;
    if (colon || ranged) {
      int rc = add_rule(comm, current, &rule);
      found = rc > 0;
      bad_sub = rc == -1;
      full = rc == -2;
    } else {
      current = -1; /* every collective: a later bare range has no collective to go to */
      for (int c = 0; c < CH_COLL_COUNT; c++) {
        int rc = add_rule(comm, c, &rule);
        found |= rc > 0;
        bad_sub |= rc == -1;
        full |= rc == -2;
      }
    }
    if (full) {
      snprintf(err, errlen, "CHORUS_ALGO=%s: more than %d items for one collective", spec, CHORUS_MAX_ALGO_RULES);
      return CHORUS_ERR_INVALID_ARG;
    }
    if (bad_sub) {
      snprintf(err, errlen, "CHORUS_ALGO=%s: \"%s\" has no inner algorithm \"%s\" (chorus-diag --algos lists them)",
               spec, rule.name, rule.sub);
      return CHORUS_ERR_INVALID_ARG;
    }
    if (!found) {
      if (colon || ranged)
        snprintf(err, errlen, "CHORUS_ALGO=%s: \"%s:%s\" is not a known collective:algorithm pair (chorus-diag --algos lists them)",
                 spec, chorus__coll_name((chorus_coll_t)current), rule.name);
      else
        snprintf(err, errlen, "CHORUS_ALGO=%s: no collective has an algorithm named \"%s\" (chorus-diag --algos lists them)",
                 spec, rule.name);
      return CHORUS_ERR_INVALID_ARG;
    }
  }
  return CHORUS_OK;
}

/* CHORUS_SOCKET_CC=auto: cubic where the system's congestion control is bbr and no fq qdisc is
 * the default, so that the kernel paces every socket itself; NULL (the system's) otherwise, or
 * when cubic cannot be set here. On emulated hosts linked at 2 Gbit/s such sockets stalled
 * exchanges of 64 KiB-1 MiB for 50-170 ms about once in 10-30 calls (recursive doubling's 64 KiB
 * allreduce on 4 hosts x 2 ranks: 12.8 ms a call against 1.1 with cubic sockets; no loss, no
 * retransmission: the sender's own pacing), and unshaped they capped one flow at 11-16 Gbit/s
 * (iperf3's too) where cubic flows carried 18-54 (docs/cluster.md). Collectives send in bursts
 * after idle gaps, the pattern internal pacing handles worst; bbr under fq keeps its pacing in
 * the qdisc and is left alone, as is any choice made by name. Inside a network namespace the
 * default qdisc cannot be read (it is the initial namespace's): taken as not fq. */
static const char* auto_tcp_cc(int rank) {
  char sys[32] = "", qdisc[32] = "", err[300];
  chorus__first_line("/proc/sys/net/ipv4/tcp_congestion_control", sys, sizeof(sys));
  chorus__first_line("/proc/sys/net/core/default_qdisc", qdisc, sizeof(qdisc));
  if (strncmp(sys, "bbr", 3) != 0 || strcmp(qdisc, "fq") == 0) return NULL;
  if (chorus__sock_set_cc(-1, "cubic", err, sizeof(err)) < 0) {
    CH_INFO(INIT, rank, "CHORUS_SOCKET_CC=auto: the system's %s stays (%s)", sys, err);
    return NULL;
  }
  CH_INFO(INIT, rank, "CHORUS_SOCKET_CC=auto: cubic, not the system's %s without an fq qdisc (kernel pacing)", sys);
  return "cubic";
}

/* CHORUS_SOCKET_CC, checked on a scratch socket so that a name the kernel refuses fails here,
 * before this rank joins the others. */
static chorus_status_t read_tcp_cc(chorus_comm_t* comm, char* err, size_t errlen) {
  const char* cc = chorus__param_str(CHORUS_PARAM_SOCKET_CC);
  if (strcmp(cc, "auto") == 0) cc = auto_tcp_cc(comm->rank);
  if (!cc || !cc[0] || strcmp(cc, "system") == 0) return CHORUS_OK;
  if (strlen(cc) >= sizeof(comm->tcp_cc)) {
    snprintf(err, errlen, "CHORUS_SOCKET_CC=\"%.40s...\" is too long for a congestion control name", cc);
    return CHORUS_ERR_INVALID_ARG;
  }
  chorus_status_t st = chorus__sock_set_cc(-1, cc, err, errlen);
  if (st >= 0) snprintf(comm->tcp_cc, sizeof(comm->tcp_cc), "%s", cc);
  return st;
}

chorus_status_t chorus__comm_read_settings(chorus_comm_t* comm, const chorus_config_t* cfg) {
  chorus__log_init();
  char err[300] = "";
  enum { NINT = 16 };
  int64_t v[NINT];
  static const chorus_param_id_t ids[NINT] = {CHORUS_PARAM_TIMEOUT_SEC, CHORUS_PARAM_CONNECT_TIMEOUT_SEC,
                                              CHORUS_PARAM_RETRY_COUNT, CHORUS_PARAM_NSOCKS_PER_PEER,
                                              CHORUS_PARAM_SPIN_US,     CHORUS_PARAM_BUFF_SIZE,
                                              CHORUS_PARAM_SHM_DISABLE, CHORUS_PARAM_SHM_BUFF_SIZE,
                                              CHORUS_PARAM_SHM_SLOT_SIZE, CHORUS_PARAM_SHM_STREAM_BYTES,
                                              CHORUS_PARAM_P2P_EAGER_BYTES, CHORUS_PARAM_P2P_UNEXPECTED_BYTES,
                                              CHORUS_PARAM_GROUP_FUSE_BYTES, CHORUS_PARAM_COMPRESSION_MIN_BYTES,
                                              CHORUS_PARAM_SHM_SINGLE_COPY, CHORUS_PARAM_ZEROS_MIN_BYTES};
  for (int i = 0; i < NINT; i++) {
    chorus_status_t st = chorus__param_int(ids[i], &v[i], err, sizeof(err));
    if (st < 0) {
      chorus__comm_set_error(comm, "%s", err);
      CH_WARN(comm->rank, "%s", err);
      return st;
    }
  }
  comm->timeout_sec = (int)v[0];
  comm->connect_timeout_sec = (int)v[1];
  comm->retry_count = (int)v[2];
  comm->nsocks = (int)v[3];
  comm->spin_by_link = v[4] < 0;
  comm->spin_us = comm->spin_small_us = v[4] < 0 ? CHORUS_SPIN_ONE_HOST_US : (int)v[4];
  comm->chunk_bytes = comm->msg_chunk_bytes = ((size_t)v[5] + 63) & ~(size_t)63; /* connect scales the latter */
  comm->shm_enabled = !v[6];
  comm->shm_ring_bytes = ((size_t)v[7] + 63) & ~(size_t)63;
  comm->shm_slot_bytes = ((size_t)v[8] + 4095) & ~(size_t)4095;
  comm->shm_stream_bytes = v[9] < 0 ? STREAM_BY_MACHINE : (size_t)v[9];
  comm->p2p_eager_bytes = (size_t)v[10];
  comm->p2p_unexpected_bytes = (size_t)v[11];
  comm->group_fuse_bytes = v[12] < 0 ? GROUP_FUSE_BY_TOPOLOGY : (size_t)v[12];
  comm->compression_min_bytes = (size_t)v[13];
  comm->shm_single_copy = (int)v[14];
  comm->zeros_min_bytes = (size_t)v[15];
  if (cfg) {
    if (cfg->size < sizeof(size_t) + sizeof(unsigned) || cfg->version / 10000 != CHORUS_VERSION_MAJOR) {
      chorus__comm_set_error(comm, "chorus_config_t was not initialised with CHORUS_CONFIG_INIT");
      return CHORUS_ERR_INVALID_ARG;
    }
    if (cfg->timeout_sec > 0) comm->timeout_sec = cfg->timeout_sec;
    if (cfg->connect_timeout_sec > 0) comm->connect_timeout_sec = cfg->connect_timeout_sec;
    if (cfg->nsocks_per_peer > 0) comm->nsocks = cfg->nsocks_per_peer > 16 ? 16 : cfg->nsocks_per_peer;
    if (cfg->name) snprintf(comm->name, sizeof(comm->name), "%s", cfg->name);
    /* Fields past the original ones are read only from a config that has them. */
    if (cfg->size >= offsetof(chorus_config_t, host_id) + sizeof(cfg->host_id) && cfg->host_id)
      snprintf(comm->host_id, sizeof(comm->host_id), "%s", cfg->host_id);
  }
  if (!comm->host_id[0]) chorus__host_id(comm->host_id, sizeof(comm->host_id));
  chorus_status_t st = read_tcp_cc(comm, err, sizeof(err));
  if (st >= 0) st = parse_algo_spec(comm, chorus__param_str(CHORUS_PARAM_ALGO), err, sizeof(err));
  if (st >= 0) st = chorus__compression_from_env(&comm->compression_env, err, sizeof(err));
  if (st >= 0) st = chorus__zeros_from_env(&comm->zeros, err, sizeof(err));
  comm->compression = comm->compression_env;
  if (st < 0) {
    chorus__comm_set_error(comm, "%s", err);
    CH_WARN(comm->rank, "%s", err);
    return st;
  }
  /* Until measured: loopback TCP figures of this machine class inside a host, and a slower
   * network between hosts. The cost model only ranks algorithms. */
  comm->cost.intra = (chorus_link_model_t){15.0, 2000.0};
  comm->cost.inter = (chorus_link_model_t){50.0, 1000.0};
  /* chorus-reduce-bench, float32 a += b at 16 MiB: 18.2 GB/s over three streams. */
  comm->cost.reduce_bytes_per_us = 6000.0;
  return CHORUS_OK;
}

chorus_status_t chorus__comm_alloc(chorus_comm_t** out, int nranks, int rank) {
  chorus_comm_t* comm = calloc(1, sizeof(*comm));
  if (!comm) return CHORUS_ERR_NO_MEMORY;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->tp.epfd = comm->tp.wakefd = -1;
  comm->blame = (chorus_blame_t){-1, 0, 0, -1, CHORUS_OK}; /* until a verdict or a give-up frame */
  comm->p2p_send_seq = calloc((size_t)nranks, sizeof(uint64_t));
  comm->p2p_recv_seq = calloc((size_t)nranks, sizeof(uint64_t));
  pthread_mutex_init(&comm->mu, NULL);
  pthread_cond_init(&comm->cv, NULL);
  pthread_cond_init(&comm->bg_cv, NULL);
  *out = comm;
  if (!comm->p2p_send_seq || !comm->p2p_recv_seq || chorus__trace_comm_init(comm) < 0 ||
      chorus__live_add(comm) < 0) {
    chorus__comm_free(comm);
    return CHORUS_ERR_NO_MEMORY;
  }
  return CHORUS_OK;
}

void chorus__comm_free(chorus_comm_t* comm) {
  if (!comm) return;
  chorus__live_remove(comm);
  chorus__trace_comm_fini(comm);
  chorus__transport_destroy(&comm->tp);
  free(comm->p2p_send_seq);
  free(comm->p2p_recv_seq);
  chorus__topo_free(&comm->topo);
  chorus__engine_free_spare_reqs(comm); /* drained already, unless set-up failed */
  chorus__scratch_release(comm);
  pthread_mutex_destroy(&comm->mu);
  pthread_cond_destroy(&comm->cv);
  pthread_cond_destroy(&comm->bg_cv);
  free(comm);
}

void chorus__host_id(char* out, size_t outlen) {
  const char* forced = chorus__param_str(CHORUS_PARAM_HOST_ID);
  if (forced[0]) {
    snprintf(out, outlen, "%s", forced);
    return;
  }
  char host[64] = "localhost", boot[40] = "";
  gethostname(host, sizeof(host) - 1);
  chorus__first_line("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
  /* Keep the id short enough for log lines: host name plus the first boot-id group. */
  boot[8] = '\0';
  snprintf(out, outlen, "%s%s%s", host, boot[0] ? "/" : "", boot);
}

void chorus__machine_id(const chorus_comm_t* comm, char* out, size_t len) {
  if (!chorus__first_line("/proc/sys/kernel/random/boot_id", out, len)) snprintf(out, len, "%s", comm->host_id);
}

void chorus__peer_info_self(const chorus_comm_t* comm, chorus_peer_info_t* me) {
  me->pid = (int32_t)getpid();
  me->nranks = comm->nranks;
  chorus__shared_settings_hash(comm, me->shared_settings);
  snprintf(me->host_id, sizeof(me->host_id), "%s", comm->host_id);
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  me->cpus = cpus > 0 ? (int32_t)cpus : 1;
  chorus__machine_id(comm, me->machine, sizeof(me->machine));
  cpu_set_t mask;
  memset(me->affinity, 0, sizeof(me->affinity));
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0)
    for (int c = 0; c < CPU_SETSIZE && c < 64 * CHORUS_AFFINITY_WORDS; c++)
      if (CPU_ISSET(c, &mask)) me->affinity[c / 64] |= 1ull << (c % 64);
}

/* How many ranks share rank r's machine (by_host: carry r's host id), and in *cpus how many CPUs
 * they may run on together: the union of their affinity masks, since a launcher that pins each
 * rank to a CPU leaves each a mask of one, while taskset, cpusets and containers leave them
 * fewer than the machine has online (2 ranks under `taskset -c 0` took 31-36 us for an 8-byte
 * allreduce polling as if each had a CPU, where 4 ranks on 2 CPUs take 2.6). The online count
 * where a mask is unknown. */
static int ranks_and_cpus(const chorus_peer_info_t* infos, int n, int r, int by_host, int* cpus) {
  uint64_t all[CHORUS_AFFINITY_WORDS] = {0};
  int same = 0, known = 1, count = 0;
  for (int q = 0; q < n; q++) {
    int alike = by_host ? strncmp(infos[q].host_id, infos[r].host_id, sizeof(infos[r].host_id)) == 0
                        : strncmp(infos[q].machine, infos[r].machine, sizeof(infos[r].machine)) == 0;
    if (!alike) continue;
    same++;
    uint64_t any = 0;
    for (int w = 0; w < CHORUS_AFFINITY_WORDS; w++) all[w] |= infos[q].affinity[w], any |= infos[q].affinity[w];
    known &= any != 0;
  }
  for (int w = 0; w < CHORUS_AFFINITY_WORDS; w++) count += __builtin_popcountll(all[w]);
  int online = infos[r].cpus > 0 ? infos[r].cpus : 1;
  *cpus = known && count > 0 && count < online ? count : online;
  return same;
}

/* Ranks per CPU on the busiest machine. Emulated hosts (network namespaces, CHORUS_HOST_ID) or
 * containers can share one machine's cores, which the host ids do not show. */
static double machine_oversubscription(const chorus_peer_info_t* infos, int n) {
  double worst = 0.0;
  for (int r = 0; r < n; r++) {
    int cpus;
    double per_cpu = (double)ranks_and_cpus(infos, n, r, 0, &cpus) / cpus;
    if (per_cpu > worst) worst = per_cpu;
  }
  return worst;
}

/* The topology (core/topo) from every rank's host id, and the queries' figures. */
static chorus_status_t derive_topology(chorus_comm_t* comm, const chorus_peer_info_t* infos) {
  const char** ids = malloc((size_t)comm->nranks * sizeof(*ids));
  if (!ids) return CHORUS_ERR_NO_MEMORY;
  for (int r = 0; r < comm->nranks; r++) ids[r] = infos[r].host_id;
  int rc = chorus__topo_init(&comm->topo, comm->nranks, ids);
  free(ids);
  if (rc < 0) return CHORUS_ERR_NO_MEMORY;
  comm->host_count = comm->topo.nhosts;
  comm->local_rank = comm->topo.local_of[comm->rank];
  comm->local_size = comm->topo.host_size[comm->topo.host_of[comm->rank]];
  comm->cost.nhosts = comm->topo.nhosts;
  comm->cost.max_local = comm->topo.max_local;
  comm->cost.uniform = comm->topo.uniform;
  comm->cost.flat = comm->topo.nhosts > 1 ? comm->cost.inter : comm->cost.intra;
  comm->cost.spread = comm->cost.flat; /* until tune.c divides it */
  comm->cost.machine_oversub = machine_oversubscription(infos, comm->nranks);
  int machine_cpus, host_cpus;
  int mine = ranks_and_cpus(infos, comm->nranks, comm->rank, 0, &machine_cpus);
  comm->machine_crowded = mine > machine_cpus;
  if (comm->shm_stream_bytes == STREAM_BY_MACHINE) {
    comm->shm_stream_bytes = chorus__stream_from_bytes(chorus__llc_bytes(), mine, machine_cpus);
    CH_INFO(TUNE, comm->rank, "calls that read and write %zu bytes of their buffers or more store with streaming stores (%d ranks on this machine)",
             comm->shm_stream_bytes, mine);
  }
  /* Across hosts a fused piece pays the two-level pipeline's fill and drain and a round trip
   * per phase: 4 MiB pieces took 5-20% less time than 1 MiB ones for 1000 grouped 4 KiB
   * allreduces on 4 emulated hosts (docs/group.md); on one host 1 MiB stays in the caches. */
  if (comm->group_fuse_bytes == GROUP_FUSE_BY_TOPOLOGY)
    comm->group_fuse_bytes = comm->topo.nhosts > 1 ? 4u << 20 : 1u << 20;
  /* More ranks than CPUs on this host: a waiting rank may hold the core of the rank it waits
   * for, so it yields from its first idle polls on instead of busy-polling first. */
  ranks_and_cpus(infos, comm->nranks, comm->rank, 1, &host_cpus);
  comm->oversubscribed = comm->local_size > host_cpus;
  if (comm->spin_by_link && comm->oversubscribed && comm->topo.nhosts == 1)
    comm->spin_us = comm->spin_small_us = CHORUS_SPIN_SHARED_CORES_US;
  return CHORUS_OK;
}

void chorus__comm_set_stripes(chorus_comm_t* comm, int socks) {
  comm->tp.stripe_socks = socks < 1 ? 1 : socks > comm->nsocks ? comm->nsocks : socks;
  /* A message to a TCP peer is cut into one part per socket in use: engines' chunks hold a
   * whole CHORUS_BUFF_SIZE per socket, since parts of a quarter of it cost more in calls and
   * waits than the extra sockets gain (measured 0.7-0.85x of one socket with 4 sockets at 256
   * KiB chunks, parity with 1 MiB chunks). Engines hold a few chunks of scratch each: at most
   * MSG_CHUNK_MAX_BYTES, unless CHORUS_BUFF_SIZE itself is more. */
  int tcp_peers = comm->host_count > 1 || !comm->shm_enabled;
  size_t parts = tcp_peers ? (size_t)comm->tp.stripe_socks : 1;
  comm->msg_chunk_bytes = comm->chunk_bytes * parts;
  if (comm->msg_chunk_bytes > MSG_CHUNK_MAX_BYTES)
    comm->msg_chunk_bytes = comm->chunk_bytes > MSG_CHUNK_MAX_BYTES ? comm->chunk_bytes : MSG_CHUNK_MAX_BYTES;
}

chorus_status_t chorus__comm_connect(chorus_comm_t* comm, int listen_fd,
                                     const chorus_peer_info_t* infos) {
  uint64_t deadline = chorus__now_ns() + (uint64_t)comm->connect_timeout_sec * CHORUS_NS_PER_SEC;
  chorus_status_t st = derive_topology(comm, infos);
  if (st >= 0) st = chorus__transport_create(&comm->tp, comm->rank, comm->nranks, comm->comm_id);
  if (st >= 0) st = chorus__match_init(&comm->tp, comm->p2p_eager_bytes, comm->p2p_unexpected_bytes);
  if (st >= 0)
    st = chorus__transport_connect_all(&comm->tp, listen_fd, infos, comm->nsocks, comm->tcp_cc, comm->secret, deadline);
  if (st >= 0 && comm->shm_enabled)
    st = chorus__transport_setup_shm(&comm->tp, chorus__topo_host_group(&comm->topo, comm->topo.host_of[comm->rank], comm->rank),
                                     comm->shm_ring_bytes, comm->shm_slot_bytes, comm->shm_single_copy,
                                     !comm->oversubscribed, deadline);
  if (st < 0) {
    if (st == CHORUS_ERR_NO_MEMORY && !comm->tp.err[0]) snprintf(comm->tp.err, sizeof(comm->tp.err), "out of memory");
    chorus__comm_set_error(comm, "%s", comm->tp.err);
    CH_WARN(comm->rank, "%s", comm->tp.err);
    return st;
  }
  chorus__comm_set_stripes(comm, comm->nsocks);
  comm->tp.status_answer = chorus__conn_status_answer;
  comm->tp.status_ctx = comm;
  comm->last_activity_ns = chorus__now_ns();
  chorus__trace_comm_register(comm);
  CH_INFO(INIT, comm->rank, "communicator %016llx ready: rank %d of %d, local rank %d of %d, %d host(s), %d socket(s) per peer",
          (unsigned long long)comm->comm_id, comm->rank, comm->nranks, comm->local_rank,
          comm->local_size, comm->host_count, comm->nsocks);
  return CHORUS_OK;
}

/* ---- public lifecycle calls ---- */

CHORUS_API chorus_status_t chorus_comm_destroy(chorus_comm_t* comm) {
  if (!comm) return CHORUS_OK;
  if (chorus__live_has(comm) && chorus__group_holds(comm)) {
    pthread_mutex_lock(&comm->mu);
    chorus__comm_set_error(comm, "chorus_comm_destroy: this thread's open group holds calls on the communicator "
                           "(call chorus_group_end first)");
    pthread_mutex_unlock(&comm->mu);
    return CHORUS_ERR_INVALID_USAGE;
  }
  /* Out of the live set first: a second destroy, or a call racing this one, is refused. */
  if (!chorus__live_remove(comm)) {
    chorus__live_check(comm, "chorus_comm_destroy");
    return CHORUS_ERR_INVALID_ARG;
  }
  chorus__engine_drain(comm);
  chorus__comm_free(comm);
  return CHORUS_OK;
}

CHORUS_API chorus_status_t chorus_comm_abort(chorus_comm_t* comm) {
  if (!chorus__live_check(comm, "chorus_comm_abort")) return CHORUS_ERR_INVALID_ARG;
  if (__atomic_exchange_n(&comm->abort_requested, 1, __ATOMIC_ACQ_REL)) return CHORUS_OK;
  /* Shut the sockets now so that peers notice at once; the fds stay open until destroy. */
  chorus_transport_t* tp = &comm->tp;
  for (int p = 0; tp->peers && p < tp->nranks; p++)
    for (int i = 0; i < tp->peers[p].nsocks; i++)
      if (tp->peers[p].socks[i].fd >= 0) shutdown(tp->peers[p].socks[i].fd, SHUT_RDWR);
  chorus__transport_wake(tp);
  if (pthread_mutex_trylock(&comm->mu) == 0) {
    pthread_cond_broadcast(&comm->cv);
    pthread_mutex_unlock(&comm->mu);
  }
  return CHORUS_OK;
}

#define QUERY(fn, field)                                                  \
  CHORUS_API chorus_status_t fn(const chorus_comm_t* comm, int* out) {    \
    if (!chorus__live_check(comm, #fn) || !out) return CHORUS_ERR_INVALID_ARG; \
    *out = comm->field;                                                   \
    return CHORUS_OK;                                                     \
  }
QUERY(chorus_comm_rank, rank)
QUERY(chorus_comm_size, nranks)
QUERY(chorus_comm_local_rank, local_rank)
QUERY(chorus_comm_local_size, local_size)
QUERY(chorus_comm_host_count, host_count)
#undef QUERY

CHORUS_API const char* chorus_comm_last_error(const chorus_comm_t* comm) {
  if (chorus__live_has(comm)) return comm->last_error;
  /* Not a communicator (any more): this thread's message about it, never its memory. */
  const char* why = chorus__live_error(comm);
  if (why[0]) return why;
  return comm ? "not a valid communicator (destroyed, or never created)" : "no communicator (NULL)";
}

const char* chorus__comm_peer_transport(const chorus_comm_t* comm, int peer) {
  if (!comm || peer < 0 || peer >= comm->nranks || !comm->tp.peers) return NULL;
  const chorus_peer_t* p = &comm->tp.peers[peer];
  return p->is_self ? "self" : p->socks[0].is_shm ? "shm" : "tcp";
}

void chorus__comm_tcp_cc(const chorus_comm_t* comm, char* buf, size_t len) {
  buf[0] = 0;
  for (int p = 0; comm && comm->tp.peers && p < comm->nranks; p++) {
    const chorus_peer_t* peer = &comm->tp.peers[p];
    if (peer->is_self || !peer->nsocks || peer->socks[0].is_shm || peer->socks[0].fd < 0) continue;
    if (chorus__sock_get_cc(peer->socks[0].fd, buf, len) != 0) buf[0] = 0;
    return;
  }
}

const char* chorus__comm_peer_host(const chorus_comm_t* comm, int peer) {
  if (!comm || peer < 0 || peer >= comm->nranks || !comm->tp.peers) return NULL;
  return comm->tp.peers[peer].host;
}

const char* chorus__comm_peer_addr(const chorus_comm_t* comm, int peer) {
  if (!comm || peer < 0 || peer >= comm->nranks || !comm->tp.peers) return NULL;
  return comm->tp.peers[peer].addr;
}
