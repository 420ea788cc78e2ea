/*
 * half.c - the out-of-line float16/bfloat16 <-> float32 conversions declared in reduce.h, for
 * callers outside the kernels (quantisation, tools, tests). Software, bit-exact and identical
 * to the F16C instructions (see half_inline.h), so they run the same on every CPU.
 */
#include "reduce/half_inline.h"
#include "reduce/reduce.h"

float chorus__half_to_float(uint16_t h) { return chorus__h2f_inline(h); }

uint16_t chorus__float_to_half(float f) { return chorus__f2h_inline(f); }

float chorus__bf16_to_float(uint16_t b) { return chorus__b2f_inline(b); }

uint16_t chorus__float_to_bf16(float f) { return chorus__f2b_inline(f); }
