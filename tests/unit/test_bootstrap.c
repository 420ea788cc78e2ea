/*
 * test_bootstrap.c - creating communicators and what goes wrong while doing so: bad init
 * arguments, every launcher environment chorus_comm_init_env understands, creating again at
 * once from the same variables, an unreachable
 * store, a rank that never joins, ranks started for different sizes or twice with one rank number,
 * bad CHORUS_* values, CHORUS_ALGO overrides, queries,
 * timeouts and abort. Environment-based ranks run as forked processes (the environment is
 * per process); the others as threads.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"
#include "test.h"

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  bind(fd, (struct sockaddr*)&sa, sizeof(sa));
  socklen_t len = sizeof(sa);
  getsockname(fd, (struct sockaddr*)&sa, &len);
  close(fd);
  return ntohs(sa.sin_port);
}

/* Allreduce of rank+1 on every rank; returns 0 when the sum is right. */
static int check_sum(chorus_comm_t* c) {
  int n = 0, r = 0;
  chorus_comm_size(c, &n);
  chorus_comm_rank(c, &r);
  int64_t v = r + 1, out = 0;
  if (chorus_allreduce(&v, &out, 1, CHORUS_INT64, CHORUS_SUM, c) != CHORUS_OK) return 1;
  return out == (int64_t)n * (n + 1) / 2 ? 0 : 2;
}

typedef void (*env_setup_fn)(int rank, int nranks, int port);

/* Forks nranks processes that set their environment and, `lives` times in a row, create a
 * communicator with chorus_comm_init_env and destroy it (the first and last after an
 * allreduce); each exits 0 when every init and allreduce succeeded. Returns how many failed. */
static int run_env_ranks_lives(int nranks, env_setup_fn setup, int lives) {
  int port = free_port();
  pid_t pids[16];
  for (int r = 0; r < nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      setup(r, nranks, port);
      for (int life = 0; life < lives; life++) {
        chorus_comm_t* c = NULL;
        chorus_status_t st = chorus_comm_init_env(&c, NULL);
        if (st != CHORUS_OK) _exit(10);
        /* The lives between the first and last go straight from creation to destroy, as
         * soon as the rank is back, the others perhaps not yet. */
        int rc = (life == 0 || life == lives - 1) ? check_sum(c) : 0;
        chorus_comm_destroy(c);
        if (rc != 0) _exit(rc);
      }
      _exit(0);
    }
  }
  int failed = 0;
  for (int r = 0; r < nranks; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
  }
  return failed;
}

static int run_env_ranks(int nranks, env_setup_fn setup) { return run_env_ranks_lives(nranks, setup, 1); }

static void clear_launcher_env(void) {
  const char* vars[] = {"CHORUS_RANK", "CHORUS_SIZE", "CHORUS_ADDR", "RANK", "WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
                        "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
}

static void setenv_int(const char* name, int v) {
  char buf[32];
  snprintf(buf, sizeof(buf), "%d", v);
  setenv(name, buf, 1);
}

static void chorus_env(int r, int n, int port) {
  clear_launcher_env();
  setenv_int("CHORUS_RANK", r);
  setenv_int("CHORUS_SIZE", n);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  setenv("CHORUS_ADDR", addr, 1);
  setenv("CHORUS_SECRET", "test-secret", 1);
}

static void torchrun_env(int r, int n, int port) {
  clear_launcher_env();
  setenv_int("RANK", r);
  setenv_int("WORLD_SIZE", n);
  setenv("MASTER_ADDR", "localhost", 1);
  setenv_int("MASTER_PORT", port);
}

static void slurm_env(int r, int n, int port) {
  clear_launcher_env();
  setenv_int("SLURM_PROCID", r);
  setenv_int("SLURM_NTASKS", n);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  setenv("CHORUS_ADDR", addr, 1);
}

static void ompi_env(int r, int n, int port) {
  clear_launcher_env();
  setenv_int("OMPI_COMM_WORLD_RANK", r);
  setenv_int("OMPI_COMM_WORLD_SIZE", n);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv_int("MASTER_PORT", port);
}

TEST(init_env_chorus_variables) { ASSERT_EQ(run_env_ranks(3, chorus_env), 0); }
TEST(init_env_torchrun_variables) { ASSERT_EQ(run_env_ranks(4, torchrun_env), 0); }
TEST(init_env_slurm_variables) { ASSERT_EQ(run_env_ranks(2, slurm_env), 0); }
TEST(init_env_openmpi_variables) { ASSERT_EQ(run_env_ranks(2, ompi_env), 0); }

/* The same ranks create communicators from the same variables again and again, at once: rank
 * 0 serves each one's store on the same address. Every rank leaves its creation only once all
 * have finished with the store and its listener is closed; before, rank 0's next listen could
 * find the address in use, or a fast rank join the old store, and the creation failed. */
TEST(init_env_again_at_once_on_the_same_address) { ASSERT_EQ(run_env_ranks_lives(4, chorus_env, 40), 0); }

TEST(init_env_missing_or_bad_variables) {
  clear_launcher_env();
  chorus_comm_t* c = (chorus_comm_t*)0x1;
  ASSERT_STATUS(chorus_comm_init_env(&c, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_NULL(c);
  setenv("CHORUS_RANK", "2", 1);
  setenv("CHORUS_SIZE", "2", 1); /* rank out of range */
  setenv("CHORUS_ADDR", "127.0.0.1:1", 1);
  ASSERT_STATUS(chorus_comm_init_env(&c, NULL), CHORUS_ERR_INVALID_ARG);
  setenv("CHORUS_RANK", "1", 1);
  unsetenv("CHORUS_ADDR"); /* no store address anywhere */
  ASSERT_STATUS(chorus_comm_init_env(&c, NULL), CHORUS_ERR_INVALID_ARG);
  setenv("CHORUS_ADDR", "no-port-here", 1);
  ASSERT_STATUS(chorus_comm_init_env(&c, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init_env(NULL, NULL), CHORUS_ERR_INVALID_ARG);
}

/* A rank whose store never answers fails within the connect timeout, and its log line names
 * the address it tried. */
TEST(init_env_unreachable_store_names_the_address) {
  int port = free_port();
  char addr[64], logpath[] = "/tmp/chorus-test-log-XXXXXX";
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  int fd = mkstemp(logpath);
  ASSERT_TRUE(fd >= 0);
  close(fd);
  clear_launcher_env();
  setenv("CHORUS_RANK", "1", 1);
  setenv("CHORUS_SIZE", "2", 1);
  setenv("CHORUS_ADDR", addr, 1);
  setenv("CHORUS_CONNECT_TIMEOUT_SEC", "1", 1);
  setenv("CHORUS_LOG_FILE", logpath, 1);
  chorus_comm_t* c = NULL;
  double t0 = test_now_sec();
  ASSERT_STATUS(chorus_comm_init_env(&c, NULL), CHORUS_ERR_TIMEOUT);
  ASSERT_TRUE(test_now_sec() - t0 < 4.0);
  FILE* f = fopen(logpath, "r");
  char text[4096] = "";
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(logpath);
  ASSERT_TRUE(strstr(text, addr) != NULL);
}

TEST(init_rejects_bad_arguments) {
  chorus_unique_id_t id;
  ASSERT_OK(chorus_get_unique_id(&id));
  chorus_comm_t* c = NULL;
  ASSERT_STATUS(chorus_comm_init(&c, 2, 2, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(&c, 0, 0, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(&c, 2, -1, &id, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(&c, 2, 0, NULL, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_init(NULL, 2, 0, &id, NULL), CHORUS_ERR_INVALID_ARG);
  chorus_unique_id_t garbage;
  memset(&garbage, 0x7f, sizeof(garbage));
  ASSERT_STATUS(chorus_comm_init(&c, 1, 0, &garbage, NULL), CHORUS_ERR_INVALID_ARG);
  chorus_config_t bad = CHORUS_CONFIG_INIT;
  bad.version = 99 * 10000;
  ASSERT_STATUS(chorus_comm_init(&c, 1, 0, &id, &bad), CHORUS_ERR_INVALID_ARG);
  ASSERT_NULL(c);
  ASSERT_STATUS(chorus_get_unique_id(NULL), CHORUS_ERR_INVALID_ARG);
}

TEST(init_rank_that_never_joins_times_out) {
  chorus_unique_id_t id;
  ASSERT_OK(chorus_get_unique_id(&id));
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.connect_timeout_sec = 1;
  chorus_comm_t* c = NULL;
  double t0 = test_now_sec();
  ASSERT_STATUS(chorus_comm_init(&c, 3, 0, &id, &cfg), CHORUS_ERR_TIMEOUT);
  ASSERT_TRUE(test_now_sec() - t0 < 4.0);
  ASSERT_NULL(c);
}

/* Ranks that disagree on the job: threads joining one id, each as (nranks, rank). */
typedef struct {
  const chorus_unique_id_t* id;
  int nranks, rank;
  chorus_status_t st;
  chorus_comm_t* comm;
  double took_sec;
  atomic_int finished;
  pthread_t thread;
} joiner_t;

static void* join_thread(void* p) {
  joiner_t* j = p;
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.connect_timeout_sec = 20;
  double t0 = test_now_sec();
  j->st = chorus_comm_init(&j->comm, j->nranks, j->rank, j->id, &cfg);
  j->took_sec = test_now_sec() - t0;
  atomic_store(&j->finished, 1);
  return NULL;
}

static void start_joiner(joiner_t* j) { ASSERT_EQ(pthread_create(&j->thread, NULL, join_thread, j), 0); }

/* A rank started for another size (launchers given different sizes on different hosts) is
 * refused with ERR_MISMATCH by every rank that reads its entry, and the ranks still waiting
 * for a rank number that nobody will take fail too, through the abort entry, long before the
 * connect timeout. Ranks 0 and 1 of a job of 3 join first and wait for rank 2 (the store
 * therefore outlives what follows); then "rank 3 of 4" joins: it reads rank 0's entry and is
 * refused, while ranks 0 and 1 still wait for a rank 2 that nobody will be, until its abort. */
TEST(init_ranks_of_different_sizes_are_refused_at_once) {
  chorus_unique_id_t id;
  ASSERT_OK(chorus_get_unique_id(&id));
  joiner_t js[3] = {{&id, 3, 0}, {&id, 3, 1}, {&id, 4, 3}};
  start_joiner(&js[0]);
  start_joiner(&js[1]);
  usleep(200 * 1000);
  start_joiner(&js[2]);
  for (int i = 0; i < 3; i++) pthread_join(js[i].thread, NULL);
  for (int i = 0; i < 3; i++) {
    test_set_context("rank %d of %d", js[i].rank, js[i].nranks);
    ASSERT_STATUS(js[i].st, CHORUS_ERR_MISMATCH);
    ASSERT_NULL(js[i].comm);
    ASSERT_TRUE(js[i].took_sec < 5.0);
  }
}

/* Two processes given the same rank (two hosts with the same node rank): the second to claim
 * it fails with ERR_MISMATCH at once, and the first holder's job works. The two claimants join
 * first (the holder then waits for rank 0, so the store outlives the refusal); rank 0 after. */
TEST(init_rank_claimed_twice_is_refused) {
  chorus_unique_id_t id;
  ASSERT_OK(chorus_get_unique_id(&id));
  joiner_t js[3] = {{&id, 2, 1}, {&id, 2, 1}, {&id, 2, 0}};
  start_joiner(&js[0]);
  start_joiner(&js[1]);
  double t0 = test_now_sec();
  while (!atomic_load(&js[0].finished) && !atomic_load(&js[1].finished) && test_now_sec() - t0 < 10.0)
    usleep(10 * 1000);
  int refused = atomic_load(&js[0].finished) ? 0 : 1, holder = 1 - refused;
  start_joiner(&js[2]);
  for (int i = 0; i < 3; i++) pthread_join(js[i].thread, NULL);
  ASSERT_STATUS(js[refused].st, CHORUS_ERR_MISMATCH);
  ASSERT_NULL(js[refused].comm);
  ASSERT_TRUE(js[refused].took_sec < 5.0);
  ASSERT_OK(js[holder].st);
  ASSERT_OK(js[2].st);
  int rank = -1;
  ASSERT_OK(chorus_comm_rank(js[holder].comm, &rank));
  ASSERT_EQ(rank, 1);
  ASSERT_OK(chorus_comm_destroy(js[2].comm));
  ASSERT_OK(chorus_comm_destroy(js[holder].comm));
}

TEST(bad_parameter_values_are_named) {
  chorus_unique_id_t id;
  ASSERT_OK(chorus_get_unique_id(&id));
  chorus_comm_t* c = NULL;
  const char* cases[][2] = {{"CHORUS_TIMEOUT_SEC", "abc"}, {"CHORUS_NSOCKS_PER_PEER", "99"},
                            {"CHORUS_BUFF_SIZE", "-5"}, {"CHORUS_ALGO", "no_such_algo"},
                            {"CHORUS_ALGO", "allreduce:binomial"}, {"CHORUS_ALGO", "nocoll:ring"},
                            {"CHORUS_ALGO", "allreduce:ring@16K-1K"}, {"CHORUS_ALGO", "allreduce:ring@1X-"},
                            {"CHORUS_ALGO", "allreduce:ring@-"},      {"CHORUS_ALGO", "ring@0-1K"},
                            {"CHORUS_ALGO", "allreduce:hier/nosuch"}, {"CHORUS_ALGO", "allreduce:ring/ring"},
                            {"CHORUS_ALGO", "allreduce:ring@0-1K,binomial@1K-"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    setenv(cases[i][0], cases[i][1], 1);
    test_set_context("%s=%s", cases[i][0], cases[i][1]);
    ASSERT_STATUS(chorus_comm_init(&c, 1, 0, &id, NULL), CHORUS_ERR_INVALID_ARG);
    unsetenv(cases[i][0]);
  }
}

static int queries_body(chorus_comm_t* c, int rank, void* arg) {
  int n = *(int*)arg, v = -1;
  ASSERT_OK(chorus_comm_rank(c, &v));
  ASSERT_EQ(v, rank);
  ASSERT_OK(chorus_comm_size(c, &v));
  ASSERT_EQ(v, n);
  ASSERT_OK(chorus_comm_local_rank(c, &v));
  ASSERT_EQ(v, rank);
  ASSERT_OK(chorus_comm_local_size(c, &v));
  ASSERT_EQ(v, n);
  ASSERT_OK(chorus_comm_host_count(c, &v));
  ASSERT_EQ(v, 1);
  ASSERT_STATUS(chorus_comm_rank(c, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_rank(NULL, &v), CHORUS_ERR_INVALID_ARG);
  ASSERT_STR_EQ(chorus_comm_last_error(c), "");
  return check_sum(c);
}

TEST(queries) {
  int n = 3;
  ASSERT_EQ(run_ranks(n, queries_body, &n), 0);
}

/* CHORUS_HOST_ID groups ranks into hosts: two ids over four ranks. The variable is per
 * process, so the ranks are forked processes. */
TEST(host_id_groups_ranks) {
  int port = free_port();
  pid_t pids[4];
  for (int r = 0; r < 4; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      chorus_env(r, 4, port);
      setenv("CHORUS_HOST_ID", r % 2 ? "hostB" : "hostA", 1);
      chorus_comm_t* c = NULL;
      if (chorus_comm_init_env(&c, NULL) != CHORUS_OK) _exit(10);
      int hosts = 0, lsize = 0, lrank = 0;
      chorus_comm_host_count(c, &hosts);
      chorus_comm_local_size(c, &lsize);
      chorus_comm_local_rank(c, &lrank);
      int rc = (hosts == 2 && lsize == 2 && lrank == r / 2) ? check_sum(c) : 3;
      chorus_comm_destroy(c);
      _exit(rc);
    }
  }
  for (int r = 0; r < 4; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

/* CHORUS_ALGO=ring forces ring where it exists and makes other collectives fail clearly. */
static int algo_ring_body(chorus_comm_t* c, int rank, void* arg) {
  (void)rank;
  (void)arg;
  ASSERT_EQ(check_sum(c), 0);
  ASSERT_STATUS(chorus_barrier(c), CHORUS_ERR_NOT_SUPPORTED);
  ASSERT_TRUE(strstr(chorus_comm_last_error(c), "barrier") != NULL);
  /* The failed call was refused before anything moved: the communicator still works. */
  ASSERT_EQ(check_sum(c), 0);
  return 0;
}

TEST(algo_override_applies_and_refuses_clearly) {
  setenv("CHORUS_ALGO", "ring", 1);
  ASSERT_EQ(run_ranks(3, algo_ring_body, NULL), 0);
  unsetenv("CHORUS_ALGO");
}

/* Bare names and pairs mix, applied left to right: ring everywhere it exists, and a barrier. */
static int algo_mixed_body(chorus_comm_t* c, int rank, void* arg) {
  (void)rank;
  (void)arg;
  ASSERT_EQ(check_sum(c), 0);
  ASSERT_COMM_OK(c, chorus_barrier(c));
  return 0;
}

TEST(algo_override_mixes_names_and_pairs) {
  setenv("CHORUS_ALGO", "ring,barrier:dissemination", 1);
  ASSERT_EQ(run_ranks(3, algo_mixed_body, NULL), 0);
  unsetenv("CHORUS_ALGO");
}

/* A rank that never calls: the others time out within the timeout, naming it. */
static int timeout_body(chorus_comm_t* c, int rank, void* arg) {
  (void)arg;
  if (rank == 1) {
    usleep(2500 * 1000); /* outlives the others' timeout, then leaves without calling */
    return 0;
  }
  double t0 = test_now_sec();
  int64_t v = 1, out;
  chorus_status_t st = chorus_allreduce(&v, &out, 1, CHORUS_INT64, CHORUS_SUM, c);
  double took = test_now_sec() - t0;
  if (rank == 0) {
    /* Rank 0 waits on rank 1 directly in the ring. */
    ASSERT_TRUE(st == CHORUS_ERR_TIMEOUT || st == CHORUS_ERR_REMOTE);
  } else {
    ASSERT_TRUE(st < 0);
  }
  ASSERT_TRUE(took < 1.0 + 2.0);
  ASSERT_TRUE(strstr(chorus_comm_last_error(c), "allreduce #0") != NULL);
  /* Same host: a rank that timed out itself (rather than seeing a peer give up first) names
   * the rank that never called. */
  if (st == CHORUS_ERR_TIMEOUT) {
    ASSERT_TRUE(strstr(chorus_comm_last_error(c), "rank 1 (host") != NULL);
    ASSERT_TRUE(strstr(chorus_comm_last_error(c), "never posted allreduce #0") != NULL);
  }
  /* Broken now: later calls fail at once. */
  t0 = test_now_sec();
  ASSERT_STATUS(chorus_allreduce(&v, &out, 1, CHORUS_INT64, CHORUS_SUM, c), CHORUS_ERR_COMM_BROKEN);
  ASSERT_TRUE(test_now_sec() - t0 < 0.1);
  return 0;
}

TEST(timeout_names_the_operation) {
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = 1;
  ASSERT_EQ(run_ranks_cfg(3, &cfg, timeout_body, NULL), 0);
}

/* Two emulated hosts, the two-level allreduce: rank 3 never calls, and only rank 0 has a short
 * timeout. Ranks 1 and 2 wait inside their hosts (for rank 0's and rank 3's flags) and would
 * wait 30 s; rank 0's give-up frame (or that of a rank it told) reaches them within a second of
 * its verdict, naming what it gave up on and who gave up first. */
static int give_up_body(chorus_comm_t* c, int rank, void* arg) {
  (void)arg;
  if (rank == 3) {
    usleep(2500 * 1000); /* past the others' failure, then leaves without calling */
    return 0;
  }
  float v[256] = {1}, out[256];
  double t0 = test_now_sec();
  chorus_status_t st = chorus_allreduce(v, out, 256, CHORUS_FLOAT32, CHORUS_SUM, c);
  double took = test_now_sec() - t0;
  const char* msg = chorus_comm_last_error(c);
  if (rank == 0) {
    if (st != CHORUS_ERR_TIMEOUT) FAIL("rank 0 got %s: %s", chorus_status_name(st), msg);
    ASSERT_TRUE(strstr(msg, "rank 3 (host emu1)") != NULL);
  } else {
    if (st != CHORUS_ERR_REMOTE) FAIL("rank %d got %s: %s", rank, chorus_status_name(st), msg);
    ASSERT_TRUE(strstr(msg, "allreduce #0") != NULL);
    ASSERT_TRUE(strstr(msg, "rank 0 (host emu0) gave up on allreduce #0 (CHORUS_ERR_TIMEOUT)") != NULL);
  }
  if (took > 1.0 + 1.0 + 1.0) FAIL("rank %d failed after %.2f s (rank 0's timeout: 1 s, verdict up to 1 s)", rank, took);
  return 0;
}

TEST(a_rank_that_gives_up_tells_the_others) {
  static const int host_of[4] = {0, 0, 1, 1}, timeout_sec[4] = {1, 30, 30, 30};
  ranks_set_hosts(4, host_of);
  ranks_set_timeouts(4, timeout_sec);
  setenv("CHORUS_ALGO", "allreduce:hier", 1);
  int rc = run_ranks(4, give_up_body, NULL);
  unsetenv("CHORUS_ALGO");
  ranks_set_timeouts(0, NULL);
  ranks_set_hosts(0, NULL);
  ASSERT_EQ(rc, 0);
}

typedef struct {
  chorus_comm_t* comm;
} abort_arg_t;

static void* abort_later(void* p) {
  usleep(300 * 1000);
  chorus_comm_abort(((abort_arg_t*)p)->comm);
  chorus_comm_abort(((abort_arg_t*)p)->comm); /* idempotent */
  return NULL;
}

/* Rank 0 blocks in an allreduce that rank 1 joins late; another thread of rank 0 aborts. Rank
 * 0 returns at once with COMM_BROKEN, rank 1 sees its peer's connection close. */
static int abort_body(chorus_comm_t* c, int rank, void* arg) {
  (void)arg;
  /* 1 Mi elements: rank 1 needs a second step from rank 0 (its reduced half), which the abort
   * prevents; a small vector rank 1 could finish from what rank 0 contributed first. */
  enum { N = 1 << 20 };
  static int64_t bufs[2][2][N];
  int64_t *v = bufs[rank][0], *out = bufs[rank][1];
  if (rank == 0) {
    abort_arg_t a = {c};
    pthread_t t;
    pthread_create(&t, NULL, abort_later, &a);
    double t0 = test_now_sec();
    ASSERT_STATUS(chorus_allreduce(v, out, N, CHORUS_INT64, CHORUS_SUM, c), CHORUS_ERR_COMM_BROKEN);
    ASSERT_TRUE(test_now_sec() - t0 < 2.0);
    pthread_join(t, NULL);
    ASSERT_TRUE(strstr(chorus_comm_last_error(c), "abort") != NULL);
    return 0;
  }
  usleep(800 * 1000);
  double t0 = test_now_sec();
  chorus_status_t st = chorus_allreduce(v, out, N, CHORUS_INT64, CHORUS_SUM, c);
  if (st != CHORUS_ERR_REMOTE) FAIL("rank 1 got %s: %s", chorus_status_name(st), chorus_comm_last_error(c));
  ASSERT_TRUE(test_now_sec() - t0 < 2.0);
  return 0;
}

TEST(abort_wakes_the_waiter_and_peers) {
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = 30;
  ASSERT_EQ(run_ranks_cfg(2, &cfg, abort_body, NULL), 0);
}
