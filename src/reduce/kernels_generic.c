/*
 * kernels_generic.c - the portable kernel table: plain C compiled for the baseline instruction
 * set of the target (SSE2 on x86-64), float16 converted in software. Runs on every CPU and is
 * the reference the faster variants must match bit for bit.
 */
#define KERNEL_TABLE chorus__reduce_generic
#define KERNEL_ISA_NAME "generic"
#define KERNEL_HAVE_AVX2 0
#define KERNEL_HAVE_F16C 0
#include "reduce/kernel_body.h"
