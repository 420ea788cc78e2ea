/*
 * test_trace.c - the flight recorder (chorus_comm_dump, SIGUSR1) and the trace file
 * (CHORUS_TRACE_FILE): contents, JSON shape, the handler installed only while communicators
 * exist, and the watcher thread gone after the last destroy.
 */
#include <dirent.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"
#include "test.h"

static char* slurp(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return NULL;
  static char buf[1 << 20];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int count_of(const char* text, const char* needle) {
  int n = 0;
  for (const char* p = text; (p = strstr(p, needle)) != NULL; p++) n++;
  return n;
}

/* The library's threads alive now, found by their names (chorus-store, chorus-progress,
 * chorus-sigusr1); printed when `say`. Counting all threads would also count a thread of the
 * test that was joined but whose kernel task has not left /proc yet, or a sanitizer's. */
static int library_threads(int say) {
  DIR* d = opendir("/proc/self/task");
  int n = 0;
  for (struct dirent* e; d && (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char path[300], name[64] = "";
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f) {
      if (!fgets(name, sizeof(name), f)) name[0] = '\0';
      fclose(f);
    }
    if (strncmp(name, "chorus-", 7) != 0) continue;
    n++;
    if (say) fprintf(stderr, "  library thread %s still alive: %s", e->d_name, name);
  }
  if (d) closedir(d);
  return n;
}

static int five_ops(chorus_comm_t* c, int rank, void* arg) {
  const char* dump_path = arg;
  int32_t v[64] = {0}, out[64];
  for (int i = 0; i < 4; i++) ASSERT_COMM_OK(c, chorus_allreduce(v, out, 64, CHORUS_INT32, CHORUS_SUM, c));
  ASSERT_COMM_OK(c, chorus_barrier(c));
  if (rank == 0 && dump_path) ASSERT_COMM_OK(c, chorus_comm_dump(c, dump_path));
  return 0;
}

TEST(recorder_dump_lists_every_operation) {
  char path[] = "/tmp/chorus-dump-XXXXXX";
  close(mkstemp(path));
  ASSERT_EQ(run_ranks(2, five_ops, path), 0);
  char* text = slurp(path);
  unlink(path);
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"kind\":\"allreduce\""), 4);
  ASSERT_EQ(count_of(text, "\"kind\":\"barrier\""), 1);
  ASSERT_EQ(count_of(text, "\"state\":\"done\""), 5);
  ASSERT_TRUE(strstr(text, "\"seq\":4") != NULL);
  ASSERT_STATUS(chorus_comm_dump(NULL, NULL), CHORUS_ERR_INVALID_ARG);
}

static int one_large_op(chorus_comm_t* c, int rank, void* arg) {
  const char* dump_path = arg;
  static float in[2][1 << 22], out[2][1 << 22];
  ASSERT_COMM_OK(c, chorus_allreduce(in[rank], out[rank], 1 << 22, CHORUS_FLOAT32, CHORUS_SUM, c));
  if (rank == 0) ASSERT_COMM_OK(c, chorus_comm_dump(c, dump_path));
  return 0;
}

/* A 16 MiB allreduce copies for milliseconds; on one rank all of it in the engine pass that
 * ends it, so its run time in the recorder must come from a clock reading taken at its end,
 * not from the one taken when that pass began. Two ranks: the shared-memory path. */
TEST(recorder_times_a_long_operation) {
  char path[] = "/tmp/chorus-dump-XXXXXX";
  close(mkstemp(path));
  for (int n = 1; n <= 2; n++) {
    test_set_context("%d ranks", n);
    ASSERT_EQ(run_ranks(n, one_large_op, path), 0);
    char* text = slurp(path);
    ASSERT_NOT_NULL(text);
    const char* run = strstr(text, "\"run_us\":");
    ASSERT_NOT_NULL(run);
    ASSERT_TRUE(atof(run + strlen("\"run_us\":")) >= 100.0);
  }
  unlink(path);
}

TEST(trace_file_has_one_event_per_operation) {
  char pattern[] = "/tmp/chorus-trace-test-%r.json";
  setenv("CHORUS_TRACE_FILE", pattern, 1);
  ASSERT_EQ(run_ranks(1, five_ops, NULL), 0);
  unsetenv("CHORUS_TRACE_FILE");
  char* text = slurp("/tmp/chorus-trace-test-0.json");
  unlink("/tmp/chorus-trace-test-0.json");
  ASSERT_NOT_NULL(text);
  ASSERT_TRUE(text[0] == '[');
  ASSERT_TRUE(strstr(text, "\n]") != NULL);
  ASSERT_EQ(count_of(text, "\"ph\":\"X\""), 5);
  ASSERT_EQ(count_of(text, "\"name\":\"allreduce\""), 4);
}

/* SIGUSR1 while rank 1 lags: rank 0 is inside an allreduce, the dump shows it "started". */
static int lagging(chorus_comm_t* c, int rank, void* arg) {
  (void)arg;
  int32_t v = 1, out;
  if (rank == 1) {
    usleep(300 * 1000);
    kill(getpid(), SIGUSR1);
    usleep(500 * 1000);
  }
  ASSERT_COMM_OK(c, chorus_allreduce(&v, &out, 1, CHORUS_INT32, CHORUS_SUM, c));
  return 0;
}

TEST(sigusr1_dumps_operations_in_flight) {
  char path[] = "/tmp/chorus-usr1-XXXXXX";
  close(mkstemp(path));
  setenv("CHORUS_DUMP_FILE", path, 1);
  ASSERT_EQ(library_threads(1), 0);
  ASSERT_EQ(run_ranks(2, lagging, NULL), 0);
  unsetenv("CHORUS_DUMP_FILE");
  char* text = slurp(path);
  unlink(path);
  ASSERT_NOT_NULL(text);
  ASSERT_GE(count_of(text, "\"comm\":"), 2);
  ASSERT_TRUE(strstr(text, "\"state\":\"started\"") != NULL);
  /* The handler and the watcher went away with the last communicator. */
  struct sigaction sa;
  ASSERT_EQ(sigaction(SIGUSR1, NULL, &sa), 0);
  ASSERT_TRUE(sa.sa_handler == SIG_DFL);
  /* The bootstrap store's detached thread exits by itself within its poll period once every
   * rank said DONE; a loaded machine can delay that, so allow ten seconds. The watcher and
   * progress threads are joined, so they are gone already (a joined thread's kernel task may
   * linger in /proc for a moment: the same wait covers it). */
  for (int i = 0; i < 200 && library_threads(0) != 0; i++) usleep(50 * 1000);
  ASSERT_EQ(library_threads(1), 0);
}
