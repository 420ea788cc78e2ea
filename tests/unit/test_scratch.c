/*
 * test_scratch.c - scratch memory (core/scratch.c) on a communicator: a block given back is
 * the one the next call that fits in it gets (the smallest that fits, when several are kept),
 * several blocks are kept at once (non-blocking calls hold several), a call that fits none gets
 * a block of its own and the largest kept block too short for it is dropped, blocks start on a
 * cache line, and destroying the communicator frees what it kept (the leak checker of the ASan
 * build fails the test otherwise). Every block is written over its whole length, which the
 * sanitizer builds check.
 */
#include <stdint.h>
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

static int kept_blocks(const chorus_comm_t* comm) {
  int n = 0;
  for (int i = 0; i < CHORUS_SCRATCH_KEPT; i++) n += comm->scratch[i] != NULL;
  return n;
}

static void fake_close(fake_t* f) {
  chorus__scratch_release(f->comm);
  ASSERT_EQ(kept_blocks(f->comm), 0);
  free(f->comm);
}

static char* take(fake_t* f, size_t bytes, int fill) {
  char* b = chorus__task_scratch(&f->task, bytes);
  ASSERT_TRUE(b != NULL);
  ASSERT_EQ((uintptr_t)b % 64, 0);
  memset(b, fill, bytes);
  return b;
}

TEST(kept_block_serves_the_next_call_that_fits) {
  fake_t f;
  fake_open(&f);
  char* a = take(&f, 1 << 20, 1);
  chorus__task_scratch_free(&f.task, a);
  char* b = take(&f, 4096, 2); /* smaller: the kept block */
  ASSERT_TRUE(b == a);
  char* c = take(&f, 4096, 3); /* the kept one is taken: a block of its own */
  ASSERT_TRUE(c != a);
  chorus__task_scratch_free(&f.task, c);
  chorus__task_scratch_free(&f.task, b);
  ASSERT_EQ(kept_blocks(f.comm), 2);
  ASSERT_TRUE(take(&f, 100, 4) == c);      /* the smallest that fits */
  ASSERT_TRUE(take(&f, 1 << 20, 5) == a);  /* the other one */
  chorus__task_scratch_free(&f.task, a);
  chorus__task_scratch_free(&f.task, c);
  fake_close(&f);
}

/* Calls in flight at once each keep their block: the next round allocates nothing. */
TEST(blocks_of_calls_in_flight_are_all_kept) {
  fake_t f;
  fake_open(&f);
  enum { N = 16 };
  char* first[N];
  for (int i = 0; i < N; i++) first[i] = take(&f, 65536, i);
  for (int i = 0; i < N; i++) chorus__task_scratch_free(&f.task, first[i]);
  ASSERT_EQ(kept_blocks(f.comm), N);
  char* again[N];
  for (int i = 0; i < N; i++) {
    again[i] = take(&f, 65536, i);
    int found = 0;
    for (int j = 0; j < N; j++) found |= again[i] == first[j];
    ASSERT_TRUE(found);
  }
  for (int i = 0; i < N; i++) chorus__task_scratch_free(&f.task, again[i]);
  fake_close(&f);
}

/* Growing calls do not pile up blocks too short for them. */
TEST(growing_calls_drop_blocks_too_short) {
  fake_t f;
  fake_open(&f);
  for (size_t bytes = 1024; bytes <= (8u << 20); bytes *= 2) chorus__task_scratch_free(&f.task, take(&f, bytes, 7));
  ASSERT_EQ(kept_blocks(f.comm), 1);
  fake_close(&f);
}

/* Beyond CHORUS_SCRATCH_KEPT a given-back block replaces the smallest kept one if larger. */
TEST(full_pool_keeps_the_larger_blocks) {
  fake_t f;
  fake_open(&f);
  char* small[CHORUS_SCRATCH_KEPT];
  for (int i = 0; i < CHORUS_SCRATCH_KEPT; i++) small[i] = take(&f, 256, 1);
  char* big = take(&f, 1 << 16, 2);
  char* tiny = take(&f, 64, 3);
  for (int i = 0; i < CHORUS_SCRATCH_KEPT; i++) chorus__task_scratch_free(&f.task, small[i]);
  chorus__task_scratch_free(&f.task, tiny); /* smaller than all kept: freed */
  chorus__task_scratch_free(&f.task, big);  /* replaces one of 256 bytes */
  ASSERT_EQ(kept_blocks(f.comm), CHORUS_SCRATCH_KEPT);
  ASSERT_TRUE(take(&f, 1 << 16, 4) == big);
  chorus__task_scratch_free(&f.task, big);
  fake_close(&f);
}

TEST(zero_bytes_null_and_no_communicator) {
  fake_t f;
  fake_open(&f);
  char* z = chorus__task_scratch(&f.task, 0); /* a valid block: algorithms test for NULL as out of memory */
  ASSERT_TRUE(z != NULL);
  chorus__task_scratch_free(&f.task, NULL); /* nothing */
  chorus__task_scratch_free(&f.task, z);
  ASSERT_TRUE(chorus__task_scratch(&f.task, (size_t)-1) == NULL); /* cannot be had: NULL */
  ASSERT_TRUE(chorus__task_scratch(&f.task, 0) == z);
  chorus__task_scratch_free(&f.task, z);
  char* own = chorus__scratch_take(NULL, 4096); /* an engine run without a pool: plain memory */
  ASSERT_TRUE(own != NULL);
  memset(own, 9, 4096);
  chorus__scratch_give(NULL, own);
  fake_close(&f);
}

/* Kept blocks stay under CHORUS_SCRATCH_KEPT_BYTES together (the smaller go first), but a block
 * alone is kept whatever its size. Blocks this large are not written (their pages are never
 * touched). */
TEST(kept_bytes_are_bounded) {
  fake_t f;
  fake_open(&f);
  size_t part = CHORUS_SCRATCH_KEPT_BYTES * 2 / 5; /* two fit under the bound, three do not */
  char* a = chorus__task_scratch(&f.task, part);
  char* b = chorus__task_scratch(&f.task, part);
  char* c = chorus__task_scratch(&f.task, part + 4096);
  ASSERT_TRUE(a && b && c);
  chorus__task_scratch_free(&f.task, a);
  chorus__task_scratch_free(&f.task, b);
  chorus__task_scratch_free(&f.task, c); /* over the bound: a smaller kept block goes */
  ASSERT_EQ(kept_blocks(f.comm), 2);
  char* small = chorus__task_scratch(&f.task, 100); /* the smallest that fits: a or b, not c */
  ASSERT_TRUE(small == a || small == b);
  char* big = chorus__task_scratch(&f.task, CHORUS_SCRATCH_KEPT_BYTES + 1); /* fits none: c goes */
  ASSERT_TRUE(big != NULL);
  ASSERT_EQ(kept_blocks(f.comm), 0);
  chorus__task_scratch_free(&f.task, big); /* alone, kept whatever its size */
  ASSERT_EQ(kept_blocks(f.comm), 1);
  chorus__task_scratch_free(&f.task, small); /* with big over the bound, and smaller: freed */
  ASSERT_EQ(kept_blocks(f.comm), 1);
  ASSERT_TRUE(chorus__task_scratch(&f.task, 100) == big);
  chorus__task_scratch_free(&f.task, big);
  fake_close(&f);
}
