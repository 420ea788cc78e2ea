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
      .pool = t->comm,
  };
}

void* chorus__sched_scratch(const chorus_sched_t* s, size_t bytes) { return chorus__scratch_take(s->pool, bytes); }

void chorus__sched_scratch_free(const chorus_sched_t* s, void* block) { chorus__scratch_give(s->pool, block); }
