/*
 * cma_bench.c - is a single-copy read of another process's buffer (process_vm_readv, "CMA")
 * faster than the two copies through a shared segment that the same-host algorithms make?
 *
 * Two processes, pinned to CPUs 0 and 1 when there are two. The owner holds a buffer of N
 * bytes; the reader gets it into its own buffer of N bytes in three ways, each timed as the
 * median of the repetitions, one size after the other, the ways alternating:
 *   cma      process_vm_readv(owner, buffer) in one call (the kernel copies it once);
 *   cma-1M   the same, one call per 1 MiB piece (how a pipelined algorithm would issue it);
 *   staged   the owner copies 1 MiB chunks into one of two shared slots, the reader copies each
 *            out (two copies, on two cores, pipelined): how the shm algorithms staged large
 *            blocks until 2026-12-06 (allgather now stages 256 KiB chunks through eight places,
 *            which beat these reads inside the collective: docs/sweep.md, "One host, 2026-12-06
 *            evening").
 * Prints one line per size and way: time, GB/s, and for cma the ratio staged / cma (> 1: CMA
 * faster). Usage: chorus-cma-bench [max_bytes] [reps]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLOT (1u << 20)

typedef struct {
  volatile uint64_t go;       /* reader -> owner: stage round number */
  volatile uint64_t bytes;    /* reader -> owner: bytes to stage this round */
  volatile uint64_t arrived;  /* owner: chunks staged so far (this round) */
  volatile uint64_t done;     /* reader: chunks copied out (this round) */
  char pad[32];
  char slot[2][SLOT];
} shared_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) sched_setaffinity(0, sizeof(set), &set);
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* The owner: stages its buffer chunk by chunk whenever the reader asks for a round. */
static void owner_loop(shared_t* sh, const char* buf, size_t max_bytes) {
  uint64_t round = 0;
  for (;;) {
    while (__atomic_load_n(&sh->go, __ATOMIC_ACQUIRE) == round) sched_yield();
    round = __atomic_load_n(&sh->go, __ATOMIC_ACQUIRE);
    if (round == UINT64_MAX) return;
    size_t bytes = (size_t)sh->bytes, nchunks = (bytes + SLOT - 1) / SLOT;
    if (bytes > max_bytes) return;
    for (size_t k = 0; k < nchunks; k++) {
      while (k >= 2 && __atomic_load_n(&sh->done, __ATOMIC_ACQUIRE) < k - 1) __builtin_ia32_pause();
      size_t len = bytes - k * SLOT < SLOT ? bytes - k * SLOT : SLOT;
      memcpy(sh->slot[k & 1], buf + k * SLOT, len);
      __atomic_store_n(&sh->arrived, k + 1, __ATOMIC_RELEASE);
    }
  }
}

static double staged_once(shared_t* sh, char* dst, size_t bytes, uint64_t* round_no) {
  size_t nchunks = (bytes + SLOT - 1) / SLOT;
  __atomic_store_n(&sh->arrived, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&sh->done, 0, __ATOMIC_RELEASE);
  double t0 = now_s();
  sh->bytes = bytes;
  __atomic_store_n(&sh->go, ++*round_no, __ATOMIC_RELEASE);
  for (size_t k = 0; k < nchunks; k++) {
    while (__atomic_load_n(&sh->arrived, __ATOMIC_ACQUIRE) < k + 1) __builtin_ia32_pause();
    size_t len = bytes - k * SLOT < SLOT ? bytes - k * SLOT : SLOT;
    memcpy(dst + k * SLOT, sh->slot[k & 1], len);
    __atomic_store_n(&sh->done, k + 1, __ATOMIC_RELEASE);
  }
  return now_s() - t0;
}

static double cma_once(pid_t owner, const char* remote, char* dst, size_t bytes, size_t piece) {
  double t0 = now_s();
  for (size_t off = 0; off < bytes; off += piece) {
    size_t len = bytes - off < piece ? bytes - off : piece;
    struct iovec local = {dst + off, len}, far = {(void*)(remote + off), len};
    ssize_t got = process_vm_readv(owner, &local, 1, &far, 1, 0);
    if (got != (ssize_t)len) {
      fprintf(stderr, "process_vm_readv: %s\n", got < 0 ? strerror(errno) : "short read");
      exit(1);
    }
  }
  return now_s() - t0;
}

int main(int argc, char** argv) {
  size_t max_bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)256 << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  if (max_bytes < 65536 || reps < 1) {
    fprintf(stderr, "usage: chorus-cma-bench [max_bytes >= 65536] [reps >= 1]\n");
    return 2;
  }
  shared_t* sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  char* src = malloc(max_bytes);
  char* dst = malloc(max_bytes);
  if (sh == MAP_FAILED || !src || !dst) return 1;
  for (size_t i = 0; i < max_bytes; i++) src[i] = (char)(i * 131 + 7);
  memset(dst, 0, max_bytes);
  pid_t parent = getpid(), owner = fork();
  if (owner == 0) { /* the child owns src (its copy of it, at the same address) */
    /* It spins for its parent's rounds: it must not outlive a parent that died (a reader piped
     * into `head` that got SIGPIPE left it spinning on a core for hours). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    pin(1);
    owner_loop(sh, src, max_bytes);
    _exit(0);
  }
  pin(0);
  uint64_t round_no = 0;
  printf("# process_vm_readv vs staged copy, reader on CPU 0, owner on CPU 1; median of %d\n", reps);
  printf("%12s %8s %12s %10s %10s\n", "bytes", "way", "time_us", "GB/s", "staged/x");
  double* t[3];
  for (int w = 0; w < 3; w++) t[w] = calloc((size_t)reps, sizeof(double));
  for (size_t bytes = 65536; bytes <= max_bytes; bytes *= 4) {
    for (int r = 0; r < reps + 2; r++) { /* two warm-up rounds */
      for (int i = 0; i < 3; i++) {
        int w = (i + r) % 3;
        double s = w == 0 ? cma_once(owner, src, dst, bytes, bytes)
                 : w == 1 ? cma_once(owner, src, dst, bytes, SLOT)
                          : staged_once(sh, dst, bytes, &round_no);
        if (memcmp(dst, src, bytes) != 0) {
          fprintf(stderr, "wrong bytes after way %d at %zu bytes\n", w, bytes);
          return 1;
        }
        memset(dst, 0, bytes);
        if (r >= 2) t[w][r - 2] = s;
      }
    }
    double med[3];
    for (int w = 0; w < 3; w++) {
      qsort(t[w], (size_t)reps, sizeof(double), cmp_double);
      med[w] = t[w][reps / 2];
    }
    const char* names[3] = {"cma", "cma-1M", "staged"};
    for (int w = 0; w < 3; w++)
      printf("%12zu %8s %12.1f %10.2f %10.2f\n", bytes, names[w], med[w] * 1e6, (double)bytes / med[w] / 1e9,
             med[2] / med[w]);
    fflush(stdout);
  }
  __atomic_store_n(&sh->go, UINT64_MAX, __ATOMIC_RELEASE);
  waitpid(owner, NULL, 0);
  return 0;
}
