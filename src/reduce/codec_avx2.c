/*
 * codec_avx2.c - the codec table compiled for AVX2 + F16C (256-bit vectors, float16 through the
 * F16C conversion instructions), the targets of kernels_avx2.c. Chosen at run time only on CPUs
 * that have both. Empty on other architectures.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif
#define CODEC_TABLE chorus__codec_avx2
#define CODEC_ISA_NAME "avx2"
#define CODEC_HAVE_F16C 1
#include "reduce/codec_body.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#else
typedef int chorus_codec_avx2_unused_t; /* ISO C forbids an empty translation unit */
#endif
