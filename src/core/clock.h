/* clock.h - monotonic time in nanoseconds, for timeouts and traces. */
#ifndef CHORUS_CLOCK_H
#define CHORUS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t chorus__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define CHORUS_NS_PER_SEC 1000000000ull

#endif /* CHORUS_CLOCK_H */
