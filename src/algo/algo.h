/*
 * algo.h - the algorithm contract. An algorithm is a non-blocking schedule: init() prepares
 * its state, progress() posts transfers (src/transport/conn.h) and reduces arrived data
 * (src/reduce/reduce.h), returning CHORUS_INPROGRESS until it is finished. progress() is called
 * again whenever any transfer of the communicator moved, so it must be resumable: keep the
 * position in t->phase / t->step / t->state and never wait, sleep or read the environment.
 */
#ifndef CHORUS_ALGO_H
#define CHORUS_ALGO_H

#include "coll/task.h"
#include "reduce/reduce.h"
#include "transport/conn.h"

/* Link figures the cost model uses: startup latency and bandwidth of one transfer. */
typedef struct {
  double alpha_us;      /* per message */
  double bytes_per_us;  /* sustained bandwidth */
} chorus_link_model_t;

typedef struct chorus_algo {
  const char* name;   /* the same string in CHORUS_ALGO, logs, traces, chorus-diag, chorus-perf */
  const char* desc;   /* one line for chorus-diag --algos */
  chorus_coll_t coll; /* the operation it serves */
  /* 1 if it can serve this task; NULL means always. */
  int (*supported)(const chorus_task_t* t);
  /* Predicted time in microseconds under the alpha-beta model. */
  double (*cost_us)(const chorus_task_t* t, const chorus_link_model_t* link);
  chorus_status_t (*init)(chorus_task_t* t);     /* may return ERR_NOT_SUPPORTED */
  chorus_status_t (*progress)(chorus_task_t* t); /* INPROGRESS, OK, or < 0 */
  void (*fini)(chorus_task_t* t);                /* releases t->state; NULL-safe; may be NULL */
} chorus_algo_t;

/* The registry (src/algo/registry.c). */
extern const chorus_algo_t* const chorus__algos[];
extern const size_t chorus__nalgos;
const chorus_algo_t* chorus__algo_find(chorus_coll_t coll, const char* name);

/* Helpers shared by algorithm files. */
static inline size_t chorus__min_sz(size_t a, size_t b) { return a < b ? a : b; }
static inline int chorus__mod(int a, int n) { return ((a % n) + n) % n; }

#endif /* CHORUS_ALGO_H */
