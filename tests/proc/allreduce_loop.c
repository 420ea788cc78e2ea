/*
 * allreduce_loop.c - a rank program for the process-level tests (run under chorus-run): joins
 * a communicator with chorus_comm_init_env, then repeats a float32 sum allreduce (16 MiB by
 * default) for a given number of seconds, checking every result bitwise against values
 * computed here independently; after each one the ranks vote (a 1-element max allreduce) on
 * whether to stop, so they stop together. Any error is printed with its status name and the
 * communicator's last error, and ends the program with status 1 (2 for a wrong result).
 *
 * Usage: chorus-test-allreduce-loop SECONDS [COUNT]
 * CHORUS_TEST_PIDDIR=DIR: after the first verified allreduce, writes DIR/rank.R.pid (so a
 * test knows the job is running collectives and which PID to kill).
 * CHORUS_TEST_SKIP=R:I: rank R never calls the allreduce of iteration I: it says so on stdout,
 * sleeps CHORUS_TEST_SKIP_SEC seconds (default 60) outside any Chorus call, and exits 3 (its
 * peers time out, for the tests of timeout verdicts).
 * CHORUS_TEST_STOP=R:I: in iteration I, rank R posts the allreduce (non-blocking), lets its
 * progress thread start it, and stops itself (SIGSTOP) inside it; the other ranks join 0.3 s
 * late, so R has not done its share yet and they wait for it (a rank stopped inside a call).
 */
#ifndef _GNU_SOURCE /* also set by CMake for the whole project */
#define _GNU_SOURCE
#endif
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chorus.h"

#define DEFAULT_COUNT ((size_t)4 << 20) /* 16 MiB of float32 */
#define PRINT_EVERY_ITERS 10
#define VALUE_PERIOD 1021 /* values repeat with this period, varied per iteration */
#define SENTINEL_BITS 0x7fc0dead /* a NaN: a result that was never written cannot pass */

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Rank r's input at element i of iteration it. Integers < 2^24, so every float32 sum over up
 * to 1024 ranks is exact and the result can be compared bitwise. */
static uint32_t base_value(size_t i, int it) {
  return (uint32_t)((i + (size_t)it * 7) % VALUE_PERIOD);
}

static void fill_input(float* buf, size_t count, int rank, int it) {
  for (size_t i = 0; i < count; i++) buf[i] = (float)(base_value(i, it) + (uint32_t)rank);
}

static void fill_sentinel(float* buf, size_t count) {
  uint32_t bits = SENTINEL_BITS;
  for (size_t i = 0; i < count; i++) memcpy(&buf[i], &bits, sizeof bits);
}

/* Sum over ranks r of (base + r) = n * base + n(n-1)/2, computed in integers. Returns the
 * index of the first wrong element, or count if all are right. */
static size_t first_wrong(const float* result, size_t count, int nranks, int it, float* want) {
  uint64_t rank_sum = (uint64_t)nranks * (uint64_t)(nranks - 1) / 2;
  for (size_t i = 0; i < count; i++) {
    float expected = (float)((uint64_t)nranks * base_value(i, it) + rank_sum);
    if (memcmp(&result[i], &expected, sizeof expected) != 0) {
      *want = expected;
      return i;
    }
  }
  return count;
}

static int write_pid_file(const char* dir, int rank) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/rank.%d.pid.tmp", dir, rank);
  snprintf(path, sizeof path, "%s/rank.%d.pid", dir, rank);
  FILE* f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "%d\n", (int)getpid());
  if (fclose(f) != 0) return -1;
  return rename(tmp, path); /* atomic: a reader never sees a partial file */
}

static int fail_status(const char* what, int rank, int it, chorus_status_t st, chorus_comm_t* comm) {
  fprintf(stderr, "rank %d: %s (iteration %d) failed: %s: %s\n", rank, what, it,
          chorus_status_name(st), comm ? chorus_comm_last_error(comm) : "(no communicator)");
  if (comm) {
    chorus_status_t dst = chorus_comm_destroy(comm);
    if (dst < 0) fprintf(stderr, "rank %d: chorus_comm_destroy: %s\n", rank, chorus_status_name(dst));
  }
  fprintf(stderr, "rank %d: exiting with status 1\n", rank);
  return 1;
}

/* Ranks stop together: each votes whether its time is up and the maximum decides, so no rank
 * leaves while another still starts an allreduce. Returns 1 to stop; *st < 0 on error. */
static int vote_stop(chorus_comm_t* comm, int rank, int it, int my_time_is_up,
                     chorus_status_t* st) {
  int32_t vote = my_time_is_up, decision = -1;
  *st = chorus_allreduce(&vote, &decision, 1, CHORUS_INT32, CHORUS_MAX, comm);
  if (*st < 0) return 1;
  if (decision != 0 && decision != 1) {
    fprintf(stderr, "rank %d: iteration %d: stop vote gave %d, expected 0 or 1\n", rank, it,
            (int)decision);
    exit(2);
  }
  return decision;
}

static int parse_args(int argc, char** argv, double* seconds, size_t* count) {
  char* end;
  if (argc < 2 || argc > 3) return -1;
  *seconds = strtod(argv[1], &end);
  if (*end || !(*seconds > 0) || !isfinite(*seconds)) return -1;
  *count = DEFAULT_COUNT;
  if (argc == 3) {
    unsigned long long c = strtoull(argv[2], &end, 10);
    if (*end || argv[2][0] == '-' || c == 0 || c > ((size_t)1 << 32)) return -1;
    *count = (size_t)c;
  }
  return 0;
}

/* CHORUS_TEST_SKIP=R:I: the iteration this rank skips, or -1. */
static int skip_iteration(int rank) {
  const char* v = getenv("CHORUS_TEST_SKIP");
  int r = -1, it = -1;
  if (!v || sscanf(v, "%d:%d", &r, &it) != 2 || r != rank) return -1;
  return it;
}

/* CHORUS_TEST_STOP=R:I: the iteration in which rank R stops inside the allreduce, or -1. */
static int stop_iteration(int* stopper) {
  const char* v = getenv("CHORUS_TEST_STOP");
  int it = -1;
  if (!v || sscanf(v, "%d:%d", stopper, &it) != 2) return -1;
  return it;
}

static void sleep_sec(double sec) {
  struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* The allreduce of the stopping iteration: the stopper stops inside it, the others come late. */
static chorus_status_t allreduce_with_stop(const float* send, float* out, size_t count, int rank, int stopper,
                                           int it, chorus_comm_t* comm) {
  if (rank != stopper) {
    sleep_sec(0.3);
    return chorus_allreduce(send, out, count, CHORUS_FLOAT32, CHORUS_SUM, comm);
  }
  chorus_req_t* req = NULL;
  chorus_status_t st = chorus_iallreduce(send, out, count, CHORUS_FLOAT32, CHORUS_SUM, comm, &req);
  if (st < 0) return st;
  sleep_sec(0.1); /* its progress thread has started the call and waits for the others */
  printf("rank %d: stopping inside the allreduce of iteration %d\n", rank, it);
  raise(SIGSTOP);
  st = chorus_wait(req);
  chorus_req_free(req);
  return st;
}

static int skip_call(int rank, int it) {
  const char* v = getenv("CHORUS_TEST_SKIP_SEC");
  double sec = v ? atof(v) : 60.0;
  printf("rank %d: skipping the allreduce of iteration %d, sleeping %.0f s\n", rank, it, sec);
  struct timespec ts = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
  fprintf(stderr, "rank %d: exiting with status 3 after skipping iteration %d\n", rank, it);
  return 3;
}

int main(int argc, char** argv) {
  double seconds;
  size_t count;
  if (parse_args(argc, argv, &seconds, &count) != 0) {
    fprintf(stderr, "usage: %s SECONDS [COUNT]   (run under chorus-run)\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* env_rank = getenv("CHORUS_RANK");
  int rank = env_rank ? atoi(env_rank) : -1, nranks = 0;
  chorus_comm_t* comm = NULL;
  chorus_status_t st = chorus_comm_init_env(&comm, NULL);
  if (st < 0) return fail_status("chorus_comm_init_env", rank, 0, st, NULL);
  if ((st = chorus_comm_rank(comm, &rank)) < 0 || (st = chorus_comm_size(comm, &nranks)) < 0)
    return fail_status("chorus_comm_rank/size", rank, 0, st, comm);

  float* send = malloc(count * sizeof(float));
  float* recv = malloc(count * sizeof(float));
  if (!send || !recv) {
    fprintf(stderr, "rank %d: cannot allocate 2 x %zu bytes\n", rank, count * sizeof(float));
    return 1;
  }
  const char* piddir = getenv("CHORUS_TEST_PIDDIR");
  int skip_it = skip_iteration(rank), stopper = -1, stop_it = stop_iteration(&stopper);
  double start = now_sec(), window_start = start;
  int it = 0;
  do {
    /* Odd iterations run in place (sendbuf == recvbuf). */
    int in_place = it & 1;
    float* out = in_place ? send : recv;
    fill_input(send, count, rank, it);
    if (!in_place) fill_sentinel(recv, count);
    if (it == skip_it) {
      free(send);
      free(recv);
      int rc = skip_call(rank, it);
      chorus_comm_destroy(comm);
      return rc;
    }
    if (it == stop_it)
      st = allreduce_with_stop(send, out, count, rank, stopper, it, comm);
    else
      st = chorus_allreduce(send, out, count, CHORUS_FLOAT32, CHORUS_SUM, comm);
    if (st < 0) return fail_status("allreduce", rank, it, st, comm);
    float want = 0;
    size_t bad = first_wrong(out, count, nranks, it, &want);
    if (bad < count) {
      fprintf(stderr, "rank %d: iteration %d (%s): wrong result at element %zu: got %.9g, "
              "expected %.9g\n", rank, it, in_place ? "in place" : "out of place", bad,
              (double)out[bad], (double)want);
      return 2;
    }
    if (it == 0 && piddir && write_pid_file(piddir, rank) != 0) {
      perror("allreduce_loop: pid file");
      return 1;
    }
    it++;
    if (it % PRINT_EVERY_ITERS == 0) {
      double t = now_sec(), per_iter_sec = (t - window_start) / PRINT_EVERY_ITERS;
      double busbw = 2.0 * (nranks - 1) / nranks * (double)(count * sizeof(float)) / per_iter_sec;
      printf("rank %d: %d iterations ok, %.1f ms each, busbw %.2f GB/s\n", rank, it,
             per_iter_sec * 1e3, busbw * 1e-9);
      window_start = t;
    }
  } while (!vote_stop(comm, rank, it, now_sec() - start >= seconds, &st));
  if (st < 0) return fail_status("stop_vote", rank, it, st, comm);
  st = chorus_comm_destroy(comm);
  if (st < 0) return fail_status("chorus_comm_destroy", rank, it, st, NULL);
  printf("rank %d: done, %d iterations of %zu floats, all results correct\n", rank, it, count);
  free(send);
  free(recv);
  return 0;
}
