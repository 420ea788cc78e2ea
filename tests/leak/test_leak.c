/*
 * test_leak.c - resource-leak tests: after destroy, abort or failure, nothing the library
 * made is left in the process. Each case (its own process, see tests/harness/runner.c) counts
 * open fds (/proc/self/fd), threads (/proc/self/task), /dev/shm entries this process named
 * (chorus-<pid>-*) and mappings of Chorus segments (/proc/self/maps), runs one lifecycle with
 * ranks as threads, then waits up to LEAK_SETTLE_SEC for every count to return to the start
 * (the detached store-server thread exits by itself shortly after the last rank joined).
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#define LEAK_SETTLE_SEC 2.0
#define POLL_INTERVAL_NS (20 * 1000 * 1000)
#define MAX_RANKS 8

/* ---- counting ---- */

typedef struct {
  int fds;
  int threads;
  int shm_names; /* /dev/shm/chorus-<our pid>-* */
  int maps;      /* mappings of chorus segments or registered-memory windows */
} counts_t;

static int count_dir(const char* path, const char* prefix) {
  DIR* d = opendir(path);
  if (!d) FAIL("cannot open %s", path);
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    if (prefix && strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
    n++;
  }
  closedir(d);
  return n - (prefix == NULL && strcmp(path, "/proc/self/fd") == 0); /* opendir's own fd */
}

static int count_chorus_maps(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) FAIL("cannot open /proc/self/maps");
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, "/dev/shm/chorus-") || strstr(line, "memfd:chorus")) n++;
  fclose(f);
  return n;
}

static void* noop_thread(void* arg) { return arg; }

/* ThreadSanitizer starts a thread of its own at the first pthread_create of the process: make
 * it exist before any baseline is taken, or every count would be off by one. */
static void settle_runtime_threads(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, noop_thread, NULL) == 0) pthread_join(t, NULL);
  /* A joined thread's /proc/self/task entry can outlive pthread_join by a moment: wait until
   * the count holds still. */
  int last = -1;
  for (int i = 0; i < 50; i++) {
    int now = count_dir("/proc/self/task", NULL);
    if (now == last) break;
    last = now;
    usleep(5000);
  }
}

static counts_t take_counts(void) {
  settle_runtime_threads();
  char prefix[64];
  snprintf(prefix, sizeof(prefix), "chorus-%d-", (int)getpid());
  counts_t c = {.fds = count_dir("/proc/self/fd", NULL),
                .threads = count_dir("/proc/self/task", NULL),
                .shm_names = count_dir("/dev/shm", prefix),
                .maps = count_chorus_maps()};
  return c;
}

static int same_counts(counts_t a, counts_t b) {
  return a.fds == b.fds && a.threads == b.threads && a.shm_names == b.shm_names && a.maps == b.maps;
}

/* Lists what the leaked fds point at, for the failure message. */
static void describe_fds(char* out, size_t outlen) {
  DIR* d = opendir("/proc/self/fd");
  size_t len = 0;
  out[0] = '\0';
  if (!d) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && len + 80 < outlen) {
    if (e->d_name[0] == '.') continue;
    char path[300], target[256];
    snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof(target) - 1);
    target[n > 0 ? n : 0] = '\0';
    len += (size_t)snprintf(out + len, outlen - len, " %s->%s", e->d_name, target);
  }
  closedir(d);
}

static void sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* Waits up to LEAK_SETTLE_SEC (scaled for sanitizer builds) for the counts to return. */
static void expect_back_to(counts_t start, const char* scenario) {
  double deadline = test_now_sec() + LEAK_SETTLE_SEC * test_timeout_multiplier();
  counts_t now = take_counts();
  while (!same_counts(now, start) && test_now_sec() < deadline) {
    sleep_ns(POLL_INTERVAL_NS);
    now = take_counts();
  }
  if (same_counts(now, start)) return;
  char fds[2048];
  describe_fds(fds, sizeof(fds));
  FAIL("%s leaks: fds %d -> %d, threads %d -> %d, /dev/shm names %d -> %d, segment mappings %d -> %d "
       "(after %.1f s); open fds:%s",
       scenario, start.fds, now.fds, start.threads, now.threads, start.shm_names, now.shm_names, start.maps,
       now.maps, LEAK_SETTLE_SEC * test_timeout_multiplier(), fds);
}

/* ---- ranks as threads ---- */

typedef struct rank_ctx rank_ctx_t;
typedef void (*rank_body_fn)(rank_ctx_t* ctx, chorus_comm_t* comm);

struct rank_ctx {
  int rank, nranks;
  const chorus_unique_id_t* id;
  const chorus_config_t* cfg;
  rank_body_fn body;          /* runs on the new communicator; must not destroy it */
  chorus_status_t init_status;
  pthread_barrier_t* barrier; /* all ranks of the group */
};

static void* rank_main(void* arg) {
  rank_ctx_t* ctx = arg;
  test_set_rank(ctx->rank);
  chorus_comm_t* comm = NULL;
  ctx->init_status = chorus_comm_init(&comm, ctx->nranks, ctx->rank, ctx->id, ctx->cfg);
  if (ctx->init_status == CHORUS_OK) {
    if (ctx->body) ctx->body(ctx, comm);
    ASSERT_COMM_OK(comm, chorus_comm_destroy(comm));
  } else {
    ASSERT_NULL(comm);
  }
  return NULL;
}

/* Starts `joining` of nranks ranks (the others never join) and joins their threads. */
static void run_group(int nranks, int joining, const chorus_config_t* cfg, rank_body_fn body,
                      rank_ctx_t* ctxs) {
  chorus_unique_id_t id;
  ASSERT_OK(chorus_get_unique_id(&id));
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, (unsigned)joining);
  pthread_t tids[MAX_RANKS];
  for (int r = 0; r < joining; r++) {
    ctxs[r] = (rank_ctx_t){.rank = r, .nranks = nranks, .id = &id, .cfg = cfg, .body = body, .barrier = &barrier};
    ASSERT_EQ(pthread_create(&tids[r], NULL, rank_main, &ctxs[r]), 0);
  }
  for (int r = 0; r < joining; r++) pthread_join(tids[r], NULL);
  pthread_barrier_destroy(&barrier);
}

/* Every rank joins; init must succeed everywhere. */
static void run_all(int nranks, const chorus_config_t* cfg, rank_body_fn body) {
  rank_ctx_t ctxs[MAX_RANKS];
  run_group(nranks, nranks, cfg, body, ctxs);
  for (int r = 0; r < nranks; r++) ASSERT_OK(ctxs[r].init_status);
}

/* ---- one checked collective, so every lifecycle really uses its connections ---- */

/* Sum of (r + 1) * (i + 1) over ranks is (i + 1) * n(n+1)/2: exact in int32. */
static void allreduce_checked(chorus_comm_t* comm, int32_t* send, int32_t* recv, size_t count) {
  int rank, n;
  ASSERT_OK(chorus_comm_rank(comm, &rank));
  ASSERT_OK(chorus_comm_size(comm, &n));
  for (size_t i = 0; i < count; i++) send[i] = (int32_t)((rank + 1) * (int)(i % 1000 + 1));
  ASSERT_COMM_OK(comm, chorus_allreduce(send, recv, count, CHORUS_INT32, CHORUS_SUM, comm));
  for (size_t i = 0; i < count; i++) {
    int32_t want = (int32_t)((i % 1000 + 1) * (size_t)(n * (n + 1) / 2));
    if (recv[i] != want) FAIL("allreduce element %zu: %d, expected %d", i, recv[i], want);
  }
}

static void body_one_allreduce(rank_ctx_t* ctx, chorus_comm_t* comm) {
  (void)ctx;
  int32_t send[1000], recv[1000];
  allreduce_checked(comm, send, recv, 1000);
}

/* ---- scenarios ---- */

static void check_lifecycle(const char* what, int nranks, const chorus_config_t* cfg, rank_body_fn body) {
  counts_t start = take_counts();
  run_all(nranks, cfg, body);
  char scenario[128];
  snprintf(scenario, sizeof(scenario), "%s with %d ranks", what, nranks);
  expect_back_to(start, scenario);
}

TEST_EX(init_destroy, 90, "quick") {
  for (int n = 2; n <= 4; n++) check_lifecycle("init + allreduce + destroy", n, NULL, body_one_allreduce);
}

/* Several sockets per peer: the extra ones stay TCP even between same-host ranks. */
TEST_EX(init_destroy_nsocks, 90, "quick") {
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.nsocks_per_peer = 3;
  check_lifecycle("init (3 sockets per peer) + allreduce + destroy", 3, &cfg, body_one_allreduce);
}

#define NB_OPS 4
#define NB_COUNT 4096

typedef struct {
  int32_t send[NB_OPS][NB_COUNT], recv[NB_OPS][NB_COUNT], bcast[NB_COUNT], freed[NB_COUNT];
} nb_bufs_t;

static void body_nonblocking(rank_ctx_t* ctx, chorus_comm_t* comm) {
  nb_bufs_t* nb = calloc(1, sizeof(*nb));
  ASSERT_NOT_NULL(nb);
  int32_t(*send)[NB_COUNT] = nb->send, (*recv)[NB_COUNT] = nb->recv, *bcast = nb->bcast, *freed = nb->freed;
  chorus_req_t* reqs[NB_OPS + 1];
  for (int k = 0; k < NB_OPS; k++) {
    for (int i = 0; i < NB_COUNT; i++) send[k][i] = ctx->rank + k + i;
    ASSERT_COMM_OK(comm, chorus_iallreduce(send[k], recv[k], NB_COUNT, CHORUS_INT32, CHORUS_MAX, comm, &reqs[k]));
  }
  /* A request released while in flight completes in the background (chorus.h). */
  chorus_req_t* dropped = NULL;
  ASSERT_COMM_OK(comm, chorus_iallreduce(freed, freed, NB_COUNT, CHORUS_INT32, CHORUS_SUM, comm, &dropped));
  chorus_req_free(dropped);
  for (int i = 0; i < NB_COUNT; i++) bcast[i] = ctx->rank == 0 ? i * 3 : -1;
  ASSERT_COMM_OK(comm, chorus_ibroadcast(bcast, bcast, NB_COUNT, CHORUS_INT32, 0, comm, &reqs[NB_OPS]));
  for (int k = 0; k <= NB_OPS; k++) {
    ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
    chorus_req_free(reqs[k]);
  }
  for (int k = 0; k < NB_OPS; k++)
    for (int i = 0; i < NB_COUNT; i++)
      if (recv[k][i] != ctx->nranks - 1 + k + i) FAIL("iallreduce %d element %d: %d", k, i, recv[k][i]);
  for (int i = 0; i < NB_COUNT; i++)
    if (bcast[i] != i * 3) FAIL("ibroadcast element %d: %d", i, bcast[i]);
  /* One more left unfinished for destroy to wait for. */
  chorus_req_t* last = NULL;
  ASSERT_COMM_OK(comm, chorus_ibarrier(comm, &last));
  chorus_req_free(last);
  free(nb); /* operations complete in posting order: the dropped one ended before the broadcast */
}

TEST_EX(nonblocking_destroy, 90, "quick") {
  for (int n = 2; n <= 4; n += 2) check_lifecycle("init + non-blocking ops + destroy", n, NULL, body_nonblocking);
}

static void body_abort(rank_ctx_t* ctx, chorus_comm_t* comm) {
  body_one_allreduce(ctx, comm);
  pthread_barrier_wait(ctx->barrier); /* nobody aborts before everyone finished the allreduce */
  ASSERT_OK(chorus_comm_abort(comm));
  ASSERT_OK(chorus_comm_abort(comm)); /* repeatable */
  int32_t x = 1;
  chorus_status_t st = chorus_allreduce(&x, &x, 1, CHORUS_INT32, CHORUS_SUM, comm);
  if (st != CHORUS_ERR_COMM_BROKEN) FAIL("allreduce after abort returned %s", chorus_status_name(st));
}

TEST_EX(abort_destroy, 90, "quick") {
  for (int n = 2; n <= 4; n++) check_lifecycle("init + abort + destroy", n, NULL, body_abort);
}

/* Rank 1 aborts its communicator while its allreduce is in flight; every other rank must get
 * an error from the same allreduce (not hang, not succeed). */
#define FAIL_COUNT ((size_t)1 << 20)

static void body_failure(rank_ctx_t* ctx, chorus_comm_t* comm) {
  body_one_allreduce(ctx, comm);
  float* buf = calloc(FAIL_COUNT, sizeof(float));
  ASSERT_NOT_NULL(buf);
  pthread_barrier_wait(ctx->barrier);
  chorus_status_t st;
  if (ctx->rank == 1) {
    chorus_req_t* req = NULL;
    ASSERT_COMM_OK(comm, chorus_iallreduce(buf, buf, FAIL_COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm, &req));
    ASSERT_OK(chorus_comm_abort(comm));
    st = chorus_wait(req);
    chorus_req_free(req);
    if (st != CHORUS_ERR_COMM_BROKEN) FAIL("the aborting rank's allreduce returned %s", chorus_status_name(st));
  } else {
    st = chorus_allreduce(buf, buf, FAIL_COUNT, CHORUS_FLOAT32, CHORUS_SUM, comm);
    if (st >= 0) FAIL("allreduce succeeded although rank 1 aborted");
  }
  free(buf);
}

TEST_EX(failure_destroy, 120, "quick") {
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.timeout_sec = 20; /* the bound if the peer's abort went unnoticed (then the test is slow) */
  for (int n = 2; n <= 3; n++) {
    double t0 = test_now_sec();
    check_lifecycle("a rank aborted mid-allreduce + destroy", n, &cfg, body_failure);
    ASSERT_LT(test_now_sec() - t0, cfg.timeout_sec * test_timeout_multiplier());
  }
}

static void body_split(rank_ctx_t* ctx, chorus_comm_t* comm) {
  int32_t send[1000], recv[1000];
  chorus_comm_t* half = NULL;
  ASSERT_COMM_OK(comm, chorus_comm_split(comm, ctx->rank % 2, -ctx->rank, &half));
  ASSERT_NOT_NULL(half);
  allreduce_checked(half, send, recv, 1000);
  /* A second split with one rank left out, destroyed before the first. */
  chorus_comm_t* some = NULL;
  int color = ctx->rank == ctx->nranks - 1 ? CHORUS_SPLIT_NOCOLOR : 0;
  ASSERT_COMM_OK(comm, chorus_comm_split(comm, color, 0, &some));
  if (color == CHORUS_SPLIT_NOCOLOR) {
    ASSERT_NULL(some);
  } else {
    allreduce_checked(some, send, recv, 1000);
    ASSERT_COMM_OK(some, chorus_comm_destroy(some));
  }
  ASSERT_COMM_OK(half, chorus_comm_destroy(half));
  allreduce_checked(comm, send, recv, 1000);
}

TEST_EX(split_destroy, 90, "quick") {
  for (int n = 3; n <= 4; n++) check_lifecycle("init + split + destroy", n, NULL, body_split);
}

#define MEM_COUNT 65536

static void body_mem(rank_ctx_t* ctx, chorus_comm_t* comm) {
  (void)ctx;
  int32_t *a = NULL, *b = NULL;
  ASSERT_COMM_OK(comm, chorus_mem_alloc(comm, MEM_COUNT * sizeof(int32_t), (void**)&a));
  ASSERT_COMM_OK(comm, chorus_mem_alloc(comm, MEM_COUNT * sizeof(int32_t), (void**)&b));
  allreduce_checked(comm, a, b, MEM_COUNT); /* the zero-copy path */
  ASSERT_OK(chorus_mem_free(comm, a));
  /* b is left for chorus_comm_destroy to release. */
}

TEST_EX(mem_alloc_destroy, 90, "quick") {
  for (int n = 2; n <= 3; n++) check_lifecycle("init + mem_alloc + destroy", n, NULL, body_mem);
}

/* Point to point and a group: messages exchanged with every rank (receives first, small and
 * large), a group of fused allreduces, a request freed in flight, and messages nobody receives
 * (held by the receiver as unexpected) or that another rank's communicator breaks: destroy
 * frees them all (the sanitizer tree's leak checker sees the heap). */
#define P2P_BIG 70000 /* int32: sent by rendezvous */

static void body_p2p_group(rank_ctx_t* ctx, chorus_comm_t* comm) {
  int n = ctx->nranks;
  int32_t* in = calloc((size_t)n * P2P_BIG, sizeof(int32_t));
  int32_t* out = calloc(P2P_BIG, sizeof(int32_t));
  chorus_req_t** reqs = calloc((size_t)(2 * n), sizeof(*reqs));
  ASSERT_TRUE(in && out && reqs);
  for (int i = 0; i < P2P_BIG; i++) out[i] = ctx->rank * 100000 + i;
  for (int p = 0; p < n; p++)
    ASSERT_COMM_OK(comm, chorus_irecv_tag(in + (size_t)p * P2P_BIG, P2P_BIG, CHORUS_INT32, p, 1, comm, &reqs[p]));
  for (int p = 0; p < n; p++) ASSERT_COMM_OK(comm, chorus_isend_tag(out, P2P_BIG, CHORUS_INT32, p, 1, comm, &reqs[n + p]));
  for (int k = 0; k < 2 * n; k++) {
    ASSERT_COMM_OK(comm, chorus_wait(reqs[k]));
    chorus_req_free(reqs[k]);
  }
  for (int p = 0; p < n; p++) ASSERT_EQ(in[(size_t)p * P2P_BIG + 7], p * 100000 + 7);
  int32_t v[8][16];
  ASSERT_OK(chorus_group_start());
  for (int k = 0; k < 8; k++) {
    for (int i = 0; i < 16; i++) v[k][i] = ctx->rank + k;
    ASSERT_COMM_OK(comm, chorus_allreduce(v[k], v[k], 16, CHORUS_INT32, CHORUS_MAX, comm));
  }
  chorus_req_t* dropped = NULL;
  ASSERT_COMM_OK(comm, chorus_ibarrier(comm, &dropped));
  chorus_req_free(dropped);
  ASSERT_COMM_OK(comm, chorus_group_end());
  for (int k = 0; k < 8; k++) ASSERT_EQ(v[k][3], n - 1 + k);
  /* Small messages to the next rank that it never receives: held there until destroy. */
  for (int k = 0; k < 3; k++) ASSERT_COMM_OK(comm, chorus_send_tag(out, 100, CHORUS_INT32, (ctx->rank + 1) % n, 50 + k, comm));
  ASSERT_COMM_OK(comm, chorus_barrier(comm)); /* they arrived (or wait in the connection) */
  free(in);
  free(out);
  free(reqs);
}

TEST_EX(p2p_group_destroy, 90, "quick") {
  for (int n = 2; n <= 3; n++) check_lifecycle("init + point to point + group + destroy", n, NULL, body_p2p_group);
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.nsocks_per_peer = 3; /* over TCP, large messages' DATA frames are striped */
  setenv("CHORUS_SHM_DISABLE", "1", 1);
  check_lifecycle("init + point to point + group + destroy (TCP, 3 sockets per peer)", 3, &cfg, body_p2p_group);
}

/* Rank nranks-1 never joins: the others' init fails after the 1 s connect timeout, and then
 * nothing of theirs, nor the store the id's maker serves, may be left. */
static void check_failed_init(int nranks) {
  counts_t start = take_counts();
  chorus_config_t cfg = CHORUS_CONFIG_INIT;
  cfg.connect_timeout_sec = 1;
  rank_ctx_t ctxs[MAX_RANKS];
  double t0 = test_now_sec();
  run_group(nranks, nranks - 1, &cfg, NULL, ctxs);
  double took_sec = test_now_sec() - t0;
  for (int r = 0; r < nranks - 1; r++) ASSERT_STATUS(ctxs[r].init_status, CHORUS_ERR_TIMEOUT);
  ASSERT_LT(took_sec, 10.0 * test_timeout_multiplier());
  char scenario[128];
  snprintf(scenario, sizeof(scenario), "a failed init (%d of %d ranks joined, connect timeout 1 s)",
           nranks - 1, nranks);
  expect_back_to(start, scenario);
}

TEST_EX(failed_init, 60, "quick") {
  check_failed_init(2);
  check_failed_init(3);
}
