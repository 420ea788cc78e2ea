/*
 * cache.c - the last-level cache and the streaming-store threshold (cache.h).
 *
 * A call's output is still cached when the caller reads it only if the buffers every rank
 * reads and writes (B bytes each, input and output) fit in the last-level cache together:
 * B R <= LLC for R ranks on the machine, of which, as glibc's memcpy assumes, about 3/4 is
 * there for them. Beyond, a plain store first reads each line it writes (read for ownership)
 * and evicts data still needed, and streaming stores win. Ranks that share a core also evict
 * each other's lines from one time slice to the next, so R ranks on P < R CPUs divide it once
 * more by R / P. Measured with chorus-perf on 2 CPUs and a 32 MiB L3, streaming against plain
 * stores (docs/group.md, "Streaming stores"): 4 ranks (threshold 3 MiB), allreduce plain 1.3x
 * faster at 1 MiB (2 MiB touched), streaming 1.15-1.34x faster from 2 to 16 MiB; allgather and
 * broadcast plain 1.5-1.7x faster at 2 MiB (2.5 and 2 MiB touched), streaming ahead at 4 MiB.
 * 2 ranks (12 MiB): allreduce plain 1.3-2.1x faster from 1 to 4 MiB (8 MiB touched), level at 8
 * and 16 MiB; allgather and reduce_scatter of 8 MiB (12 MiB touched) 1.3x faster streaming in
 * one series (another read reduce_scatter the other way: within this machine's noise). Allgather
 * no longer streams since its large blocks go through the slots in cached chunks (allgather.c).
 */
#include "core/cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sysfile.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#define SYS_CACHE "/sys/devices/system/cpu/cpu0/cache/index"
#define UNKNOWN_LLC_STREAM_FROM (16u << 20) /* an 8 MiB allreduce: the fixed threshold before this rule */
#define MIN_STREAM_FROM (256u << 10)        /* smaller calls take the one-phase and LL paths */

int chorus__cpu_prefetchw;

/* CPUID 0x80000001, ECX bit 8: PRFCHW. */
__attribute__((constructor)) static void find_prefetchw(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax, ebx, ecx, edx;
  chorus__cpu_prefetchw = __get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 8));
#endif
}

/* The first line of SYS_CACHE<index>/<name> into buf; 0 when missing. */
static int read_attr(int index, const char* name, char* buf, size_t len) {
  char path[128];
  snprintf(path, sizeof(path), SYS_CACHE "%d/%s", index, name);
  return chorus__first_line(path, buf, len);
}

/* "32768K", "32M" or a plain byte count; 0 when unreadable. */
static size_t parse_size(const char* s) {
  char* end = NULL;
  unsigned long long v = strtoull(s, &end, 10);
  if (end == s) return 0;
  if (*end == 'K') v <<= 10;
  else if (*end == 'M') v <<= 20;
  else if (*end == 'G') v <<= 30;
  return (size_t)v;
}

/* CPUs in a list such as "0-7,64-71". */
static int count_cpus(const char* list) {
  int n = 0;
  for (const char* p = list; *p;) {
    char* end = NULL;
    long a = strtol(p, &end, 10), b = a;
    if (end == p) break;
    if (*end == '-') b = strtol(end + 1, &end, 10);
    if (b >= a) n += (int)(b - a + 1);
    p = *end == ',' ? end + 1 : end;
    if (*end != ',') break;
  }
  return n;
}

size_t chorus__llc_bytes(void) {
  int best_level = 0;
  size_t size = 0;
  int shared = 1;
  for (int i = 0; i < 16; i++) {
    char level[16], type[32], sz[32], cpus[8192]; /* "0,2,4,...": interleaved lists run long */
    if (!read_attr(i, "level", level, sizeof(level)) || !read_attr(i, "type", type, sizeof(type))) continue;
    if (strcmp(type, "Instruction") == 0 || atoi(level) <= best_level) continue;
    if (!read_attr(i, "size", sz, sizeof(sz)) || parse_size(sz) == 0) continue;
    best_level = atoi(level);
    size = parse_size(sz);
    shared = read_attr(i, "shared_cpu_list", cpus, sizeof(cpus)) ? count_cpus(cpus) : 0;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (size) return shared > 0 && online > shared ? size * (size_t)((online + shared - 1) / shared) : size;
#ifdef _SC_LEVEL3_CACHE_SIZE
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return (size_t)l3;
#endif
  return 0;
}

size_t chorus__stream_from_bytes(size_t llc_bytes, int ranks, int cpus) {
  if (!llc_bytes) return UNKNOWN_LLC_STREAM_FROM;
  double r = ranks > 1 ? ranks : 1, p = cpus > 0 ? cpus : 1;
  double from = 0.75 * (double)llc_bytes / (r * (r > p ? r / p : 1.0));
  return from < MIN_STREAM_FROM ? MIN_STREAM_FROM : (size_t)from;
}
