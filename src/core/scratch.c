/*
 * scratch.c - room an algorithm needs beside the caller's buffers (hier's packed blocks, an
 * in-place alltoall's stash, an engine's receive slots, rd's partner vector, zip's encodings):
 * a communicator keeps up to CHORUS_SCRATCH_KEPT blocks its calls gave back and hands each
 * call the smallest that fits, until the communicator is destroyed. Training repeats the same
 * calls, and memory freed to the system comes back as fresh pages that the kernel faults in
 * and zeroes (about 10 us a page on a machine of shadow paging):
 *   - a malloc above glibc's mmap threshold (32 MiB at most) maps new pages on every call: a
 *     64 MiB hier allgather on 4 emulated hosts x 2 ranks took 393 ms a call that way and 280
 *     with its scratch reused; 2 ranks, a forced rd allreduce of 32 MiB, 127 ms against 10;
 *   - below it, blocks freed at the top of the heap are trimmed: 4 non-blocking ring
 *     allreduces of 4 MiB in flight (1 MiB of slots each) re-faulted 4 MiB a round, 20-30 ms
 *     against 6 for the same calls made one after the other.
 * Several blocks, because non-blocking calls and the phases of a two-level call hold several
 * at once; at most CHORUS_SCRATCH_KEPT_BYTES of them together (beyond, the smaller go first),
 * though one block is kept whatever its size. Taken and given under comm->mu: algorithms' init,
 * progress and fini all run under it (coll/api.c, core/progress.c), and so do a fused group's
 * post and end (coll/group.c).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/comm.h"

/* Ahead of every block: its capacity, padded to a cache line so that the block starts on one
 * (receive slots are written with whole lines). */
typedef union {
  size_t capacity;
  char line[64];
} scratch_head_t;

/* Bytes of the blocks kept, and the index of the smallest (-1: none). */
static size_t kept_bytes(const chorus_comm_t* comm, int* smallest) {
  size_t total = 0;
  *smallest = -1;
  for (int i = 0; comm && i < CHORUS_SCRATCH_KEPT; i++) {
    scratch_head_t* k = comm->scratch[i];
    if (!k) continue;
    total += k->capacity;
    if (*smallest < 0 || k->capacity < ((scratch_head_t*)comm->scratch[*smallest])->capacity) *smallest = i;
  }
  return total;
}

void* chorus__scratch_take(chorus_comm_t* comm, size_t bytes) {
  int best = -1, largest_short = -1;
  for (int i = 0; comm && i < CHORUS_SCRATCH_KEPT; i++) {
    scratch_head_t* h = comm->scratch[i];
    if (!h) continue;
    if (h->capacity >= bytes) {
      if (best < 0 || h->capacity < ((scratch_head_t*)comm->scratch[best])->capacity) best = i;
    } else if (largest_short < 0 || h->capacity > ((scratch_head_t*)comm->scratch[largest_short])->capacity) {
      largest_short = i;
    }
  }
  if (best >= 0) {
    scratch_head_t* h = comm->scratch[best];
    comm->scratch[best] = NULL;
    return h + 1;
  }
  if (bytes > SIZE_MAX - sizeof(scratch_head_t)) return NULL;
  void* mem = NULL;
  if (posix_memalign(&mem, sizeof(scratch_head_t), sizeof(scratch_head_t) + bytes) != 0) return NULL;
  /* Calls grew past what is kept: the largest block too short for them is the likeliest never
   * to serve again (a sweep of growing sizes would otherwise keep one of each). */
  if (largest_short >= 0) {
    free(comm->scratch[largest_short]);
    comm->scratch[largest_short] = NULL;
  }
  scratch_head_t* h = mem;
  h->capacity = bytes;
  return h + 1;
}

void chorus__scratch_give(chorus_comm_t* comm, void* block) {
  if (!block) return;
  scratch_head_t* h = (scratch_head_t*)block - 1;
  if (!comm) {
    free(h);
    return;
  }
  /* Over the byte bound, the smaller blocks go first; alone, a block is kept whatever its size
   * (the calls of a training step repeat). */
  int smallest;
  for (;;) {
    size_t total = kept_bytes(comm, &smallest);
    if (smallest < 0 || total + h->capacity <= CHORUS_SCRATCH_KEPT_BYTES) break;
    if (((scratch_head_t*)comm->scratch[smallest])->capacity > h->capacity) {
      free(h); /* every kept block is larger */
      return;
    }
    free(comm->scratch[smallest]);
    comm->scratch[smallest] = NULL;
  }
  int slot = -1;
  for (int i = 0; i < CHORUS_SCRATCH_KEPT && slot < 0; i++)
    if (!comm->scratch[i]) slot = i;
  if (slot < 0) { /* all places taken: it replaces the smallest, if larger */
    if (((scratch_head_t*)comm->scratch[smallest])->capacity >= h->capacity) {
      free(h);
      return;
    }
    free(comm->scratch[smallest]);
    slot = smallest;
  }
  comm->scratch[slot] = h;
}

void chorus__scratch_release(chorus_comm_t* comm) {
  for (int i = 0; i < CHORUS_SCRATCH_KEPT; i++) {
    free(comm->scratch[i]);
    comm->scratch[i] = NULL;
  }
}

void* chorus__task_scratch(chorus_task_t* t, size_t bytes) { return chorus__scratch_take(t->comm, bytes); }

void chorus__task_scratch_free(chorus_task_t* t, void* block) { chorus__scratch_give(t->comm, block); }
