/*
 * test_sequence.c - different collectives and sizes back to back on one communicator of ranks
 * that share memory, every result checked bitwise: each call's schedule lays the slots out its
 * own way (two-rank broadcasts and reduces, and allgathers of several chunks, as a ring of
 * places, shm.h and allgather.c; the others as two halves), and each must find them free of the
 * calls before it. Blocking calls, then three
 * posted at once and waited for. Default slots (a 12 MiB broadcast goes round its places six
 * times) and 64 KiB ones (every call of more than 64 KiB goes round); the short cases (quick,
 * also under the sanitizers) with small calls on 64 KiB slots.
 */
#include <stdlib.h>

#include "matrix.h"
#include "ranks.h"
#include "ref.h"
#include "test.h"

typedef struct {
  chorus_coll_t coll;
  size_t count; /* elements (per block for allgather) */
} step_t;

static const step_t kSteps[] = {
    {CH_COLL_BROADCAST, 3u << 20}, {CH_COLL_ALLREDUCE, 65537},  {CH_COLL_REDUCE, 3u << 20},
    {CH_COLL_BROADCAST, 100003},   {CH_COLL_ALLGATHER, 4097},   {CH_COLL_REDUCE, 100003},
    {CH_COLL_BARRIER, 0},          {CH_COLL_BROADCAST, 7},      {CH_COLL_REDUCE_SCATTER, 20011},
    {CH_COLL_REDUCE, 1023},        {CH_COLL_ALLREDUCE, 3u << 18}, {CH_COLL_BROADCAST, 1u << 16},
    {CH_COLL_ALLGATHER, 300007},   {CH_COLL_BROADCAST, 9},      {CH_COLL_ALLGATHER, 70001},
    {CH_COLL_ALLTOALL, 200003},    {CH_COLL_BROADCAST, 5003},   {CH_COLL_ALLTOALL, 1023},
};

/* Small enough for the sanitizer builds, with 64 KiB slots: every broadcast followed by a call
 * that writes the slots of the ids after it, while the other ranks may still copy its last
 * chunk (a broadcast's root returns before they have: broadcast.c), in one chunk (LL lines, a
 * slot) and in a two-rank pipeline of several; calls of no elements, which take no id, before
 * one staged through a slot (a rank that published an id for nothing would let the others copy
 * its slot before it wrote it); reduces whose other ranks leave before the root has read what
 * they staged (LL lines, on two ranks one chunk in a slot or a pipeline's places: reduce.c),
 * followed by calls that write those lines, slots and places. */
static const step_t kShortSteps[] = {
    {CH_COLL_BROADCAST, 5003}, {CH_COLL_ALLREDUCE, 8191},       {CH_COLL_BROADCAST, 7},
    {CH_COLL_ALLGATHER, 1025}, {CH_COLL_BROADCAST, 20011},      {CH_COLL_REDUCE_SCATTER, 4099},
    {CH_COLL_BROADCAST, 300},  {CH_COLL_ALLTOALL, 1023},        {CH_COLL_BROADCAST, 2},
    {CH_COLL_ALLREDUCE, 3},    {CH_COLL_BROADCAST, 16384},      {CH_COLL_REDUCE, 5003},
    {CH_COLL_ALLGATHER, 40009}, {CH_COLL_BROADCAST, 11},        {CH_COLL_ALLGATHER, 20011},
    {CH_COLL_ALLGATHER, 0},     {CH_COLL_ALLGATHER, 5003},      {CH_COLL_REDUCE_SCATTER, 0},
    {CH_COLL_REDUCE, 3001},     {CH_COLL_BROADCAST, 20011},     {CH_COLL_REDUCE, 9},
    {CH_COLL_REDUCE, 20011},    {CH_COLL_REDUCE, 30011},        {CH_COLL_ALLREDUCE, 8191},
    {CH_COLL_REDUCE, 40009},    {CH_COLL_REDUCE, 40009},        {CH_COLL_REDUCE, 40009},
};

typedef struct {
  const step_t* steps;
  int nsteps; /* a multiple of 3: posted three at a time */
  int rounds;
  int nranks;
} plan_t;

static const plan_t kLong = {kSteps, sizeof(kSteps) / sizeof(kSteps[0]), 6, 0};
static const plan_t kShort = {kShortSteps, sizeof(kShortSteps) / sizeof(kShortSteps[0]), 20, 0};
_Static_assert(sizeof(kSteps) / sizeof(kSteps[0]) % 3 == 0, "the posted loop covers every step");
_Static_assert(sizeof(kShortSteps) / sizeof(kShortSteps[0]) % 3 == 0, "the posted loop covers every step");

static mx_spec_t step_spec(const plan_t* p, int round, int i) {
  mx_spec_t s = {p->steps[i].coll,
                 p->steps[i].count,
                 (chorus_dtype_t)((round * p->nsteps + i) % CHORUS_DTYPE_COUNT),
                 (chorus_op_t)((round + i) % CHORUS_OP_COUNT),
                 (round + i) % p->nranks,
                 0,
                 (round + i) % 3 == 0,
                 ref_mix64(7000u + (uint64_t)(round * p->nsteps + i)),
                 0};
  return s;
}

static int blocking_rank(chorus_comm_t* comm, int rank, void* arg) {
  const plan_t* p = arg;
  for (int round = 0; round < p->rounds; round++)
    for (int i = 0; i < p->nsteps; i++) {
      mx_spec_t s = step_spec(p, round, i);
      char spec[160];
      test_set_context("round %d, blocking %s", round, mx_spec_str(&s, spec, sizeof(spec)));
      mx_op_t op;
      mx_op_prepare(&op, &s, rank, p->nranks, NULL);
      ASSERT_COMM_OK(comm, mx_op_run(&op, comm));
      ASSERT_EQ(mx_op_verify(&op), 0);
      mx_op_release(&op);
    }
  return 0;
}

/* Three calls posted at once: each rank starts the next as soon as it has ended the one before
 * (the engine runs one collective at a time, in posting order), while its peer may still be
 * reading the slots of that one. */
static int posted_rank(chorus_comm_t* comm, int rank, void* arg) {
  const plan_t* p = arg;
  for (int round = 0; round < p->rounds; round++)
    for (int i = 0; i + 3 <= p->nsteps; i += 3) {
      mx_op_t ops[3];
      for (int j = 0; j < 3; j++) {
        mx_spec_t s = step_spec(p, round, i + j);
        char spec[160];
        test_set_context("round %d, posted %s", round, mx_spec_str(&s, spec, sizeof(spec)));
        mx_op_prepare(&ops[j], &s, rank, p->nranks, NULL);
        ASSERT_COMM_OK(comm, mx_op_post(&ops[j], comm));
      }
      for (int j = 0; j < 3; j++) {
        mx_spec_t s = step_spec(p, round, i + j);
        char spec[160];
        test_set_context("round %d, posted %s", round, mx_spec_str(&s, spec, sizeof(spec)));
        for (int r = 0; r < ops[j].nreq; r++) {
          ASSERT_OK(chorus_wait(ops[j].req[r]));
          chorus_req_free(ops[j].req[r]);
        }
        ASSERT_EQ(mx_op_verify(&ops[j]), 0);
        mx_op_release(&ops[j]);
      }
    }
  return 0;
}

static void run_both(const plan_t* base, int nranks, const char* slot_bytes) {
  plan_t p = *base;
  p.nranks = nranks;
  if (slot_bytes) setenv("CHORUS_SHM_SLOT_SIZE", slot_bytes, 1);
  ASSERT_EQ(run_ranks(nranks, blocking_rank, &p), 0);
  ASSERT_EQ(run_ranks(nranks, posted_rank, &p), 0);
  if (slot_bytes) unsetenv("CHORUS_SHM_SLOT_SIZE");
}

/* Two ranks have a CPU each here: single-copy reads (broadcasts of more than 4 KiB up to 1 MiB,
 * allgather and alltoall blocks of 8 KiB and more) whatever the kernel's speed, between the
 * staged calls. */
TEST_EX(two_ranks, 300, "full") {
  setenv("CHORUS_SHM_SINGLE_COPY", "2", 1);
  run_both(&kLong, 2, NULL);
  unsetenv("CHORUS_SHM_SINGLE_COPY");
}
TEST_EX(two_ranks_small_slots, 300, "full") { run_both(&kLong, 2, "65536"); }
TEST_EX(three_ranks, 300, "full") { run_both(&kLong, 3, NULL); }
/* Staged through the slots: single-copy reads would take the broadcasts of 4 KiB - 1 MiB. */
static void run_short(int nranks) {
  setenv("CHORUS_SHM_SINGLE_COPY", "0", 1);
  run_both(&kShort, nranks, "65536");
  unsetenv("CHORUS_SHM_SINGLE_COPY");
}

TEST_EX(short_two_ranks, 120, "quick") { run_short(2); }

/* Two-rank reduces of several chunks (a pipeline through the places of the other rank's
 * slots), each followed at once by a call that writes the slots by halves, or by another
 * such reduce: the other rank leaves the reduce before the root has read its last places
 * (reduce.c), and its next write must wait for them (shm.h), whoever is root. */
static const step_t kPipeSteps[] = {
    {CH_COLL_REDUCE, 40009}, {CH_COLL_ALLREDUCE, 16001},      {CH_COLL_REDUCE, 40009},
    {CH_COLL_REDUCE, 40009}, {CH_COLL_ALLGATHER, 4097},       {CH_COLL_REDUCE, 30011},
    {CH_COLL_REDUCE, 40009}, {CH_COLL_REDUCE_SCATTER, 20011}, {CH_COLL_BROADCAST, 12007},
};
static const plan_t kPipe = {kPipeSteps, sizeof(kPipeSteps) / sizeof(kPipeSteps[0]), 300, 0};
_Static_assert(sizeof(kPipeSteps) / sizeof(kPipeSteps[0]) % 3 == 0, "the posted loop covers every step");

TEST_EX(reduce_pipelines_two_ranks, 120, "quick") {
  setenv("CHORUS_SHM_SINGLE_COPY", "0", 1);
  run_both(&kPipe, 2, "65536");
  unsetenv("CHORUS_SHM_SINGLE_COPY");
}
TEST_EX(short_three_ranks, 120, "quick") { run_short(3); }

/* Payload sizes from 0 to past the LL limits (transport/shm.h: 56 data bytes per line, the
 * first line starting with the signature word; up to 1 KiB, each collective to its own bound),
 * in bytes per rank, for each collective that moves small payloads through LL lines: bitwise,
 * with int8 and avg (a division after the sum), float16 and max, uint8 and prod, as calls of
 * changing sizes follow one another. Every size up to 300 bytes, then every seventh and those
 * around the bounds (512 B, 1 KiB). */
static size_t next_ll_size(size_t bytes) {
  static const size_t kBounds[] = {510, 511, 512, 513, 514, 1022, 1023, 1024, 1025, 1026};
  size_t next = bytes < 300 ? bytes + 1 : bytes + 7;
  for (size_t i = 0; i < sizeof(kBounds) / sizeof(kBounds[0]); i++)
    if (kBounds[i] > bytes && kBounds[i] < next) return kBounds[i];
  return next;
}

static int ll_sizes_rank(chorus_comm_t* comm, int rank, void* arg) {
  int nranks = *(const int*)arg;
  static const chorus_coll_t kColls[] = {CH_COLL_ALLREDUCE, CH_COLL_ALLGATHER, CH_COLL_REDUCE_SCATTER,
                                         CH_COLL_ALLTOALL, CH_COLL_BROADCAST, CH_COLL_REDUCE};
  enum { NCOLLS = sizeof(kColls) / sizeof(kColls[0]) };
  static const chorus_dtype_t kTypes[] = {CHORUS_INT8, CHORUS_FLOAT16, CHORUS_UINT8};
  static const chorus_op_t kOps[] = {CHORUS_AVG, CHORUS_MAX, CHORUS_PROD};
  for (size_t bytes = 0; bytes <= 1100; bytes = next_ll_size(bytes))
    for (int c = 0; c < NCOLLS; c++) {
      int blocked = kColls[c] == CH_COLL_REDUCE_SCATTER || kColls[c] == CH_COLL_ALLTOALL;
      int ti = (int)(bytes % 3);
      size_t esize = kTypes[ti] == CHORUS_FLOAT16 ? 2 : 1;
      size_t count = blocked ? bytes / esize / (size_t)nranks : bytes / esize;
      mx_spec_t s = {kColls[c], count, kTypes[ti], kOps[ti], (int)(bytes % (size_t)nranks), 0,
                     (int)(bytes % 4 == 0), ref_mix64(9000u + bytes * 8 + (size_t)c), 0};
      char spec[160];
      test_set_context("%zu bytes, %s", bytes, mx_spec_str(&s, spec, sizeof(spec)));
      mx_op_t op;
      mx_op_prepare(&op, &s, rank, nranks, NULL);
      ASSERT_COMM_OK(comm, mx_op_run(&op, comm));
      ASSERT_EQ(mx_op_verify(&op), 0);
      mx_op_release(&op);
    }
  return 0;
}

static void run_ll_sizes(int nranks) { ASSERT_EQ(run_ranks(nranks, ll_sizes_rank, &nranks), 0); }

TEST_EX(ll_sizes_two_ranks, 120, "quick") { run_ll_sizes(2); }
TEST_EX(ll_sizes_three_ranks, 120, "quick") { run_ll_sizes(3); }

/* Two ranks with a CPU each: allreduces of more than 16 MiB in one phase (shm/allreduce.c), in
 * chunks of 512 KiB and a short last one, combined with plain stores where the other
 * collectives stream, out of place and in place, with avg, sum and max. */
static int two_ranks_large_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  static const mx_spec_t kCalls[] = {
      {CH_COLL_ALLREDUCE, (16u << 20) / 4 + 1, CHORUS_FLOAT32, CHORUS_AVG, 0, 0, 0, 0, 0},
      {CH_COLL_ALLREDUCE, (16u << 20) / 8 + 3, CHORUS_FLOAT64, CHORUS_SUM, 0, 0, 1, 0, 0},
      {CH_COLL_ALLREDUCE, (16u << 20) / 4 + 7, CHORUS_INT32, CHORUS_MAX, 0, 0, 1, 0, 0},
  };
  for (int i = 0; i < 3; i++) {
    mx_spec_t s = kCalls[i];
    s.seed = ref_mix64(9500u + (uint64_t)i);
    char spec[160];
    test_set_context("%s", mx_spec_str(&s, spec, sizeof(spec)));
    mx_op_t op;
    mx_op_prepare(&op, &s, rank, 2, NULL);
    ASSERT_COMM_OK(comm, mx_op_run(&op, comm));
    ASSERT_EQ(mx_op_verify(&op), 0);
    mx_op_release(&op);
  }
  return 0;
}

TEST_EX(two_ranks_large, 120, "quick_asan") { ASSERT_EQ(run_ranks(2, two_ranks_large_rank, NULL), 0); }

/* Calls of no elements may pass NULL buffers (the root's send buffer too): nothing is read or
 * written, on either side of a two-rank pipeline, and the calls after them still work. */
static int empty_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  float out[4] = {1, 2, 3, 4};
  ASSERT_OK(chorus_broadcast(NULL, out, 0, CHORUS_FLOAT32, 0, comm));
  ASSERT_OK(chorus_broadcast(NULL, NULL, 0, CHORUS_FLOAT32, 1, comm));
  ASSERT_OK(chorus_reduce(NULL, rank == 1 ? out : NULL, 0, CHORUS_FLOAT32, CHORUS_SUM, 1, comm));
  ASSERT_TRUE(out[0] == 1 && out[3] == 4);
  float in[4] = {(float)rank, 1, 2, 3};
  ASSERT_OK(chorus_broadcast(in, out, 4, CHORUS_FLOAT32, 1, comm));
  ASSERT_TRUE(out[0] == 1 && out[1] == 1 && out[3] == 3);
  return 0;
}

TEST_EX(two_ranks_no_elements, 60, "quick") { ASSERT_EQ(run_ranks(2, empty_rank, NULL), 0); }
