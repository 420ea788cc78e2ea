/*
 * kernels_avx2.c - the kernel table compiled for AVX2 + F16C (256-bit vectors, float16
 * through the F16C conversion instructions). Chosen at run time only on CPUs that have both,
 * so the rest of the library stays baseline x86-64. Empty on other architectures.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif
#define KERNEL_TABLE chorus__reduce_avx2
#define KERNEL_ISA_NAME "avx2"
#define KERNEL_HAVE_AVX2 1
#define KERNEL_HAVE_F16C 1
#include "reduce/kernel_body.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#else
typedef int chorus_reduce_avx2_unused_t; /* ISO C forbids an empty translation unit */
#endif
