/*
 * tune.c - the cost model's link figures (tune.h). The probe: the first two ranks of the first
 * host that has two (host 0's, usually) exchange messages over shared memory (the intra-host
 * link), and host 0's first rank does the same with host 1's first rank over TCP (the
 * inter-host link; on one core for its small exchanges where the two share a machine with more
 * ranks than CPUs and hosts hold several ranks: share_one_core); 8-byte exchanges give alpha,
 * 256 KiB (intra) and 1 MiB (inter) ones the bandwidth; host 0's first rank publishes both in
 * the bootstrap store and every rank reads them from there. On 3 hosts or more, the first rank
 * of every host then sends 1 MiB to the next host's and receives from the previous one's, all at
 * once (the ring figure, algo.h). About 1 ms on one host, a few tens of ms over 2 Gbit/s links.
 * With several sockets per TCP peer the pair that talks TCP also compares one socket with all of
 * them, and every rank cuts messages over the count host 0's rank chose (a job's start took 7 ms
 * longer on an unshaped veth pair, 224 ms over a 2 Gbit/s link: docs/cluster.md).
 * Exchanges are the library's own point-to-point calls (numbered per pair, so the collective
 * sequence still starts at 0 for the user; outside CHORUS_ALGO, the recorder and the trace).
 */
#include "coll/tune.h"

#include "coll/coll.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/param.h"

#define SPIN_INTER_ALPHAS 4
#define SPIN_MAX_US 1000

#define PROBE_SMALL_REPS 16
#define PROBE_BIG_REPS 3
/* Inside a host 256 KiB is plenty; between hosts a shorter message passes a token-bucket
 * shaper (or a NIC's burst) at line rate and overstates the link: 256 KiB through tc tbf at
 * 2 Gbit/s measured 327-766 B/us where 250 get through. 1 MiB drains such a burst. */
#define PROBE_INTRA_BYTES (256u * 1024u)
#define PROBE_INTER_BYTES (1024u * 1024u)

/* Several sockets per TCP peer (CHORUS_NSOCKS_PER_PEER) are for links that carry more over
 * several flows than over one: per-flow limits of cloud networks, flows hashed over the members
 * of a bond or the paths of a fabric. Where one flow already fills the link they cost: on a
 * 2-core machine's veth pair four sockets ran 0.89-0.99x of one (their four sets of buffers
 * hold four times the bytes in flight, which the kernel's copies then read from farther
 * caches). So the probe compares the two, in alternation, and keeps every socket only when
 * they carry its exchange at least this much faster than one, a margin above the noise of
 * single exchanges on a busy machine. */
#define STRIPE_GAIN_MIN 1.15
#define STRIPE_ROUNDS 3
/* A part for each of up to 16 sockets (parts are never cut smaller: transport.h), and long
 * enough for the flows to be past their start-up: over 4 links of 2 Gbit/s with a per-flow
 * hash, where striping ran 1.9x faster than one socket, 1 MiB exchanges kept the sockets in 1
 * launch of 5 (four flows' start took as long as one flow's whole message), 4 MiB in 4 of 5. */
#define PROBE_STRIPE_BYTES (4u << 20)

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Microseconds of each of reps exchanges of `bytes` (sent to `to`, received from `from`), sorted. */
static chorus_status_t time_exchanges(chorus_comm_t* comm, int to, int from, size_t bytes, int reps, char* buf,
                                      double* us) {
  for (int i = -1; i < reps; i++) { /* one warm-up */
    uint64_t t0 = chorus__now_ns();
    chorus_status_t st = chorus__sendrecv_internal(buf, bytes, to, buf + bytes, bytes, from, comm);
    if (st < 0) return st;
    if (i >= 0) us[i] = (double)(chorus__now_ns() - t0) / 1e3;
  }
  qsort(us, (size_t)reps, sizeof(double), cmp_double);
  return CHORUS_OK;
}

/* What the two ranks of a probe pair tell each other before they measure. */
typedef struct {
  char machine[CHORUS_ADDR_LEN]; /* chorus__machine_id */
  int32_t crowded;               /* comm->machine_crowded */
  int32_t cpu;                   /* the CPU the pair's lead runs on */
} pair_hello_t;

/* Two ranks on one machine with more ranks than CPUs (hosts emulated in network namespaces, or
 * containers of one machine) wait for each other's turn on a core in most of a collective's
 * hand-overs, and one small exchange costs 4x as much when they take turns on one core as on
 * two: 28-31 us against 6-9 on 2 CPUs, where a launcher's pinning alone decided which one the
 * pair saw (it pins rank r of the job to CPU r mod 2: host 0's and host 1's first ranks share a
 * CPU when host 0 has 2 ranks, not when it has 1 or 3). The lower figure priced the steps of
 * hosts of 3+1 and 1+2+3 ranks at a quarter of what they took and chose schedules that took
 * 1.3-2.7x the fastest's time for allgathers and reduce_scatters of 1-12 KiB (flat rings where
 * the two-level leader mode or halving was fastest); measured on one core, within 1.1x. So such
 * a pair measures the shared case on purpose: both run on the lead's CPU for the small
 * exchanges. 1 when this rank moved (*own: its affinity before). */
static int share_one_core(chorus_comm_t* comm, int peer, int lead, cpu_set_t* own, chorus_status_t* st) {
  pair_hello_t mine, theirs;
  memset(&mine, 0, sizeof(mine));
  memset(&theirs, 0, sizeof(theirs));
  chorus__machine_id(comm, mine.machine, sizeof(mine.machine));
  mine.crowded = comm->machine_crowded;
  mine.cpu = lead ? sched_getcpu() : -1;
  *st = chorus__sendrecv_internal(&mine, sizeof(mine), peer, &theirs, sizeof(theirs), peer, comm);
  if (*st < 0 || !mine.crowded || !theirs.crowded || strncmp(mine.machine, theirs.machine, sizeof(mine.machine)) != 0)
    return 0;
  int cpu = lead ? mine.cpu : theirs.cpu;
  if (cpu < 0 || cpu >= CPU_SETSIZE || sched_getaffinity(0, sizeof(*own), own) != 0) return 0;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof(one), &one) == 0; /* not allowed there: the pair measures apart */
}

/* Only where hosts hold several ranks: what the shared figure corrects is the price of a step
 * between hosts against the hand-overs inside a host (priced from the shared-memory pair, which
 * a launcher puts on two cores). With one rank per host every candidate crosses hosts alone and
 * the figure as placed ranked them better: at one core, 4 emulated hosts x 1 rank on 2 CPUs
 * priced recursive doubling under halving-doubling at 16-32 KiB, where it took 1.3x its time. */
int chorus__tune_inter_lead(const chorus_topo_t* topo, int rank, int first) {
  return topo->max_local > 1 ? rank == first : -1;
}

chorus_status_t chorus__tune_measure(chorus_comm_t* comm, int peer, int reps, size_t big_bytes, int lead,
                                     chorus_link_model_t* out) {
  char* buf = calloc(2, big_bytes);
  double* us = calloc((size_t)reps, sizeof(double));
  chorus_status_t st = buf && us ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
  double small = 0, big = 0;
  cpu_set_t own;
  int moved = st >= 0 && lead >= 0 ? share_one_core(comm, peer, lead, &own, &st) : 0;
  if (st >= 0) st = time_exchanges(comm, peer, peer, 8, reps, buf, us);
  if (moved && sched_setaffinity(0, sizeof(own), &own) != 0) /* a cpuset changed meanwhile */
    CH_WARN(comm->rank, "link probe: could not restore this thread's CPU affinity: %s", strerror(errno));
  if (st >= 0) small = us[reps / 2];
  if (st >= 0) st = time_exchanges(comm, peer, peer, big_bytes, reps < PROBE_BIG_REPS ? reps : PROBE_BIG_REPS, buf, us);
  if (st >= 0) big = us[0];
  free(buf);
  free(us);
  if (st < 0) return st;
  out->alpha_us = small > 0.1 ? small : 0.1;
  out->bytes_per_us = chorus__tune_bytes_per_us(big_bytes, big, out->alpha_us);
  return CHORUS_OK;
}

double chorus__tune_bytes_per_us(size_t bytes, double us, double alpha_us) {
  /* An exchange moves a message each way at once: its time is one transfer's. */
  return (double)bytes / (us > alpha_us + 1.0 ? us - alpha_us : 1.0);
}

chorus_status_t chorus__tune_ring_us(chorus_comm_t* comm, size_t bytes, int reps, double* fastest_us) {
  const chorus_topo_t* topo = &comm->topo;
  int H = topo->nhosts, h = topo->host_of[comm->rank];
  char* buf = calloc(2, bytes);
  double* us = calloc((size_t)reps, sizeof(double));
  chorus_status_t st = buf && us ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
  if (st >= 0) st = time_exchanges(comm, topo->rails[(h + 1) % H], topo->rails[(h + H - 1) % H], bytes, reps, buf, us);
  if (st >= 0) *fastest_us = us[0];
  free(buf);
  free(us);
  return st;
}

/* ---- sockets per TCP peer ---- */

/* Both ranks of a pair cut messages over `socks` sockets from now on, then exchange 8 bytes
 * (whole on the first socket whatever the count): neither sends the other a message cut the new
 * way before the other counts its parts the same way, and neither has a message of the old way
 * still coming in (each entered here only once its last receive was done). */
static chorus_status_t switch_stripes(chorus_comm_t* comm, int peer, int socks, char* buf) {
  chorus__comm_set_stripes(comm, socks);
  return chorus__sendrecv_internal(buf, 8, peer, buf + 8, 8, peer, comm);
}

/* Times exchanges of `bytes` (at least 16) with peer cut over one socket (best_us[0]) and over
 * all comm->nsocks (best_us[1]), in `rounds` alternations: the fastest of each, the slower of
 * the two ends' figures (both end with the same). Both ranks of the pair call it, and it leaves
 * both cutting over all sockets. */
static chorus_status_t compare_stripes(chorus_comm_t* comm, int peer, size_t bytes, int rounds, double best_us[2]) {
  char* buf = calloc(2, bytes);
  chorus_status_t st = buf ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
  const int socks[2] = {1, comm->nsocks};
  best_us[0] = best_us[1] = 0.0;
  /* Alternating, so that a burst of load on the machine weighs on both counts alike. */
  for (int r = 0; r < rounds && st >= 0; r++)
    for (int k = 0; k < 2 && st >= 0; k++) {
      double us = 0.0;
      st = switch_stripes(comm, peer, socks[k], buf);
      if (st >= 0) st = time_exchanges(comm, peer, peer, bytes, 1, buf, &us);
      if (st >= 0 && (best_us[k] == 0.0 || us < best_us[k])) best_us[k] = us;
    }
  /* Back to every socket, and the two ends' figures to both (the exchange is the fence, as in
   * switch_stripes): each end's time is mostly its incoming direction's, and a collective needs
   * both, so both keep the slower figure of each count and decide alike. */
  double theirs[2] = {0.0, 0.0};
  chorus__comm_set_stripes(comm, comm->nsocks);
  if (st >= 0) st = chorus__sendrecv_internal(best_us, sizeof(theirs), peer, theirs, sizeof(theirs), peer, comm);
  for (int k = 0; k < 2 && st >= 0; k++)
    if (theirs[k] > best_us[k]) best_us[k] = theirs[k];
  free(buf);
  return st;
}

int chorus__tune_stripes_kept(const double best_us[2]) {
  return best_us[0] >= STRIPE_GAIN_MIN * best_us[1];
}

/* The probe's pair that talks TCP: the inter-host pair, or on one host without shared memory
 * the intra-host one; NULL when none does, or when each peer has a single socket anyway. */
static const int* stripe_pair(const chorus_comm_t* comm, const int intra[2], const int inter[2]) {
  if (comm->nsocks <= 1) return NULL;
  if (inter[0] >= 0) return inter;
  return intra[0] >= 0 && !comm->shm_enabled ? intra : NULL;
}

/* ---- the probe, shared through the store ---- */

typedef struct {
  double intra[2], inter[2]; /* alpha_us, bytes_per_us; 0: not measured */
  double inter_ring;         /* bytes_per_us; 0: not measured */
  double stripes;            /* sockets per TCP peer that messages are cut over; 0: not compared */
} tune_figures_t;

/* A rank of the pair that talks TCP (stripe_pair) compares one socket with all of them and keeps
 * the figures of the count it chose (f->stripes; the bandwidth of its level). */
static chorus_status_t probe_stripes(chorus_comm_t* comm, const int pair[2], double* bytes_per_us, double alpha_us,
                                     tune_figures_t* f) {
  double best_us[2];
  int peer = comm->rank == pair[0] ? pair[1] : pair[0];
  size_t bytes = PROBE_STRIPE_BYTES;
  chorus_status_t st = compare_stripes(comm, peer, bytes, STRIPE_ROUNDS, best_us);
  if (st < 0) return st;
  int kept = chorus__tune_stripes_kept(best_us);
  f->stripes = kept ? comm->nsocks : 1;
  *bytes_per_us = chorus__tune_bytes_per_us(bytes, best_us[kept], alpha_us);
  CH_DEBUG(TUNE, comm->rank, "sockets per peer: %zu bytes with rank %d took %.0f us on 1 socket, %.0f us on %d: %s",
           bytes, peer, best_us[0], best_us[1], comm->nsocks, kept ? "all kept" : "one used");
  return CHORUS_OK;
}

static chorus_status_t store_failed(chorus_comm_t* comm, chorus_store_t* store, chorus_status_t st) {
  chorus__comm_set_error(comm, "rank %d: sharing the link probe's figures: %s", comm->rank,
                         st == CHORUS_ERR_PROTOCOL ? "malformed entry" : chorus__store_error(store));
  return st;
}

static chorus_status_t store_get_exact(chorus_comm_t* comm, chorus_store_t* store, const char* key, void* out,
                                       size_t size) {
  void* val = NULL;
  size_t len = 0;
  chorus_status_t st = chorus__store_get(store, key, &val, &len, comm->connect_timeout_sec * 1000);
  if (st >= 0 && len == size) memcpy(out, val, size);
  else if (st >= 0) st = CHORUS_ERR_PROTOCOL;
  free(val);
  return st < 0 ? store_failed(comm, store, st) : st;
}

/* The store key of one of the probe's entries: "<comm id>/tune" + what. */
static const char* probe_key(const chorus_comm_t* comm, const char* what, char* key, size_t len) {
  snprintf(key, len, "%016llx/tune%s", (unsigned long long)comm->comm_id, what);
  return key;
}

/* After the sockets comparison its second rank says it has read its last message, and the first
 * (host 0's first rank, which publishes the count) waits for that: a rank that already cuts
 * messages the chosen way must not reach the second while it still counts parts the old way (an
 * engine that stood still for a while reads every peer's frames ahead). */
static chorus_status_t stripes_fence(chorus_comm_t* comm, chorus_store_t* store, const int pair[2]) {
  char key[80], done = 1;
  probe_key(comm, "/stripes_done", key, sizeof(key));
  if (comm->rank == pair[0]) return store_get_exact(comm, store, key, &done, 1);
  chorus_status_t st = chorus__store_set(store, key, &done, 1);
  return st < 0 ? store_failed(comm, store, st) : st;
}

void chorus__tune_probe_pairs(const chorus_topo_t* topo, int intra[2], int inter[2]) {
  /* Host 0 may have one rank (1+2+3): the defaults would then price every hand-over inside a host. */
  intra[0] = intra[1] = -1;
  for (int h = 0; h < topo->nhosts && intra[0] < 0; h++)
    if (topo->host_size[h] > 1) {
      intra[0] = topo->by_host[topo->host_first[h]];
      intra[1] = topo->by_host[topo->host_first[h] + 1];
    }
  inter[0] = topo->nhosts > 1 ? topo->rails[0] : -1;
  inter[1] = topo->nhosts > 1 ? topo->rails[1] : -1;
}

/* The ring figure (algo.h), on 3 hosts or more: the first rank of every host exchanges with its
 * neighbours once host 0's first rank says through the store that the pairs are done (they
 * measure alone), each keeps its fastest exchange, and host 0's takes the slowest host's (the
 * slowest link sets a ring's pace). Called by the first rank of every host; *bytes_per_us is
 * set on host 0's, from its alpha_us. */
static chorus_status_t ring_probe(chorus_comm_t* comm, chorus_store_t* store, double alpha_us, double* bytes_per_us) {
  int H = comm->topo.nhosts, h = comm->topo.host_of[comm->rank];
  char key[80], what[32], go = 1;
  chorus_status_t st;
  probe_key(comm, "/ring_go", key, sizeof(key));
  if (h == 0 && (st = chorus__store_set(store, key, &go, 1)) < 0) return store_failed(comm, store, st);
  if (h > 0 && (st = store_get_exact(comm, store, key, &go, 1)) < 0) return st;
  double us = 0;
  if ((st = chorus__tune_ring_us(comm, PROBE_INTER_BYTES, PROBE_BIG_REPS, &us)) < 0) return st;
  if (h > 0) {
    snprintf(what, sizeof(what), "/ring/%d", h);
    st = chorus__store_set(store, probe_key(comm, what, key, sizeof(key)), &us, sizeof(us));
    return st < 0 ? store_failed(comm, store, st) : st;
  }
  for (int i = 1; i < H; i++) {
    double theirs = 0;
    snprintf(what, sizeof(what), "/ring/%d", i);
    if ((st = store_get_exact(comm, store, probe_key(comm, what, key, sizeof(key)), &theirs, sizeof(theirs))) < 0)
      return st;
    if (theirs > us) us = theirs;
  }
  *bytes_per_us = chorus__tune_bytes_per_us(PROBE_INTER_BYTES, us, alpha_us);
  return CHORUS_OK;
}

static chorus_status_t probe(chorus_comm_t* comm, chorus_store_t* store) {
  const chorus_topo_t* topo = &comm->topo;
  int intra[2], inter[2];
  chorus__tune_probe_pairs(topo, intra, inter);
  int ia = intra[0], b = intra[1];
  int a = topo->by_host[0], c = inter[1]; /* host 0's and host 1's first ranks */
  const int* tcp_pair = stripe_pair(comm, intra, inter);
  tune_figures_t f = {{0, 0}, {0, 0}, 0, 0};
  chorus_link_model_t m;
  chorus_status_t st = CHORUS_OK;
  char key[80];
  /* A pair away from host 0 measures after the inter-host pair (one probe at a time on cores
   * they may share) and hands its figures to host 0's first rank, which publishes them all. */
  if (ia >= 0 && ia != a && ia != c && comm->rank == ia) {
    char done;
    if (c >= 0) st = store_get_exact(comm, store, probe_key(comm, "/inter_done", key, sizeof(key)), &done, 1);
    if (st < 0) return st;
  }
  if (ia >= 0 && (comm->rank == ia || comm->rank == b)) {
    st = chorus__tune_measure(comm, comm->rank == ia ? b : ia, PROBE_SMALL_REPS, PROBE_INTRA_BYTES, -1, &m);
    f.intra[0] = m.alpha_us;
    f.intra[1] = m.bytes_per_us;
    if (st >= 0 && tcp_pair == intra) st = probe_stripes(comm, intra, &f.intra[1], f.intra[0], &f);
    if (st >= 0 && ia != a && comm->rank == ia) {
      st = chorus__store_set(store, probe_key(comm, "/intra", key, sizeof(key)), f.intra, sizeof(f.intra));
      if (st < 0) return store_failed(comm, store, st);
    }
  }
  if (st >= 0 && c >= 0 && (comm->rank == a || comm->rank == c)) {
    st = chorus__tune_measure(comm, comm->rank == a ? c : a, PROBE_SMALL_REPS, PROBE_INTER_BYTES,
                              chorus__tune_inter_lead(topo, comm->rank, a), &m);
    f.inter[0] = m.alpha_us;
    f.inter[1] = m.bytes_per_us;
    if (st >= 0 && tcp_pair == inter) st = probe_stripes(comm, inter, &f.inter[1], f.inter[0], &f);
  }
  if (st >= 0 && tcp_pair && (comm->rank == tcp_pair[0] || comm->rank == tcp_pair[1]))
    st = stripes_fence(comm, store, tcp_pair);
  if (st < 0) return st;
  if (comm->rank == a && ia >= 0 && ia != a) {
    if (ia != c && (st = chorus__store_set(store, probe_key(comm, "/inter_done", key, sizeof(key)), "1", 1)) < 0)
      return store_failed(comm, store, st);
    if ((st = store_get_exact(comm, store, probe_key(comm, "/intra", key, sizeof(key)), f.intra, sizeof(f.intra))) < 0)
      return st;
  }
  /* Measured even when CHORUS_LINK_INTER will replace it (chorus__tune_links): which ranks take
   * part must not hang on a variable that one rank may lack. */
  if (topo->nhosts >= 3 && topo->local_of[comm->rank] == 0 &&
      (st = ring_probe(comm, store, f.inter[0], &f.inter_ring)) < 0)
    return st;
  probe_key(comm, "", key, sizeof(key));
  if (comm->rank == a) {
    st = chorus__store_set(store, key, &f, sizeof(f));
    if (st < 0) return store_failed(comm, store, st);
  } else if ((st = store_get_exact(comm, store, key, &f, sizeof(f))) < 0) {
    return st;
  }
  if (f.intra[1] > 0) comm->cost.intra = (chorus_link_model_t){f.intra[0], f.intra[1]};
  if (f.inter[1] > 0) comm->cost.inter = (chorus_link_model_t){f.inter[0], f.inter[1]};
  comm->cost.inter_ring_bytes_per_us = f.inter_ring;
  /* Every rank is past its last message of the probe: from here on all count parts alike. */
  if (f.stripes > 0) chorus__comm_set_stripes(comm, (int)f.stripes);
  return CHORUS_OK;
}

/* ---- a file (chorus-diag --tune) and the variables ---- */

int chorus__tune_parse_link(const char* txt, chorus_link_model_t* out) {
  double alpha, beta;
  char tail;
  if (sscanf(txt, " %lf , %lf %c", &alpha, &beta, &tail) != 2 || !(alpha >= 0) || !(beta > 0)) return 0;
  *out = (chorus_link_model_t){alpha, beta};
  return 1;
}

static chorus_status_t read_file(chorus_comm_t* comm, const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) {
    chorus__comm_set_error(comm, "CHORUS_TUNE=%s: cannot open the file (1, 0, or a file of chorus-diag --tune)", path);
    return CHORUS_ERR_INVALID_ARG;
  }
  char line[256];
  int lineno = 0, bad = 0;
  while (!bad && fgets(line, sizeof(line), f)) {
    lineno++;
    char level[16];
    double alpha, beta;
    if (line[strspn(line, " \t")] == '#' || line[strspn(line, " \t\r\n")] == '\0') continue;
    if (sscanf(line, " %15s %lf %lf", level, &alpha, &beta) != 3 || !(alpha >= 0) || !(beta > 0)) bad = 1;
    else if (strcmp(level, "intra") == 0) comm->cost.intra = (chorus_link_model_t){alpha, beta};
    else if (strcmp(level, "inter") == 0) comm->cost.inter = (chorus_link_model_t){alpha, beta};
    else if (strcmp(level, "inter_ring") == 0) comm->cost.inter_ring_bytes_per_us = beta; /* alpha: inter's */
    else bad = 1;
  }
  fclose(f);
  if (bad) {
    chorus__comm_set_error(comm, "CHORUS_TUNE=%s: line %d is not \"intra|inter|inter_ring ALPHA_US BYTES_PER_US\"",
                           path, lineno);
    return CHORUS_ERR_INVALID_ARG;
  }
  return CHORUS_OK;
}

static chorus_status_t apply_variable(chorus_comm_t* comm, chorus_param_id_t id, const char* name,
                                      chorus_link_model_t* link) {
  const char* v = chorus__param_str(id);
  if (!v[0]) return CHORUS_OK;
  if (chorus__tune_parse_link(v, link)) return CHORUS_OK;
  chorus__comm_set_error(comm, "%s=%s: expected ALPHA_US,BYTES_PER_US (e.g. 15,2000)", name, v);
  return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__tune_links(chorus_comm_t* comm, chorus_store_t* store) {
  const char* spec = chorus__param_str(CHORUS_PARAM_TUNE);
  chorus_status_t st = CHORUS_OK;
  const char* source = "defaults";
  if (strcmp(spec, "0") == 0) {
  } else if (strcmp(spec, "1") == 0 || !spec[0]) {
    if (store && comm->nranks > 1) {
      st = probe(comm, store);
      source = "probe";
    }
  } else {
    st = read_file(comm, spec);
    source = spec;
  }
  if (st >= 0) st = apply_variable(comm, CHORUS_PARAM_LINK_INTRA, "CHORUS_LINK_INTRA", &comm->cost.intra);
  if (st >= 0) st = apply_variable(comm, CHORUS_PARAM_LINK_INTER, "CHORUS_LINK_INTER", &comm->cost.inter);
  if (st < 0) return st;
  /* A link given by a variable is the whole figure: a measured ring's would undercut it. */
  if (chorus__param_str(CHORUS_PARAM_LINK_INTER)[0]) comm->cost.inter_ring_bytes_per_us = 0.0;
  chorus__tune_derive(&comm->cost);
  /* One host has no latency-bound calls (spin_bytes 0): its waits keep comm.c's spin. */
  comm->spin_small_us = comm->spin_by_link && comm->cost.nhosts > 1 ? chorus__tune_spin_us(&comm->cost) : comm->spin_us;
  char ring[48] = "";
  if (comm->cost.inter_ring_bytes_per_us > 0.0)
    snprintf(ring, sizeof(ring), " (%.0f B/us in a ring of hosts)", comm->cost.inter_ring_bytes_per_us);
  char socks[64] = "";
  if (comm->nsocks > 1)
    snprintf(socks, sizeof(socks), "; TCP messages cut over %d of %d sockets per peer", comm->tp.stripe_socks,
             comm->nsocks);
  CH_INFO(TUNE, comm->rank, "links (%s): intra %.1f us + %.0f B/us, inter %.1f us + %.0f B/us%s; waits spin %d us, "
          "%d us for calls of up to %.0f bytes%s", source, comm->cost.intra.alpha_us, comm->cost.intra.bytes_per_us,
          comm->cost.inter.alpha_us, comm->cost.inter.bytes_per_us, ring, comm->spin_us, comm->spin_small_us,
          comm->cost.spin_bytes, socks);
  return CHORUS_OK;
}

/* x rounded to a power of two on a log scale, the boundaries 2^0.4 = 1.32 above each power
 * (not 2^0.5 = 1.41): the latency-bound limit comes from a probe whose alpha and bandwidth move
 * from one launch to the next on a busy machine, and a call just under it spins while the same
 * call in the next launch sleeps, and is priced for the other mode of hier. On 4 emulated hosts
 * x 2 ranks at 2 Gbit/s the probes read 11.4-20.6 KB (49.6 us x 231 B/us .. 86 us x 240), and
 * their most common figures, 11.4-12.7 KB, straddled the nearest-power boundary (11.59 KB): a
 * sweep's job that read 11.46 KB took its 16 KiB calls latency-bound no longer, ran hier's rails
 * instead of its leader mode, and took 1.36x the leader mode's time. Boundaries at 10.8 and
 * 21.6 KB keep that whole range at 16 KiB. */
static double rounded_power_of_two(double x) {
  if (!(x >= 1.0)) return x > 0.0 ? 1.0 : 0.0;
  double p = 1.0;
  while (p * 1.3195079107728942 < x) p *= 2.0;
  return p;
}

void chorus__tune_derive(chorus_cost_ctx_t* cx) {
  int L = cx->max_local > 1 ? cx->max_local : 1;
  int shared_cores = cx->nhosts > 1 && cx->machine_oversub > 1.0;
  cx->flat = cx->nhosts > 1 ? cx->inter : cx->intra;
  cx->spread = cx->flat;
  /* Flat algorithms keep several host links busy at once (a host-ordered ring or a chain, every
   * one), which one probe pair does not (on 2 hosts its exchange does): 4 emulated hosts x 2
   * ranks on 2 cores at 10 Gbit/s, one pair read 625 B/us while the flat ring moved 300 per
   * stream and took 24 ms for 4 MiB, priced at 12.2 against hier's 11.8 (hier took 9.5). */
  if (cx->nhosts >= 3 && cx->inter_ring_bytes_per_us > 0.0 && cx->inter_ring_bytes_per_us < cx->flat.bytes_per_us)
    cx->flat.bytes_per_us = cx->inter_ring_bytes_per_us;
  /* Across hosts, latency-bound calls spin through their waits (chorus__tune_spin_us): those
   * whose bytes one link carries within a message's start-up. Larger ones wait longer than any
   * spin and sleep after the one-host spin, leaving the cores to the ranks (and the kernel's
   * network work) that have something to do: the host leader's 64 KiB allreduce took 1.0-1.2 ms
   * with 240 us of spinning against 0.66-0.84 ms with 50, on 4 emulated hosts x 2 ranks. The
   * figure comes from the links alone, which every rank shares, never from CHORUS_SPIN_US: it
   * prices calls, and ranks that priced alike select alike (an explicit spin only changes how
   * long this rank polls). */
  cx->spin_bytes = cx->nhosts > 1 ? rounded_power_of_two(cx->inter.alpha_us * cx->inter.bytes_per_us) : 0.0;
  /* Hosts whose ranks share cores (more ranks than CPUs on one machine): every wait for another
   * rank waits for that rank's turn on a core. A sleeping waiter pays a wake-up, priced as the
   * inter-host alpha (a message that wakes its receiver); a spinning one pays the turn, a pass
   * and a yield of each of the core's other ranks: 4 stages of a 4 KiB allreduce by a host
   * leader took about 50 us on 4 emulated hosts x 2 ranks on 2 CPUs. One host keeps its own
   * figures (the shared-memory prices were measured that way). */
  cx->handover_us = shared_cores ? cx->inter.alpha_us : 0.0;
  cx->handover_spin_us = shared_cores ? cx->machine_oversub * CHORUS_CORE_TURN_US : 0.0;
  /* With one rank per host the probe pair measured as placed, each on a core of its own
   * (chorus__tune_inter_lead), but in a call every step across hosts also waits while the core
   * goes round the other ranks that share it, whose turns grow with their number: k ranks a CPU
   * cost a step k (k - 1) turns. Unpriced, on 4 emulated hosts x 1 rank on 2 CPUs (k = 2: 6
   * us) halving-doubling's four steps were level with recursive doubling's two at 4 KiB (the
   * probe's noise chose either) and ahead at 8 KiB, where they took 1.3-1.7x its time; on 8 x 1
   * (k = 4: 36 us; a step of 256 B took 43 us there, against a 6 us alpha) halving-doubling
   * went first from 4 KiB, at 1.5-1.8x. From 16 KiB on 4 x 1 and 64 KiB on 8 x 1, where the
   * transfers hide the turns and halving-doubling is the faster, it stays ahead. Between the two,
   * 8 KiB on 4 x 1, the sum still prices them within 3% while recursive doubling runs 1.3-1.5x
   * faster: its transfers hide the turns too, which a sum cannot show (docs/sweep.md). */
  if (shared_cores && L == 1) {
    double step_turns_us = cx->machine_oversub * (cx->machine_oversub - 1.0) * CHORUS_CORE_TURN_US;
    cx->flat.alpha_us += step_turns_us;
    cx->spread.alpha_us += step_turns_us;
  }
  if (cx->nhosts > 1 && L > 1) cx->spread.bytes_per_us /= L;
  /* L streams per host share its link, and none goes faster than the ring's streams. */
  if (cx->spread.bytes_per_us > cx->flat.bytes_per_us) cx->spread.bytes_per_us = cx->flat.bytes_per_us;
  /* The small messages of all L ranks of a host, sent at once on shared cores, queue for them:
   * each beyond the first adds the kernel's half of an exchange. Recursive doubling at 4 KiB took
   * about 1.4 inter-host alphas a round on 4 emulated hosts x 2 ranks, the host leader's
   * exchanges 1.0. Larger calls overlap their messages' start-ups with transfers. */
  cx->spread_alpha_small_us = cx->spread.alpha_us * (shared_cores ? 1.0 + 0.5 * (L - 1) : 1.0);
}

int chorus__tune_spin_us(const chorus_cost_ctx_t* cx) {
  if (cx->nhosts <= 1) return CHORUS_SPIN_ONE_HOST_US;
  /* A small exchange across hosts takes a few inter-host alphas; a waiter that sleeps sooner
   * pays a wake-up on top (a halted virtual CPU's, here). 4 KiB allreduce on 4 emulated hosts x
   * 2 ranks, host leader: 280-460 us with 50 us of spinning, 180-240 with 200-3000. */
  double us = SPIN_INTER_ALPHAS * cx->inter.alpha_us;
  return us < CHORUS_SPIN_ONE_HOST_US ? CHORUS_SPIN_ONE_HOST_US : us > SPIN_MAX_US ? SPIN_MAX_US : (int)us;
}
