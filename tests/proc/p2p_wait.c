/*
 * p2p_wait.c - a rank program for the process-level tests (run under chorus-run): point-to-point
 * operations pending when a peer dies. Every rank first exchanges one checked message with
 * rank 0 (so the connections are in use). Then rank 0 writes its pid file and sleeps, to be
 * killed; every other rank posts a receive from rank 0, a receive from any source and a send to
 * rank 0 too large to leave before rank 0 receives it (rendezvous), writes its pid file and
 * waits for each: each must end with an error status (printed with the communicator's last
 * error) soon after rank 0 dies, not at the timeout; the rank then exits with status 1.
 *
 * Usage: chorus-test-p2p-wait; CHORUS_TEST_PIDDIR=DIR as for chorus-test-allreduce-loop.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chorus.h"

#define BIG_COUNT ((size_t)1 << 20) /* 4 MiB of float32: far over the eager size */

static void write_pid(int rank) {
  const char* dir = getenv("CHORUS_TEST_PIDDIR");
  if (!dir) return;
  char tmp[512], path[512];
  snprintf(tmp, sizeof(tmp), "%s/rank.%d.pid.tmp", dir, rank);
  snprintf(path, sizeof(path), "%s/rank.%d.pid", dir, rank);
  FILE* f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  rename(tmp, path);
}

static int fail(int rank, const char* what, chorus_status_t st, chorus_comm_t* comm) {
  printf("rank %d: %s failed: %s: %s\n", rank, what, chorus_status_name(st), chorus_comm_last_error(comm));
  fflush(stdout);
  return 1;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  chorus_comm_t* comm = NULL;
  chorus_status_t st = chorus_comm_init_env(&comm, NULL);
  if (st != CHORUS_OK) {
    printf("init failed: %s\n", chorus_status_name(st));
    return 1;
  }
  int rank = 0, n = 0;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &n);
  int32_t token = rank * 7 + 1, got = -1;
  if (rank == 0) {
    for (int p = 1; p < n; p++) {
      st = chorus_recv_tag(&got, 1, CHORUS_INT32, p, 1, comm, NULL);
      if (st == CHORUS_OK && got != p * 7 + 1) st = CHORUS_ERR_INTERNAL;
      if (st == CHORUS_OK) st = chorus_send_tag(&token, 1, CHORUS_INT32, p, 2, comm);
      if (st != CHORUS_OK) return fail(rank, "first exchange", st, comm);
    }
    write_pid(rank);
    for (;;) pause(); /* until killed */
  }
  st = chorus_send_tag(&token, 1, CHORUS_INT32, 0, 1, comm);
  if (st == CHORUS_OK) st = chorus_recv_tag(&got, 1, CHORUS_INT32, 0, 2, comm, NULL);
  if (st == CHORUS_OK && got != 1) st = CHORUS_ERR_INTERNAL;
  if (st != CHORUS_OK) return fail(rank, "first exchange", st, comm);
  float* big = calloc(BIG_COUNT, sizeof(float));
  float small[16];
  if (!big) return 1;
  chorus_req_t* reqs[3];
  const char* what[3] = {"recv from rank 0", "recv from any source", "send to rank 0"};
  st = chorus_irecv_tag(small, 8, CHORUS_FLOAT32, 0, 3, comm, &reqs[0]);
  if (st == CHORUS_OK)
    st = chorus_irecv_tag(small + 8, 8, CHORUS_FLOAT32, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG, comm, &reqs[1]);
  if (st == CHORUS_OK) st = chorus_isend_tag(big, BIG_COUNT, CHORUS_FLOAT32, 0, 4, comm, &reqs[2]);
  if (st != CHORUS_OK) return fail(rank, "posting", st, comm);
  write_pid(rank);
  int errors = 0;
  for (int k = 0; k < 3; k++) {
    st = chorus_wait(reqs[k]);
    if (st < 0) errors += fail(rank, what[k], st, comm);
    else printf("rank %d: %s succeeded\n", rank, what[k]);
    chorus_req_free(reqs[k]);
  }
  free(big);
  chorus_comm_destroy(comm);
  printf("rank %d: exiting with status %d\n", rank, errors ? 1 : 0);
  /* The survivors see the death within milliseconds: wait a little, so that chorus-run reaps
   * the killed rank first and reports it (and its 128+9) rather than a survivor's status 1. */
  if (errors) usleep(500000);
  return errors ? 1 : 0;
}
