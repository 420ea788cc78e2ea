/*
 * cache.h - the machine's last-level cache, and what it means for the memory-semantics
 * collectives' stores into the caller's output (algo/shm/shm.h): plain stores while the ranks'
 * buffers can stay cached, streaming (cache-bypassing) ones beyond. And a prefetch for writing,
 * for lines another core holds.
 */
#ifndef CHORUS_CACHE_H
#define CHORUS_CACHE_H

#include <stddef.h>

/* All of the machine's last-level cache in bytes: from /sys, one instance times the instances
 * the online CPUs have; else sysconf's L3 (one instance); 0 when unknown. */
size_t chorus__llc_bytes(void);

/* From how many bytes of the caller's buffers a call reads and writes on a rank (input and
 * output) streaming stores pay, for `ranks` ranks of a communicator on a machine of `cpus`
 * CPUs and llc_bytes of last-level cache (0: unknown, then 16 MiB). */
size_t chorus__stream_from_bytes(size_t llc_bytes, int ranks, int cpus);

/* 1 when the CPU has a prefetch for writing (x86 PREFETCHW: every AMD64 CPU, Intel's from
 * Broadwell), found when the library loads. */
extern int chorus__cpu_prefetchw;

/* Asks for line p in the exclusive state, as a store would, without waiting for it: a line that
 * a peer last read (an LL line, a flag) comes back in one miss instead of a shared copy and then
 * an upgrade. __builtin_prefetch(p, 1, ...) is a read prefetch on x86 unless the build targets
 * PREFETCHW (the baseline build does not), hence the instruction itself where the CPU has it. */
static inline void chorus__prefetch_for_write(const void* p) {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(__PRFCHW__)
  if (chorus__cpu_prefetchw) __asm__ volatile("prefetchw %0" ::"m"(*(const char*)p));
  else __builtin_prefetch(p, 1, 3); /* a read prefetch there: the line is at least nearer */
#else
  __builtin_prefetch(p, 1, 3);
#endif
}

/* The same for every line of [p, p + n): a copy that walks lines a peer holds waits for one
 * upgrade after another, where lines asked for at once come back with their misses overlapped
 * (the same-host slots and rings, LL buffers). */
static inline void chorus__prefetch_range_for_write(const void* p, size_t n) {
  for (size_t at = 0; at < n; at += 64) chorus__prefetch_for_write((const char*)p + at);
}

#endif /* CHORUS_CACHE_H */
