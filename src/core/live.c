/*
 * live.c - the set of live communicators (live.h): an open-addressing hash table of atomic
 * pointers, probed linearly. Readers (every API call) take no lock and never dereference what
 * they look up; writers (creation, destroy) hold a mutex. A removed entry becomes a tombstone
 * that later insertions reuse, so the probe path of a live entry stays short; a lookup that
 * misses (only on the error path) may scan the table. When live entries fill half the table it
 * is copied into one twice the size, published with one atomic store; the old table is kept
 * (never freed: the tables add up to less than twice the last one), so a reader still probing
 * it stays safe, and sees every communicator that was live before its call began.
 */
#include "core/live.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define EMPTY ((uintptr_t)0)
#define TOMB ((uintptr_t)1)
#define FIRST_CAP 64

typedef struct table {
  size_t cap; /* a power of two */
  struct table* older; /* the table this one replaced (kept, see above) */
  uintptr_t slot[];    /* accessed atomically */
} table_t;

static table_t* current; /* atomic */
static size_t live_count;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local char error_msg[200];
static _Thread_local const void* error_about; /* the communicator error_msg is about */

static size_t home(uintptr_t p, size_t cap) {
  return (size_t)(((uint64_t)p * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);
}

static table_t* table_new(size_t cap) {
  table_t* t = calloc(1, sizeof(*t) + cap * sizeof(uintptr_t));
  if (t) t->cap = cap;
  return t;
}

/* Stores p in the first free slot of its probe path. mu held; t has a free slot. */
static void put(table_t* t, uintptr_t p) {
  for (size_t i = home(p, t->cap);; i = (i + 1) & (t->cap - 1)) {
    uintptr_t v = __atomic_load_n(&t->slot[i], __ATOMIC_RELAXED);
    if (v == EMPTY || v == TOMB) {
      __atomic_store_n(&t->slot[i], p, __ATOMIC_RELEASE);
      return;
    }
  }
}

/* Index of p in t, or -1. Inlined: it is the whole cost of the check on every call. */
static inline __attribute__((always_inline)) long find(const table_t* t, uintptr_t p) {
  size_t i = home(p, t->cap);
  for (size_t n = 0; n < t->cap; n++, i = (i + 1) & (t->cap - 1)) {
    uintptr_t v = __atomic_load_n(&t->slot[i], __ATOMIC_ACQUIRE);
    if (v == p) return (long)i;
    if (v == EMPTY) return -1;
  }
  return -1;
}

int chorus__live_add(const chorus_comm_t* comm) {
  pthread_mutex_lock(&mu);
  table_t* t = current;
  if (!t || (live_count + 1) * 2 > t->cap) {
    table_t* bigger = table_new(t ? t->cap * 2 : FIRST_CAP);
    if (!bigger) {
      pthread_mutex_unlock(&mu);
      return -1;
    }
    for (size_t i = 0; t && i < t->cap; i++) {
      uintptr_t v = __atomic_load_n(&t->slot[i], __ATOMIC_RELAXED);
      if (v != EMPTY && v != TOMB) put(bigger, v);
    }
    bigger->older = t;
    __atomic_store_n(&current, bigger, __ATOMIC_RELEASE);
    t = bigger;
  }
  put(t, (uintptr_t)comm);
  live_count++;
  pthread_mutex_unlock(&mu);
  return 0;
}

int chorus__live_remove(const chorus_comm_t* comm) {
  if (!comm) return 0;
  pthread_mutex_lock(&mu);
  table_t* t = current;
  long i = t ? find(t, (uintptr_t)comm) : -1;
  if (i >= 0) {
    __atomic_store_n(&t->slot[i], TOMB, __ATOMIC_RELEASE);
    live_count--;
  }
  pthread_mutex_unlock(&mu);
  return i >= 0;
}

int chorus__live_has(const chorus_comm_t* comm) {
  const table_t* t = __atomic_load_n(&current, __ATOMIC_ACQUIRE);
  return comm && t && find(t, (uintptr_t)comm) >= 0;
}

int chorus__live_check(const chorus_comm_t* comm, const char* call) {
  if (chorus__live_has(comm)) return 1;
  error_about = comm;
  if (!comm)
    snprintf(error_msg, sizeof(error_msg), "%s: the communicator is NULL", call);
  else
    snprintf(error_msg, sizeof(error_msg), "%s: %p is not a valid communicator (destroyed, or never created)",
             call, (const void*)comm);
  return 0;
}

const char* chorus__live_error(const chorus_comm_t* comm) { return error_about == comm ? error_msg : ""; }
