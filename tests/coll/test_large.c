/*
 * test_large.c - messages over 2 GiB on 2 ranks: an int8 broadcast of 2.1 GiB (in place from
 * root 0, then out of place from root 1) and a uint8 allreduce of 2^31 + 4099 elements, so
 * that any 32-bit byte count or index in the path shows. Every byte is checked; the pattern
 * depends on bits above 2^31 of the index, so a wrapped offset cannot go unnoticed.
 * Needs about 6.3 GiB (broadcast) and 4.3 GiB (allreduce) of memory; skipped when short.
 */
#include <stdio.h>
#include <stdlib.h>

#include "ranks.h"
#include "test.h"

static const size_t BROADCAST_BYTES = 2254857830u; /* 2.1 GiB */
static const size_t ALLREDUCE_COUNT = ((size_t)1 << 31) + 4099;
static const size_t GIB = (size_t)1 << 30;

static size_t mem_available_bytes(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  size_t kib = 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "MemAvailable: %zu kB", &kib) == 1) break;
  fclose(f);
  return kib * 1024;
}

static void require_memory(size_t bytes) {
  size_t avail = mem_available_bytes();
  if (avail < bytes + 2 * GIB)
    SKIP("needs %.1f GiB of memory (+2 GiB margin), %.1f GiB available",
         (double)bytes / (double)GIB, (double)avail / (double)GIB);
}

static inline uint8_t large_byte(size_t i, unsigned seed) {
  uint64_t x = (uint64_t)i;
  return (uint8_t)((x ^ (x >> 17) ^ (x >> 31)) * 131u + seed);
}

static void fill_pattern(uint8_t* buf, size_t n, unsigned seed, uint8_t mask) {
  for (size_t i = 0; i < n; i++) buf[i] = large_byte(i, seed) & mask;
}

static void check_pattern(const uint8_t* buf, size_t n, unsigned seed, const char* what) {
  for (size_t i = 0; i < n; i++)
    if (buf[i] != large_byte(i, seed))
      FAIL("%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n, buf[i],
           large_byte(i, seed));
}

static uint8_t* must_alloc(size_t n) {
  uint8_t* p = test_alloc_large(n);
  if (!p) FAIL("cannot allocate %zu bytes", n);
  return p;
}

static int broadcast_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  size_t n = BROADCAST_BYTES;
  uint8_t* buf = must_alloc(n);
  if (rank == 0)
    fill_pattern(buf, n, 1, 0xff);
  else
    memset(buf, 0xa5, n);
  double start_sec = test_now_sec();
  ASSERT_COMM_OK(comm, chorus_broadcast(buf, buf, n, CHORUS_INT8, 0, comm));
  printf("  rank %d: in-place broadcast of %zu bytes: %.2f s\n", rank, n,
         test_now_sec() - start_sec);
  check_pattern(buf, n, 1, "in-place broadcast from root 0");

  uint8_t* send = NULL;
  if (rank == 1) {
    send = must_alloc(n);
    fill_pattern(send, n, 2, 0xff);
  }
  memset(buf, 0xa5, n);
  start_sec = test_now_sec();
  ASSERT_COMM_OK(comm, chorus_broadcast(rank == 1 ? send : buf, buf, n, CHORUS_INT8, 1, comm));
  printf("  rank %d: broadcast of %zu bytes from root 1: %.2f s\n", rank, n,
         test_now_sec() - start_sec);
  check_pattern(buf, n, 2, "broadcast from root 1");
  if (send) check_pattern(send, n, 2, "root's send buffer after broadcast");
  free(send);
  free(buf);
  return 0;
}

static int allreduce_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  size_t n = ALLREDUCE_COUNT;
  uint8_t* buf = must_alloc(n);
  /* Each input below 128, so the uint8 sum of two never wraps. */
  fill_pattern(buf, n, (unsigned)rank + 3, 0x7f);
  double start_sec = test_now_sec();
  ASSERT_COMM_OK(comm, chorus_allreduce(buf, buf, n, CHORUS_UINT8, CHORUS_SUM, comm));
  printf("  rank %d: in-place allreduce of %zu uint8: %.2f s\n", rank, n,
         test_now_sec() - start_sec);
  for (size_t i = 0; i < n; i++) {
    uint8_t want = (uint8_t)((large_byte(i, 3) & 0x7f) + (large_byte(i, 4) & 0x7f));
    if (buf[i] != want)
      FAIL("allreduce: element %zu of %zu is %u, expected %u", i, n, buf[i], want);
  }
  free(buf);
  return 0;
}

TEST_EX(broadcast_2g, 300, "full;large") {
  require_memory(3 * BROADCAST_BYTES);
  ASSERT_EQ(run_ranks(2, broadcast_rank, NULL), 0);
}

TEST_EX(allreduce_2g, 300, "full;large") {
  require_memory(2 * ALLREDUCE_COUNT);
  ASSERT_EQ(run_ranks(2, allreduce_rank, NULL), 0);
}
