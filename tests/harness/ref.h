/*
 * ref.h - the independent reference for collective tests: dtype facts, float16/bfloat16
 * conversion written here (the library's own code is never used to check itself), input
 * generators whose every reduction is exact in every dtype, reference reductions computed
 * with plain loops, and element formatting for failure messages.
 */
#ifndef CHORUS_TEST_REF_H
#define CHORUS_TEST_REF_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

typedef struct {
  const char* name;
  size_t size_bytes;
  int is_signed; /* may hold negative values (signed integers and every float type) */
  int is_float;
} ref_dtype_t;

extern const ref_dtype_t ref_dtypes[CHORUS_DTYPE_COUNT];
extern const char* const ref_op_names[CHORUS_OP_COUNT];

/* IEEE binary16 and bfloat16 <-> float32, round to nearest even, NaN stays NaN. */
uint16_t ref_float_to_half(float f);
float ref_half_to_float(uint16_t h);
uint16_t ref_float_to_bf16(float f);
float ref_bf16_to_float(uint16_t b);

/* A 64-bit mixing function (splitmix64's finaliser): distinct inputs, well-spread outputs. */
uint64_t ref_mix64(uint64_t x);

/* Reduction inputs. Element `index` of rank `rank` (of nranks) is an integer chosen so that
 * every partial result of `op` over nranks ranks is exact in dtype: for sum/avg each value is
 * at most bound/nranks in magnitude (bound: the type's range; 2048 for float16, 256 for
 * bfloat16, 2^24 for float32, 2^53 for float64); prod uses {1,2}, or {-1,1,2} for signed
 * types, with at most ceil(nranks/3) twos; max/min span the type's range (or its exact-integer
 * range). Negative values only for signed types. Writes elements index0 .. index0+count-1 of
 * that rank's input to buf[0 .. count). */
void ref_fill_reduce_input(void* buf, size_t count, chorus_dtype_t dtype, chorus_op_t op,
                           int nranks, int rank, size_t index0, uint64_t seed);

/* out[k] = op over ranks 0..nranks-1 of input element index0 + k, computed exactly with
 * integers; avg divides once at the end: integers truncate toward zero, float32/float64
 * divide in their own precision, float16/bfloat16 divide in float32 and round to nearest even. */
void ref_reduce_expected(void* out, size_t count, chorus_dtype_t dtype, chorus_op_t op, int nranks,
                         size_t index0, uint64_t seed);

/* Data-movement inputs: bytes byte_offset .. byte_offset+nbytes-1 of rank's pseudo-random
 * buffer (any bit pattern, NaNs included: moving data must be bitwise). */
void ref_fill_bytes(void* out, size_t nbytes, int rank, uint64_t seed, size_t byte_offset);

/* "0x3c00 (1)" style rendering of one element, for failure messages. */
void ref_format_elem(char* out, size_t out_size, const void* elem, chorus_dtype_t dtype);

#endif /* CHORUS_TEST_REF_H */
