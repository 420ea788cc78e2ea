/*
 * select.c - algorithm selection: CHORUS_ALGO forces a choice for the calls its items cover (an
 * error when that algorithm cannot serve the call, never a silent fallback); otherwise the
 * registry entry with the lowest predicted alpha-beta cost among those that support the call.
 * A call with a codec (coll/compress.c) is offered only to the algorithms that compress; a
 * forced algorithm that does not compress runs it as it is (its codec is dropped, on every rank
 * alike, before the signature is taken).
 */
#include <float.h>
#include <stdio.h>
#include <string.h>

#include "coll/coll.h"
#include "core/log.h"

chorus_status_t chorus__select(chorus_comm_t* comm, chorus_task_t* t) {
  chorus_coll_t coll = t->args.coll;
  const char* cname = chorus__coll_name(coll);
  size_t bytes = t->args.count * t->dtype_size;
  for (int i = comm->nrules[coll] - 1; i >= 0; i--) {
    const chorus_algo_rule_t* rule = &comm->rules[coll][i];
    if (bytes < rule->lo || bytes >= rule->hi) continue;
    if (!rule->algo) {
      chorus__comm_set_error(comm, "%s: CHORUS_ALGO=%s names no %s algorithm \"%s\" (chorus-diag --algos lists them)",
                             cname, comm->algo_spec, cname, rule->name);
      return CHORUS_ERR_NOT_SUPPORTED;
    }
    if (rule->algo->supported && !rule->algo->supported(t)) {
      /* A compressing algorithm (zip serves only compressed calls) forced for a call without a
       * codec (another dtype or op, scope inter on one host): the call runs as if not covered. */
      if (rule->algo->compresses && t->codec.kind == CHORUS_CODEC_NONE) continue;
      chorus__comm_set_error(comm, "%s: CHORUS_ALGO=%s forces algorithm \"%s\", which cannot serve this call "
                             "(%zu elements on %d ranks)", cname, comm->algo_spec, rule->algo->name,
                             t->args.count, comm->nranks);
      return CHORUS_ERR_NOT_SUPPORTED;
    }
    t->algo = rule->algo;
    t->sub_algo = rule->sub[0] ? rule->sub : NULL;
    if (rule->algo->cost_us) {
      chorus_cost_ctx_t cx = chorus__cost_for_call(&comm->cost, (double)bytes);
      t->predicted_us = rule->algo->cost_us(t, &cx);
    }
    if (!rule->algo->compresses) t->codec = (chorus_codec_t){CHORUS_CODEC_NONE, 0.0}; /* documented: sent as is */
    /* The lossless form is the library's own choice: a forced inner engine (hier/ring) runs. */
    if (t->codec.kind == CHORUS_CODEC_ZEROS && t->sub_algo) t->codec = (chorus_codec_t){CHORUS_CODEC_NONE, 0.0};
    return CHORUS_OK;
  }
  /* Training repeats the same calls: the last choice for the same shape is reused as long as
   * it still supports the call (support can depend on more than the key, e.g. buffers). */
  const chorus_coll_args_t* a0 = &t->args;
  uint64_t key[3] = {(uint64_t)a0->dtype | (uint64_t)a0->op << 8 | (uint64_t)(uint32_t)a0->root << 16 |
                         (uint64_t)(a0->sendbuf == a0->recvbuf) << 48 | (uint64_t)(t->segs != NULL) << 49 |
                         (uint64_t)t->codec.kind << 50 | (uint64_t)(t->codec_scope_all != 0) << 54,
                     a0->count, a0->recvcount ^ (uint64_t)(uint32_t)a0->peer << 40};
  const chorus_algo_t* cached = comm->picked[coll].algo;
  if (cached && memcmp(key, comm->picked[coll].key, sizeof(key)) == 0 &&
      (!cached->supported || cached->supported(t))) {
    t->algo = cached;
    t->predicted_us = comm->picked[coll].us;
    return CHORUS_OK;
  }
  const chorus_algo_t* best = NULL;
  double best_us = DBL_MAX;
  chorus_cost_ctx_t cx = chorus__cost_for_call(&comm->cost, (double)bytes);
  /* The candidates and their predictions, for the debug log (built only when it is on). */
  int log_on = CH_LOG_ON(CH_LOG_DEBUG, CH_SUB(TUNE));
  char cands[512];
  size_t len = 0;
  cands[0] = '\0';
  for (size_t i = 0; i < chorus__nalgos; i++) {
    const chorus_algo_t* a = chorus__algos[i];
    if (a->coll != coll || (a->supported && !a->supported(t))) continue;
    if (t->codec.kind != CHORUS_CODEC_NONE && !a->compresses) continue;
    double us = a->cost_us ? a->cost_us(t, &cx) : 0.0;
    if (!a->takes_segments && us < DBL_MAX) us += chorus__algo_packing_us(t, &cx);
    if (us < best_us) {
      best = a;
      best_us = us;
    }
    if (log_on && len + 40 < sizeof(cands) && us < DBL_MAX)
      len += (size_t)snprintf(cands + len, sizeof(cands) - len, " %s=%.1f", a->name, us);
  }
  if (!best) {
    chorus__comm_set_error(comm, "%s: no registered algorithm supports this call", cname);
    return CHORUS_ERR_NOT_SUPPORTED;
  }
  CH_DEBUG(TUNE, comm->rank, "%s of %zu bytes on %d host(s): %s (%.1f us predicted); candidates (us):%s", cname,
           bytes, comm->cost.nhosts, best->name, best_us, cands);
  t->algo = best;
  t->predicted_us = best_us;
  comm->picked[coll].algo = best;
  comm->picked[coll].us = best_us;
  memcpy(comm->picked[coll].key, key, sizeof(key));
  return CHORUS_OK;
}
