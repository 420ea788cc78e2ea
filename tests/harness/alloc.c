/*
 * alloc.c - test_alloc_large: memory a case fills and checks in bulk. Tests of large messages
 * allocate hundreds of megabytes and touch every byte once; on virtual machines a page fault
 * can cost 5-10 us (seen on the 2-core test machines), so 4 KiB pages made the bulk of those
 * tests' time (coll/alltoall/big_n8: 2.5 million faults, 28 s; 13 s with huge pages). Blocks of
 * 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages (the machines'
 * setting is "madvise"); where the kernel declines, they are ordinary pages.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "test.h"

#define HUGE_PAGE_BYTES ((size_t)2 << 20)

void* test_alloc_large(size_t bytes) {
  if (bytes < HUGE_PAGE_BYTES) return malloc(bytes ? bytes : 1);
  /* Exactly the bytes asked for (the tail short of a huge page stays in small pages), so that
   * ASan still sees an overrun at the end of the block. */
  void* p = NULL;
  if (posix_memalign(&p, HUGE_PAGE_BYTES, bytes) != 0) return NULL;
  (void)madvise(p, bytes & ~(HUGE_PAGE_BYTES - 1), MADV_HUGEPAGE);
  return p;
}
