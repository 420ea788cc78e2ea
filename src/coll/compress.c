/*
 * compress.c - a communicator's gradient compression setting (CHORUS_COMPRESSION,
 * CHORUS_COMPRESSION_SCOPE, chorus_comm_set_compression) and which calls it applies to: the
 * float32 sum/avg allreduces, across hosts (scope inter-host) or everywhere (scope all). The
 * calls it leaves alone may still cross hosts in the lossless ZEROS form (CHORUS_ZEROS).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "coll/coll.h"
#include "core/live.h"
#include "core/log.h"
#include "core/param.h"

const char* chorus_compression_name(chorus_compression_t codec) {
  /* ZEROS is the library's own form, not a codec a user names */
  return (unsigned)codec < (unsigned)CHORUS_CODEC_PUBLIC_COUNT ? chorus__codec_name((chorus_codec_kind_t)codec) : NULL;
}

static int opts_valid(const chorus_compression_opts_t* o) {
  if ((unsigned)o->codec >= (unsigned)CHORUS_CODEC_PUBLIC_COUNT) return 0;
  if (o->scope != CHORUS_COMPRESSION_SCOPE_INTER_HOST && o->scope != CHORUS_COMPRESSION_SCOPE_ALL) return 0;
  return o->codec != CHORUS_COMPRESSION_TOPK || (o->topk_fraction > 0.0 && o->topk_fraction <= 1.0);
}

/* "topk:0.01" or "topk:1%": the fraction, or -1 when the text is not one. */
static double parse_fraction(const char* text) {
  char* end = NULL;
  errno = 0;
  double f = strtod(text, &end);
  if (errno || end == text) return -1.0;
  if (*end == '%') {
    f /= 100.0;
    end++;
  }
  return *end == '\0' && f > 0.0 && f <= 1.0 ? f : -1.0;
}

static chorus_status_t parse_codec(const char* spec, chorus_compression_opts_t* o, char* err, size_t errlen) {
  o->topk_fraction = 0.0;
  if (!spec[0]) {
    o->codec = CHORUS_COMPRESSION_NONE;
    return CHORUS_OK;
  }
  if (strncmp(spec, "topk:", 5) == 0) {
    o->codec = CHORUS_COMPRESSION_TOPK;
    o->topk_fraction = parse_fraction(spec + 5);
    if (o->topk_fraction > 0.0) return CHORUS_OK;
    snprintf(err, errlen, "CHORUS_COMPRESSION=%s: the top-k fraction must lie in (0, 1] (topk:0.01 or topk:1%%)", spec);
    return CHORUS_ERR_INVALID_ARG;
  }
  for (int c = 0; c < CHORUS_CODEC_PUBLIC_COUNT; c++) {
    if (c != CHORUS_COMPRESSION_TOPK && strcmp(spec, chorus__codec_name((chorus_codec_kind_t)c)) == 0) {
      o->codec = (chorus_compression_t)c;
      return CHORUS_OK;
    }
  }
  snprintf(err, errlen, "CHORUS_COMPRESSION=%s: expected none, fp16, bf16, int8, int4 or topk:FRACTION", spec);
  return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__zeros_from_env(int* mode, char* err, size_t errlen) {
  static const char* const names[] = {[CHORUS_ZEROS_OFF] = "off", [CHORUS_ZEROS_ON] = "on",
                                      [CHORUS_ZEROS_AUTO] = "auto"};
  const char* v = chorus__param_str(CHORUS_PARAM_ZEROS);
  for (int m = 0; m < 3; m++)
    if (strcmp(v, names[m]) == 0 || (!v[0] && m == CHORUS_ZEROS_AUTO)) {
      *mode = m;
      return CHORUS_OK;
    }
  snprintf(err, errlen, "CHORUS_ZEROS=%s: expected auto, on or off", v);
  return CHORUS_ERR_INVALID_ARG;
}

chorus_status_t chorus__compression_from_env(chorus_compression_opts_t* o, char* err, size_t errlen) {
  chorus_status_t st = parse_codec(chorus__param_str(CHORUS_PARAM_COMPRESSION), o, err, errlen);
  if (st < 0) return st;
  const char* scope = chorus__param_str(CHORUS_PARAM_COMPRESSION_SCOPE);
  if (strcmp(scope, "inter") == 0 || !scope[0]) {
    o->scope = CHORUS_COMPRESSION_SCOPE_INTER_HOST;
  } else if (strcmp(scope, "all") == 0) {
    o->scope = CHORUS_COMPRESSION_SCOPE_ALL;
  } else {
    snprintf(err, errlen, "CHORUS_COMPRESSION_SCOPE=%s: expected inter or all", scope);
    return CHORUS_ERR_INVALID_ARG;
  }
  return CHORUS_OK;
}

chorus_status_t chorus_comm_set_compression(chorus_comm_t* comm, const chorus_compression_opts_t* opts) {
  if (!chorus__live_check(comm, "chorus_comm_set_compression")) return CHORUS_ERR_INVALID_ARG;
  pthread_mutex_lock(&comm->mu);
  chorus_status_t st = CHORUS_OK;
  if (!opts) {
    comm->compression = comm->compression_env;
  } else if (!opts_valid(opts)) {
    chorus__comm_set_error(comm, "chorus_comm_set_compression: codec %d, scope %d, top-k fraction %g: "
                                 "unknown codec or scope, or a fraction outside (0, 1]",
                           (int)opts->codec, (int)opts->scope, opts->topk_fraction);
    st = CHORUS_ERR_INVALID_ARG;
  } else {
    comm->compression = *opts;
    if (opts->codec != CHORUS_COMPRESSION_TOPK) comm->compression.topk_fraction = 0.0;
  }
  pthread_mutex_unlock(&comm->mu);
  return st;
}

chorus_status_t chorus_comm_set_compression_min_bytes(chorus_comm_t* comm, size_t min_bytes) {
  if (!chorus__live_check(comm, "chorus_comm_set_compression_min_bytes")) return CHORUS_ERR_INVALID_ARG;
  pthread_mutex_lock(&comm->mu);
  comm->compression_min_bytes = min_bytes;
  pthread_mutex_unlock(&comm->mu);
  return CHORUS_OK;
}

chorus_status_t chorus_comm_get_compression_min_bytes(const chorus_comm_t* comm, size_t* min_bytes) {
  if (!chorus__live_check(comm, "chorus_comm_get_compression_min_bytes") || !min_bytes) return CHORUS_ERR_INVALID_ARG;
  pthread_mutex_lock((pthread_mutex_t*)&comm->mu);
  *min_bytes = comm->compression_min_bytes;
  pthread_mutex_unlock((pthread_mutex_t*)&comm->mu);
  return CHORUS_OK;
}

chorus_status_t chorus_comm_get_compression(const chorus_comm_t* comm, chorus_compression_opts_t* opts) {
  if (!chorus__live_check(comm, "chorus_comm_get_compression")) return CHORUS_ERR_INVALID_ARG;
  if (!opts) return CHORUS_ERR_INVALID_ARG;
  pthread_mutex_lock((pthread_mutex_t*)&comm->mu);
  *opts = comm->compression;
  pthread_mutex_unlock((pthread_mutex_t*)&comm->mu);
  return CHORUS_OK;
}

struct chorus_residual {
  const chorus_comm_t* comm;
  size_t count;
  float values[];
};

chorus_status_t chorus_residual_create(chorus_comm_t* comm, size_t count, chorus_residual_t** residual) {
  if (!chorus__live_check(comm, "chorus_residual_create")) return CHORUS_ERR_INVALID_ARG;
  if (!residual || count > (SIZE_MAX - sizeof(chorus_residual_t)) / sizeof(float)) {
    pthread_mutex_lock(&comm->mu);
    chorus__comm_set_error(comm, "chorus_residual_create: %s", residual ? "count too large" : "the handle pointer is NULL");
    pthread_mutex_unlock(&comm->mu);
    return CHORUS_ERR_INVALID_ARG;
  }
  chorus_residual_t* r = calloc(1, sizeof(*r) + count * sizeof(float));
  if (!r) return CHORUS_ERR_NO_MEMORY;
  r->comm = comm;
  r->count = count;
  *residual = r;
  return CHORUS_OK;
}

chorus_status_t chorus_residual_destroy(chorus_residual_t* residual) {
  if (!residual) return CHORUS_ERR_INVALID_ARG;
  free(residual);
  return CHORUS_OK;
}

chorus_status_t chorus__compression_check_opts(chorus_comm_t* comm, const chorus_coll_args_t* a) {
  if (a->zip_given && !opts_valid(&a->zip)) {
    chorus__comm_set_error(comm, "chorus_allreduce_ex: compression codec %d, scope %d, top-k fraction %g: unknown "
                                 "codec or scope, or a fraction outside (0, 1]",
                           (int)a->zip.codec, (int)a->zip.scope, a->zip.topk_fraction);
    return CHORUS_ERR_INVALID_ARG;
  }
  if (a->residual && (a->residual->comm != comm || a->residual->count != a->count)) {
    chorus__comm_set_error(comm, "chorus_allreduce_ex: the residual was made for %s and %zu elements, the call has %zu",
                           a->residual->comm == comm ? "this communicator" : "another communicator",
                           a->residual->count, a->count);
    return CHORUS_ERR_INVALID_ARG;
  }
  return CHORUS_OK;
}

/* Whether any codec may carry call a: a float32 sum/avg allreduce, across hosts when only what
 * crosses them is encoded. */
static int codec_may_carry(const chorus_comm_t* comm, const chorus_coll_args_t* a, int inter_only) {
  if (a->coll != CH_COLL_ALLREDUCE || a->dtype != CHORUS_FLOAT32) return 0;
  return (a->op == CHORUS_SUM || a->op == CHORUS_AVG) && (!inter_only || comm->topo.nhosts >= 2);
}

/* Whether setting o compresses a call like a, whatever its size. */
static int setting_covers(const chorus_comm_t* comm, const chorus_compression_opts_t* o, const chorus_coll_args_t* a) {
  if (o->codec == CHORUS_COMPRESSION_NONE) return 0;
  if (!codec_may_carry(comm, a, o->scope == CHORUS_COMPRESSION_SCOPE_INTER_HOST)) return 0;
  /* Top-k's indices are 32-bit (reduce/codec.h): a larger call goes as it is, on every rank alike. */
  return o->codec != CHORUS_COMPRESSION_TOPK || a->count <= UINT32_MAX;
}

/* Fewer than min bytes of float32 (count x 4 < min, without overflow). */
static int under_bytes(const chorus_coll_args_t* a, size_t min) {
  return a->count < min / sizeof(float) + (min % sizeof(float) != 0);
}

static int under_min_bytes(const chorus_comm_t* comm, const chorus_coll_args_t* a) {
  return under_bytes(a, comm->compression_min_bytes);
}

int chorus__compression_exact_by_size(const chorus_comm_t* comm, const chorus_coll_args_t* a) {
  return !a->zip_given && setting_covers(comm, &comm->compression, a) && under_min_bytes(comm, a);
}

/* Where host links are this slow or slower, the ZEROS form's passes (a scan, a compaction, an
 * expansion: a few times the bytes at memory speed, cx->reduce_bytes_per_us) cost under an
 * eighth of what the block takes to cross, so even a vector with no +0 to drop loses little;
 * faster links (an unshaped veth pair carries 1600-2300 bytes/us here) keep the plain form. */
#define ZEROS_AUTO_LINK_BYTES_PER_US 750.0

/* Whether the lossless ZEROS form carries a call the setting does not compress: float32 sum/avg
 * allreduces that cross hosts, from CHORUS_ZEROS_MIN_BYTES (256 KiB: at 64 KiB on 4 emulated
 * hosts x 2 ranks the form's two messages per block took dense calls to 1.21x the plain
 * two-level allreduce's time, from 256 KiB on level; docs/cluster.md), by CHORUS_ZEROS. In auto
 * only on links slow enough and where the two-level allreduce's rails carry it (hosts of equal size, several ranks
 * each), whose pipeline hides the form's passes behind the other chunks' transfers: on hosts of
 * one rank the flat compressed allreduce that would carry it encodes, exchanges and decodes
 * whole blocks in turn, and took 1.26-1.38x the ring's time for dense 4-16 MiB vectors on 4
 * emulated hosts at 2 Gbit/s (docs/cluster.md). Every rank decides alike: the link figure is
 * host 0's, published at creation. */
static int zeros_cover(const chorus_comm_t* comm, const chorus_coll_args_t* a) {
  if (comm->zeros == CHORUS_ZEROS_OFF || !codec_may_carry(comm, a, 1)) return 0;
  if (under_bytes(a, comm->zeros_min_bytes)) return 0;
  if (a->count > UINT32_MAX) return 0; /* the form counts a block's elements in 32 bits */
  if (comm->zeros == CHORUS_ZEROS_ON) return 1;
  return chorus__topo_has_rails(&comm->topo) && comm->cost.inter.bytes_per_us <= ZEROS_AUTO_LINK_BYTES_PER_US;
}

void chorus__compression_resolve(const chorus_comm_t* comm, chorus_task_t* t) {
  const chorus_coll_args_t* a = &t->args;
  const chorus_compression_opts_t* o = a->zip_given ? &a->zip : &comm->compression;
  t->codec = (chorus_codec_t){CHORUS_CODEC_NONE, 0.0};
  t->residual = NULL;
  t->codec_scope_all = 0;
  if (t->internal) return;
  int lossy = setting_covers(comm, o, a) && (a->zip_given || !under_min_bytes(comm, a)); /* a call's own: any size */
  if (!lossy) {
    if (!a->zip_given && zeros_cover(comm, a)) t->codec = (chorus_codec_t){CHORUS_CODEC_ZEROS, 0.0};
    return;
  }
  t->codec = (chorus_codec_t){(chorus_codec_kind_t)o->codec, o->topk_fraction};
  t->codec_scope_all = o->scope == CHORUS_COMPRESSION_SCOPE_ALL;
  t->residual = a->residual ? a->residual->values : NULL;
}
