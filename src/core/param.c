/* param.c - the table built from param.def and its typed, validated getters. */
#include "core/param.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const chorus_param_info_t chorus__params[CHORUS_PARAM_COUNT] = {
#define PARAM(name, type, def, lo, hi, doc) {#name, #type[0] == 'I', def, lo, hi, doc},
#include "core/param.def"
#undef PARAM
};

static const char* param_raw(chorus_param_id_t id) {
  char var[96];
  snprintf(var, sizeof(var), "CHORUS_%s", chorus__params[id].name);
  const char* v = getenv(var);
  return (v && *v) ? v : NULL;
}

const char* chorus__param_str(chorus_param_id_t id) {
  const char* v = param_raw(id);
  return v ? v : chorus__params[id].def;
}

chorus_status_t chorus__param_int(chorus_param_id_t id, int64_t* out, char* err, size_t errlen) {
  const chorus_param_info_t* p = &chorus__params[id];
  const char* v = param_raw(id);
  const char* text = v ? v : p->def;
  char* end = NULL;
  errno = 0;
  long long val = strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || val < p->lo || val > p->hi) {
    if (err)
      snprintf(err, errlen, "CHORUS_%s=\"%s\" is invalid: expected an integer in [%lld, %lld]",
               p->name, text, (long long)p->lo, (long long)p->hi);
    return CHORUS_ERR_INVALID_ARG;
  }
  *out = val;
  return CHORUS_OK;
}
