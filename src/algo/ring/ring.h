/*
 * ring.h - the chunk-pipelined ring schedule shared by ring allreduce, reduce_scatter and
 * allgather. Allreduce runs n-1 reduce-scatter steps then n-1 allgather steps; the standalone
 * reduce_scatter and allgather run one of the two halves. ring.c holds the engine and the
 * full description (segments, units, dependencies, windows).
 */
#ifndef CHORUS_ALGO_RING_H
#define CHORUS_ALGO_RING_H

#include "algo/algo.h"

/* Receive scratch slots (chunks) for reduce-scatter receives (also the receives kept posted in
 * the allgather half), and sends kept in flight. Compile-time knobs, since algorithms read no
 * environment. Measured on 2 cores, 2-8 ranks, 1-64 MiB: 2 and 4 were equal within noise, 8
 * and 16 slower with chunks of 256 KiB and more; 4 keeps more receives posted for TCP peers. */
#ifndef CHORUS_RING_WINDOW
#define CHORUS_RING_WINDOW 4
#endif
#ifndef CHORUS_RING_SENDS
#define CHORUS_RING_SENDS 4
#endif

typedef enum {
  CHORUS_RING_ALLREDUCE,      /* count elements in n segments; reduce-scatter + allgather */
  CHORUS_RING_REDUCE_SCATTER, /* n blocks of count elements; rank r keeps block r */
  CHORUS_RING_ALLGATHER,      /* n blocks of count elements; rank r contributes block r */
  /* The two halves of allreduce as phases of a two-level algorithm, over the same count
   * elements in n segments (chorus__ring_segment): the first leaves member r with segment
   * (r + 1) mod n reduced in recvbuf; the second spreads every member's segment (r + 1) mod n
   * of recvbuf (sendbuf unused) to all. */
  CHORUS_RING_ALLREDUCE_RS,
  CHORUS_RING_ALLREDUCE_AG
} chorus_ring_kind_t;

/* Segment i of count elements cut into n as the allreduce halves cut it. */
static inline void chorus__ring_segment(size_t count, int n, int i, size_t* first, size_t* len) {
  size_t base = count / (size_t)n, rem = count % (size_t)n, k = (size_t)i;
  *first = k * base + (k < rem ? k : rem);
  *len = base + (k < rem ? 1 : 0);
}
/* The segment member r owns after CHORUS_RING_ALLREDUCE_RS. */
static inline int chorus__ring_rs_owned(int r, int n) { return (r + 1) % n; }

/* The engine, over any group: start, step until OK (or < 0), free (NULL-safe). */
typedef struct chorus_ring chorus_ring_t;
chorus_status_t chorus__ring_start(const chorus_sched_t* s, chorus_ring_kind_t kind, chorus_ring_t** out);
chorus_status_t chorus__ring_step(chorus_task_t* t, chorus_ring_t* ring);
size_t chorus__ring_units_done(const chorus_ring_t* ring);
void chorus__ring_free(chorus_ring_t* ring);

/* The registry entries' init/progress/fini: the whole communicator on its host-ordered ring
 * (allgatherv, reduce_scatterv: blocks of the task's recvcounts at its rdispls). */
chorus_status_t chorus__ring_init(chorus_task_t* t, chorus_ring_kind_t kind);
/* The same over another ordering of the whole communicator (rankring: rank order). */
chorus_status_t chorus__ring_init_over(chorus_task_t* t, chorus_ring_kind_t kind, chorus_group_t ring);
chorus_status_t chorus__ring_progress(chorus_task_t* t);
void chorus__ring_fini(chorus_task_t* t);
/* Cost of the ring allreduce of the whole communicator when its slowest hop is `link`
 * (allreduce.c). */
double chorus__ring_allreduce_cost_us(const chorus_task_t* t, const chorus_link_model_t* link);
/* Cost of ring allgatherv and reduce_scatterv (allgatherv.c). */
double chorus__ring_v_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx);

#endif /* CHORUS_ALGO_RING_H */
