/* window.c - registered memory regions (see window.h). */
#include "transport/window.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

chorus_status_t chorus__window_create(size_t bytes, int nranks, uint64_t index, chorus_window_t** out,
                                      char* err, size_t errlen) {
  chorus_window_t* w = calloc(1, sizeof(*w));
  void** peers = calloc((size_t)nranks, sizeof(void*));
  if (!w || !peers) {
    free(w);
    free(peers);
    return CHORUS_ERR_NO_MEMORY;
  }
  w->fd = memfd_create("chorus-window", MFD_CLOEXEC);
  int rc = w->fd < 0 ? errno : posix_fallocate(w->fd, 0, (off_t)bytes);
  void* base = rc == 0 ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, w->fd, 0) : MAP_FAILED;
  if (base == MAP_FAILED) {
    snprintf(err, errlen, "cannot allocate %zu bytes of registered memory: %s", bytes, strerror(rc ? rc : errno));
    if (w->fd >= 0) close(w->fd);
    free(w);
    free(peers);
    return rc == ENOSPC || rc == ENOMEM ? CHORUS_ERR_NO_MEMORY : CHORUS_ERR_SYSTEM;
  }
  w->index = index;
  w->base = base;
  w->bytes = bytes;
  w->nranks = nranks;
  w->peer_base = peers;
  *out = w;
  return CHORUS_OK;
}

chorus_status_t chorus__window_map_peers(chorus_window_t* w, int rank, const chorus_window_ref_t* refs,
                                         char* err, size_t errlen) {
  for (int r = 0; r < w->nranks; r++) {
    if (r == rank) {
      w->peer_base[r] = w->base;
      continue;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", refs[r].pid, refs[r].fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    void* base = fd >= 0 ? mmap(NULL, w->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    int saved = errno;
    if (fd >= 0) close(fd);
    if (base == MAP_FAILED) {
      snprintf(err, errlen, "cannot map rank %d's registered memory (%s): %s", r, path, strerror(saved));
      return CHORUS_ERR_SYSTEM;
    }
    w->peer_base[r] = base;
  }
  return CHORUS_OK;
}

void chorus__window_close_fd(chorus_window_t* w) {
  if (w->fd >= 0) close(w->fd);
  w->fd = -1;
}

void chorus__window_destroy(chorus_window_t* w) {
  if (!w) return;
  for (int r = 0; r < w->nranks; r++)
    if (w->peer_base[r] && w->peer_base[r] != w->base) munmap(w->peer_base[r], w->bytes);
  if (w->base) munmap(w->base, w->bytes);
  chorus__window_close_fd(w);
  free(w->peer_base);
  free(w);
}

chorus_window_t* chorus__window_find(chorus_window_t* list, const void* ptr, size_t len, size_t* offset) {
  uintptr_t p = (uintptr_t)ptr;
  for (chorus_window_t* w = list; w; w = w->next) {
    uintptr_t b = (uintptr_t)w->base;
    if (p >= b && len <= w->bytes && p - b <= w->bytes - len) {
      *offset = p - b;
      return w;
    }
  }
  return NULL;
}
