/*
 * reduce.h - reduction and conversion kernels, one per dtype x op, selected at run time.
 *
 * chorus__reduce computes dst[i] = a[i] OP b[i] for i < count. dst may be the same pointer as a
 * or b (exact aliasing), never a partial overlap. CHORUS_AVG reduces as CHORUS_SUM; the caller
 * divides once at the end with chorus__reduce_avg_finish. float16 and bfloat16 are computed in
 * float32 and rounded to nearest even on store. Integer arithmetic wraps (unsigned semantics
 * for the bit pattern), as MPI implementations do in practice.
 */
#ifndef CHORUS_REDUCE_H
#define CHORUS_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

typedef void (*chorus_reduce_fn)(void* dst, const void* a, const void* b, size_t count);

/* The kernel for (dtype, op); NULL when either is out of range. */
chorus_reduce_fn chorus__reduce_fn(chorus_dtype_t dtype, chorus_op_t op);

/* dst[i] = a[i] op b[i]. */
void chorus__reduce(void* dst, const void* a, const void* b, size_t count, chorus_dtype_t dtype,
                    chorus_op_t op);

/* buf[i] /= nranks; integers truncate toward zero; float16/bfloat16 divide in float32 and round
 * to nearest even. A no-op for nranks <= 1. */
void chorus__reduce_avg_finish(void* buf, size_t count, chorus_dtype_t dtype, int nranks);

/* IEEE binary16 and bfloat16 <-> float32, round to nearest even, NaN kept NaN. */
float chorus__half_to_float(uint16_t h);
uint16_t chorus__float_to_half(float f);
float chorus__bf16_to_float(uint16_t b);
uint16_t chorus__float_to_bf16(float f);

/* memcpy with stores that bypass the cache (copy.c): for destinations that will not stay cached.
 * No overlap; the copy is complete and visible to other threads before a later store. */
void chorus__copy_streaming(void* dst, const void* src, size_t nbytes);

/* Name of the kernel variant chosen at run time ("avx512", "avx2", "generic"), for logs. */
const char* chorus__reduce_isa(void);

#endif /* CHORUS_REDUCE_H */
