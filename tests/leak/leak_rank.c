/*
 * leak_rank.c - a rank program for test_kill_cleanup.sh (run under chorus-run): joins with
 * chorus_comm_init_env and repeats a checked float32 sum allreduce of COUNT elements for
 * SECONDS. After the first verified allreduce it writes DIR/rank.R.pid (CHORUS_TEST_PIDDIR) so
 * the test knows the job is inside its collectives. Any error ends it with status 1.
 *
 * Usage: chorus-test-leak-rank SECONDS [COUNT]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"

#define DEFAULT_COUNT ((size_t)1 << 20)

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int write_pid_file(int rank) {
  const char* dir = getenv("CHORUS_TEST_PIDDIR");
  if (!dir) return 0;
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof(tmp), "%s/rank.%d.pid.tmp", dir, rank);
  snprintf(path, sizeof(path), "%s/rank.%d.pid", dir, rank);
  FILE* f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "%d\n", (int)getpid());
  if (fclose(f) != 0) return -1;
  return rename(tmp, path); /* a reader never sees a partial file */
}

/* Element i of rank r in iteration it is (i + it) % 1000 + r: float sums stay exact. */
static int run(chorus_comm_t* comm, int rank, int nranks, double seconds, size_t count, float* buf) {
  double end = now_sec() + seconds;
  for (int it = 0; now_sec() < end; it++) {
    for (size_t i = 0; i < count; i++) buf[i] = (float)((i + (size_t)it) % 1000 + (size_t)rank);
    chorus_status_t st = chorus_allreduce(buf, buf, count, CHORUS_FLOAT32, CHORUS_SUM, comm);
    if (st != CHORUS_OK) {
      fprintf(stderr, "rank %d: allreduce %d failed: %s: %s\n", rank, it, chorus_status_name(st),
              chorus_comm_last_error(comm));
      return 1;
    }
    for (size_t i = 0; i < count; i++) {
      float want = (float)(((i + (size_t)it) % 1000) * (size_t)nranks + (size_t)(nranks * (nranks - 1) / 2));
      if (memcmp(&buf[i], &want, sizeof(want)) != 0) {
        fprintf(stderr, "rank %d: allreduce %d element %zu is %g, expected %g\n", rank, it, i, buf[i], want);
        return 2;
      }
    }
    if (it == 0 && write_pid_file(rank) != 0) {
      fprintf(stderr, "rank %d: cannot write its pid file\n", rank);
      return 1;
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SECONDS [COUNT]\n", argv[0]);
    return 2;
  }
  double seconds = atof(argv[1]);
  size_t count = argc > 2 ? (size_t)strtoull(argv[2], NULL, 10) : DEFAULT_COUNT;
  chorus_comm_t* comm = NULL;
  chorus_status_t st = chorus_comm_init_env(&comm, NULL);
  if (st != CHORUS_OK) {
    fprintf(stderr, "init failed: %s\n", chorus_status_name(st));
    return 1;
  }
  int rank = 0, nranks = 0;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &nranks);
  float* buf = malloc(count * sizeof(float));
  int rc = buf ? run(comm, rank, nranks, seconds, count, buf) : 1;
  free(buf);
  chorus_comm_destroy(comm);
  printf("rank %d: exiting with status %d\n", rank, rc);
  return rc;
}
