/* consumer.c - a program outside the Chorus tree, built against an installed Chorus by
 * tests/install/test_install.sh (through pkg-config and through find_package(Chorus)). Alone
 * it makes a 1-rank communicator (chorus_get_unique_id + chorus_comm_init); under a launcher
 * (CHORUS_RANK set) it joins the job with chorus_comm_init_env. Either way it runs an int64
 * sum allreduce and a float64 max allreduce and checks every element against values it
 * computes itself; it prints "consumer ok" and exits 0, or names the mismatch and exits 1. */
#include <chorus.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNT 1000

static int fail(const char* what, chorus_status_t st, chorus_comm_t* comm) {
  fprintf(stderr, "consumer: %s: %s (%s)\n", what, chorus_status_name(st),
          comm ? chorus_comm_last_error(comm) : "no communicator");
  return 1;
}

int main(void) {
  if (chorus_version() != CHORUS_VERSION_CODE) {
    fprintf(stderr, "consumer: header version %d, library version %d\n", CHORUS_VERSION_CODE,
            chorus_version());
    return 1;
  }
  chorus_comm_t* comm = NULL;
  chorus_status_t st;
  if (getenv("CHORUS_RANK")) {
    st = chorus_comm_init_env(&comm, NULL);
  } else {
    chorus_unique_id_t id;
    st = chorus_get_unique_id(&id);
    if (st != CHORUS_OK) return fail("chorus_get_unique_id", st, NULL);
    st = chorus_comm_init(&comm, 1, 0, &id, NULL);
  }
  if (st != CHORUS_OK) return fail("communicator init", st, NULL);
  int rank = -1, size = 0;
  if ((st = chorus_comm_rank(comm, &rank)) != CHORUS_OK) return fail("chorus_comm_rank", st, comm);
  if ((st = chorus_comm_size(comm, &size)) != CHORUS_OK) return fail("chorus_comm_size", st, comm);

  static int64_t ints[COUNT];
  static double reals[COUNT];
  for (int i = 0; i < COUNT; i++) {
    ints[i] = (int64_t)(rank + 1) * (i + 1);
    reals[i] = (double)((rank * 7 + i) % size) - 0.5 * i;
  }
  st = chorus_allreduce(ints, ints, COUNT, CHORUS_INT64, CHORUS_SUM, comm);
  if (st != CHORUS_OK) return fail("int64 sum allreduce", st, comm);
  st = chorus_allreduce(reals, reals, COUNT, CHORUS_FLOAT64, CHORUS_MAX, comm);
  if (st != CHORUS_OK) return fail("float64 max allreduce", st, comm);

  int64_t rank_sum = (int64_t)size * (size + 1) / 2; /* sum of rank + 1 over the ranks */
  int wrong = 0;
  for (int i = 0; i < COUNT; i++) {
    double want_max = -1e300;
    for (int r = 0; r < size; r++) {
      double v = (double)((r * 7 + i) % size) - 0.5 * i;
      if (v > want_max) want_max = v;
    }
    if (ints[i] != rank_sum * (i + 1) || reals[i] != want_max) {
      if (wrong++ < 5)
        fprintf(stderr, "consumer: rank %d element %d: %lld and %g, expected %lld and %g\n", rank,
                i, (long long)ints[i], reals[i], (long long)(rank_sum * (i + 1)), want_max);
    }
  }
  st = chorus_comm_destroy(comm);
  if (st != CHORUS_OK) return fail("chorus_comm_destroy", st, NULL);
  if (wrong) {
    fprintf(stderr, "consumer: rank %d: %d wrong element(s)\n", rank, wrong);
    return 1;
  }
  printf("consumer ok: rank %d of %d\n", rank, size);
  return 0;
}
