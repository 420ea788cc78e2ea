/*
 * codec_generic.c - the portable codec table: plain C compiled for the baseline instruction set
 * of the target (SSE2 on x86-64), float16 converted in software. Runs on every CPU and is the
 * reference the faster variants must match bit for bit.
 */
#define CODEC_TABLE chorus__codec_generic
#define CODEC_ISA_NAME "generic"
#define CODEC_HAVE_F16C 0
#include "reduce/codec_body.h"
