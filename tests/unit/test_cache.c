/*
 * test_cache.c - the streaming-store threshold (core/cache): the rule's figures for the
 * layouts it was measured on, the clamp and the unknown-cache default, checked against values
 * worked out by hand; the last-level cache read from this machine's /sys; and the bytes a call
 * touches (coll/task.h), overlapping buffers counted once.
 */
#include "core/cache.h"
#include "coll/task.h"

#include <unistd.h>

#include "test.h"

#define MiB (1024u * 1024u)

TEST(stream_threshold_rule) {
  /* 3/4 of 32 MiB of cache: 2 ranks on 2 CPUs stream from 12 MiB touched, 4 ranks on 2 CPUs
   * (twice oversubscribed) from 24 / (4 * 2) = 3 MiB, 8 on 2 from 24 / 32 = 768 KiB, 4 on 8
   * from 6 MiB, one rank from 24 MiB. */
  ASSERT_EQ(chorus__stream_from_bytes(32 * MiB, 2, 2), 12 * MiB);
  ASSERT_EQ(chorus__stream_from_bytes(32 * MiB, 4, 2), 3 * MiB);
  ASSERT_EQ(chorus__stream_from_bytes(32 * MiB, 8, 2), 768u * 1024u);
  ASSERT_EQ(chorus__stream_from_bytes(32 * MiB, 4, 8), 6 * MiB);
  ASSERT_EQ(chorus__stream_from_bytes(32 * MiB, 1, 2), 24 * MiB);
}

TEST(stream_threshold_edges) {
  ASSERT_EQ(chorus__stream_from_bytes(0, 4, 2), 16 * MiB);             /* cache unknown: the old fixed figure */
  ASSERT_EQ(chorus__stream_from_bytes(32 * MiB, 64, 2), 256u * 1024u); /* never under 256 KiB */
  ASSERT_EQ(chorus__stream_from_bytes(32 * MiB, 0, 0), 24 * MiB);      /* nonsense counts taken as 1 */
}

TEST(llc_from_sys) {
  /* Where /sys describes cpu0's caches, the last level is found and is at least 64 KiB. */
  if (access("/sys/devices/system/cpu/cpu0/cache/index0/size", R_OK) != 0) return;
  ASSERT_TRUE(chorus__llc_bytes() >= 64u * 1024u);
}

TEST(touched_bytes_counts_overlap_once) {
  static char buf[4096];
  /* Apart: both. In place (same start): the larger. An output inside the input (in-place
   * reduce_scatter: rank 2's block of 4) and an input inside the output (in-place allgather):
   * the span of both, that is the enclosing buffer. No input: the output alone. */
  ASSERT_EQ(chorus__touched_bytes(buf, 1000, buf + 2000, 1000), 2000u);
  ASSERT_EQ(chorus__touched_bytes(buf, 1000, buf, 1000), 1000u);
  ASSERT_EQ(chorus__touched_bytes(buf, 4000, buf + 2000, 1000), 4000u);
  ASSERT_EQ(chorus__touched_bytes(buf + 1000, 1000, buf, 4000), 4000u);
  ASSERT_EQ(chorus__touched_bytes(NULL, 1000, buf, 3000), 3000u);
  ASSERT_EQ(chorus__touched_bytes(buf, 1000, NULL, 0), 1000u);
}
