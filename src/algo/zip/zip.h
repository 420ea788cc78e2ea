/*
 * zip.h - the compressed allreduce engine (zip/allreduce.c), over any rank group: run flat over
 * the whole communicator (CHORUS_COMPRESSION_SCOPE=all, or hosts of unequal size), or as the
 * inter-host phase of the two-level allreduce, over each rail.
 */
#ifndef CHORUS_ALGO_ZIP_H
#define CHORUS_ALGO_ZIP_H

#include "algo/common.h"

typedef struct chorus_zip chorus_zip_t;

/* s->codec must be a codec (not NONE), s->dtype float32, s->op sum or avg. */
chorus_status_t chorus__zip_start(const chorus_sched_t* s, chorus_zip_t** out);
chorus_status_t chorus__zip_step(chorus_task_t* t, chorus_zip_t* z); /* INPROGRESS, OK, < 0 */
void chorus__zip_free(chorus_zip_t* z);                              /* NULL-safe */

/* Predicted time of a compressed allreduce of `bytes` (float32) over n members on `link`:
 * two direct exchanges of the codec's form, plus encoding and decoding at memory speed. */
double chorus__zip_cost_us(const chorus_codec_t* codec, double bytes, int n, const chorus_cost_ctx_t* cx,
                           const chorus_link_model_t* link);

#endif /* CHORUS_ALGO_ZIP_H */
