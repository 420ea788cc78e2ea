/*
 * shm.h - the same-host transport: one shared segment per host and communicator holding a
 * single-producer single-consumer byte ring for every ordered pair of local ranks, plus a
 * doorbell (futex word) per local rank. Frames travel through a ring exactly as through a TCP
 * socket (header, then payload), so the data path is shared with tcp. The segment is a memfd
 * with no name: nothing can be left in /dev/shm, whatever kills which process when.
 */
#ifndef CHORUS_SHM_H
#define CHORUS_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "chorus.h"

typedef struct chorus_shm_ring chorus_shm_ring_t;

typedef struct {
  uint32_t seq;      /* futex word: bumped by anyone who gives this rank something to do */
  uint32_t sleeping; /* CHORUS_BELL_*: how this rank sleeps (or is about to) */
  int32_t pid;       /* the owner's process and its epoll wake-up eventfd there, so peers can */
  int32_t wakefd;    /* take a copy of it (pidfd_getfd) and wake it out of epoll */
  uint32_t wakes_all; /* the owner holds a working copy of every local peer's eventfd */
  uint32_t pad0;
  uint64_t self_addr; /* where this bell lies in the owner's address space (read by the probe of
                         single-copy reads, shm_setup.c) */
  char pad[32];
} chorus_shm_bell_t;
_Static_assert(sizeof(chorus_shm_bell_t) == 64, "a doorbell is one cache line");

/* How a rank sleeps: not at all; on its bell's futex (only shared memory to wait for); in
 * epoll (sockets too), where a ring must write its eventfd instead. */
enum { CHORUS_BELL_AWAKE = 0, CHORUS_BELL_FUTEX = 1, CHORUS_BELL_EPOLL = 2 };

/* Per local rank, for memory-semantics collectives: counters only the owner writes, and the
 * signature of the operation it is running (checked by the others before they touch its
 * data, so mismatched calls are detected). Flags and signature share one cache line: a peer
 * that sees a flag move has the signature to check in the same miss. */
/* Low-latency (LL) buffers: small payloads travel in whole cache lines, each with 56 bytes
 * of data and, in its last word, the operation's id, stored after the data with release
 * semantics; a reader that sees every line's id has the data in the same lines, with no
 * separate flag to wait for (and on x86 each line arrives in one miss). Line 0 starts with a
 * hash of the call's signature. Up to CHORUS_SHM_LL_MAX_BYTES per rank; each collective
 * takes them up to its own measured bound (algo/shm: allreduce and reduce_scatter 512 B,
 * allgather and alltoall all 1 KiB, broadcast 64 B). */
#define CHORUS_SHM_LL_MAX_BYTES 1024
#define CHORUS_SHM_LL_LINE_DATA 56
#define CHORUS_SHM_LL_LINES 19
#define CHORUS_SHM_LL_WORDS (8 * CHORUS_SHM_LL_LINES)
_Static_assert(8 + CHORUS_SHM_LL_MAX_BYTES <= CHORUS_SHM_LL_LINES * CHORUS_SHM_LL_LINE_DATA, "LL buffer too small");

typedef struct {
  uint64_t flag[3];
  uint64_t sig[5];
  uint64_t zc[4]; /* zero-copy operations: send window + offset, receive window + offset */
  /* Heartbeat: when the owner's progress engine last ran, in CHORUS_SHM_BEAT_SHIFT units of the
   * monotonic clock (0: never). A rank that posted an operation and then stopped cannot say
   * so; its peers see this stand still. Off the first line, which peers poll. */
  uint64_t beat;
  char pad[24];
  uint64_t ll[2][CHORUS_SHM_LL_WORDS]; /* by operation id parity */
} chorus_shm_ctl_t;

/* How a rank last wrote its own slots, for the rules of algo/shm/shm.h: as places of
 * place_bytes each (0: as two halves, by id parity), and the last id whose place local rank
 * `reader` may still have to read (0: none). */
typedef struct {
  size_t place_bytes;
  uint64_t unread_until;
  int reader;
} chorus_shm_slots_use_t;

/* 2^24 ns (16.8 ms): coarse enough that a spinning engine writes the heartbeat rarely, fine
 * enough for a verdict in tenths of a second. */
#define CHORUS_SHM_BEAT_SHIFT 24

/* Nanoseconds since the owner of c stamped its heartbeat, as seen at now_ns; 0 when it never
 * did. Ranks of one host share the monotonic clock. */
static inline uint64_t chorus__shm_beat_age_ns(const chorus_shm_ctl_t* c, uint64_t now_ns) {
  uint64_t at = __atomic_load_n(&c->beat, __ATOMIC_RELAXED) << CHORUS_SHM_BEAT_SHIFT;
  return at && now_ns > at ? now_ns - at : 0;
}

/* The mapping of one host's segment, held by each local rank. */
typedef struct {
  void* base;
  size_t bytes;
  int nlocal;
  int my_local;
  size_t ring_bytes;
  size_t slot_bytes; /* each local rank owns two slots of this size */
  char* areas;       /* local rank r's control block and slots start at areas + r * area_bytes */
  size_t area_bytes;
  /* Every local rank can read every other's memory with process_vm_readv, the host has a CPU
   * for each, and the kernel's copy is fast enough where CHORUS_SHM_SINGLE_COPY asks (agreed by
   * all at set-up, so that all choose the single-copy paths alike: transport/shm_setup.c). */
  int cma;
  /* The same but for the CPUs: reads work and pay, and may be shared by ranks (the alltoall of
   * large blocks takes them there too: algo/shm/alltoall.c). */
  int cma_any_cpus;
} chorus_shm_seg_t;

/* Ring of the ordered pair (from -> to), local indices. */
chorus_shm_ring_t* chorus__shm_ring(const chorus_shm_seg_t* seg, int from, int to);
chorus_shm_bell_t* chorus__shm_bell(const chorus_shm_seg_t* seg, int local);
static inline chorus_shm_ctl_t* chorus__shm_ctl(const chorus_shm_seg_t* seg, int local) {
  return (chorus_shm_ctl_t*)(seg->areas + (size_t)local * seg->area_bytes);
}
char* chorus__shm_slot(const chorus_shm_seg_t* seg, int local, int which);

/* Segment size for nlocal ranks with rings of ring_bytes and slots of slot_bytes. */
size_t chorus__shm_seg_bytes(int nlocal, size_t ring_bytes, size_t slot_bytes);
/* Creates (leader) or maps (others) the segment; see shm_setup.c for the handshake. */
chorus_status_t chorus__shm_create(char* name, size_t namelen, int nlocal, size_t ring_bytes, size_t slot_bytes,
                                   chorus_shm_seg_t* seg, int* fd, char* err, size_t errlen);
chorus_status_t chorus__shm_attach(const char* name, int nlocal, int my_local, chorus_shm_seg_t* seg,
                                   char* err, size_t errlen);
void chorus__shm_detach(chorus_shm_seg_t* seg);
/* Maps now, in this process, the parts of the segment this rank reads and writes: its rings
 * to and from every local peer, and every rank's control block and slots. */
void chorus__shm_prefault(const chorus_shm_seg_t* seg);

/* Stream I/O: bytes moved (0 when the ring is full / empty). */
size_t chorus__shm_ring_write(chorus_shm_ring_t* r, size_t ring_bytes, const struct iovec* iov, int niov);
size_t chorus__shm_ring_read(chorus_shm_ring_t* r, size_t ring_bytes, void* buf, size_t len);
int chorus__shm_ring_empty(const chorus_shm_ring_t* r);
size_t chorus__shm_ring_space(const chorus_shm_ring_t* r, size_t ring_bytes);

/* Doorbells: ring wakes the rank if it sleeps; wait sleeps until bumped past `seen` or
 * timeout_ms passes. */
/* Wakes the bell's owner if it sleeps: its futex, or in epoll its eventfd (wakefd: this
 * process's copy of it, -1 when there is none). */
void chorus__shm_bell_ring(chorus_shm_bell_t* bell, int wakefd);
/* Switches an armed bell (chorus__shm_bell_arm returned seen) to an epoll sleep; 0 when it was
 * rung since, so the caller must not sleep. */
int chorus__shm_bell_arm_epoll(chorus_shm_bell_t* bell, uint32_t seen);
uint32_t chorus__shm_bell_arm(chorus_shm_bell_t* bell);
void chorus__shm_bell_wait(chorus_shm_bell_t* bell, uint32_t seen, int timeout_ms);
void chorus__shm_bell_disarm(chorus_shm_bell_t* bell);

#endif /* CHORUS_SHM_H */
