/*
 * codec_avx512.c - the codec table compiled for AVX-512 (F, BW, DQ, VL: 512-bit vectors) with
 * F16C for float16, the targets of kernels_avx512.c. Chosen at run time only on CPUs that have
 * all of them. Empty on other architectures.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(                                                         \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,f16c,prefer-vector-width=512")
#endif
#define CODEC_TABLE chorus__codec_avx512
#define CODEC_ISA_NAME "avx512"
#define CODEC_HAVE_F16C 1
#include "reduce/codec_body.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#else
typedef int chorus_codec_avx512_unused_t; /* ISO C forbids an empty translation unit */
#endif
