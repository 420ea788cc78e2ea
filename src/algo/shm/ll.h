/*
 * ll.h - low-latency (LL) payloads of the memory-semantics algorithms: a call whose payload per
 * rank is at most CHORUS_SHM_LL_MAX_BYTES (transport/shm.h) moves it through the ranks' LL
 * buffers, where each 8-byte word carries 4 data bytes and the operation's flag, so seeing the
 * data is seeing that it arrived: one cache miss per peer line instead of a flag miss followed
 * by a data miss. Every rank writes its payload (after two words of the call's signature, so
 * that mismatched calls are detected), waits for every other's, reads what it needs, and
 * publishes DONE.
 *
 * An LL buffer was last used at most two ids ago; a rank that completed the LL operation just
 * before this one saw every peer's words of it, so every peer had finished the one before: the
 * DONE flags need no look then (chorus__ll_exchange).
 */
#ifndef CHORUS_ALGO_SHM_LL_H
#define CHORUS_ALGO_SHM_LL_H

#include "algo/shm/shm.h"

/* How many times a wait polls a peer's last word (a pause apart, a few microseconds in all)
 * before it hands back to the engine: polled once per engine pass, the word was seen half a
 * pass late on average. */
#define CHORUS_SHM_LL_POLLS 64

/* The flag of operation id in LL words: never 0, so zeroed memory never looks written. */
static inline uint64_t chorus__ll_flag(uint64_t id) { return ((id % 0xffffffffull) + 1) << 32; }

/* Two words that every rank computes the same from the same call: a hash of the signature. */
static inline void chorus__ll_signature(const chorus_task_t* t, uint32_t out[CHORUS_SHM_LL_SIG_WORDS]) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < CHORUS_SIG_WORDS; i++) h = (h ^ t->sig[i]) * 1099511628211ull, h ^= h >> 29;
  out[0] = (uint32_t)h;
  out[1] = (uint32_t)(h >> 32);
}

static inline size_t chorus__ll_data_words(size_t bytes) { return (bytes + 3) / 4; }

/* Writes this rank's payload into its LL buffer; the last word sequentially consistent, so that
 * a peer about to sleep either sees it or is rung (see chorus__shm_bell_ring). */
static inline void chorus__ll_write(chorus_task_t* t, uint64_t id, const void* payload, size_t bytes) {
  uint64_t* words = chorus__conn_shm_ll(t, t->rank, (int)(id & 1)), flag = chorus__ll_flag(id);
  uint32_t sig[CHORUS_SHM_LL_SIG_WORDS];
  chorus__ll_signature(t, sig);
  const unsigned char* src = payload;
  size_t n = chorus__ll_data_words(bytes);
  /* Peers hold these lines from the last use: ask for all of them at once, or each store
   * waits for its own line in turn. */
  for (size_t w = 0; w < CHORUS_SHM_LL_SIG_WORDS + n; w += 8) __builtin_prefetch(&words[w], 1, 3);
  for (int i = 0; i < CHORUS_SHM_LL_SIG_WORDS; i++) __atomic_store_n(&words[i], flag | sig[i], __ATOMIC_RELAXED);
  for (size_t w = 0; w < n; w++) {
    uint32_t v = 0;
    if (bytes - 4 * w >= 4) memcpy(&v, src + 4 * w, 4);
    else memcpy(&v, src + 4 * w, bytes - 4 * w);
    __atomic_store_n(&words[CHORUS_SHM_LL_SIG_WORDS + w], flag | v, w + 1 == n ? __ATOMIC_SEQ_CST : __ATOMIC_RELAXED);
  }
  if (!n) __atomic_store_n(&words[0], flag | sig[0], __ATOMIC_SEQ_CST);
  chorus__conn_shm_signal(t);
}

/* 1 when rank's LL buffer holds every word of operation id; *st < 0 when it never will. */
static inline int chorus__ll_arrived(chorus_task_t* t, int rank, uint64_t id, size_t bytes, chorus_status_t* st) {
  const uint64_t* words = chorus__conn_shm_ll(t, rank, (int)(id & 1));
  uint64_t flag = chorus__ll_flag(id);
  size_t total = CHORUS_SHM_LL_SIG_WORDS + chorus__ll_data_words(bytes);
  /* The last word is written last: poll it alone until it is there. */
  for (int spin = t->polls_inline ? CHORUS_SHM_LL_POLLS : 0;
       spin > 0 && (__atomic_load_n(&words[total - 1], __ATOMIC_ACQUIRE) & ~0xffffffffull) != flag; spin--)
    __builtin_ia32_pause();
  if ((__atomic_load_n(&words[total - 1], __ATOMIC_ACQUIRE) & ~0xffffffffull) != flag) {
    chorus__conn_shm_peer_ok(t, rank, st);
    return 0;
  }
  for (size_t w = 0; w < total; w++)
    if ((__atomic_load_n(&words[w], __ATOMIC_ACQUIRE) & ~0xffffffffull) != flag) return 0;
  uint32_t mine[CHORUS_SHM_LL_SIG_WORDS];
  chorus__ll_signature(t, mine);
  for (int i = 0; i < CHORUS_SHM_LL_SIG_WORDS; i++) {
    if ((uint32_t)__atomic_load_n(&words[i], __ATOMIC_RELAXED) == mine[i]) continue;
    *st = chorus__conn_shm_mismatch(t, rank);
    return 0;
  }
  return 1;
}

/* Rank's payload of operation id (bytes long), out of its LL words into out. */
static inline void chorus__ll_read(const chorus_task_t* t, int rank, uint64_t id, size_t bytes, unsigned char* out) {
  const uint64_t* words = chorus__conn_shm_ll(t, rank, (int)(id & 1)) + CHORUS_SHM_LL_SIG_WORDS;
  size_t n = chorus__ll_data_words(bytes);
  for (size_t w = 0; w < n; w++) {
    uint32_t v = (uint32_t)__atomic_load_n(&words[w], __ATOMIC_RELAXED);
    if (bytes - 4 * w >= 4) memcpy(out + 4 * w, &v, 4);
    else memcpy(out + 4 * w, &v, bytes - 4 * w);
  }
}

/* Stage 0 writes this rank's payload (once no rank still reads this parity's previous use),
 * stage 1 waits for the peers one by one (t->step: the next to wait for). OK once every peer's
 * payload is there (read them with chorus__ll_read, then call chorus__ll_done). */
static inline chorus_status_t chorus__ll_exchange(chorus_task_t* t, chorus_shm_op_t* s, const void* payload,
                                                  size_t bytes) {
  uint64_t id = chorus__shm_id(s), *last = chorus__conn_shm_ll_last(t);
  chorus_status_t st = CHORUS_OK;
  if (s->stage == 0) {
    if (*last + 1 != id) CHORUS_SHM_WAIT(chorus__shm_slot_free(t, s, &st), st);
    chorus__ll_write(t, id, payload, bytes);
    chorus__shm_advance(t, s, 1);
  }
  for (; t->step < (size_t)t->nranks; t->step++)
    if ((int)t->step != t->rank) CHORUS_SHM_WAIT(chorus__ll_arrived(t, (int)t->step, id, bytes, &st), st);
  return CHORUS_OK;
}

/* Combines m elements at byte `off` of every rank's payload (`bytes` long) into dst, in rank
 * order, as every rank does, so that all get the same bits; avg divides. */
static inline void chorus__ll_combine(chorus_task_t* t, chorus_shm_op_t* s, size_t bytes, size_t off, char* dst,
                                      size_t m) {
  uint64_t id = chorus__shm_id(s);
  _Alignas(64) unsigned char a[CHORUS_SHM_LL_MAX_BYTES], b[CHORUS_SHM_LL_MAX_BYTES];
  chorus__ll_read(t, 0, id, bytes, a);
  chorus__ll_read(t, 1, id, bytes, b);
  s->reduce(dst, a + off, b + off, m);
  for (int q = 2; q < t->nranks; q++) {
    chorus__ll_read(t, q, id, bytes, b);
    s->reduce(dst, dst, b + off, m);
  }
  if (t->args.op == CHORUS_AVG) chorus__reduce_avg_finish(dst, m, t->args.dtype, t->nranks);
}

/* Every peer has written operation id, so each has read this rank's words of id - 1: take
 * those lines back now, while the caller goes on, so that the next call's write (id + 1,
 * the same parity) does not stall on them. */
static inline void chorus__ll_reclaim(chorus_task_t* t, uint64_t id) {
  uint64_t* words = chorus__conn_shm_ll(t, t->rank, (int)((id + 1) & 1));
  for (size_t w = 0; w < CHORUS_SHM_LL_WORDS; w += 8) __builtin_prefetch(&words[w], 1, 3);
}

static inline void chorus__ll_done(chorus_task_t* t, chorus_shm_op_t* s) {
  uint64_t id = chorus__shm_id(s);
  chorus__ll_reclaim(t, id);
  chorus__conn_shm_publish(t, SHM_DONE, id);
  *chorus__conn_shm_ll_last(t) = id;
  s->k = s->nchunks;
}

#endif /* CHORUS_ALGO_SHM_LL_H */
