/*
 * scratch.c - room an algorithm needs beside the caller's buffers (hier's packed blocks, an
 * in-place alltoall's stash): a communicator keeps the largest block its calls freed and hands
 * it to the next call that fits in it, until the communicator is destroyed. Training repeats
 * the same calls, and a fresh malloc above glibc's mmap threshold (32 MiB at most) maps new
 * pages on every call, which the kernel faults in and zeroes: a 64 MiB hier allgather on 4
 * emulated hosts x 2 ranks took 393 ms a call that way and 280 with its scratch reused.
 * Algorithms take and give scratch only from init and fini, which run under comm->mu
 * (coll/api.c, core/progress.c): the lock that guards the kept block.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/comm.h"

/* Ahead of every block: its capacity, padded so that the block keeps malloc's alignment. */
typedef union {
  size_t capacity;
  max_align_t align;
} scratch_head_t;

void* chorus__task_scratch(chorus_task_t* t, size_t bytes) {
  chorus_comm_t* comm = t->comm;
  scratch_head_t* kept = comm->scratch;
  if (kept && kept->capacity >= bytes) {
    comm->scratch = NULL;
    return kept + 1;
  }
  if (bytes > SIZE_MAX - sizeof(scratch_head_t)) return NULL;
  scratch_head_t* head = malloc(sizeof(scratch_head_t) + bytes);
  if (!head) return NULL;
  head->capacity = bytes;
  return head + 1;
}

void chorus__task_scratch_free(chorus_task_t* t, void* block) {
  if (!block) return;
  chorus_comm_t* comm = t->comm;
  scratch_head_t* head = (scratch_head_t*)block - 1;
  scratch_head_t* kept = comm->scratch;
  if (kept && kept->capacity >= head->capacity) {
    free(head);
    return;
  }
  free(kept);
  comm->scratch = head;
}

void chorus__scratch_release(chorus_comm_t* comm) {
  free(comm->scratch);
  comm->scratch = NULL;
}
