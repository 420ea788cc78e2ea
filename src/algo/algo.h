/*
 * algo.h - the algorithm contract. An algorithm is a non-blocking schedule: init() prepares
 * its state, progress() posts transfers (src/transport/conn.h) and reduces arrived data
 * (src/reduce/reduce.h), returning CHORUS_INPROGRESS until it is finished. progress() is called
 * again whenever any transfer of the communicator moved, so it must be resumable: keep the
 * position in t->phase / t->step / t->state and never wait, sleep or read the environment.
 */
#ifndef CHORUS_ALGO_H
#define CHORUS_ALGO_H

#include "coll/task.h"
#include "core/topo.h"
#include "reduce/reduce.h"
#include "transport/conn.h"

/* One run of an engine (ring, binomial, ...): a rank group inside the communicator with its
 * own buffers, count, reduction, root and tags. The registry's entries run an engine over the
 * whole communicator (chorus__sched_of_task); a two-level algorithm runs several over host
 * groups and rails, as phases of one task. Members are group indexes throughout; the engine
 * maps them to communicator ranks only when it posts. */
typedef struct {
  chorus_group_t group;
  const void* sendbuf;
  void* recvbuf;
  size_t count;         /* as chorus_coll_args_t.count for the collective the engine runs */
  chorus_dtype_t dtype;
  size_t elem_bytes;
  chorus_op_t op;
  int root;             /* group index */
  int avg_divisor;      /* op AVG: final sums are divided by this; 0: left undivided (a phase) */
  uint32_t tag_base;    /* added to every tag: phases of one task never match each other */
  size_t chunk_bytes;   /* pipelining unit */
  /* Block-layout collectives (reduce_scatter, allgather): member i owns block block_of[i] of
   * the n-block buffer (NULL: block i). Must outlive the run. */
  const int* block_of;
  /* Variable-size blocks (allgatherv, reduce_scatterv; NULL: every block holds `count`):
   * block b holds counts[b] elements at element displs[b] of the n-block buffer. Must outlive
   * the run. */
  const size_t* counts;
  const size_t* displs;
  /* Pieces read and written where they are instead of through a packed buffer: a fused group
   * operation's members (coll/group.c, task.segs), or a two-level phase's view of the user's
   * blocks (hier/allgather.c, hier/reduce_scatter.c): element e of this run's buffers is
   * element seg_at + e of the pieces' vector. NULL: the buffers above. Only the
   * memory-semantics reduce-scatter (input: the pieces' send pointers) and allgather (output:
   * their receive pointers; with no sendbuf, in place: its input too) of shm/group.c take them. */
  const chorus_seg_t* segs;
  size_t nsegs, seg_at;
  /* Compress what this run sends (kind NONE: do not). Only the zip engine reads it; a
   * two-level algorithm hands it to its inter-host phase alone. */
  chorus_codec_t codec;
  /* Error feedback (with a codec): element e of this run's input has residual[e], added before
   * encoding and replaced by what the encoding dropped. NULL: none. */
  float* residual;
  /* Where the engine takes the work areas that grow with the vector or its window (receive
   * slots, rd's partner vector, Bruck's packs, zip's encodings) and gives them back: the
   * communicator's kept scratch blocks (chorus__sched_scratch); NULL: malloc and free. */
  struct chorus_comm* pool;
} chorus_sched_t;

/* The schedule of a whole-communicator call over `group` (the task's own arguments, root
 * translated to its group index; avg divided by the communicator size). */
void chorus__sched_of_task(const chorus_task_t* t, chorus_group_t group, chorus_sched_t* s);

/* An engine's work area of `bytes` (64-byte aligned; NULL when out of memory) from s->pool, so
 * that calls do not allocate it anew (core/scratch.c says what that cost), and its return.
 * Engines start and end under the communicator's lock (init, progress, fini). */
void* chorus__sched_scratch(const chorus_sched_t* s, size_t bytes);
void chorus__sched_scratch_free(const chorus_sched_t* s, void* block);

/* Link figures the cost model uses: startup latency and bandwidth of one transfer. */
typedef struct {
  double alpha_us;      /* per message */
  double bytes_per_us;  /* sustained bandwidth */
} chorus_link_model_t;

/* What the cost model knows of a communicator: one link model per level and the shape. A flat
 * algorithm's steps all wait for the slowest link they use, so its formulas take `flat` (the
 * inter-host link when the communicator spans hosts, else the intra-host one); two-level
 * algorithms price each phase with its own level. */
typedef struct chorus_cost_ctx_s {
  chorus_link_model_t intra, inter, flat;
  /* The inter-host link while the first rank of every host sends to the next host's and
   * receives from the previous one's at once, as a host-ordered ring keeps every host link (the
   * probe's pattern on 3 hosts or more; 0: not measured). Where a rank's share of a core, not
   * the wire, sets a stream's pace, one pair alone overstates it: flat takes the lower figure. */
  double inter_ring_bytes_per_us;
  /* What a flat algorithm whose every rank talks across hosts at once sees (rd, rhd, direct,
   * dbtree, bruck, ...): the L ranks of a host share its link, so each gets 1/L of it. A
   * host-ordered ring crosses with one rank per host and sees `flat`. */
  chorus_link_model_t spread;
  /* Vector bytes a reduction kernel combines per microsecond (out of cache). Algorithms that
   * reduce a whole message only after it arrived pay it on top of the transfer; pipelined ones
   * overlap it. */
  double reduce_bytes_per_us;
  int nhosts;
  int max_local; /* ranks on the most populated host */
  int uniform;   /* every host has max_local ranks */
  /* Ranks per CPU on the busiest machine (emulated hosts share one), and what one rank waiting
   * for another costs when that is over 1 across hosts: the waited-for rank must first get a
   * core, which costs about a message between hosts (tune.c). 0 otherwise. */
  double machine_oversub;
  double handover_us; /* a latency-bound call's view replaces it (chorus__cost_for_call) */
  /* Latency-bound calls, of at most spin_bytes (the vector's bytes, count x dtype size; 0: no
   * call is), see other figures (tune.c): their waits spin, so a hand-over costs the rank waited
   * for a turn on the core (handover_spin_us, in place of handover_us); and messages that all
   * leave at once queue for shared cores instead of overlapping transfers
   * (spread_alpha_small_us, in place of spread.alpha_us). */
  double spin_bytes;
  double handover_spin_us;
  double spread_alpha_small_us;
} chorus_cost_ctx_t;

/* Whether a call of `bytes` is latency-bound across hosts (its waits spin: coll/api.c). */
static inline int chorus__cost_latency_bound(const chorus_cost_ctx_t* cx, double bytes) {
  return cx->spin_bytes > 0.0 && bytes <= cx->spin_bytes;
}

/* The figures a call of `bytes` sees: cx itself, or its latency-bound view. Idempotent. */
static inline chorus_cost_ctx_t chorus__cost_for_call(const chorus_cost_ctx_t* cx, double bytes) {
  chorus_cost_ctx_t call = *cx;
  if (chorus__cost_latency_bound(cx, bytes)) {
    call.handover_us = cx->handover_spin_us;
    call.spread.alpha_us = cx->spread_alpha_small_us;
  }
  return call;
}

/* Rounds of a doubling pattern (partners at distance 1, 2, 4, ... members apart: recursive
 * doubling and halving, a binomial tree) whose partners share a host, for the cost model: over
 * the host-ordered ring of equal hosts of L = 2^j ranks and a power-of-two n, distances 1 .. L/2
 * pair ranks of one host, so the first j rounds stay inside the hosts and only the others cross
 * (0 otherwise). */
static inline int chorus__cost_rounds_inside_hosts(const chorus_cost_ctx_t* cx, int n) {
  int L = cx->max_local, j = 0;
  if (cx->nhosts <= 1 || !cx->uniform || L < 2 || (L & (L - 1)) || (n & (n - 1))) return 0;
  while ((1 << j) < L) j++;
  return j;
}

/* What a message between two ranks of one host waits beyond its transfer when ranks share
 * cores across hosts: its receiver runs once the core has gone round its ranks, the
 * handover_spin_us of a latency-bound wait (tune.c sets it only then; 0 elsewhere). Hosts of 1+2+3 ranks on
 * 2 CPUs (3 ranks a CPU): broadcasts of 16 B - 12 KiB went to the chain, priced without it, at
 * 1.8-3.1x hier's time (its 3 hops inside hosts on the critical path, against one spread per
 * host). Priced at the others' turns only ((oversub - 1) / oversub of a round), hosts of 3+1
 * ranks sent 16 B reduces to the chain whenever the probe's intra-host alpha read near 1 us,
 * where calls started together (chorus-perf -B 2) took 33-36 us on the chain's two hops against
 * hier's 27-32. */
static inline double chorus__cost_inhost_turn_us(const chorus_cost_ctx_t* cx) { return cx->handover_spin_us; }

/* Bytes a rank copies per microsecond inside its own memory while they stay in the caches (a
 * read and a write each; ~10 GB/s on these machines): the memory-semantics schedules' copies
 * (shm.h) and the local copies of the others that are priced (Bruck's packs). Beyond the caches
 * the reduction kernels' figure (reduce_bytes_per_us) is the nearer one. */
#define CHORUS_COST_COPY_BYTES_PER_US 10000.0

/* What a pipelined schedule's reductions of `bytes` add to its transfers where ranks share
 * cores (machine_oversub over 1; 0 elsewhere): there they do not overlap the transfers, whose
 * TCP copies need the same cores, and a core reduces for each of its ranks in turn. The flat
 * ring's reduce_scatter on 4 emulated hosts x 2 ranks (4 ranks a core) with 10 Gbit/s links,
 * priced without it, tied with hier's (97 against 94 ms predicted at 64 MiB) and was chosen in
 * some launches, where it took 182-186 ms to hier's 101-106. */
static inline double chorus__cost_crowded_reduce_us(const chorus_cost_ctx_t* cx, double bytes) {
  return cx->machine_oversub > 1.0 ? bytes / cx->reduce_bytes_per_us * cx->machine_oversub : 0.0;
}

/* What packing costs a fused group operation (task.segs) whose algorithm does not take its
 * members where they are: they are copied into one vector before it starts and out of it after
 * it ends, two passes over its bytes that nothing overlaps, at the speed of memory (the
 * reduction kernels' figure), slowed by the ranks that share each core. 0 for other calls. */
static inline double chorus__algo_packing_us(const chorus_task_t* t, const chorus_cost_ctx_t* cx) {
  if (!t->segs) return 0.0;
  double bytes = (double)t->args.count * (double)t->dtype_size;
  return 2.0 * bytes / cx->reduce_bytes_per_us * (cx->machine_oversub > 1.0 ? cx->machine_oversub : 1.0);
}

typedef struct chorus_algo {
  const char* name;   /* the same string in CHORUS_ALGO, logs, traces, chorus-diag, chorus-perf */
  const char* desc;   /* one line for chorus-diag --algos */
  chorus_coll_t coll; /* the operation it serves */
  /* 1 if it can serve this task; NULL means always. */
  int (*supported)(const chorus_task_t* t);
  /* Predicted time in microseconds under the alpha-beta model. */
  double (*cost_us)(const chorus_task_t* t, const chorus_cost_ctx_t* cx);
  chorus_status_t (*init)(chorus_task_t* t);     /* may return ERR_NOT_SUPPORTED */
  chorus_status_t (*progress)(chorus_task_t* t); /* INPROGRESS, OK, or < 0 */
  void (*fini)(chorus_task_t* t);                /* releases t->state; NULL-safe; may be NULL */
  /* Two-level algorithms: the name of inner engine i it can run ("rhd" of "hier/rhd"), NULL
   * past the last; the function is NULL when it takes none. */
  const char* (*sub_name)(size_t i);
  /* 1: reads and writes a fused group operation's members where they are (task.segs) instead
   * of the packed buffer in args, so the group need not pack and unpack them. Its init may set
   * task.segs to NULL for a call it serves otherwise (hier's leader mode): the group packs it. */
  int takes_segments;
  /* 1: applies the call's codec (task.codec) where its scope says. A call with a codec is
   * offered only to these (coll/select.c). */
  int compresses;
} chorus_algo_t;

/* One item of CHORUS_ALGO for one collective: calls whose bytes (count x dtype size) lie in
 * [lo, hi) run `algo` (with inner engine `sub`, as in "hier/rhd"); the last matching rule
 * wins. algo NULL: the name given has no entry for this collective (an error at call time). */
typedef struct {
  const struct chorus_algo* algo;
  char name[32];
  char sub[16];
  size_t lo, hi;
} chorus_algo_rule_t;
#define CHORUS_MAX_ALGO_RULES 8

/* The registry (src/algo/registry.c). */
extern const chorus_algo_t* const chorus__algos[];
extern const size_t chorus__nalgos;
const chorus_algo_t* chorus__algo_find(chorus_coll_t coll, const char* name);
/* 1 when algo runs inner engine `sub`. */
int chorus__algo_has_sub(const chorus_algo_t* algo, const char* sub);

/* Helpers shared by algorithm files. */
static inline size_t chorus__min_sz(size_t a, size_t b) { return a < b ? a : b; }
static inline int chorus__mod(int a, int n) { return ((a % n) + n) % n; }

#endif /* CHORUS_ALGO_H */
