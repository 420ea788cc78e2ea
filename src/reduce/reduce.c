/*
 * reduce.c - run-time choice of the reduction kernels: on first use, the best kernel table the
 * CPU can run (avx512, then avx2, then generic) is picked once and cached; every later call is
 * a table lookup. Also the avg_finish entry point and the variant query used by tests.
 */
#include <stdatomic.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "reduce/reduce.h"
#include "reduce/variants.h"

#if defined(__x86_64__) || defined(__i386__)
/* F16C from CPUID leaf 1 (clang's __builtin_cpu_supports does not know "f16c"). It uses the
 * AVX register state, whose OS support __builtin_cpu_supports("avx2") has already checked. */
static int cpu_has_f16c(void) {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
#endif

/* 1 when the CPU (and the OS, for the wider registers) supports variant isa. */
static int cpu_supports_isa(chorus_reduce_isa_t isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isa) {
    case CHORUS_REDUCE_ISA_AVX512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx2") && cpu_has_f16c();
    case CHORUS_REDUCE_ISA_AVX2:
      return __builtin_cpu_supports("avx2") && cpu_has_f16c();
    case CHORUS_REDUCE_ISA_GENERIC:
      return 1;
    default:
      return 0;
  }
#else
  return isa == CHORUS_REDUCE_ISA_GENERIC;
#endif
}

static const chorus_reduce_variant_t* variant_table(chorus_reduce_isa_t isa) {
  switch (isa) {
#if defined(__x86_64__) || defined(__i386__)
    case CHORUS_REDUCE_ISA_AVX512:
      return &chorus__reduce_avx512;
    case CHORUS_REDUCE_ISA_AVX2:
      return &chorus__reduce_avx2;
#endif
    case CHORUS_REDUCE_ISA_GENERIC:
      return &chorus__reduce_generic;
    default:
      return NULL;
  }
}

const chorus_reduce_variant_t* chorus__reduce_variant(chorus_reduce_isa_t isa) {
  const chorus_reduce_variant_t* table = variant_table(isa);
  return table != NULL && cpu_supports_isa(isa) ? table : NULL;
}

/* The chosen table. Threads racing on first use all compute the same answer, so a relaxed
 * atomic is enough: whoever stores last stores the same pointer. */
static _Atomic(const chorus_reduce_variant_t*) chosen_variant;

static const chorus_reduce_variant_t* active_variant(void) {
  const chorus_reduce_variant_t* v = atomic_load_explicit(&chosen_variant, memory_order_relaxed);
  if (v != NULL) return v;
  for (int isa = 0; isa < CHORUS_REDUCE_ISA_COUNT && v == NULL; isa++) {
    v = chorus__reduce_variant((chorus_reduce_isa_t)isa);
  }
  atomic_store_explicit(&chosen_variant, v, memory_order_relaxed);
  return v;
}

static int dtype_valid(chorus_dtype_t dtype) {
  return (unsigned)dtype < (unsigned)CHORUS_DTYPE_COUNT;
}

chorus_reduce_fn chorus__reduce_fn(chorus_dtype_t dtype, chorus_op_t op) {
  if (!dtype_valid(dtype) || (unsigned)op >= (unsigned)CHORUS_OP_COUNT) return NULL;
  return active_variant()->reduce[dtype][op];
}

void chorus__reduce(void* dst, const void* a, const void* b, size_t count, chorus_dtype_t dtype,
                    chorus_op_t op) {
  chorus_reduce_fn fn = chorus__reduce_fn(dtype, op);
  if (fn != NULL && count > 0) fn(dst, a, b, count);
}

void chorus__reduce_avg_finish(void* buf, size_t count, chorus_dtype_t dtype, int nranks) {
  if (nranks <= 1 || count == 0 || !dtype_valid(dtype)) return;
  active_variant()->avg[dtype](buf, count, nranks);
}

const char* chorus__reduce_isa(void) { return active_variant()->name; }
