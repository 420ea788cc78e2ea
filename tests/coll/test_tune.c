/*
 * test_tune.c - the cost model's link figures (coll/tune.c): defaults with CHORUS_TUNE=0, a
 * file, the CHORUS_LINK_* variables over both, the probe on emulated hosts (positive figures,
 * bitwise the same on every rank, so every rank selects alike), clear errors for a missing
 * file, a malformed line and a malformed variable; and what the model derives from the links
 * (spread, hand-overs, the latency-bound calls' spin and view) against hand-worked figures; the
 * probe leaves every rank's CPU affinity as it found it (its inter-host pair may share a core
 * for a moment: tune.c), and shares a core only where hosts hold several ranks. On
 * 3 hosts or more the probe also measures the ring figure (every host's first rank sending to
 * the next at once), which flat algorithms take when it is lower than the pair's.
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_EQUAL */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll/tune.h"
#include "core/comm.h"
#include "ranks.h"
#include "test.h"

static const int kTwoHosts[] = {0, 1, 0, 1};

typedef struct {
  double want[4]; /* intra alpha, beta, inter alpha, beta; negative: only check > 0 */
} tune_case_t;

static int check_links(chorus_comm_t* comm, int rank, void* arg) {
  (void)rank;
  const tune_case_t* c = arg;
  double mine[4] = {comm->cost.intra.alpha_us, comm->cost.intra.bytes_per_us, comm->cost.inter.alpha_us,
                    comm->cost.inter.bytes_per_us};
  for (int i = 0; i < 4; i++) {
    if (c->want[i] < 0) ASSERT_TRUE(mine[i] > 0);
    else ASSERT_TRUE(mine[i] == c->want[i]);
  }
  ASSERT_TRUE(comm->cost.flat.alpha_us == mine[2] && comm->cost.flat.bytes_per_us == mine[3]); /* spans hosts */
  /* Every rank holds the same bits. */
  double all[4 * 4];
  ASSERT_OK(chorus_allgather(mine, all, 4, CHORUS_FLOAT64, comm));
  for (int r = 1; r < 4; r++) ASSERT_TRUE(memcmp(all, all + 4 * r, sizeof(mine)) == 0);
  return 0;
}

static void run_case(const tune_case_t* c) {
  ranks_set_hosts(4, kTwoHosts);
  ASSERT_EQ(run_ranks(4, check_links, (void*)c), 0);
  ranks_set_hosts(0, NULL);
}

TEST(defaults_without_tuning) {
  setenv("CHORUS_TUNE", "0", 1);
  tune_case_t c = {{15.0, 2000.0, 50.0, 1000.0}};
  run_case(&c);
  unsetenv("CHORUS_TUNE");
}

TEST(probe_measures_both_levels_alike_everywhere) {
  tune_case_t c = {{-1, -1, -1, -1}};
  run_case(&c);
}

/* On a machine with more ranks than CPUs (4 thread ranks on this 2-core one) the inter-host
 * pair takes its small exchanges on one core (tune.c): every thread ends with the affinity it
 * began with, and the machine counts as crowded exactly when the ranks outnumber its CPUs. */
static cpu_set_t g_before;

static int check_affinity(chorus_comm_t* comm, int rank, void* arg) {
  (void)rank, (void)arg;
  cpu_set_t now;
  ASSERT_EQ(sched_getaffinity(0, sizeof(now), &now), 0);
  ASSERT_TRUE(CPU_EQUAL(&now, &g_before));
  ASSERT_EQ(comm->machine_crowded, comm->nranks > sysconf(_SC_NPROCESSORS_ONLN));
  ASSERT_TRUE(comm->cost.inter.alpha_us > 0);
  return 0;
}

TEST(probe_leaves_every_rank_where_it_was) {
  ASSERT_EQ(sched_getaffinity(0, sizeof(g_before), &g_before), 0); /* the threads inherit it */
  ranks_set_hosts(4, kTwoHosts);
  ASSERT_EQ(run_ranks(4, check_affinity, NULL), 0);
  ranks_set_hosts(0, NULL);
}

/* The inter-host pair measures on one core only where hosts hold several ranks. */
TEST(inter_pair_shares_a_core_only_with_several_ranks_a_host) {
  const char* two_by_two[] = {"a", "a", "b", "b"};
  const char* three_plus_one[] = {"a", "a", "a", "b"};
  const char* four_by_one[] = {"a", "b", "c", "d"};
  chorus_topo_t topo;
  ASSERT_EQ(chorus__topo_init(&topo, 4, two_by_two), 0);
  ASSERT_EQ(chorus__tune_inter_lead(&topo, 0, 0), 1);
  ASSERT_EQ(chorus__tune_inter_lead(&topo, 2, 0), 0);
  chorus__topo_free(&topo);
  ASSERT_EQ(chorus__topo_init(&topo, 4, three_plus_one), 0);
  ASSERT_EQ(chorus__tune_inter_lead(&topo, 3, 0), 0);
  chorus__topo_free(&topo);
  ASSERT_EQ(chorus__topo_init(&topo, 4, four_by_one), 0);
  ASSERT_EQ(chorus__tune_inter_lead(&topo, 0, 0), -1);
  ASSERT_EQ(chorus__tune_inter_lead(&topo, 1, 0), -1);
  chorus__topo_free(&topo);
}

/* 3 hosts: the ring figure is measured, the same bits on every rank, and flat takes the lower
 * of it and the pair's bandwidth. The probe's orderings differ with the layout: 1+2+3 (host 0 of
 * one rank, so host 1's first rank measures the intra-host pair first), 1+1+2 (the intra pair on
 * host 2, after the inter-host pair) and 2+1+1 (host 0's first two ranks). */
static const int kThreeHosts[] = {0, 1, 1, 2, 2, 2};
static const int kIntraOnHost2[] = {0, 1, 2, 2};
static const int kIntraOnHost0[] = {0, 0, 1, 2};

static int check_ring(chorus_comm_t* comm, int rank, void* arg) {
  (void)rank;
  double want_ring = *(const double*)arg;
  double ring = comm->cost.inter_ring_bytes_per_us, inter = comm->cost.inter.bytes_per_us;
  if (want_ring < 0) ASSERT_TRUE(ring > 0);
  else ASSERT_TRUE(ring == want_ring);
  ASSERT_TRUE(comm->cost.flat.bytes_per_us == (ring > 0 && ring < inter ? ring : inter));
  ASSERT_TRUE(comm->cost.flat.alpha_us == comm->cost.inter.alpha_us);
  ASSERT_TRUE(comm->cost.intra.bytes_per_us > 0);
  double all[6];
  ASSERT_OK(chorus_allgather(&ring, all, 1, CHORUS_FLOAT64, comm));
  for (int r = 1; r < comm->nranks; r++) ASSERT_TRUE(memcmp(all, all + r, sizeof(ring)) == 0);
  return 0;
}

static void run_ring_case(int n, const int* hosts, double want_ring) {
  ranks_set_hosts(n, hosts);
  ASSERT_EQ(run_ranks(n, check_ring, &want_ring), 0);
  ranks_set_hosts(0, NULL);
}

TEST(probe_measures_the_ring_of_hosts) {
  run_ring_case(6, kThreeHosts, -1.0);
  run_ring_case(4, kIntraOnHost2, -1.0);
  run_ring_case(4, kIntraOnHost0, -1.0);
  /* A link given by a variable stands alone. */
  setenv("CHORUS_LINK_INTER", "40,250", 1);
  run_ring_case(6, kThreeHosts, 0.0);
  unsetenv("CHORUS_LINK_INTER");
}

static void write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  ASSERT_NOT_NULL(f);
  fputs(text, f);
  fclose(f);
}

TEST(file_and_variables) {
  char path[] = "/tmp/chorus-tune-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  write_file(path, "# chorus-diag --tune\nintra 1.5 12000\n\ninter 40 250\n");
  setenv("CHORUS_TUNE", path, 1);
  tune_case_t c = {{1.5, 12000.0, 40.0, 250.0}};
  run_case(&c);
  setenv("CHORUS_LINK_INTER", "5,9999", 1); /* a variable wins over the file */
  tune_case_t v = {{1.5, 12000.0, 5.0, 9999.0}};
  run_case(&v);
  unsetenv("CHORUS_LINK_INTER");
  /* The ring figure from a file: lower than the pair's, flat takes it on 3 hosts. */
  write_file(path, "intra 1.5 12000\ninter 40 250\ninter_ring 40 200\n");
  run_ring_case(6, kThreeHosts, 200.0);
  unsetenv("CHORUS_TUNE");
  unlink(path);
}

/* Creation fails with ERR_INVALID_ARG (the logged sentence names the variable). */
static void expect_refused(const char* name, const char* value) {
  setenv(name, value, 1);
  chorus_unique_id_t id;
  ASSERT_OK(chorus_get_unique_id(&id));
  chorus_comm_t* comm = NULL;
  test_set_context("%s=%s", name, value);
  ASSERT_STATUS(chorus_comm_init(&comm, 1, 0, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_NULL(comm);
  unsetenv(name);
}

TEST(bad_settings_are_refused) {
  char path[] = "/tmp/chorus-tune-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  write_file(path, "intra 1.5\n");
  expect_refused("CHORUS_TUNE", path);
  write_file(path, "wan 1 2\n");
  expect_refused("CHORUS_TUNE", path);
  unlink(path);
  expect_refused("CHORUS_TUNE", "/nonexistent/tune-file");
  expect_refused("CHORUS_LINK_INTRA", "fast");
  expect_refused("CHORUS_LINK_INTER", "10,0");
}

/* 4 emulated hosts x 2 ranks on one 2-CPU machine: inter 60 us + 250 B/us. */
static chorus_cost_ctx_t cluster_ctx(double oversub) {
  chorus_cost_ctx_t cx = {0};
  cx.intra = (chorus_link_model_t){1.0, 1500.0};
  cx.inter = (chorus_link_model_t){60.0, 250.0};
  cx.nhosts = 4;
  cx.max_local = 2;
  cx.uniform = 1;
  cx.machine_oversub = oversub;
  return cx;
}

TEST(derived_figures_on_shared_cores) {
  chorus_cost_ctx_t cx = cluster_ctx(4.0);
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.flat.alpha_us == 60.0 && cx.flat.bytes_per_us == 250.0);
  ASSERT_TRUE(cx.spread.alpha_us == 60.0 && cx.spread.bytes_per_us == 125.0); /* 2 ranks share a link */
  ASSERT_TRUE(cx.spread_alpha_small_us == 90.0);                            /* 1 + (2 - 1) / 2 alphas */
  ASSERT_TRUE(cx.handover_us == 60.0);                                      /* a wake-up */
  ASSERT_TRUE(cx.handover_spin_us == 4.0 * CHORUS_CORE_TURN_US);            /* 3 others' turns + its own */
  ASSERT_TRUE(cx.spin_bytes == 16384.0); /* one alpha of the link, 15000 B, to the nearest power of two */
  ASSERT_EQ(chorus__tune_spin_us(&cx), 240);

  chorus_cost_ctx_t small = chorus__cost_for_call(&cx, 16384.0), big = chorus__cost_for_call(&cx, 16385.0);
  ASSERT_TRUE(small.handover_us == cx.handover_spin_us && small.spread.alpha_us == 90.0);
  ASSERT_TRUE(small.spread.bytes_per_us == 125.0 && small.inter.alpha_us == 60.0);
  ASSERT_TRUE(big.handover_us == 60.0 && big.spread.alpha_us == 60.0);
  ASSERT_TRUE(chorus__cost_latency_bound(&cx, 0.0)); /* a barrier across hosts */
  chorus_cost_ctx_t twice = chorus__cost_for_call(&small, 16384.0); /* hier's plan applies it again */
  ASSERT_TRUE(twice.handover_us == small.handover_us && twice.spread.alpha_us == small.spread.alpha_us);
  ASSERT_TRUE(twice.spread.bytes_per_us == small.spread.bytes_per_us && twice.inter.alpha_us == small.inter.alpha_us);
}

/* One rank per host: the probe pair measured as placed, on cores of their own, so where k ranks
 * share each core every step across hosts is priced k (k - 1) turns of the core more (tune.c);
 * the link's own figures (the spin, the latency-bound limit) stay as measured. */
TEST(derived_figures_one_rank_per_host) {
  chorus_cost_ctx_t cx = cluster_ctx(4.0); /* 8 x 1 on 2 CPUs */
  cx.max_local = 1;
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.flat.alpha_us == 60.0 + 12.0 * CHORUS_CORE_TURN_US && cx.spread.alpha_us == cx.flat.alpha_us);
  cx = cluster_ctx(2.0); /* 4 x 1 */
  cx.max_local = 1;
  chorus__tune_derive(&cx);
  double turn = 2.0 * CHORUS_CORE_TURN_US;
  ASSERT_TRUE(cx.flat.alpha_us == 60.0 + turn && cx.spread.alpha_us == 60.0 + turn);
  ASSERT_TRUE(cx.spread_alpha_small_us == 60.0 + turn && cx.spread.bytes_per_us == 250.0);
  ASSERT_TRUE(cx.inter.alpha_us == 60.0 && cx.spin_bytes == 16384.0);
  chorus__tune_derive(&cx); /* derived again (a split): the turn is not added twice */
  ASSERT_TRUE(cx.flat.alpha_us == 60.0 + turn && cx.spread.alpha_us == 60.0 + turn);
  cx = cluster_ctx(0.5); /* cores of their own */
  cx.max_local = 1;
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.flat.alpha_us == 60.0 && cx.spread.alpha_us == 60.0);
}

TEST(derived_ring_figure) {
  chorus_cost_ctx_t cx = cluster_ctx(4.0);
  cx.inter.bytes_per_us = 600.0;
  cx.inter_ring_bytes_per_us = 300.0; /* streams that the cores, not the wire, hold back */
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.flat.alpha_us == 60.0 && cx.flat.bytes_per_us == 300.0);
  ASSERT_TRUE(cx.spread.bytes_per_us == 300.0); /* the pair's figure, shared by 2 ranks */
  cx.inter_ring_bytes_per_us = 250.0;
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.flat.bytes_per_us == 250.0 && cx.spread.bytes_per_us == 250.0); /* never above a ring stream */
  cx.inter_ring_bytes_per_us = 300.0;
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.spin_bytes == 32768.0);        /* the pair's figures: 36000 B */
  cx.inter_ring_bytes_per_us = 900.0;           /* never above the pair's */
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.flat.bytes_per_us == 600.0);
  cx.inter_ring_bytes_per_us = 300.0;
  cx.nhosts = 2; /* the pair's exchange is the ring's pattern */
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.flat.bytes_per_us == 600.0);
}

TEST(derived_figures_elsewhere) {
  /* Hosts with cores of their own: nothing queues, nothing waits for a core. */
  chorus_cost_ctx_t cx = cluster_ctx(0.5);
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.handover_us == 0.0 && cx.handover_spin_us == 0.0 && cx.spread_alpha_small_us == 60.0);
  ASSERT_TRUE(cx.spin_bytes == 16384.0);
  /* One host: its own link everywhere, the one-host spin. */
  cx = cluster_ctx(4.0);
  cx.nhosts = 1;
  chorus__tune_derive(&cx);
  ASSERT_TRUE(cx.flat.alpha_us == 1.0 && cx.spread.alpha_us == 1.0 && cx.spread.bytes_per_us == 1500.0);
  ASSERT_TRUE(cx.handover_us == 0.0 && cx.spin_bytes == 0.0);
  ASSERT_EQ(chorus__tune_spin_us(&cx), CHORUS_SPIN_ONE_HOST_US);
  ASSERT_TRUE(!chorus__cost_latency_bound(&cx, 0.0)); /* not even a barrier: no call is */
  /* The spin stays within 50 us .. 1 ms whatever the link. */
  cx = cluster_ctx(4.0);
  cx.inter.alpha_us = 5.0;
  ASSERT_EQ(chorus__tune_spin_us(&cx), CHORUS_SPIN_ONE_HOST_US);
  cx.inter.alpha_us = 400.0;
  ASSERT_EQ(chorus__tune_spin_us(&cx), 1000);
}

/* The latency-bound limit is one alpha of the inter-host link rounded to a power of two on a
 * log scale, the boundaries 1.32x above each power: probes that read 44-86 us at 250 B/us
 * (11-21.5 KB) all give 16 KiB, so a 16 KiB call spins in every launch; past the boundaries
 * the next powers. The last pair is a probe of 4 emulated hosts x 2 ranks (49.6 us x 231 B/us,
 * 11.46 KB), which rounding to the nearest power made 8 KiB. */
TEST(latency_bound_limit_is_rounded) {
  const double alphas[] = {43.0, 44.0, 60.0, 70.0, 86.0, 87.0, 0.002, 49.6 * 231.0 / 250.0};
  const double limits[] = {8192.0, 16384.0, 16384.0, 16384.0, 16384.0, 32768.0, 1.0, 16384.0};
  for (size_t i = 0; i < sizeof(alphas) / sizeof(alphas[0]); i++) {
    chorus_cost_ctx_t cx = cluster_ctx(4.0);
    cx.inter.alpha_us = alphas[i];
    chorus__tune_derive(&cx);
    if (cx.spin_bytes != limits[i])
      FAIL("alpha %.3f us at 250 B/us: latency-bound up to %.0f bytes, expected %.0f", alphas[i], cx.spin_bytes, limits[i]);
  }
}

/* Built-in links (CHORUS_TUNE=0): inter 50 us + 1000 B/us, so latency-bound calls are those of
 * at most 64 KiB (50000 bytes rounded), and they spin 200 us. The pricing never depends on CHORUS_SPIN_US, which
 * may differ from rank to rank; a split inside one host has neither. */
static int check_spin(chorus_comm_t* comm, int rank, void* arg) {
  int explicit_us = *(const int*)arg;
  ASSERT_TRUE(comm->cost.spin_bytes == 65536.0);
  if (explicit_us) {
    ASSERT_TRUE(comm->spin_us == explicit_us && comm->spin_small_us == explicit_us);
  } else {
    ASSERT_EQ(comm->spin_us, 50);
    ASSERT_EQ(comm->spin_small_us, 200);
  }
  chorus_comm_t* host = NULL;
  ASSERT_OK(chorus_comm_split(comm, kTwoHosts[rank], rank, &host));
  ASSERT_TRUE(host->cost.spin_bytes == 0.0);
  ASSERT_EQ(host->spin_small_us, explicit_us ? explicit_us : 50);
  ASSERT_OK(chorus_comm_destroy(host));
  return 0;
}

TEST(spin_follows_the_links_unless_set) {
  setenv("CHORUS_TUNE", "0", 1);
  ranks_set_hosts(4, kTwoHosts);
  int by_link = 0, explicit_us = 120;
  ASSERT_EQ(run_ranks(4, check_spin, &by_link), 0);
  setenv("CHORUS_SPIN_US", "120", 1);
  ASSERT_EQ(run_ranks(4, check_spin, &explicit_us), 0);
  unsetenv("CHORUS_SPIN_US");
  ranks_set_hosts(0, NULL);
  unsetenv("CHORUS_TUNE");
}

/* One host: waits poll CHORUS_SPIN_ONE_HOST_US, or CHORUS_SPIN_SHARED_CORES_US where the host's
 * ranks outnumber the CPUs they may run on (its waiters yield between polls there); an explicit
 * CHORUS_SPIN_US wins either way. */
static int check_one_host_spin(chorus_comm_t* comm, int rank, void* arg) {
  (void)rank;
  int want = *(const int*)arg;
  ASSERT_EQ(comm->spin_us, want);
  ASSERT_EQ(comm->spin_small_us, want);
  ASSERT_EQ(comm->oversubscribed, want != CHORUS_SPIN_ONE_HOST_US);
  return 0;
}

/* The CPUs this thread (and the rank threads it starts) may run on. */
static int allowed_cpus(void) {
  cpu_set_t mask;
  return sched_getaffinity(0, sizeof(mask), &mask) == 0 ? CPU_COUNT(&mask) : (int)sysconf(_SC_NPROCESSORS_ONLN);
}

TEST(one_host_spin_is_longer_where_ranks_share_cpus) {
  int cpus = allowed_cpus();
  int fit = CHORUS_SPIN_ONE_HOST_US, crowded = CHORUS_SPIN_SHARED_CORES_US, explicit_us = 120;
  ASSERT_TRUE(cpus >= 1);
  if (cpus >= 2) ASSERT_EQ(run_ranks(2, check_one_host_spin, &fit), 0);
  if (cpus < 16) {
    ASSERT_EQ(run_ranks((int)cpus + 1, check_one_host_spin, &crowded), 0);
    setenv("CHORUS_SPIN_US", "120", 1);
    ASSERT_EQ(run_ranks((int)cpus + 1, check_one_host_spin, &explicit_us), 0);
    unsetenv("CHORUS_SPIN_US");
  }
}

/* Ranks count the CPUs they may run on together, not the machine's online ones: two ranks held
 * to one CPU (as taskset, a cpuset or a container would) share it, on a machine of any size. */
TEST(ranks_held_to_fewer_cpus_share_them) {
  cpu_set_t own, one;
  ASSERT_TRUE(sched_getaffinity(0, sizeof(own), &own) == 0);
  int cpu = -1;
  for (int c = 0; c < CPU_SETSIZE && cpu < 0; c++)
    if (CPU_ISSET(c, &own)) cpu = c;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_TRUE(sched_setaffinity(0, sizeof(one), &one) == 0); /* the rank threads inherit it */
  int crowded = CHORUS_SPIN_SHARED_CORES_US;
  int rc = run_ranks(2, check_one_host_spin, &crowded);
  ASSERT_TRUE(sched_setaffinity(0, sizeof(own), &own) == 0);
  ASSERT_EQ(rc, 0);
}

/* Where every rank has a CPU of its own, a wait polls at least twice its call's predicted time
 * (up to 1 ms) before it sleeps, and at least the communicator's spin; an explicit
 * CHORUS_SPIN_US, and ranks that share CPUs, keep the communicator's spin whatever the call. A
 * call's selection records its prediction (the cached choice too). */
static int check_call_spin(chorus_comm_t* comm, int rank, void* arg) {
  const int* explicit_us = arg;
  chorus_task_t t;
  memset(&t, 0, sizeof(t));
  uint64_t base_ns = (uint64_t)comm->spin_us * 1000u;
  ASSERT_TRUE(chorus__engine_spin_ns(comm, NULL) == base_ns);
  const double predicted[] = {0.0, 5.0, 100.0, 400.0, 1e6};
  for (size_t i = 0; i < sizeof(predicted) / sizeof(predicted[0]); i++) {
    t.predicted_us = predicted[i];
    uint64_t want = base_ns;
    if (!*explicit_us && !comm->oversubscribed) {
      double call_ns = 2.0 * predicted[i] * 1000.0 < 1e6 ? 2.0 * predicted[i] * 1000.0 : 1e6;
      if (call_ns > (double)want) want = (uint64_t)call_ns;
    }
    test_set_context("predicted %.0f us, spin %d us, %s", predicted[i], comm->spin_us,
                     comm->oversubscribed ? "ranks share CPUs" : "a CPU each");
    ASSERT_TRUE(chorus__engine_spin_ns(comm, &t) == want);
  }
  enum { N = 1 << 18 }; /* float32: 1 MiB */
  float* buf = malloc(N * sizeof(float));
  ASSERT_TRUE(buf != NULL);
  for (int round = 0; round < 2; round++) { /* the second call takes the cached choice */
    for (int i = 0; i < N; i++) buf[i] = rank == 0 ? (float)(i % 4093) : -1.0f;
    ASSERT_OK(chorus_broadcast(buf, buf, N, CHORUS_FLOAT32, 0, comm));
    for (int i = 0; i < N; i++) ASSERT_TRUE(buf[i] == (float)(i % 4093));
    ASSERT_TRUE(comm->picked[CH_COLL_BROADCAST].us > 0.0);
  }
  free(buf);
  return 0;
}

TEST(waits_spin_about_as_long_as_their_call) {
  int cpus = allowed_cpus(), by_link = 0, explicit_us = 120;
  if (cpus >= 2) ASSERT_EQ(run_ranks(2, check_call_spin, &by_link), 0);
  if (cpus < 16) ASSERT_EQ(run_ranks(cpus + 1, check_call_spin, &by_link), 0);
  setenv("CHORUS_SPIN_US", "120", 1);
  ASSERT_EQ(run_ranks(2, check_call_spin, &explicit_us), 0);
  unsetenv("CHORUS_SPIN_US");
}

/* Several sockets per peer (CHORUS_NSOCKS_PER_PEER=3): the probe compares one socket with all
 * three and every rank ends cutting messages over the same count, 1 or 3 (on loopback which one
 * depends on the machine); without the probe all three. Either way a 3 MiB allreduce (cut into
 * 3 parts of 1 MiB when striped) is exact, and a split keeps its parent's count. */
static int check_stripes(chorus_comm_t* comm, int rank, void* arg) {
  int want = *(const int*)arg; /* 0: 1 or 3 */
  int mine = comm->tp.stripe_socks, all[4];
  if (want) ASSERT_EQ(mine, want);
  else ASSERT_TRUE(mine == 1 || mine == 3);
  ASSERT_EQ(comm->msg_chunk_bytes, comm->chunk_bytes * (size_t)mine);
  ASSERT_OK(chorus_allgather(&mine, all, 1, CHORUS_INT32, comm));
  for (int r = 1; r < 4; r++) ASSERT_EQ(all[r], all[0]);
  enum { N = 3 << 18 }; /* float32: 3 MiB */
  float* buf = malloc(N * sizeof(float));
  ASSERT_TRUE(buf != NULL);
  for (int i = 0; i < N; i++) buf[i] = (float)((i + rank) % 1000);
  ASSERT_OK(chorus_allreduce(buf, buf, N, CHORUS_FLOAT32, CHORUS_SUM, comm));
  int wrong = 0;
  for (int i = 0; i < N; i++) {
    float want_sum = 0.0f;
    for (int r = 0; r < 4; r++) want_sum += (float)((i + r) % 1000);
    wrong += buf[i] != want_sum;
  }
  free(buf);
  ASSERT_EQ(wrong, 0);
  chorus_comm_t* half = NULL;
  ASSERT_OK(chorus_comm_split(comm, rank % 2, rank, &half));
  ASSERT_EQ(half->tp.stripe_socks, mine);
  ASSERT_OK(chorus_comm_destroy(half));
  return 0;
}

TEST(sockets_per_peer_agreed_by_the_probe) {
  setenv("CHORUS_NSOCKS_PER_PEER", "3", 1);
  ranks_set_hosts(4, kTwoHosts);
  int either = 0, all = 3;
  ASSERT_EQ(run_ranks(4, check_stripes, &either), 0);
  setenv("CHORUS_TUNE", "0", 1);
  ASSERT_EQ(run_ranks(4, check_stripes, &all), 0);
  unsetenv("CHORUS_TUNE");
  ranks_set_hosts(0, NULL);
  unsetenv("CHORUS_NSOCKS_PER_PEER");
}

/* Every socket is kept only when they were clearly faster than one. */
TEST(stripes_kept_only_when_clearly_faster) {
  const double equal[2] = {1000.0, 1000.0}, slower[2] = {1000.0, 1100.0}, slightly[2] = {1000.0, 950.0},
               twice[2] = {1000.0, 500.0};
  ASSERT_EQ(chorus__tune_stripes_kept(equal), 0);
  ASSERT_EQ(chorus__tune_stripes_kept(slower), 0);
  ASSERT_EQ(chorus__tune_stripes_kept(slightly), 0);
  ASSERT_EQ(chorus__tune_stripes_kept(twice), 1);
}
