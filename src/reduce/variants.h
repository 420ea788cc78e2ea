/*
 * variants.h - the kernel tables, one per instruction-set variant, that reduce.c chooses from
 * at run time. Private to src/reduce and to its tests and benchmark, which use
 * chorus__reduce_variant() to exercise every variant the CPU can run, not just the chosen one.
 */
#ifndef CHORUS_REDUCE_VARIANTS_H
#define CHORUS_REDUCE_VARIANTS_H

#include <stddef.h>

#include "reduce/reduce.h"

/* buf[i] = buf[i] / nranks for one dtype (nranks >= 2). */
typedef void (*chorus_avg_fn)(void* buf, size_t count, int nranks);

typedef struct {
  const char* name; /* "avx512", "avx2", "generic" */
  chorus_reduce_fn reduce[CHORUS_DTYPE_COUNT][CHORUS_OP_COUNT];
  chorus_avg_fn avg[CHORUS_DTYPE_COUNT];
} chorus_reduce_variant_t;

/* Best first: the dispatcher takes the first one the CPU supports. */
typedef enum {
  CHORUS_REDUCE_ISA_AVX512,
  CHORUS_REDUCE_ISA_AVX2,
  CHORUS_REDUCE_ISA_GENERIC,
  CHORUS_REDUCE_ISA_COUNT
} chorus_reduce_isa_t;

/* Defined by kernels_<isa>.c; the avx2/avx512 tables exist on x86 only. */
extern const chorus_reduce_variant_t chorus__reduce_generic;
#if defined(__x86_64__) || defined(__i386__)
extern const chorus_reduce_variant_t chorus__reduce_avx2;
extern const chorus_reduce_variant_t chorus__reduce_avx512;
#endif

/* The table of variant `isa`, or NULL when this CPU (or build) cannot run it. */
const chorus_reduce_variant_t* chorus__reduce_variant(chorus_reduce_isa_t isa);

#endif /* CHORUS_REDUCE_VARIANTS_H */
