/* status.c - names and messages of the public enums, generated from their X-macro lists. */
#include "chorus.h"
#include "coll/task.h"

#include <string.h>

CHORUS_API const char* chorus_status_name(chorus_status_t st) {
  switch (st) {
#define CHORUS_XX_(name, val, str) \
  case CHORUS_##name:              \
    return "CHORUS_" #name;
    CHORUS_STATUS_MAP(CHORUS_XX_)
#undef CHORUS_XX_
  }
  return "CHORUS_UNKNOWN_STATUS";
}

CHORUS_API const char* chorus_status_str(chorus_status_t st) {
  switch (st) {
#define CHORUS_XX_(name, val, str) \
  case CHORUS_##name:              \
    return str;
    CHORUS_STATUS_MAP(CHORUS_XX_)
#undef CHORUS_XX_
  }
  return "unknown status";
}

static const char* const dtype_names[] = {
#define CHORUS_XX_(name, str, size) str,
    CHORUS_DTYPE_MAP(CHORUS_XX_)
#undef CHORUS_XX_
};
static const size_t dtype_sizes[] = {
#define CHORUS_XX_(name, str, size) size,
    CHORUS_DTYPE_MAP(CHORUS_XX_)
#undef CHORUS_XX_
};
static const char* const op_names[] = {
#define CHORUS_XX_(name, str) str,
    CHORUS_OP_MAP(CHORUS_XX_)
#undef CHORUS_XX_
};
static const char* const coll_names[] = {
#define CHORUS_XX_(name, str) str,
    CHORUS_COLL_MAP(CHORUS_XX_)
#undef CHORUS_XX_
};

CHORUS_API const char* chorus_dtype_name(chorus_dtype_t dtype) {
  return ((unsigned)dtype < CHORUS_DTYPE_COUNT) ? dtype_names[dtype] : NULL;
}

CHORUS_API size_t chorus_dtype_size(chorus_dtype_t dtype) {
  return ((unsigned)dtype < CHORUS_DTYPE_COUNT) ? dtype_sizes[dtype] : 0;
}

CHORUS_API const char* chorus_op_name(chorus_op_t op) {
  return ((unsigned)op < CHORUS_OP_COUNT) ? op_names[op] : NULL;
}

CHORUS_API int chorus_version(void) { return CHORUS_VERSION_CODE; }

const char* chorus__coll_name(chorus_coll_t coll) {
  return ((unsigned)coll < CH_COLL_COUNT) ? coll_names[coll] : "?";
}

int chorus__coll_from_name(const char* name) {
  for (int i = 0; i < CH_COLL_COUNT; i++)
    if (strcmp(coll_names[i], name) == 0) return i;
  return -1;
}
