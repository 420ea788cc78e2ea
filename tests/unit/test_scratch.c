/*
 * test_scratch.c - algorithms' scratch memory (core/scratch.c) on a communicator: the block a
 * call gives back is the one the next call that fits in it gets, a larger block given back
 * replaces the kept one, a call that does not fit gets a block of its own (written over its
 * whole length, which the sanitizer builds check), and destroying the communicator frees what
 * it kept (the leak checker of the ASan build fails the test otherwise).
 */
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"

#include "test.h"

typedef struct {
  chorus_comm_t* comm;
  chorus_task_t task;
} fake_t;

static void fake_open(fake_t* f) {
  f->comm = calloc(1, sizeof(*f->comm));
  ASSERT_TRUE(f->comm != NULL);
  memset(&f->task, 0, sizeof(f->task));
  f->task.comm = f->comm;
}

static void fake_close(fake_t* f) {
  chorus__scratch_release(f->comm);
  ASSERT_TRUE(f->comm->scratch == NULL);
  free(f->comm);
}

TEST(kept_block_serves_the_next_call_that_fits) {
  fake_t f;
  fake_open(&f);
  char* a = chorus__task_scratch(&f.task, 1 << 20);
  ASSERT_TRUE(a != NULL);
  memset(a, 1, 1 << 20);
  chorus__task_scratch_free(&f.task, a);
  char* b = chorus__task_scratch(&f.task, 4096); /* smaller: the kept block */
  ASSERT_TRUE(b == a);
  char* c = chorus__task_scratch(&f.task, 4096); /* the kept one is taken: a block of its own */
  ASSERT_TRUE(c != NULL && c != a);
  memset(c, 2, 4096);
  chorus__task_scratch_free(&f.task, c);
  chorus__task_scratch_free(&f.task, b); /* larger than c: replaces it */
  char* d = chorus__task_scratch(&f.task, 1 << 20);
  ASSERT_TRUE(d == a);
  chorus__task_scratch_free(&f.task, d);
  fake_close(&f);
}

TEST(larger_block_replaces_the_kept_one) {
  fake_t f;
  fake_open(&f);
  char* small = chorus__task_scratch(&f.task, 100);
  chorus__task_scratch_free(&f.task, small);
  char* big = chorus__task_scratch(&f.task, 3u << 20); /* does not fit the kept 100 bytes */
  ASSERT_TRUE(big != NULL);
  memset(big, 3, 3u << 20);
  chorus__task_scratch_free(&f.task, big);
  ASSERT_TRUE(chorus__task_scratch(&f.task, 3u << 20) == big);
  chorus__task_scratch_free(&f.task, big);
  fake_close(&f);
}

TEST(zero_bytes_and_null) {
  fake_t f;
  fake_open(&f);
  char* z = chorus__task_scratch(&f.task, 0); /* a valid block: algorithms test for NULL as out of memory */
  ASSERT_TRUE(z != NULL);
  chorus__task_scratch_free(&f.task, NULL); /* nothing */
  chorus__task_scratch_free(&f.task, z);
  ASSERT_TRUE(chorus__task_scratch(&f.task, (size_t)-1) == NULL); /* cannot be had: NULL, kept block untouched */
  ASSERT_TRUE(chorus__task_scratch(&f.task, 0) == z);
  chorus__task_scratch_free(&f.task, z);
  fake_close(&f);
}
