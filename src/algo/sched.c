/*
 * sched.c - the schedule of a whole-communicator call: the adapter between a registry entry
 * (which gets a task) and an engine (which runs over a group).
 */
#include "algo/algo.h"

void chorus__sched_of_task(const chorus_task_t* t, chorus_group_t group, chorus_sched_t* s) {
  const chorus_coll_args_t* a = &t->args;
  int root = a->root;
  if (group.ranks)
    for (int i = 0; i < group.size; i++)
      if (group.ranks[i] == a->root) root = i;
  *s = (chorus_sched_t){
      .group = group,
      .sendbuf = a->sendbuf,
      .recvbuf = a->recvbuf,
      .count = a->count,
      .dtype = a->dtype,
      .elem_bytes = t->dtype_size,
      .op = a->op,
      .root = root,
      .avg_divisor = t->nranks,
      .chunk_bytes = t->chunk_bytes,
      .codec = t->codec,
      .residual = t->residual,
  };
}

chorus_status_t chorus__sched_lend_area(chorus_task_t* t, chorus_sched_t* s, size_t bytes) {
  s->area = bytes ? chorus__task_scratch(t, bytes) : NULL;
  return bytes && !s->area ? CHORUS_ERR_NO_MEMORY : CHORUS_OK;
}

void chorus__sched_take_back_area(chorus_task_t* t, const chorus_sched_t* s) { chorus__task_scratch_free(t, s->area); }
