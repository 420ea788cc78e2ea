/*
 * test_tune.c - the cost model's link figures (coll/tune.c): defaults with CHORUS_TUNE=0, a
 * file, the CHORUS_LINK_* variables over both, the probe on emulated hosts (positive figures,
 * bitwise the same on every rank, so every rank selects alike), and clear errors for a missing
 * file, a malformed line and a malformed variable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
