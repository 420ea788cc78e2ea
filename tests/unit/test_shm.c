/*
 * test_shm.c - the host's shared segment: every rank has its rings and the slots in its page
 * tables once the communicator exists (shm.c, chorus__shm_prefault), so that the first calls
 * do not fault page by page through fresh rings.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "ranks.h"
#include "test.h"

/* Size and Rss, in kB, of every mapping of the host's segment in this process. */
static int segment_mappings(long size_kb[], long rss_kb[], int max) {
  FILE* f = fopen("/proc/self/smaps", "r");
  char line[512];
  int n = 0, in_segment = 0;
  while (f && fgets(line, sizeof(line), f)) {
    long kb;
    unsigned long start, end;
    if (sscanf(line, "%lx-%lx ", &start, &end) == 2) { /* a mapping's first line; its fields follow */
      in_segment = strstr(line, "chorus-shm") != NULL && n < max;
      if (in_segment) size_kb[n] = rss_kb[n] = -1, n++;
    } else if (in_segment && sscanf(line, "Size: %ld kB", &kb) == 1) {
      size_kb[n - 1] = kb;
    } else if (in_segment && sscanf(line, "Rss: %ld kB", &kb) == 1) {
      rss_kb[n - 1] = kb;
    }
  }
  if (f) fclose(f);
  return n;
}

static int mapped_body(chorus_comm_t* c, int rank, void* arg) {
  (void)arg;
  ASSERT_COMM_OK(c, chorus_barrier(c)); /* both ranks have made their mapping */
  if (rank == 0) {
    long size_kb[8], rss_kb[8];
    int n = segment_mappings(size_kb, rss_kb, 8);
    ASSERT_EQ(n, 2); /* ranks as threads: the creator's mapping and the other rank's */
    for (int i = 0; i < n; i++) {
      printf("  mapping %d of the segment: %ld kB, %ld kB in the page tables\n", i, size_kb[i], rss_kb[i]);
      /* Two ranks: every ring is one of the rank's own, and the slots are all mapped. */
      if (size_kb[i] <= 0 || rss_kb[i] < size_kb[i] * 9 / 10)
        FAIL("mapping %d: %ld of %ld kB mapped after creation", i, rss_kb[i], size_kb[i]);
    }
  }
  ASSERT_COMM_OK(c, chorus_barrier(c));
  return 0;
}

TEST(rings_and_slots_mapped_at_creation) {
  void* probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_TRUE(probe != MAP_FAILED);
#ifdef MADV_POPULATE_WRITE
  int supported = madvise(probe, 4096, MADV_POPULATE_WRITE) == 0;
#else
  int supported = 0;
#endif
  munmap(probe, 4096);
  if (!supported) SKIP("this kernel has no MADV_POPULATE_WRITE (Linux 5.14): pages map on first use");
  ASSERT_EQ(run_ranks(2, mapped_body, NULL), 0);
}
