/*
 * shm_setup.c - moving same-host peers onto shared memory at communicator creation. The
 * lowest rank of the host (the leader) creates the segment (a memfd) and tells each local peer
 * where to open it (its pid and fd) over their TCP connection; each peer maps it and answers;
 * the leader then announces one verdict to all (shared memory for everyone, or TCP for
 * everyone, so both ends of every pair agree) and closes its fd: from then on the segment
 * lives only in the mappings and vanishes with the last process, however it ends.
 *
 * Each rank also publishes its pid and epoll wake-up eventfd in its doorbell line before it
 * answers, and once the verdict is in takes a copy of every local peer's (pidfd_getfd), so
 * that a peer can wake it while it sleeps in epoll on sockets and shared memory at once. It also
 * tries to read each peer's memory (process_vm_readv) and times the kernel's copy against memcpy,
 * and the leader gathers whether every rank could and found it fast enough: the single-copy paths
 * of the same-host collectives need every pair.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/log.h"
#include "transport/transport.h"

#define SHM_NAME_LEN 64

static int peer_fd(const chorus_transport_t* tp, int peer) { return tp->peers[peer].socks[0].fd; }

static void publish_wakefd(chorus_transport_t* tp, int my_local) {
  chorus_shm_bell_t* me = chorus__shm_bell(&tp->shm, my_local);
  __atomic_store_n(&me->self_addr, (uint64_t)(uintptr_t)me, __ATOMIC_RELAXED);
  __atomic_store_n(&me->pid, (int32_t)getpid(), __ATOMIC_RELAXED);
  __atomic_store_n(&me->wakefd, (int32_t)tp->wakefd, __ATOMIC_RELEASE);
}

/* This process's copy of the eventfd that local rank i published, or -1. */
static int take_wakefd(const chorus_transport_t* tp, int i) {
  const chorus_shm_bell_t* b = chorus__shm_bell(&tp->shm, i);
  int pid = __atomic_load_n(&b->pid, __ATOMIC_RELAXED), fd = __atomic_load_n(&b->wakefd, __ATOMIC_ACQUIRE);
  if (pid <= 0 || fd < 0) return -1;
  if (pid == getpid()) return fcntl(fd, F_DUPFD_CLOEXEC, 0); /* ranks as threads of one process */
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_getfd)
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) return -1;
  int copy = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
  close(pidfd);
  return copy;
#else
  return -1;
#endif
}

/* Whether process_vm_readv reads local rank i's memory: its pid, from its own bell at the address
 * it published there (ptrace rules, seccomp or a kernel without it can forbid it). */
static int reads_peer(const chorus_transport_t* tp, int i, int* err) {
  const chorus_shm_bell_t* b = chorus__shm_bell(&tp->shm, i);
  int32_t pid = __atomic_load_n(&b->pid, __ATOMIC_RELAXED), got = 0;
  uint64_t at = __atomic_load_n(&b->self_addr, __ATOMIC_RELAXED) + offsetof(chorus_shm_bell_t, pid);
  struct iovec mine = {&got, sizeof(got)}, theirs = {(void*)(uintptr_t)at, sizeof(got)};
  ssize_t n = pid > 0 ? process_vm_readv(pid, &mine, 1, &theirs, 1, 0) : -1;
  if (n < 0) *err = errno;
  return n == (ssize_t)sizeof(got) && got == pid;
}

/* Copies of every local peer's eventfd; says in this rank's bell whether all worked. Without
 * them, waits that watch sockets and shared memory at once poll (transport.c). */
static void take_wakefds(chorus_transport_t* tp, int nlocal, int my_local) {
  int all = 1;
  tp->local_wakefd = malloc((size_t)nlocal * sizeof(int));
  for (int i = 0; i < nlocal; i++) {
    int fd = tp->local_wakefd && i != my_local ? take_wakefd(tp, i) : -1;
    if (tp->local_wakefd) tp->local_wakefd[i] = fd;
    if (i != my_local && fd < 0) all = 0;
  }
  if (!all)
    CH_INFO(INIT, tp->rank, "cannot take a copy of every local peer's eventfd (%s): waits on sockets and shared "
            "memory together will poll", strerror(errno));
  __atomic_store_n(&chorus__shm_bell(&tp->shm, my_local)->wakes_all, (uint32_t)all, __ATOMIC_RELEASE);
}

/* Whether this rank can read every local peer's memory. */
static int reads_every_peer(const chorus_transport_t* tp, int nlocal, int my_local) {
  int err = 0;
  for (int i = 0; i < nlocal; i++) {
    if (i == my_local || reads_peer(tp, i, &err)) continue;
    CH_INFO(INIT, tp->rank, "cannot read local peers' memory (process_vm_readv: %s): no single-copy reads",
            err ? strerror(err) : "read back another value");
    return 0;
  }
  return 1;
}

/* How fast the kernel copies here against memcpy, measured on this process's own memory (the
 * same copy as a read of a peer's: 256 KiB took 9-11 us both ways on 2026-12-06): the best of
 * READ_PROBE_REPS of each, READ_PROBE_BYTES at a time. Reads pay only on days the kernel's copy
 * keeps up: a same-host broadcast read straight won 1.3-1.5x at 32-512 KiB on 2026-12-05 and
 * 2-2.5x on 2026-12-06 evening (the kernel's copy of 1 MiB 1.8-2.0x memcpy's time, six timings),
 * and lost 1.2-1.9x that afternoon (kernel copies at 2-6 GB/s, memcpy at 14-37: 2.3x at the
 * least, in all likelihood more; no timing of this probe's own exists from such a day). */
#define READ_PROBE_BYTES (1u << 20)
#define READ_PROBE_REPS 5
#define READ_RATIO_MAX 2.5

static double kernel_copy_ratio(double* copy_gbs, double* read_gbs) {
  char* a = malloc(2 * (size_t)READ_PROBE_BYTES);
  if (!a) return 0.0;
  char* b = a + READ_PROBE_BYTES;
  memset(a, 1, 2 * (size_t)READ_PROBE_BYTES);
  uint64_t best_copy = UINT64_MAX, best_read = UINT64_MAX;
  int read_failed = 0;
  for (int i = 0; i < READ_PROBE_REPS; i++) {
    uint64_t t0 = chorus__now_ns();
    memcpy(b, a, READ_PROBE_BYTES);
    __asm__ __volatile__("" ::"r"(b) : "memory"); /* the copy is not optimised away */
    uint64_t t1 = chorus__now_ns();
    struct iovec mine = {b, READ_PROBE_BYTES}, theirs = {a, READ_PROBE_BYTES};
    if (process_vm_readv(getpid(), &mine, 1, &theirs, 1, 0) != (ssize_t)READ_PROBE_BYTES) read_failed = 1;
    uint64_t t2 = chorus__now_ns();
    if (t1 - t0 < best_copy) best_copy = t1 - t0;
    if (t2 - t1 < best_read) best_read = t2 - t1;
  }
  free(a);
  if (read_failed || best_copy == 0 || best_read == 0) return 0.0;
  *copy_gbs = (double)READ_PROBE_BYTES / (double)best_copy;
  *read_gbs = (double)READ_PROBE_BYTES / (double)best_read;
  return (double)best_read / (double)best_copy;
}

/* Timed once per process (the first communicator that can read): the speeds belong to the
 * machine, and a job that creates many communicators (a split per group) pays once. */
static struct {
  pthread_once_t once;
  double ratio, copy_gbs, read_gbs;
} kernel_copy = {PTHREAD_ONCE_INIT, 0, 0, 0};

static void time_kernel_copy(void) {
  kernel_copy.ratio = kernel_copy_ratio(&kernel_copy.copy_gbs, &kernel_copy.read_gbs);
}

/* mode 1 (CHORUS_SHM_SINGLE_COPY's default): whether the kernel's copy is fast enough here; 2:
 * reads wherever they work, whatever the speed. */
static int reads_pay(const chorus_transport_t* tp, int mode) {
  if (mode >= 2) return 1;
  pthread_once(&kernel_copy.once, time_kernel_copy);
  double copy_gbs = kernel_copy.copy_gbs, read_gbs = kernel_copy.read_gbs, ratio = kernel_copy.ratio;
  int pays = ratio > 0 && ratio <= READ_RATIO_MAX;
  CH_INFO(INIT, tp->rank, "kernel copy %.1f GB/s, memcpy %.1f GB/s (%u KiB): single-copy reads %s", read_gbs,
          copy_gbs, READ_PROBE_BYTES >> 10, pays ? "pay" : "do not pay");
  return pays;
}

/* Single-copy reads need every pair, and pay for most calls only while every rank has a CPU of
 * its own (with two ranks per CPU, the kernel's copies lost from 32 MiB on: docs/compare.md);
 * the alltoall of large blocks gains from them even where ranks share CPUs (alltoall.c). The
 * leader gathers whether each rank can and would read and answers with the verdict, so that every
 * rank of the host chooses alike; whether each has a CPU (cpu_each) every rank knows alike from
 * the bootstrap's affinity masks (core/comm.c). */
static chorus_status_t agree_on_reads(chorus_transport_t* tp, const int* local, int nlocal, int my_local,
                                      int32_t reads, int cpu_each, uint64_t deadline) {
  chorus_status_t st = CHORUS_OK;
  int32_t verdict = 0;
  if (my_local == 0) {
    int32_t all = reads;
    for (int i = 1; i < nlocal && st >= 0; i++) {
      int32_t theirs = 0; /* a failed read leaves it as it was */
      st = chorus__sock_read_all(peer_fd(tp, local[i]), &theirs, sizeof(theirs), deadline);
      all = all && theirs;
    }
    verdict = all;
    for (int i = 1; i < nlocal && st >= 0; i++)
      st = chorus__sock_write_all(peer_fd(tp, local[i]), &verdict, sizeof(verdict), deadline);
  } else {
    st = chorus__sock_write_all(peer_fd(tp, local[0]), &reads, sizeof(reads), deadline);
    if (st >= 0) st = chorus__sock_read_all(peer_fd(tp, local[0]), &verdict, sizeof(verdict), deadline);
  }
  if (st < 0) snprintf(tp->err, sizeof(tp->err), "rank %d: a local peer left while setting up shared memory", tp->rank);
  tp->shm.cma_any_cpus = st >= 0 && verdict;
  tp->shm.cma = tp->shm.cma_any_cpus && cpu_each;
  return st;
}

static chorus_status_t leader_side(chorus_transport_t* tp, const int* local, int nlocal, size_t ring_bytes,
                                   size_t slot_bytes, uint64_t deadline, int* verdict) {
  char name[SHM_NAME_LEN] = "", err[256];
  int fd = -1;
  if (chorus__shm_create(name, sizeof(name), nlocal, ring_bytes, slot_bytes, &tp->shm, &fd, err, sizeof(err)) < 0) {
    CH_WARN(tp->rank, "same-host peers fall back to TCP: %s", err);
    name[0] = '\0';
  } else {
    publish_wakefd(tp, 0);
  }
  chorus_status_t st = CHORUS_OK;
  for (int i = 1; i < nlocal && st >= 0; i++) st = chorus__sock_write_all(peer_fd(tp, local[i]), name, sizeof(name), deadline);
  *verdict = name[0] != '\0';
  for (int i = 1; i < nlocal && st >= 0; i++) {
    int32_t answer = CHORUS_ERR_INTERNAL;
    st = chorus__sock_read_all(peer_fd(tp, local[i]), &answer, sizeof(answer), deadline);
    if (st >= 0 && answer != CHORUS_OK) *verdict = 0;
  }
  int32_t v = *verdict;
  for (int i = 1; i < nlocal && st >= 0; i++) st = chorus__sock_write_all(peer_fd(tp, local[i]), &v, sizeof(v), deadline);
  if (fd >= 0) close(fd); /* every peer has answered: mapped, or never will */
  if (st < 0) snprintf(tp->err, sizeof(tp->err), "rank %d: a local peer left while setting up shared memory", tp->rank);
  return st;
}

static chorus_status_t member_side(chorus_transport_t* tp, int leader, int nlocal, int my_local, uint64_t deadline,
                                   int* verdict) {
  char name[SHM_NAME_LEN], err[256];
  chorus_status_t st = chorus__sock_read_all(peer_fd(tp, leader), name, sizeof(name), deadline);
  if (st < 0) {
    snprintf(tp->err, sizeof(tp->err), "rank %d: rank %d left while setting up shared memory", tp->rank, leader);
    return st;
  }
  name[SHM_NAME_LEN - 1] = '\0';
  int32_t answer = CHORUS_ERR_NOT_SUPPORTED;
  if (name[0]) {
    answer = chorus__shm_attach(name, nlocal, my_local, &tp->shm, err, sizeof(err));
    if (answer < 0) CH_WARN(tp->rank, "same-host peers fall back to TCP: %s", err);
    else publish_wakefd(tp, my_local);
  }
  int32_t v = 0;
  st = chorus__sock_write_all(peer_fd(tp, leader), &answer, sizeof(answer), deadline);
  if (st >= 0) st = chorus__sock_read_all(peer_fd(tp, leader), &v, sizeof(v), deadline);
  *verdict = v;
  return st;
}

chorus_status_t chorus__transport_setup_shm(chorus_transport_t* tp, chorus_group_t host, size_t ring_bytes,
                                            size_t slot_bytes, int single_copy, int cpu_each, uint64_t deadline_ns) {
  const int* local = host.ranks;
  int nlocal = host.size, my_local = host.me;
  if (nlocal < 2) return CHORUS_OK;
  int verdict = 0;
  chorus_status_t st = my_local == 0 ? leader_side(tp, local, nlocal, ring_bytes, slot_bytes, deadline_ns, &verdict)
                                     : member_side(tp, local[0], nlocal, my_local, deadline_ns, &verdict);
  if (st < 0 || !verdict) {
    chorus__shm_detach(&tp->shm);
    return st;
  }
  tp->shm.my_local = my_local;
  tp->my_bell = chorus__shm_bell(&tp->shm, my_local);
  tp->local_ranks = local;
  take_wakefds(tp, nlocal, my_local);
  /* Reads serve only the one-host algorithms. */
  int could_read = single_copy && nlocal == tp->nranks && reads_every_peer(tp, nlocal, my_local);
  st = agree_on_reads(tp, local, nlocal, my_local, could_read && reads_pay(tp, single_copy), cpu_each, deadline_ns);
  if (st < 0) return st; /* the communicator fails: its destroy releases all of it */
  tp->my_ctl = chorus__shm_ctl(&tp->shm, my_local);
  tp->shm_all_local = nlocal == tp->nranks;
  for (int i = 0; i < nlocal; i++) {
    if (i == my_local) continue;
    chorus_stream_t* s = &tp->peers[local[i]].socks[0];
    s->is_shm = 1;
    s->tx_ring = chorus__shm_ring(&tp->shm, my_local, i);
    s->rx_ring = chorus__shm_ring(&tp->shm, i, my_local);
    s->peer_bell = chorus__shm_bell(&tp->shm, i);
    s->peer_wakefd = tp->local_wakefd ? tp->local_wakefd[i] : -1;
  }
  CH_INFO(INIT, tp->rank, "shared memory with %d local peer(s), rings of %zu bytes; single-copy reads %s", nlocal - 1,
          tp->shm.ring_bytes,
          tp->shm.cma ? "on" : tp->shm.cma_any_cpus ? "for large alltoall blocks only (ranks share CPUs)" : "off");
  return CHORUS_OK;
}

void chorus__transport_prefault_shm(chorus_transport_t* tp) {
  if (tp->my_bell) chorus__shm_prefault(&tp->shm);
}
