/*
 * param.h - typed access to the CHORUS_* environment variables declared in param.def.
 * Values are read when a communicator is created (not cached for the process), so a test can
 * change them between communicators. A malformed or out-of-range value is an error that names
 * the variable.
 */
#ifndef CHORUS_PARAM_H
#define CHORUS_PARAM_H

#include <stdint.h>

#include "chorus.h"

typedef enum {
#define PARAM(name, type, def, lo, hi, doc) CHORUS_PARAM_##name,
#include "core/param.def"
#undef PARAM
  CHORUS_PARAM_COUNT
} chorus_param_id_t;

typedef struct {
  const char* name; /* without the CHORUS_ prefix */
  int is_int;
  const char* def;
  int64_t lo, hi;
  const char* doc;
} chorus_param_info_t;

extern const chorus_param_info_t chorus__params[CHORUS_PARAM_COUNT];

/* Reads an INT parameter: the environment value or the default. On a bad value returns
 * ERR_INVALID_ARG and writes a sentence naming the variable into err (if err != NULL). */
chorus_status_t chorus__param_int(chorus_param_id_t id, int64_t* out, char* err, size_t errlen);
/* Reads a STR parameter: the environment value or the default (never NULL). */
const char* chorus__param_str(chorus_param_id_t id);

#endif /* CHORUS_PARAM_H */
