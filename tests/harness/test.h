/*
 * test.h - the Chorus test harness, in the libuv style: TEST(name) defines a case, ASSERT_*
 * stop it on the first failure, SKIP() ends it as skipped. The runner (runner.c, which holds
 * main) forks every case into its own process with a time limit: `./test_x` runs every case,
 * `./test_x NAME...` the named ones, `./test_x --list` lists them (see runner.c).
 */
#ifndef CHORUS_TEST_H
#define CHORUS_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chorus.h"

/* One registered case. timeout_sec is scaled by the build's multiplier (sanitizers). labels is
 * a CTest label list ("quick", "full;large"); tests/CMakeLists.txt reads it from the source. */
typedef struct test_case {
  const char* name;
  void (*fn)(void);
  int timeout_sec;
  const char* labels;
  struct test_case* next;
} test_case_t;

void test__register(test_case_t* tc);

#define TEST_DEFAULT_TIMEOUT_SEC 60

/* TEST(name) { ... }: a case with the default time limit and the label "quick".
 * TEST_EX(name, timeout_sec, "labels") { ... }: the same with an explicit limit and labels.
 * Both must start a line so that tests/CMakeLists.txt can find them. */
#define TEST(name) TEST_EX(name, TEST_DEFAULT_TIMEOUT_SEC, "quick")
#define TEST_EX(name, timeout_sec, labels)                                                  \
  static void test_fn_##name(void);                                                         \
  static test_case_t test_case_##name = {#name, test_fn_##name, timeout_sec, labels, NULL}; \
  __attribute__((constructor)) static void test_register_##name(void) {                     \
    test__register(&test_case_##name);                                                      \
  }                                                                                         \
  static void test_fn_##name(void)

/* Failure and skip: print where and why, then end the case's process (every rank thread
 * with it), so a failing rank never leaves its peers waiting for the library's timeout. */
__attribute__((noreturn, format(printf, 3, 4))) void test__fail(const char* file, int line,
                                                                const char* fmt, ...);
__attribute__((noreturn, format(printf, 1, 2))) void test__skip(const char* fmt, ...);

/* Context printed with every failure of the calling thread: its rank (-1: none) and a free
 * text such as "allreduce algo=ring n=3 count=7 float16 sum". */
void test_set_rank(int rank);
int test_get_rank(void);
__attribute__((format(printf, 1, 2))) void test_set_context(const char* fmt, ...);
const char* test_get_context(void);

/* Timeout multiplier of this build and environment (CHORUS_TEST_TIMEOUT_MULTIPLIER). */
int test_timeout_multiplier(void);
/* Monotonic clock. */
double test_now_sec(void);
/* Memory a case fills in bulk (large messages): malloc's, in huge pages where it is big enough
 * (alloc.c). Freed with free(); NULL when out of memory. */
void* test_alloc_large(size_t bytes);

#define FAIL(...) test__fail(__FILE__, __LINE__, __VA_ARGS__)
#define SKIP(...) test__skip(__VA_ARGS__)

#define ASSERT_TRUE(expr)                               \
  do {                                                  \
    if (!(expr)) FAIL("ASSERT_TRUE(%s) failed", #expr); \
  } while (0)

#define TEST_CMP_(a, b, cmp)                                                            \
  do {                                                                                  \
    int64_t assert_a_ = (int64_t)(a);                                                   \
    int64_t assert_b_ = (int64_t)(b);                                                   \
    if (!(assert_a_ cmp assert_b_))                                                     \
      FAIL("ASSERT(%s %s %s) failed: %lld vs %lld", #a, #cmp, #b, (long long)assert_a_, \
           (long long)assert_b_);                                                       \
  } while (0)

#define ASSERT_EQ(a, b) TEST_CMP_(a, b, ==)
#define ASSERT_NE(a, b) TEST_CMP_(a, b, !=)
#define ASSERT_LT(a, b) TEST_CMP_(a, b, <)
#define ASSERT_LE(a, b) TEST_CMP_(a, b, <=)
#define ASSERT_GT(a, b) TEST_CMP_(a, b, >)
#define ASSERT_GE(a, b) TEST_CMP_(a, b, >=)
#define ASSERT_NULL(p) ASSERT_TRUE((p) == NULL)
#define ASSERT_NOT_NULL(p) ASSERT_TRUE((p) != NULL)

#define ASSERT_STR_EQ(a, b)                                                              \
  do {                                                                                   \
    const char* assert_sa_ = (a);                                                        \
    const char* assert_sb_ = (b);                                                        \
    if (assert_sa_ == NULL || assert_sb_ == NULL || strcmp(assert_sa_, assert_sb_) != 0) \
      FAIL("ASSERT_STR_EQ(%s, %s) failed: \"%s\" vs \"%s\"", #a, #b,                     \
           assert_sa_ ? assert_sa_ : "(null)", assert_sb_ ? assert_sb_ : "(null)");      \
  } while (0)

/* A chorus call must return CHORUS_OK; prints the status name and its message. */
#define ASSERT_OK(st)                                                  \
  do {                                                                 \
    chorus_status_t assert_st_ = (st);                                 \
    if (assert_st_ != CHORUS_OK)                                       \
      FAIL("%s returned %s (%s)", #st, chorus_status_name(assert_st_), \
           chorus_status_str(assert_st_));                             \
  } while (0)

/* The same, adding chorus_comm_last_error(comm), the library's full sentence. */
#define ASSERT_COMM_OK(comm, st)                                           \
  do {                                                                     \
    chorus_status_t assert_st_ = (st);                                     \
    if (assert_st_ != CHORUS_OK)                                           \
      FAIL("%s returned %s (%s): %s", #st, chorus_status_name(assert_st_), \
           chorus_status_str(assert_st_), chorus_comm_last_error(comm));   \
  } while (0)

/* A chorus call must return exactly `want`. */
#define ASSERT_STATUS(st, want)                                                \
  do {                                                                         \
    chorus_status_t assert_st_ = (st);                                         \
    chorus_status_t assert_want_ = (want);                                     \
    if (assert_st_ != assert_want_)                                            \
      FAIL("%s returned %s, expected %s", #st, chorus_status_name(assert_st_), \
           chorus_status_name(assert_want_));                                  \
  } while (0)

#endif /* CHORUS_TEST_H */
