/*
 * window.h - registered memory: regions every rank of a host maps (chorus_mem_alloc). Each
 * rank backs its region with a memfd; peers map it through /proc/<pid>/fd/<n>, after which the
 * owner closes the fd, so the memory lives exactly as long as some process maps it and no name
 * is ever left in /dev/shm.
 */
#ifndef CHORUS_WINDOW_H
#define CHORUS_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

typedef struct chorus_window {
  uint64_t index; /* the same on every rank: windows are made collectively, in order */
  void* base;     /* this rank's region */
  size_t bytes;
  int fd;         /* memfd, open until every peer has mapped it */
  void** peer_base; /* every rank's region in this process (peer_base[rank] == base) */
  int nranks;
  struct chorus_window* next;
} chorus_window_t;

/* Where a rank's region can be opened: its pid and the memfd number. */
typedef struct {
  int32_t pid;
  int32_t fd;
} chorus_window_ref_t;

chorus_status_t chorus__window_create(size_t bytes, int nranks, uint64_t index, chorus_window_t** out,
                                      char* err, size_t errlen);
/* Maps every peer's region; refs[r] for every rank r (its own entry is skipped). */
chorus_status_t chorus__window_map_peers(chorus_window_t* w, int rank, const chorus_window_ref_t* refs,
                                         char* err, size_t errlen);
void chorus__window_close_fd(chorus_window_t* w);
void chorus__window_destroy(chorus_window_t* w);

/* The window holding [ptr, ptr + len) in this rank's region, and the offset of ptr; NULL if none. */
chorus_window_t* chorus__window_find(chorus_window_t* list, const void* ptr, size_t len, size_t* offset);

#endif /* CHORUS_WINDOW_H */
