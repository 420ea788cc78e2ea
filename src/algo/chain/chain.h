/*
 * chain.h - the pipelined chain broadcast engine over any group: root -> root+1 -> ... ->
 * root-1 (member indexes mod n), chunk by chunk; and what the chain broadcast and the chain
 * reduce (the tree reduce engine of binomial.h over a chain, the other way) share: how they
 * cut a message and their price.
 */
#ifndef CHORUS_ALGO_CHAIN_H
#define CHORUS_ALGO_CHAIN_H

#include "algo/algo.h"
#include "algo/common.h"

/* Chunks in flight on each link (receives posted ahead, sends not yet done). */
#ifndef CHORUS_CHAIN_WINDOW
#define CHORUS_CHAIN_WINDOW 4
#endif

/* The engine: start, step until OK (or < 0), free (NULL-safe). The root's sendbuf ends in
 * every member's recvbuf. */
typedef struct chorus_chain chorus_chain_t;
chorus_status_t chorus__chain_bcast_start(const chorus_sched_t* s, chorus_chain_t** out);
chorus_status_t chorus__chain_bcast_step(chorus_task_t* t, chorus_chain_t* c);
size_t chorus__chain_bcast_chunks_done(const chorus_chain_t* c);
void chorus__chain_bcast_free(chorus_chain_t* c);

/* The chunk of a message of `bytes` whose pipelining unit is `unit` bytes: at least 8 chunks
 * of at least 16 KiB. Every hop forwards a chunk only once it is whole, so one chunk of the whole
 * message would cross the links one after another; chunks of 4 KiB made a 16 KiB broadcast on 4
 * emulated hosts x 2 ranks take 138 us where one chunk took 70 (8 ranks on 2 cores: every
 * message costs its ranks a turn on a core). */
static inline size_t chorus__chain_chunk_bytes(size_t bytes, size_t unit) {
  size_t chunk = bytes / 8u;
  if (chunk < 16384u) chunk = 16384u;
  return chunk < unit ? chunk : unit;
}

/* Cost of one call (alpha-beta, C chunks of S bytes, X hops between hosts, the other n-1-X
 * inside them): the first chunk through every hop, then C - 1 more over the slowest link, the
 * start-ups of the window's chunks in flight overlapping its transfers:
 *   T = X (a2 + S/b2) + (n-1-X) (a1 + h + S/b1) + (C-1) (a2/W + S/b2); 0 for n = 1,
 * h a round of a core that ranks share (algo.h, chorus__cost_inhost_turn_us): the first chunk
 * moves on from each rank of a host only once that rank has its turn on a core.
 * Priced with every hop crossing hosts and one chunk of up to 256 KiB, broadcasts of 64 KiB -
 * 64 MiB on 4 emulated hosts x 2 ranks went to hier's trees at 1.9-2.0x the chain's time. Calls
 * back to back cost a chain less than this (its hops overlap from call to call: 16 KiB in 70 us
 * against 200 alone), but the price is of a call alone, as the binomial tree's and hier's are:
 * priced as a run (one pass of the busiest link), the chain took 12 KiB broadcasts on hosts of
 * 1+2+3 ranks at 138 us alone where hier took 43. */
static inline double chorus__chain_cost_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (t->nranks <= 1) return 0.0;
  size_t nbytes = t->args.count * t->dtype_size;
  double bytes = (double)nbytes, chunk = (double)chorus__chain_chunk_bytes(nbytes, t->chunk_bytes);
  double chunks = bytes > chunk ? bytes / chunk : 1.0, piece = bytes / chunks;
  /* From a root that is not first on its host the chain ends back on it: one more crossing. */
  double crossing = cx->nhosts > 1 ? cx->nhosts - (chorus__root_first_on_host(t) ? 1.0 : 0.0) : 0.0;
  double inside = t->nranks - 1.0 - crossing;
  const chorus_link_model_t* slow = cx->nhosts > 1 ? &cx->flat : &cx->intra;
  return crossing * (cx->flat.alpha_us + piece / cx->flat.bytes_per_us) +
         inside * (cx->intra.alpha_us + chorus__cost_inhost_turn_us(cx) + piece / cx->intra.bytes_per_us) +
         (chunks - 1.0) * (slow->alpha_us / CHORUS_CHAIN_WINDOW + piece / slow->bytes_per_us);
}

#endif /* CHORUS_ALGO_CHAIN_H */
