/*
 * copy.c - a copy whose stores bypass the cache, for destinations too large to stay cached.
 *
 * A plain store to a line that is not cached first reads the line (read for ownership), so
 * copying into a cold buffer moves each destination byte across the memory bus twice; streaming
 * stores write whole lines without reading them. glibc's memcpy streams only for one call
 * larger than a share of the last-level cache, and the shm algorithms copy a slot (1 MiB) at a
 * time, so they decide for themselves from what the whole call touches (core/cache.c). On this project's
 * machines, copying 1 MiB chunks into a 16-256 MiB buffer ran at 6 GB/s with memcpy and 12-18 GB/s
 * streaming; into 4-8 MiB, memcpy was faster (the buffer stays in cache).
 */
#include <string.h>

#include "reduce/reduce.h"

#if defined(__x86_64__)
#include <emmintrin.h>

void chorus__copy_streaming(void* dst, const void* src, size_t nbytes) {
  char* d = dst;
  const char* s = src;
  size_t head = (16 - ((uintptr_t)d & 15)) & 15; /* streaming stores need 16-byte alignment */
  if (head > nbytes) head = nbytes;
  memcpy(d, s, head);
  d += head, s += head, nbytes -= head;
  size_t i = 0;
  for (; i + 64 <= nbytes; i += 64) {
    __m128i x0 = _mm_loadu_si128((const __m128i*)(s + i)), x1 = _mm_loadu_si128((const __m128i*)(s + i + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i*)(s + i + 32)), x3 = _mm_loadu_si128((const __m128i*)(s + i + 48));
    _mm_stream_si128((__m128i*)(d + i), x0);
    _mm_stream_si128((__m128i*)(d + i + 16), x1);
    _mm_stream_si128((__m128i*)(d + i + 32), x2);
    _mm_stream_si128((__m128i*)(d + i + 48), x3);
  }
  memcpy(d + i, s + i, nbytes - i);
  /* Streaming stores are weakly ordered: without the fence, a flag published after this copy
   * could become visible before the data. */
  _mm_sfence();
}

#else

void chorus__copy_streaming(void* dst, const void* src, size_t nbytes) { memcpy(dst, src, nbytes); }

#endif
