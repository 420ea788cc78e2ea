/*
 * cache.h - the machine's last-level cache, and what it means for the memory-semantics
 * collectives' stores into the caller's output (algo/shm/shm.h): plain stores while the ranks'
 * buffers can stay cached, streaming (cache-bypassing) ones beyond.
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

#endif /* CHORUS_CACHE_H */
