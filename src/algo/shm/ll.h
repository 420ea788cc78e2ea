/*
 * ll.h - low-latency (LL) payloads of the memory-semantics algorithms: a call whose payload per
 * rank is at most CHORUS_SHM_LL_MAX_BYTES moves it through the ranks' LL buffers (transport/
 * shm.h), whose cache lines each carry 56 data bytes and the operation's id, stored after the
 * data with release semantics: seeing every line's id is seeing the data, one miss per line
 * instead of a flag miss followed by data misses. Every rank writes its payload (line 0 begins
 * with a hash of the call's signature, so that mismatched calls are detected), waits for every
 * other's, reads what it needs, and publishes DONE.
 *
 * An LL buffer was last used two ids ago or earlier; a rank that completed the LL operation just
 * before this one saw every peer's lines of it, so every peer had finished the one before: the
 * DONE flags need no look then (chorus__ll_exchange).
 */
#ifndef CHORUS_ALGO_SHM_LL_H
#define CHORUS_ALGO_SHM_LL_H

#include "algo/shm/shm.h"
#include "core/cache.h"

/* How many times a wait polls a peer's lines (a pause apart, a few microseconds in all) before
 * it hands back to the engine: polled once per engine pass, they were seen half a pass late
 * on average. */
#define CHORUS_SHM_LL_POLLS 64

/* A hash of the signature, the same on every rank for the same call. */
static inline uint64_t chorus__ll_signature(const chorus_task_t* t) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < CHORUS_SIG_WORDS; i++) h = (h ^ t->sig[i]) * 1099511628211ull, h ^= h >> 29;
  return h;
}

/* Lines that carry the signature word and `bytes` of payload. */
static inline size_t chorus__ll_lines(size_t bytes) {
  return (8 + bytes + CHORUS_SHM_LL_LINE_DATA - 1) / CHORUS_SHM_LL_LINE_DATA;
}

/* Data byte i of an LL buffer (counting the signature word as bytes 0-7). */
static inline unsigned char* chorus__ll_byte(uint64_t* words, size_t i) {
  return (unsigned char*)(words + 8 * (i / CHORUS_SHM_LL_LINE_DATA)) + i % CHORUS_SHM_LL_LINE_DATA;
}

static inline uint64_t* chorus__ll_id_word(uint64_t* words, size_t line) { return words + 8 * line + 7; }

/* Writes this rank's payload into its LL buffer of id's parity; the last line's id
 * sequentially consistent, so that a peer about to sleep either sees it or is rung (see
 * chorus__shm_bell_ring). */
static inline void chorus__ll_write(chorus_task_t* t, uint64_t id, const void* payload, size_t bytes) {
  uint64_t* words = chorus__conn_shm_ll(t, t->rank, (int)(id & 1));
  size_t lines = chorus__ll_lines(bytes);
  /* Peers hold these lines from the last use: ask for all of them at once, or each store
   * waits for its own line in turn. */
  chorus__prefetch_range_for_write(words, lines * 8 * sizeof(*words));
  words[0] = chorus__ll_signature(t);
  const unsigned char* src = payload;
  for (size_t done = 0, l = 0; l < lines; l++) {
    size_t at = l ? 0 : 8, n = CHORUS_SHM_LL_LINE_DATA - at;
    if (n > bytes - done) n = bytes - done;
    if (n) memcpy((unsigned char*)(words + 8 * l) + at, src + done, n);
    done += n;
    __atomic_store_n(chorus__ll_id_word(words, l), id, l + 1 == lines ? __ATOMIC_SEQ_CST : __ATOMIC_RELEASE);
  }
  chorus__conn_shm_signal(t);
}

/* Whether line 0 (the signature's) and the lines that carry payload bytes [off, off + n)
 * carry id: all loaded at once, so that their misses overlap. A reader that needs only its
 * own block of a payload (reduce_scatter, alltoall) waits for no other line. */
static inline int chorus__ll_lines_hold(uint64_t* words, size_t off, size_t n, uint64_t id) {
  size_t first = (8 + off) / CHORUS_SHM_LL_LINE_DATA, end = chorus__ll_lines(off + n);
  int all = __atomic_load_n(chorus__ll_id_word(words, 0), __ATOMIC_ACQUIRE) == id;
  for (size_t l = first > 0 ? first : 1; l < end; l++)
    all &= __atomic_load_n(chorus__ll_id_word(words, l), __ATOMIC_ACQUIRE) == id;
  return all;
}

/* 1 when rank's LL buffer holds payload bytes [off, off + n) of operation id; *st < 0 when it
 * never will. */
static inline int chorus__ll_arrived(chorus_task_t* t, int rank, uint64_t id, size_t off, size_t n,
                                     chorus_status_t* st) {
  uint64_t* words = chorus__conn_shm_ll(t, rank, (int)(id & 1));
  int spin = t->cpu_per_rank ? CHORUS_SHM_LL_POLLS : 0;
  while (!chorus__ll_lines_hold(words, off, n, id)) {
    if (spin-- <= 0) {
      chorus__conn_shm_peer_ok(t, rank, st);
      return 0;
    }
    __builtin_ia32_pause();
  }
  if (words[0] == chorus__ll_signature(t)) return 1;
  *st = chorus__conn_shm_mismatch(t, rank);
  return 0;
}

/* Bytes [off, off + bytes) of rank's payload of operation id, out of its LL lines into out. */
static inline void chorus__ll_read(const chorus_task_t* t, int rank, uint64_t id, size_t off, size_t bytes,
                                   unsigned char* out) {
  uint64_t* words = chorus__conn_shm_ll(t, rank, (int)(id & 1));
  for (size_t done = 0; done < bytes;) {
    size_t i = 8 + off + done, n = CHORUS_SHM_LL_LINE_DATA - i % CHORUS_SHM_LL_LINE_DATA;
    if (n > bytes - done) n = bytes - done;
    memcpy(out + done, chorus__ll_byte(words, i), n);
    done += n;
  }
}

/* Stage 0 writes this rank's payload (once no rank still reads this parity's previous use),
 * stage 1 waits for the peers one by one (t->step: the next to wait for). OK once bytes
 * [want_off, want_off + want) of every peer's payload are there (read them with
 * chorus__ll_read, then call chorus__ll_done). Seeing any line of a peer's op id - 1 is seeing
 * that it finished id - 2, so the shortcut on *last holds for partial waits too. */
static inline chorus_status_t chorus__ll_exchange(chorus_task_t* t, chorus_shm_op_t* s, const void* payload,
                                                  size_t bytes, size_t want_off, size_t want) {
  uint64_t id = chorus__shm_id(s), *last = chorus__conn_shm_ll_last(t);
  chorus_status_t st = CHORUS_OK;
  if (s->stage == 0) {
    if (*last + 1 != id) CHORUS_SHM_WAIT(chorus__shm_parity_free(t, s, &st), st);
    chorus__ll_write(t, id, payload, bytes);
    chorus__shm_advance(t, s, 1);
  }
  for (; t->step < (size_t)t->nranks; t->step++)
    if ((int)t->step != t->rank) CHORUS_SHM_WAIT(chorus__ll_arrived(t, (int)t->step, id, want_off, want, &st), st);
  return CHORUS_OK;
}

/* Rank q's n payload bytes at `off`: this rank's own copy where it has one (mine), else read
 * out of q's lines into buf. */
static inline const unsigned char* chorus__ll_input(const chorus_task_t* t, uint64_t id, int q, size_t off, size_t n,
                                                    const unsigned char* mine, unsigned char* buf) {
  if (mine && q == t->rank) return mine;
  chorus__ll_read(t, q, id, off, n, buf);
  return buf;
}

/* Combines m elements at byte `off` of every rank's payload into dst, in rank order, as every
 * rank does, so that all get the same bits; avg divides. Only those bytes leave the lines.
 * own: this rank's payload where it wrote none in its lines (a reduce's root), else NULL; it
 * may be dst (in place), so it is read before dst is written. */
static inline void chorus__ll_combine(chorus_task_t* t, chorus_shm_op_t* s, size_t off, char* dst, size_t m,
                                      const void* own) {
  uint64_t id = chorus__shm_id(s);
  size_t n = m * t->dtype_size;
  _Alignas(64) unsigned char a[CHORUS_SHM_LL_MAX_BYTES], b[CHORUS_SHM_LL_MAX_BYTES], mine[CHORUS_SHM_LL_MAX_BYTES];
  const unsigned char* self = own ? memcpy(mine, (const unsigned char*)own + off, n) : NULL;
  s->reduce(dst, chorus__ll_input(t, id, 0, off, n, self, a), chorus__ll_input(t, id, 1, off, n, self, b), m);
  for (int q = 2; q < t->nranks; q++) s->reduce(dst, dst, chorus__ll_input(t, id, q, off, n, self, b), m);
  if (t->args.op == CHORUS_AVG) chorus__reduce_avg_finish(dst, m, t->args.dtype, t->nranks);
}

/* Every peer has written operation id (or, for a broadcast root, entered it), so each has read
 * this rank's lines of id - 1: take those lines back now (as many as a call of this size
 * writes), while the caller goes on, so that the next call's write (id + 1, the same parity)
 * does not stall on them. A prefetch: it changes only how soon the lines are here. */
static inline void chorus__ll_reclaim(chorus_task_t* t, uint64_t id, size_t bytes) {
  uint64_t* words = chorus__conn_shm_ll(t, t->rank, (int)((id + 1) & 1));
  chorus__prefetch_range_for_write(words, chorus__ll_lines(bytes) * 8 * sizeof(*words));
}

/* The end of an exchange of `bytes` per rank. */
static inline void chorus__ll_done(chorus_task_t* t, chorus_shm_op_t* s, size_t bytes) {
  uint64_t id = chorus__shm_id(s);
  chorus__ll_reclaim(t, id, bytes);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  *chorus__conn_shm_ll_last(t) = id;
  s->k = s->nchunks;
}

#endif /* CHORUS_ALGO_SHM_LL_H */
