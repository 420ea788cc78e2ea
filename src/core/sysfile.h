/*
 * sysfile.h - small readers shared by core and the layers above: the first line of a /proc or
 * /sys file, and the FNV-1a hash with which ranks compare what they must agree on.
 */
#ifndef CHORUS_CORE_SYSFILE_H
#define CHORUS_CORE_SYSFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The first line of path, without its newline, into buf; 0 (and buf "") when unreadable. */
static inline int chorus__first_line(const char* path, char* buf, size_t len) {
  buf[0] = '\0';
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  int ok = fgets(buf, (int)len, f) != NULL;
  fclose(f);
  if (!ok) buf[0] = '\0';
  buf[strcspn(buf, "\n")] = '\0';
  return ok;
}

#define CHORUS_FNV_START 1469598103934665603ull

/* FNV-1a of len bytes, continuing from h (CHORUS_FNV_START for a new hash). */
static inline uint64_t chorus__fnv1a(const void* bytes, size_t len, uint64_t h) {
  const uint8_t* p = bytes;
  for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

#endif /* CHORUS_CORE_SYSFILE_H */
