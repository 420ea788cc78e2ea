/*
 * shm.c - shared segments, SPSC byte rings and futex doorbells for same-host peers (shm.h).
 *
 * Segment layout: a header line, one doorbell line per local rank, nlocal*(nlocal-1) rings,
 * then per local rank a control block and two slots for memory-semantics collectives. A ring is a producer line (head: bytes written so far), a consumer line (tail: bytes
 * read so far) and ring_bytes of data; head and tail only grow, so head - tail is the fill.
 * The producer publishes data with a release store of head, the consumer frees space with a
 * release store of tail: no locks, no shared writes to one cache line.
 */
#include "transport/shm.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/cache.h"

#define SHM_MAGIC 0x43485348u /* "CHSH" */
#define LINE 64

struct chorus_shm_ring {
  _Alignas(LINE) uint64_t head;
  _Alignas(LINE) uint64_t tail;
  _Alignas(LINE) char data[];
};

typedef struct {
  uint32_t magic;
  uint32_t nlocal;
  uint64_t ring_bytes;
  uint64_t slot_bytes;
  uint64_t seg_bytes;
  char pad[LINE - 32];
} seg_header_t;

_Static_assert(offsetof(chorus_shm_ctl_t, ll) == 2 * LINE, "LL buffers start on the third line");
_Static_assert(sizeof(chorus_shm_ctl_t) % LINE == 0, "control blocks are whole cache lines");
_Static_assert(CHORUS_SHM_LL_WORDS * 8 % LINE == 0, "LL buffers are whole cache lines");
_Static_assert(offsetof(chorus_shm_ctl_t, zc) == LINE, "flags and signature fill the first line");

static size_t ring_stride(size_t ring_bytes) { return sizeof(chorus_shm_ring_t) + ring_bytes; }

static size_t rings_end(int nlocal, size_t ring_bytes) {
  return LINE + (size_t)nlocal * LINE + (size_t)nlocal * (size_t)(nlocal - 1) * ring_stride(ring_bytes);
}

static size_t area_stride(size_t slot_bytes) { return sizeof(chorus_shm_ctl_t) + 2 * slot_bytes; }

size_t chorus__shm_seg_bytes(int nlocal, size_t ring_bytes, size_t slot_bytes) {
  return rings_end(nlocal, ring_bytes) + (size_t)nlocal * area_stride(slot_bytes);
}

/* Where the per-rank areas are, once the geometry is known (the hot paths only add). */
static void locate_areas(chorus_shm_seg_t* seg) {
  seg->areas = (char*)seg->base + rings_end(seg->nlocal, seg->ring_bytes);
  seg->area_bytes = area_stride(seg->slot_bytes);
}

char* chorus__shm_slot(const chorus_shm_seg_t* seg, int local, int which) {
  return (char*)(chorus__shm_ctl(seg, local) + 1) + (size_t)which * seg->slot_bytes;
}

chorus_shm_bell_t* chorus__shm_bell(const chorus_shm_seg_t* seg, int local) {
  return (chorus_shm_bell_t*)((char*)seg->base + LINE + (size_t)local * LINE);
}

chorus_shm_ring_t* chorus__shm_ring(const chorus_shm_seg_t* seg, int from, int to) {
  size_t idx = (size_t)from * (size_t)(seg->nlocal - 1) + (size_t)(to < from ? to : to - 1);
  char* rings = (char*)seg->base + LINE + (size_t)seg->nlocal * LINE;
  return (chorus_shm_ring_t*)(rings + idx * ring_stride(seg->ring_bytes));
}

static chorus_status_t map_fd(int fd, size_t bytes, chorus_shm_seg_t* seg, char* err, size_t errlen) {
  void* base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    snprintf(err, errlen, "mmap of %zu shared bytes failed: %s", bytes, strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  seg->base = base;
  seg->bytes = bytes;
  return CHORUS_OK;
}

/* The segment is a memfd: it has no name anywhere, peers open it through /proc/<pid>/fd/<n>
 * while the creator holds the fd, and it vanishes with the last mapping, however the processes
 * end. `name` is "pid:fd". */
chorus_status_t chorus__shm_create(char* name, size_t namelen, int nlocal, size_t ring_bytes, size_t slot_bytes,
                                   chorus_shm_seg_t* seg, int* fd_out, char* err, size_t errlen) {
  size_t bytes = chorus__shm_seg_bytes(nlocal, ring_bytes, slot_bytes);
  int fd = memfd_create("chorus-shm", MFD_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "memfd_create failed: %s", strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  /* posix_fallocate reserves the pages now, so a full /dev/shm (tmpfs) fails here, not with
   * SIGBUS in the middle of a collective. */
  int rc = posix_fallocate(fd, 0, (off_t)bytes);
  chorus_status_t st = CHORUS_OK;
  if (rc != 0) {
    snprintf(err, errlen, "cannot reserve %zu bytes of shared memory: %s", bytes, strerror(rc));
    st = CHORUS_ERR_SYSTEM;
  }
  if (st >= 0) st = map_fd(fd, bytes, seg, err, errlen);
  if (st < 0) {
    close(fd);
    return st;
  }
  seg->nlocal = nlocal;
  seg->my_local = 0;
  seg->ring_bytes = ring_bytes;
  seg->slot_bytes = slot_bytes;
  locate_areas(seg);
  seg_header_t* h = seg->base;
  h->nlocal = (uint32_t)nlocal;
  h->ring_bytes = ring_bytes;
  h->slot_bytes = slot_bytes;
  h->seg_bytes = bytes;
  __atomic_store_n(&h->magic, SHM_MAGIC, __ATOMIC_RELEASE);
  snprintf(name, namelen, "%d:%d", (int)getpid(), fd);
  *fd_out = fd;
  return CHORUS_OK;
}

chorus_status_t chorus__shm_attach(const char* name, int nlocal, int my_local, chorus_shm_seg_t* seg,
                                   char* err, size_t errlen) {
  int pid = 0, their_fd = -1;
  char path[64];
  if (sscanf(name, "%d:%d", &pid, &their_fd) != 2) {
    snprintf(err, errlen, "malformed shared segment reference \"%s\"", name);
    return CHORUS_ERR_PROTOCOL;
  }
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, their_fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    snprintf(err, errlen, "cannot open the shared segment %s: %s", path, strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  struct stat sb;
  chorus_status_t st = CHORUS_OK;
  if (fstat(fd, &sb) != 0 || (size_t)sb.st_size < sizeof(seg_header_t)) {
    snprintf(err, errlen, "shared segment %s has no header", path);
    st = CHORUS_ERR_PROTOCOL;
  }
  if (st >= 0) st = map_fd(fd, (size_t)sb.st_size, seg, err, errlen);
  close(fd);
  if (st < 0) return st;
  seg_header_t* h = seg->base;
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SHM_MAGIC || h->nlocal != (uint32_t)nlocal ||
      h->seg_bytes != (uint64_t)sb.st_size ||
      chorus__shm_seg_bytes(nlocal, h->ring_bytes, h->slot_bytes) != h->seg_bytes) {
    snprintf(err, errlen, "shared segment %s does not match this communicator", path);
    chorus__shm_detach(seg);
    return CHORUS_ERR_PROTOCOL;
  }
  seg->nlocal = nlocal;
  seg->my_local = my_local;
  seg->ring_bytes = h->ring_bytes;
  seg->slot_bytes = h->slot_bytes;
  locate_areas(seg);
  return CHORUS_OK;
}

/* The segment's pages exist (posix_fallocate), but each process still takes a fault on its
 * first touch of each page. On virtual machines such a fault can cost 5-10 us (the 2-core test
 * machines): a rank's first 128 sendrecvs of 8 KiB, which walk a fresh 1 MiB ring, took 150-210
 * us each against 15-19 us afterwards. One call maps them all at creation instead, at a
 * fraction of a microsecond a page. MADV_POPULATE_WRITE is Linux 5.14: on an older kernel
 * madvise fails and pages fault in as they are first used, as before. */
static void populate(const void* start, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t from = (uintptr_t)start & ~(page - 1), to = ((uintptr_t)start + bytes + page - 1) & ~(page - 1);
  (void)madvise((void*)from, to - from, MADV_POPULATE_WRITE);
#else
  (void)start;
  (void)bytes;
#endif
}

void chorus__shm_prefault(const chorus_shm_seg_t* seg) {
  for (int i = 0; i < seg->nlocal; i++) {
    if (i == seg->my_local) continue;
    populate(chorus__shm_ring(seg, seg->my_local, i), ring_stride(seg->ring_bytes));
    populate(chorus__shm_ring(seg, i, seg->my_local), ring_stride(seg->ring_bytes));
  }
  populate(seg->areas, (size_t)seg->nlocal * seg->area_bytes);
}

void chorus__shm_detach(chorus_shm_seg_t* seg) {
  if (seg->base) munmap(seg->base, seg->bytes);
  seg->base = NULL;
  seg->bytes = 0;
}

/* ---- rings ---- */

/* Head and tail are sequentially consistent: see chorus__shm_bell_ring. */

/* A write of at most this many bytes asks for the ring's lines first: the reader read them the
 * last time round, so each is shared with its cache (core/cache.h, as the slots' copies do:
 * algo/shm/shm.h, chorus__shm_stage_copy). Alternating launches, medians of 5 (2026-12-07):
 * sendrecv of 4 KiB 0.95x the time on 2 ranks, of 256 B - 4 KiB 0.91-0.95x on 4 (2 cores); the
 * 4 KiB ring allreduce 0.90x; other sizes up to 64 KiB within 3% either way. */
#define RING_CLAIM_MAX_BYTES (16u * 1024u)

size_t chorus__shm_ring_write(chorus_shm_ring_t* r, size_t ring_bytes, const struct iovec* iov, int niov) {
  uint64_t head = r->head; /* only this side writes head */
  uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_SEQ_CST);
  size_t space = ring_bytes - (size_t)(head - tail), written = 0;
  for (int i = 0; i < niov && space > 0; i++) {
    const char* src = iov[i].iov_base;
    size_t len = iov[i].iov_len < space ? iov[i].iov_len : space;
    size_t pos = (size_t)(head % ring_bytes);
    size_t first = len < ring_bytes - pos ? len : ring_bytes - pos;
    if (len <= RING_CLAIM_MAX_BYTES) {
      chorus__prefetch_range_for_write(r->data + pos, first);
      chorus__prefetch_range_for_write(r->data, len - first);
    }
    memcpy(r->data + pos, src, first);
    if (len > first) memcpy(r->data, src + first, len - first);
    head += len;
    space -= len;
    written += len;
    if (len < iov[i].iov_len) break;
  }
  if (written) __atomic_store_n(&r->head, head, __ATOMIC_SEQ_CST);
  return written;
}

size_t chorus__shm_ring_read(chorus_shm_ring_t* r, size_t ring_bytes, void* buf, size_t len) {
  uint64_t tail = r->tail; /* only this side writes tail */
  uint64_t head = __atomic_load_n(&r->head, __ATOMIC_SEQ_CST);
  size_t avail = (size_t)(head - tail);
  if (len > avail) len = avail;
  if (!len) return 0;
  size_t pos = (size_t)(tail % ring_bytes);
  size_t first = len < ring_bytes - pos ? len : ring_bytes - pos;
  memcpy(buf, r->data + pos, first);
  if (len > first) memcpy((char*)buf + first, r->data, len - first);
  __atomic_store_n(&r->tail, tail + len, __ATOMIC_SEQ_CST);
  return len;
}

int chorus__shm_ring_empty(const chorus_shm_ring_t* r) {
  return __atomic_load_n(&r->head, __ATOMIC_SEQ_CST) == r->tail;
}

/* ---- doorbells ---- */

/* Whoever gives a rank something to do stores it sequentially consistent (flags, ring heads and
 * tails), then rings: only a rank that said it sleeps is worth a write to its bell. Either the
 * sleeper's recheck after arming sees the store, or this load sees `sleeping` and bumps seq,
 * which the futex wait (on the value read when arming) notices. A rank that polls costs its
 * peers no write to a shared line. */
void chorus__shm_bell_ring(chorus_shm_bell_t* bell, int wakefd) {
  if (!__atomic_load_n(&bell->sleeping, __ATOMIC_SEQ_CST)) return;
  __atomic_add_fetch(&bell->seq, 1, __ATOMIC_SEQ_CST);
  /* Read again after the bump: a sleeper that moves from futex to epoll stores its mode, then
   * reads seq; so either it sees the bump (and does not sleep) or this load sees epoll. */
  if (wakefd >= 0 && __atomic_load_n(&bell->sleeping, __ATOMIC_SEQ_CST) == CHORUS_BELL_EPOLL) {
    uint64_t one = 1;
    if (write(wakefd, &one, sizeof(one)) < 0) {
      /* the counter is saturated: a wake-up is pending anyway */
    }
    return;
  }
  syscall(SYS_futex, &bell->seq, FUTEX_WAKE, 1, NULL, NULL, 0);
}

int chorus__shm_bell_arm_epoll(chorus_shm_bell_t* bell, uint32_t seen) {
  __atomic_store_n(&bell->sleeping, CHORUS_BELL_EPOLL, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&bell->seq, __ATOMIC_SEQ_CST) == seen;
}

/* Returns the value to wait on; the caller re-checks its rings after this and before waiting,
 * so a bell rung in between either shows in the rings or changes seq (no lost wake-up). */
uint32_t chorus__shm_bell_arm(chorus_shm_bell_t* bell) {
  uint32_t seen = __atomic_load_n(&bell->seq, __ATOMIC_SEQ_CST);
  __atomic_store_n(&bell->sleeping, CHORUS_BELL_FUTEX, __ATOMIC_SEQ_CST);
  return seen;
}

void chorus__shm_bell_wait(chorus_shm_bell_t* bell, uint32_t seen, int timeout_ms) {
  struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, &bell->seq, FUTEX_WAIT, seen, &ts, NULL, 0);
}

void chorus__shm_bell_disarm(chorus_shm_bell_t* bell) {
  __atomic_store_n(&bell->sleeping, CHORUS_BELL_AWAKE, __ATOMIC_SEQ_CST);
}

size_t chorus__shm_ring_space(const chorus_shm_ring_t* r, size_t ring_bytes) {
  return ring_bytes - (size_t)(r->head - __atomic_load_n(&r->tail, __ATOMIC_SEQ_CST));
}
