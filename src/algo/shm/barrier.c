/*
 * shm/barrier.c - memory-semantics barrier for ranks that share one host: every rank
 * publishes ARRIVED = id and waits until all others have; then DONE = id (it reads nothing,
 * but every collective closes its ids). Cost: one flag wait, no data.
 */
#include "algo/algos.h"
#include "algo/shm/shm.h"

static int supported(const chorus_task_t* t) { return chorus__conn_shm_avail(t); }

static double cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  (void)t;
  return chorus__shm_cost_us(cx, 1, 1, 0);
}

static chorus_status_t init(chorus_task_t* t) { return chorus__shm_op_init(t, 1, 1, 0, 0); }

static chorus_status_t progress(chorus_task_t* t) {
  chorus_shm_op_t* s = t->state;
  uint64_t id = chorus__shm_id(s);
  chorus_status_t st = CHORUS_OK;
  if (s->stage == 0) {
    chorus__conn_shm_publish(t, SHM_ARRIVED, id);
    chorus__shm_advance(t, s, 1);
  }
  CHORUS_SHM_WAIT(chorus__shm_all_reached(t, s, SHM_ARRIVED, id, &st), st);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  return CHORUS_OK;
}

const chorus_algo_t chorus__algo_shm_barrier = {
    .name = "shm",
    .desc = "same-host memory semantics: one flag per rank in the shared segment",
    .coll = CH_COLL_BARRIER,
    .supported = supported,
    .cost_us = cost_us,
    .init = init,
    .progress = progress,
    .fini = chorus__shm_op_fini,
};
