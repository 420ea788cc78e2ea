/*
 * kernels_avx512.c - the kernel table compiled for AVX-512 (F, BW, DQ, VL: 512-bit vectors,
 * byte and 64-bit integer min/max/multiply in one instruction) with F16C for float16. Chosen at
 * run time only on CPUs that have all of them. Empty on other architectures.
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
#define KERNEL_TABLE chorus__reduce_avx512
#define KERNEL_ISA_NAME "avx512"
#define KERNEL_HAVE_AVX2 1
#define KERNEL_HAVE_F16C 1
#include "reduce/kernel_body.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#else
typedef int chorus_reduce_avx512_unused_t; /* ISO C forbids an empty translation unit */
#endif
