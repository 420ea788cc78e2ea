/*
 * create_bench.c - how long a job's communicator takes to come up: chorus_comm_init_env, the
 * first allreduce (the ranks' skew at leaving the creation lands there) and chorus_comm_destroy,
 * on every rank, repeated R times with a new communicator each time (the first also pays the
 * process's one-time set-up, such as timing the kernel's copy). Rank 0 prints, per repetition,
 * the slowest rank's time of each phase. Public API only: any launcher, any build.
 * Usage: chorus-run -n N chorus-create-bench [R]
 */
#include <chorus.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One communicator's life; ms[0..2] = creation, first allreduce, destroy on this rank. */
static int one_life(double ms[3], int* rank, int* nranks) {
  chorus_comm_t* comm = NULL;
  double t0 = now_ms();
  chorus_status_t st = chorus_comm_init_env(&comm, NULL);
  if (st != CHORUS_OK) {
    fprintf(stderr, "chorus-create-bench: chorus_comm_init_env: %s\n", chorus_status_name(st));
    return -1;
  }
  double t1 = now_ms();
  float one = 1.0f;
  st = chorus_allreduce(&one, &one, 1, CHORUS_FLOAT32, CHORUS_SUM, comm);
  double t2 = now_ms();
  chorus_comm_rank(comm, rank);
  chorus_comm_size(comm, nranks);
  if (st != CHORUS_OK || one != (float)*nranks) {
    fprintf(stderr, "chorus-create-bench: first allreduce: %s, %g\n", chorus_status_name(st), (double)one);
    chorus_comm_destroy(comm);
    return -1;
  }
  chorus_comm_destroy(comm);
  ms[0] = t1 - t0;
  ms[1] = t2 - t1;
  ms[2] = now_ms() - t2;
  return 0;
}

int main(int argc, char** argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1) {
    fprintf(stderr, "usage: chorus-create-bench [REPETITIONS >= 1]\n");
    return 2;
  }
  for (int r = 0; r < reps; r++) {
    double ms[3], slowest[3];
    int rank = 0, nranks = 0;
    if (one_life(ms, &rank, &nranks) != 0) return 1;
    /* The slowest rank's figures, gathered on a communicator of their own. */
    chorus_comm_t* report = NULL;
    if (chorus_comm_init_env(&report, NULL) != CHORUS_OK ||
        chorus_allreduce(ms, slowest, 3, CHORUS_FLOAT64, CHORUS_MAX, report) != CHORUS_OK) {
      fprintf(stderr, "chorus-create-bench: cannot gather the figures\n");
      return 1;
    }
    chorus_comm_destroy(report);
    if (rank == 0)
      printf("%d ranks, repetition %d: create %.1f ms, first allreduce %.2f ms, destroy %.2f ms (slowest rank)\n",
             nranks, r + 1, slowest[0], slowest[1], slowest[2]);
    fflush(stdout);
  }
  return 0;
}
