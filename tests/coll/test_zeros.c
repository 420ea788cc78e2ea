/*
 * test_zeros.c - the lossless ZEROS form of float32 sum/avg allreduces across hosts
 * (CHORUS_ZEROS, coll/compress.c; the form: reduce/codec.h, checked byte for byte in
 * tests/unit/test_codec.c), ranks as threads on emulated hosts:
 *  - CHORUS_ZEROS=on, sum and avg, in and out of place, vectors whose blocks are all +0, partly
 *    +0 (at random and in runs of 64), without +0, with -0 among the kept values: bitwise against
 *    the exact result computed here (small integers, which every order of summation gives; -0
 *    only where every rank holds -0), every rank alike, on 2x2 and 4x2 hosts (the two-level
 *    allreduce's rails), 2x3, 4x1 and 3+1 (the flat compressed allreduce);
 *  - which calls take the form, read from the trace's codec field: those of at least
 *    CHORUS_ZEROS_MIN_BYTES across hosts, not smaller ones, other dtypes, one host or
 *    CHORUS_ZEROS=off; under auto, a host link priced at 250 bytes/us (CHORUS_LINK_INTER) takes
 *    it, one at 2000 does not, nor hosts of one rank or of unequal size; a forced inner engine
 *    (CHORUS_ALGO=allreduce:hier/ring) runs without it;
 *  - a CHORUS_ZEROS value that is not auto, on or off, or a CHORUS_ZEROS_MIN_BYTES that is not
 *    a byte count, fails creation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"
#include "ref.h"
#include "test.h"

enum { MAX_RANKS = 8 };

static const int k2x2_rr[] = {0, 1, 0, 1};
static const int k2x3[] = {0, 0, 0, 1, 1, 1};
static const int k4x2_rr[] = {0, 1, 2, 3, 0, 1, 2, 3};
static const int k4x1[] = {0, 1, 2, 3};
static const int k3p1[] = {0, 0, 1, 0};

/* (Counts of 1 and 7 take the two-level allreduce's latency mode, which carries the form among
 * the hosts' leaders; the larger ones its rails.) */

/* ---- inputs: small integers and zeros, in four kinds of region ---- */

static uint32_t bits_of(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

/* Element i of rank r's input for call `call`: the vector's quarters are all +0; +0 at random
 * (60%); no +0; runs of 64 that are all +0 or all kept. Kept values are integers in [-8, 8]
 * without 0, and -0 one time in 16. */
static float input_elem(int call, int r, size_t i, size_t count) {
  uint64_t h = ref_mix64(((uint64_t)call << 40) ^ ((uint64_t)r << 32) ^ i);
  int quarter = (int)(4 * i / (count ? count : 1));
  int zero = quarter == 0 || (quarter == 1 && h % 10 < 6) ||
             (quarter == 3 && ref_mix64(((uint64_t)call << 40) ^ ((uint64_t)r << 32) ^ (i / 64) ^ 0xabcdu) % 2);
  if (zero) return 0.0f;
  if ((h >> 8) % 16 == 0) return -0.0f;
  int v = (int)((h >> 16) % 16) - 8;
  return (float)(v >= 0 ? v + 1 : v);
}

/* The exact result of element i over n ranks. */
static float expected(int call, int n, size_t i, size_t count, chorus_op_t op) {
  int sum = 0, all_negative_zero = 1, all_zero = 1;
  for (int r = 0; r < n; r++) {
    float x = input_elem(call, r, i, count);
    sum += (int)x;
    all_zero &= x == 0.0f;
    all_negative_zero &= bits_of(x) == 0x80000000u;
  }
  float s = all_zero && all_negative_zero ? -0.0f : (float)sum;
  return op == CHORUS_AVG ? s / (float)n : s;
}

typedef struct {
  size_t count;
  chorus_op_t op;
  int in_place;
} call_t;

static const size_t k_counts[] = {1, 7, 4099, 300007};

static int calls_of(call_t* calls) {
  int k = 0;
  for (size_t c = 0; c < sizeof k_counts / sizeof k_counts[0]; c++)
    for (int op = 0; op < 2; op++)
      calls[k++] = (call_t){k_counts[c], op ? CHORUS_AVG : CHORUS_SUM, (int)(c + op) % 2};
  return k;
}

static int exact_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  int n = 0, wrong = 0;
  ASSERT_OK(chorus_comm_size(comm, &n));
  call_t calls[16];
  int ncalls = calls_of(calls);
  for (int k = 0; k < ncalls; k++) {
    const call_t* c = &calls[k];
    float* in = malloc((c->count + 1) * sizeof(float));
    float* out = c->in_place ? in : malloc((c->count + 1) * sizeof(float));
    ASSERT_TRUE(in && out);
    for (size_t i = 0; i < c->count; i++) in[i] = input_elem(k, rank, i, c->count);
    ASSERT_COMM_OK(comm, chorus_allreduce(in, out, c->count, CHORUS_FLOAT32, c->op, comm));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < c->count; i++)
      if (bits_of(out[i]) != bits_of(expected(k, n, i, c->count, c->op)) && bad++ == 0) first = i;
    if (bad) {
      printf("WRONG rank %d call %d (%zu elements, %s, %s): %zu elements, first [%zu] = %a, want %a\n", rank, k,
             c->count, c->op == CHORUS_AVG ? "avg" : "sum", c->in_place ? "in place" : "out of place", bad, first,
             (double)out[first], (double)expected(k, n, first, c->count, c->op));
      wrong++;
    }
    if (out != in) free(out);
    free(in);
  }
  return wrong;
}

static void exact_on(int n, const int* hosts) {
  setenv("CHORUS_ZEROS", "on", 1);
  setenv("CHORUS_ZEROS_MIN_BYTES", "0", 1); /* every count */
  ranks_set_hosts(n, hosts);
  int st = run_ranks(n, exact_rank, NULL);
  ranks_set_hosts(0, NULL);
  unsetenv("CHORUS_ZEROS");
  unsetenv("CHORUS_ZEROS_MIN_BYTES");
  ASSERT_EQ(st, 0);
}

TEST_EX(exact_2x2_rr, 300, "quick") { exact_on(4, k2x2_rr); }
TEST_EX(exact_4x2_rr, 300, "full") { exact_on(8, k4x2_rr); }
TEST_EX(exact_2x3, 300, "full") { exact_on(6, k2x3); }
TEST_EX(exact_4x1, 300, "full") { exact_on(4, k4x1); }
TEST_EX(exact_3p1, 300, "full") { exact_on(4, k3p1); }

/* ---- which calls take the form ---- */

/* Calls of known codec, in this order: float32 sum of 256 KiB (CHORUS_ZEROS_MIN_BYTES's
 * default), of 256 KiB less one element, an int32 sum of 256 KiB, a float32 max of 256 KiB. */
static int kinds_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  size_t count = 262144 / sizeof(float);
  float* f = calloc(count, sizeof(float));
  int32_t* i32 = calloc(count, sizeof(int32_t));
  ASSERT_TRUE(f && i32);
  f[rank] = 1.0f;
  ASSERT_COMM_OK(comm, chorus_allreduce(f, f, count, CHORUS_FLOAT32, CHORUS_SUM, comm));
  ASSERT_COMM_OK(comm, chorus_allreduce(f, f, count - 1, CHORUS_FLOAT32, CHORUS_SUM, comm));
  ASSERT_COMM_OK(comm, chorus_allreduce(i32, i32, count, CHORUS_INT32, CHORUS_SUM, comm));
  ASSERT_COMM_OK(comm, chorus_allreduce(f, f, count, CHORUS_FLOAT32, CHORUS_MAX, comm));
  free(f);
  free(i32);
  return 0;
}

static int count_of(const char* text, const char* what) {
  int k = 0;
  for (const char* p = strstr(text, what); p; p = strstr(p + 1, what)) k++;
  return k;
}

/* Runs kinds_rank on n ranks (hosts, or one host) with CHORUS_ZEROS=zeros (NULL: unset) and
 * link (CHORUS_LINK_INTER, NULL: the probe's); returns the trace's text (the caller frees). */
static char* traced_kinds(int n, const int* hosts, const char* zeros, const char* link) {
  char path[64];
  snprintf(path, sizeof path, "/tmp/chorus-zeros-trace-%d.json", (int)getpid());
  setenv("CHORUS_TRACE_FILE", path, 1);
  if (zeros) setenv("CHORUS_ZEROS", zeros, 1);
  if (link) setenv("CHORUS_LINK_INTER", link, 1);
  ranks_set_hosts(hosts ? n : 0, hosts);
  int st = run_ranks(n, kinds_rank, NULL);
  ranks_set_hosts(0, NULL);
  unsetenv("CHORUS_LINK_INTER");
  unsetenv("CHORUS_ZEROS");
  unsetenv("CHORUS_TRACE_FILE");
  char* text = NULL;
  FILE* f = fopen(path, "r");
  if (f) {
    text = calloc(1, 1 << 20);
    if (text) fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
  }
  unlink(path);
  if (st != 0) {
    free(text);
    return NULL;
  }
  return text;
}

/* Each rank traces its 4 calls: only the first is float32 sum of at least the minimum. */
TEST_EX(which_calls, 300, "quick") {
  char* text = traced_kinds(4, k2x2_rr, "on", NULL);
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"name\":\"allreduce\""), 16);
  ASSERT_EQ(count_of(text, "\"codec\":\"zeros\""), 4);
  free(text);
  text = traced_kinds(4, NULL, "on", NULL); /* one host: nothing crosses */
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"none\""), 16);
  free(text);
  text = traced_kinds(4, k2x2_rr, "off", NULL);
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"none\""), 16);
  free(text);
  setenv("CHORUS_ALGO", "allreduce:hier/ring", 1); /* a forced inner engine runs as forced */
  text = traced_kinds(4, k2x2_rr, "on", NULL);
  unsetenv("CHORUS_ALGO");
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"zeros\""), 0);
  free(text);
  setenv("CHORUS_ALGO", "allreduce:hier", 1);
  text = traced_kinds(4, k2x2_rr, "on", NULL);
  unsetenv("CHORUS_ALGO");
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"zeros\""), 4);
  free(text);
}

/* auto (the default) follows the inter-host link's figure. */
TEST_EX(auto_by_link, 300, "quick") {
  char* text = traced_kinds(4, k2x2_rr, NULL, "50,250");
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"zeros\""), 4);
  free(text);
  text = traced_kinds(4, k2x2_rr, "auto", "50,2000");
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"zeros\""), 0);
  free(text);
  text = traced_kinds(4, k4x1, "auto", "50,250"); /* no rails: auto leaves hosts of one rank alone */
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"zeros\""), 0);
  free(text);
  text = traced_kinds(4, k4x1, "on", "50,250"); /* on: the flat compressed allreduce */
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"zeros\""), 4);
  free(text);
  text = traced_kinds(4, k3p1, "auto", "50,250"); /* nor unequal hosts */
  ASSERT_NOT_NULL(text);
  ASSERT_EQ(count_of(text, "\"codec\":\"zeros\""), 0);
  free(text);
}

/* ---- the setting's errors (ranks that differ: tests/proc/test_settings_mismatch.sh) ---- */

TEST_EX(bad_value, 120, "quick") {
  const char* bad[][2] = {{"CHORUS_ZEROS", "yes"}, {"CHORUS_ZEROS", "1"}, {"CHORUS_ZEROS", "On"},
                          {"CHORUS_ZEROS_MIN_BYTES", "-1"}, {"CHORUS_ZEROS_MIN_BYTES", "1M"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv(bad[i][0], bad[i][1], 1);
    chorus_status_t st = ranks_create_alone(); /* refused, with a warning naming the variable */
    unsetenv(bad[i][0]);
    ASSERT_STATUS(st, CHORUS_ERR_INVALID_ARG);
  }
}
