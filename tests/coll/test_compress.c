/*
 * test_compress.c - compressed allreduce (CHORUS_COMPRESSION): every codec, sum and avg, in and
 * out of place, counts from 0 past several int8/int4 chunks, ranks as threads:
 *  - one host with scope all (the flat compressed allreduce): bitwise against a reference
 *    composed here from the codec (reduce/codec.h, itself checked bit for bit against an
 *    independent encoder in tests/unit/test_codec.c): each block encoded once per rank, decoded
 *    and summed in rank order, the sum encoded once and decoded;
 *  - emulated hosts (two-level allreduce with compressed rails; uneven hosts: the flat one):
 *    every rank bitwise identical, lossless inputs exact (fp16/bf16 of small integers, top-k
 *    keeping everything), int8/int4 within the quantisation bound of the exact sum;
 *  - one host with scope inter-host, other dtypes, other ops and a forced non-compressing
 *    algorithm: exactly the uncompressed result;
 *  - calls under the setting's min_bytes, alone or fused in a group: exactly the uncompressed
 *    result; a call of min_bytes: compressed;
 *  - ranks with different codecs: ERR_MISMATCH (across hosts ERR_MISMATCH or ERR_REMOTE);
 *  - the setter, the getter and CHORUS_COMPRESSION's parsing and their errors.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ranks.h"
#include "reduce/codec.h"
#include "ref.h"
#include "test.h"

enum { MAX_RANKS = 8 };

static const int k2x2_rr[] = {0, 1, 0, 1};
static const int k2x3_rr[] = {0, 1, 0, 1, 0, 1};
static const int k4x2_rr[] = {0, 1, 2, 3, 0, 1, 2, 3};
static const int k3p1[] = {0, 0, 1, 0};

/* ---- inputs ---- */

typedef enum {
  DATA_RANDOM,    /* floats of mixed scales: what gradients look like */
  DATA_SMALL_INT, /* integers in [-8, 8]: every codec but int8/int4 and top-k < 1 is lossless */
} data_t;

/* Element i of rank r's input for call `call`. */
static float input_elem(data_t data, int call, int r, size_t i) {
  uint64_t h = ref_mix64(((uint64_t)call << 40) ^ ((uint64_t)r << 32) ^ i);
  if (data == DATA_SMALL_INT) return (float)((int)(h % 17) - 8);
  double unit = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;            /* [-1, 1) */
  double scale = ldexp(1.0, (int)((h >> 3) % 5) - 2 + r % 3);       /* 2^-2 .. 2^4 */
  return (float)(unit * scale);
}

static void fill_input(float* buf, size_t count, data_t data, int call, int r) {
  for (size_t i = 0; i < count; i++) buf[i] = input_elem(data, call, r, i);
}

/* ---- the cases ---- */

typedef struct {
  chorus_compression_t codec;
  double fraction;
  size_t count;
  chorus_op_t op;
  int in_place;
  data_t data;
} call_t;

static const chorus_compression_t k_codecs[] = {CHORUS_COMPRESSION_FP16, CHORUS_COMPRESSION_BF16,
                                                CHORUS_COMPRESSION_INT8, CHORUS_COMPRESSION_INT4,
                                                CHORUS_COMPRESSION_TOPK, CHORUS_COMPRESSION_TOPK};
static const double k_fractions[] = {0, 0, 0, 0, 0.1, 1.0};
enum { NCODECS = sizeof(k_codecs) / sizeof(k_codecs[0]) };

typedef struct {
  call_t calls[512];
  int ncalls;
  chorus_compression_scope_t scope;
  /* per call and rank: a hash of the result, and problems found against the expectation */
  uint64_t hash[512][MAX_RANKS];
  atomic_int problems;
  int exact_reference; /* one host, scope all: the composed reference applies */
} plan_t;

static void plan_calls(plan_t* p, const size_t* counts, size_t ncounts) {
  p->ncalls = 0;
  for (int c = 0; c < NCODECS; c++)
    for (size_t k = 0; k < ncounts; k++)
      for (int v = 0; v < 4; v++) {
        call_t* call = &p->calls[p->ncalls++];
        *call = (call_t){k_codecs[c], k_fractions[c], counts[k], v & 1 ? CHORUS_AVG : CHORUS_SUM, v >> 1,
                         (k + (size_t)v) % 2 ? DATA_SMALL_INT : DATA_RANDOM};
      }
}

static uint64_t hash_floats(const float* x, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], sizeof u);
    h = ref_mix64(h ^ u);
  }
  return h;
}

/* ---- the reference of the flat compressed allreduce, members in rank order ---- */

static void segment(size_t count, int n, int b, size_t* first, size_t* len) {
  size_t base = count / (size_t)n, rem = count % (size_t)n, k = (size_t)b;
  *first = k * base + (k < rem ? k : rem);
  *len = base + (k < rem ? 1 : 0);
}

static void divide(float* x, size_t n, int by) {
  for (size_t i = 0; i < n; i++) x[i] = x[i] / (float)by;
}

static void reference_flat(const call_t* call, int call_no, int n, float* out) {
  chorus_codec_t codec = {(chorus_codec_kind_t)call->codec, call->fraction};
  float* in = malloc((call->count + 1) * sizeof(float));
  void* enc = malloc(chorus__codec_bytes(&codec, call->count) + 64);
  ASSERT_TRUE(in && enc);
  if (codec.kind == CHORUS_CODEC_TOPK) {
    memset(out, 0, call->count * sizeof(float));
    for (int m = 0; m < n; m++) {
      fill_input(in, call->count, call->data, call_no, m);
      chorus__codec_encode(&codec, enc, in, call->count, NULL);
      chorus__codec_decode_add(&codec, out, enc, call->count);
    }
    if (call->op == CHORUS_AVG) divide(out, call->count, n);
  } else {
    for (int b = 0; b < n; b++) {
      size_t first, len;
      segment(call->count, n, b, &first, &len);
      float* acc = out + first;
      for (int m = 0; m < n; m++) {
        fill_input(in, call->count, call->data, call_no, m);
        chorus__codec_encode(&codec, enc, in + first, len, NULL);
        if (m == 0) chorus__codec_decode(&codec, acc, enc, len);
        else chorus__codec_decode_add(&codec, acc, enc, len);
      }
      if (call->op == CHORUS_AVG) divide(acc, len, n);
      chorus__codec_encode(&codec, enc, acc, len, NULL);
      chorus__codec_decode(&codec, acc, enc, len);
    }
  }
  free(in);
  free(enc);
}

/* ---- what must hold without the reference: exactness or the quantisation bound ---- */

static int lossless(const call_t* call) {
  if (call->data != DATA_SMALL_INT) return 0;
  if (call->codec == CHORUS_COMPRESSION_TOPK) return call->fraction >= 1.0;
  return call->codec == CHORUS_COMPRESSION_FP16 || call->codec == CHORUS_COMPRESSION_BF16;
}

/* The result of a lossless call: the exact sum (an integer float32 holds), for avg divided in
 * float32, and for the casts that quotient cast once more (the owner encodes the average). */
static float lossless_result(const call_t* call, double exact_sum, int n) {
  float r = (float)exact_sum;
  if (call->op != CHORUS_AVG) return r;
  r = r / (float)n;
  if (call->codec == CHORUS_COMPRESSION_FP16) return ref_half_to_float(ref_float_to_half(r));
  if (call->codec == CHORUS_COMPRESSION_BF16) return ref_bf16_to_float(ref_float_to_bf16(r));
  return r;
}

/* Checks out against the exact sum (double) of the inputs: equal when lossless; for int8/int4
 * each element within two quantisation steps of every rank's largest magnitude (one
 * quantisation of each input, one of the sum); the casts within a relative 2^-7. */
static int check_bound(const call_t* call, int call_no, int n, const float* out, int rank) {
  float* in = malloc((call->count + 1) * sizeof(float));
  double* exact = calloc(call->count + 1, sizeof(double));
  ASSERT_TRUE(in && exact);
  double amax = 0;
  for (int m = 0; m < n; m++) {
    fill_input(in, call->count, call->data, call_no, m);
    for (size_t i = 0; i < call->count; i++) {
      exact[i] += in[i];
      if (fabs(in[i]) > amax) amax = fabs(in[i]);
    }
  }
  int div = call->op == CHORUS_AVG ? n : 1;
  double q = call->codec == CHORUS_COMPRESSION_INT8 ? 127.0 : call->codec == CHORUS_COMPRESSION_INT4 ? 7.0 : 0.0;
  int bad = 0;
  for (size_t i = 0; i < call->count && !bad; i++) {
    double want = lossless(call) ? lossless_result(call, exact[i], n) : exact[i] / div, got = out[i];
    double tol = lossless(call) ? 0.0 : q > 0 ? 2.05 * n * amax / q / div + 1e-6 : fabs(want) * 0x1p-6 + n * amax * 0x1p-7 / div;
    if (call->codec == CHORUS_COMPRESSION_TOPK && !lossless(call)) tol = 1e300; /* identity only */
    if (!(fabs(got - want) <= tol)) {
      printf("WRONG rank %d call %d (codec %s, count %zu, %s): element %zu is %.9g, exact %.9g, bound %.3g\n", rank,
             call_no, chorus_compression_name(call->codec), call->count, call->op == CHORUS_AVG ? "avg" : "sum", i, got,
             want, tol);
      bad = 1;
    }
  }
  /* Quantised for real: random data never survives int8 or int4 whole. */
  int quantised = call->codec == CHORUS_COMPRESSION_INT8 || call->codec == CHORUS_COMPRESSION_INT4;
  if (!bad && quantised && call->data == DATA_RANDOM && call->count >= 1000) {
    size_t same = 0;
    for (size_t i = 0; i < call->count; i++) same += out[i] == (float)(exact[i] / div);
    if (same == call->count) {
      printf("WRONG rank %d call %d (codec %s, count %zu): the result is the exact sum, not quantised\n", rank, call_no,
             chorus_compression_name(call->codec), call->count);
      bad = 1;
    }
  }
  free(in);
  free(exact);
  return bad;
}

/* ---- one rank ---- */

static int compare_reference(const call_t* call, int call_no, int n, const float* out, int rank) {
  float* want = malloc((call->count + 1) * sizeof(float));
  ASSERT_NOT_NULL(want);
  reference_flat(call, call_no, n, want);
  int bad = 0;
  for (size_t i = 0; i < call->count && !bad; i++) {
    if (memcmp(&want[i], &out[i], sizeof(float)) != 0) {
      printf("WRONG rank %d call %d (codec %s, count %zu, %s, %s): element %zu is %.9g, reference %.9g\n", rank,
             call_no, chorus_compression_name(call->codec), call->count, call->op == CHORUS_AVG ? "avg" : "sum",
             call->in_place ? "in place" : "out of place", i, out[i], want[i]);
      bad = 1;
    }
  }
  free(want);
  return bad;
}

static int plan_rank(chorus_comm_t* comm, int rank, void* arg) {
  plan_t* p = arg;
  int n = 0;
  ASSERT_OK(chorus_comm_size(comm, &n));
  ASSERT_COMM_OK(comm, chorus_comm_set_compression_min_bytes(comm, 0)); /* every count compressed */
  for (int k = 0; k < p->ncalls; k++) {
    const call_t* call = &p->calls[k];
    chorus_compression_opts_t o = {call->codec, call->fraction, p->scope};
    ASSERT_COMM_OK(comm, chorus_comm_set_compression(comm, &o));
    float* in = malloc((call->count + 1) * sizeof(float));
    float* out = call->in_place ? in : malloc((call->count + 1) * sizeof(float));
    ASSERT_TRUE(in && out);
    fill_input(in, call->count, call->data, k, rank);
    ASSERT_COMM_OK(comm, chorus_allreduce(in, out, call->count, CHORUS_FLOAT32, call->op, comm));
    p->hash[k][rank] = hash_floats(out, call->count);
    int bad = p->exact_reference ? compare_reference(call, k, n, out, rank) : check_bound(call, k, n, out, rank);
    if (bad) atomic_fetch_add(&p->problems, 1);
    if (out != in) free(out);
    free(in);
  }
  return 0;
}

static void run_plan(plan_t* p, int n, const int* hosts) {
  atomic_store(&p->problems, 0);
  ranks_set_hosts(hosts ? n : 0, hosts);
  ASSERT_EQ(run_ranks(n, plan_rank, p), 0);
  ranks_set_hosts(0, NULL);
  int differ = 0;
  for (int k = 0; k < p->ncalls; k++)
    for (int r = 1; r < n; r++)
      if (p->hash[k][r] != p->hash[k][0] && differ++ < 5)
        printf("DIFFER call %d (codec %s, count %zu): rank %d's result is not rank 0's\n", k,
               chorus_compression_name(p->calls[k].codec), p->calls[k].count, r);
  if (differ || atomic_load(&p->problems))
    FAIL("%d calls differ between ranks, %d wrong results (lines above)", differ, atomic_load(&p->problems));
}

static plan_t g_plan; /* large: not on a thread's stack */

static const size_t k_counts_quick[] = {0, 1, 7, 2049, 70001};
static const size_t k_counts_hosts[] = {1, 7, 4099, 300007};

static void flat_one_host(int n) {
  plan_calls(&g_plan, k_counts_quick, sizeof(k_counts_quick) / sizeof(k_counts_quick[0]));
  g_plan.scope = CHORUS_COMPRESSION_SCOPE_ALL;
  g_plan.exact_reference = 1;
  run_plan(&g_plan, n, NULL);
}

static void on_hosts(int n, const int* hosts) {
  plan_calls(&g_plan, k_counts_hosts, sizeof(k_counts_hosts) / sizeof(k_counts_hosts[0]));
  g_plan.scope = CHORUS_COMPRESSION_SCOPE_INTER_HOST;
  g_plan.exact_reference = 0;
  run_plan(&g_plan, n, hosts);
}

TEST_EX(flat_one_host_n3, 300, "quick") { flat_one_host(3); }
TEST_EX(flat_one_host_n2, 300, "full") { flat_one_host(2); }
TEST_EX(flat_one_host_n4, 300, "full") { flat_one_host(4); }
TEST_EX(hier_2x2_rr, 300, "quick") { on_hosts(4, k2x2_rr); }
TEST_EX(hier_2x3_rr, 300, "full") { on_hosts(6, k2x3_rr); }
TEST_EX(hier_4x2_rr, 300, "full") { on_hosts(8, k4x2_rr); }
TEST_EX(flat_uneven_3p1, 300, "full") { on_hosts(4, k3p1); }
/* The two-level allreduce's latency mode: local rank 0 of each host carries the whole chunk. */
TEST_EX(hier_leader_2x2_rr, 300, "full") {
  setenv("CHORUS_ALGO", "allreduce:hier/leader", 1);
  on_hosts(4, k2x2_rr);
  unsetenv("CHORUS_ALGO");
}

/* ---- calls compression leaves alone: bitwise the uncompressed result ---- */

typedef struct {
  chorus_dtype_t dtype;
  chorus_op_t op;
} untouched_t;

/* Each call twice, without and with int8 compression set: the results must be equal. */
static int untouched_rank(chorus_comm_t* comm, int rank, void* arg) {
  const untouched_t* u = arg;
  enum { COUNT = 5003 };
  size_t es = chorus_dtype_size(u->dtype);
  unsigned char *in = malloc(COUNT * es), *plain = malloc(COUNT * es), *zipped = malloc(COUNT * es);
  ASSERT_TRUE(in && plain && zipped);
  if (u->dtype == CHORUS_FLOAT32)
    fill_input((float*)in, COUNT, DATA_RANDOM, 7, rank);
  else
    ref_fill_reduce_input(in, COUNT, u->dtype, u->op, 4, rank, 0, 11);
  ASSERT_COMM_OK(comm, chorus_allreduce(in, plain, COUNT, u->dtype, u->op, comm));
  chorus_compression_opts_t o = {CHORUS_COMPRESSION_INT8, 0, CHORUS_COMPRESSION_SCOPE_INTER_HOST};
  ASSERT_COMM_OK(comm, chorus_comm_set_compression(comm, &o));
  ASSERT_COMM_OK(comm, chorus_comm_set_compression_min_bytes(comm, 0)); /* left alone for another reason */
  ASSERT_COMM_OK(comm, chorus_allreduce(in, zipped, COUNT, u->dtype, u->op, comm));
  int same = memcmp(plain, zipped, COUNT * es) == 0;
  if (!same) printf("WRONG rank %d: %s %s changed under int8 compression\n", rank, chorus_dtype_name(u->dtype),
                    chorus_op_name(u->op));
  free(in);
  free(plain);
  free(zipped);
  return !same;
}

TEST_EX(one_host_scope_inter_unchanged, 120, "quick") {
  untouched_t u = {CHORUS_FLOAT32, CHORUS_SUM};
  ASSERT_EQ(run_ranks(4, untouched_rank, &u), 0);
}

TEST_EX(hosts_other_dtypes_ops_unchanged, 120, "quick") {
  ranks_set_hosts(4, k2x2_rr);
  untouched_t cases[] = {{CHORUS_FLOAT64, CHORUS_SUM}, {CHORUS_INT32, CHORUS_SUM}, {CHORUS_FLOAT16, CHORUS_SUM},
                         {CHORUS_FLOAT32, CHORUS_MAX}, {CHORUS_FLOAT32, CHORUS_PROD}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) ASSERT_EQ(run_ranks(4, untouched_rank, &cases[i]), 0);
  ranks_set_hosts(0, NULL);
}

/* A forced algorithm that does not compress runs the call as it is. */
TEST_EX(hosts_forced_ring_uncompressed, 120, "quick") {
  ranks_set_hosts(4, k2x2_rr);
  setenv("CHORUS_ALGO", "allreduce:ring", 1);
  untouched_t u = {CHORUS_FLOAT32, CHORUS_SUM};
  ASSERT_EQ(run_ranks(4, untouched_rank, &u), 0);
  unsetenv("CHORUS_ALGO");
  ranks_set_hosts(0, NULL);
}

/* ---- min_bytes: smaller calls stay exact, alone and grouped ---- */

enum { GROUPED = 64 };

typedef struct {
  chorus_compression_opts_t opts;
  size_t min_bytes;
} min_plan_t;

/* The allreduce of `count` elements with and without the setting; returns whether they agree. */
static int same_as_plain(chorus_comm_t* comm, int rank, size_t count, const chorus_compression_opts_t* o) {
  float *in = malloc(count * sizeof(float)), *plain = malloc(count * sizeof(float)), *zipped = malloc(count * sizeof(float));
  ASSERT_TRUE(in && plain && zipped);
  fill_input(in, count, DATA_RANDOM, (int)count, rank);
  ASSERT_COMM_OK(comm, chorus_comm_set_compression(comm, NULL));
  ASSERT_COMM_OK(comm, chorus_allreduce(in, plain, count, CHORUS_FLOAT32, CHORUS_SUM, comm));
  ASSERT_COMM_OK(comm, chorus_comm_set_compression(comm, o));
  ASSERT_COMM_OK(comm, chorus_allreduce(in, zipped, count, CHORUS_FLOAT32, CHORUS_SUM, comm));
  int same = memcmp(plain, zipped, count * sizeof(float)) == 0;
  free(in);
  free(plain);
  free(zipped);
  return same;
}

static int min_bytes_rank(chorus_comm_t* comm, int rank, void* arg) {
  const min_plan_t* p = arg;
  const chorus_compression_opts_t* o = &p->opts;
  size_t below = p->min_bytes / 4 - (p->min_bytes % 4 == 0), at = below + 1; /* the last count under, the first not */
  ASSERT_COMM_OK(comm, chorus_comm_set_compression_min_bytes(comm, p->min_bytes));
  int bad = 0;
  if (!same_as_plain(comm, rank, below, o)) bad += printf("WRONG rank %d: a call under min_bytes was compressed\n", rank);
  if (same_as_plain(comm, rank, at, o)) bad += printf("WRONG rank %d: a call of min_bytes was not compressed\n", rank);
  /* A call's own compression applies at any size. */
  float* x = malloc(below * sizeof(float));
  float* own = malloc(below * sizeof(float));
  ASSERT_TRUE(x && own);
  fill_input(x, below, DATA_RANDOM, 5, rank);
  chorus_allreduce_opts_t call = {o, NULL};
  ASSERT_COMM_OK(comm, chorus_comm_set_compression(comm, NULL));
  ASSERT_COMM_OK(comm, chorus_allreduce_ex(x, own, below, CHORUS_FLOAT32, CHORUS_SUM, &call, comm));
  ASSERT_COMM_OK(comm, chorus_allreduce(x, x, below, CHORUS_FLOAT32, CHORUS_SUM, comm));
  if (memcmp(own, x, below * sizeof(float)) == 0) bad += printf("WRONG rank %d: a call's own compression was not applied\n", rank);
  free(x);
  free(own);
  /* GROUPED small calls fuse into one operation of about GROUPED x min_bytes: it must stay exact. */
  float* in = malloc(GROUPED * below * sizeof(float));
  float* plain = malloc(GROUPED * below * sizeof(float));
  float* grouped = malloc(GROUPED * below * sizeof(float));
  ASSERT_TRUE(in && plain && grouped);
  fill_input(in, GROUPED * below, DATA_RANDOM, 99, rank);
  for (int g = 0; g < 2; g++) {
    float* out = g ? grouped : plain;
    ASSERT_OK(chorus_group_start());
    for (int c = 0; c < GROUPED; c++)
      ASSERT_COMM_OK(comm, chorus_allreduce(in + c * below, out + c * below, below, CHORUS_FLOAT32, CHORUS_SUM, comm));
    ASSERT_OK(chorus_group_end());
    ASSERT_COMM_OK(comm, chorus_comm_set_compression(comm, o));
  }
  if (memcmp(plain, grouped, GROUPED * below * sizeof(float)) != 0)
    bad += printf("WRONG rank %d: grouped calls under min_bytes were compressed\n", rank);
  size_t got = 0;
  ASSERT_OK(chorus_comm_get_compression_min_bytes(comm, &got));
  ASSERT_EQ(got, p->min_bytes);
  free(in);
  free(plain);
  free(grouped);
  return bad != 0;
}

TEST_EX(min_bytes_one_host, 120, "quick") {
  min_plan_t p = {{CHORUS_COMPRESSION_INT8, 0, CHORUS_COMPRESSION_SCOPE_ALL}, 4096};
  ASSERT_EQ(run_ranks(3, min_bytes_rank, &p), 0);
  p.min_bytes = 4001; /* not a multiple of 4: 1000 elements are under it, 1001 are not */
  ASSERT_EQ(run_ranks(2, min_bytes_rank, &p), 0);
}

TEST_EX(min_bytes_hosts, 120, "quick") {
  min_plan_t p = {{CHORUS_COMPRESSION_INT8, 0, CHORUS_COMPRESSION_SCOPE_INTER_HOST}, 4096};
  ranks_set_hosts(4, k2x2_rr);
  ASSERT_EQ(run_ranks(4, min_bytes_rank, &p), 0);
  ranks_set_hosts(0, NULL);
}

/* ---- ranks that disagree on the codec ---- */

static int mismatch_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  chorus_compression_opts_t o = {rank == 1 ? CHORUS_COMPRESSION_BF16 : CHORUS_COMPRESSION_FP16, 0,
                                 CHORUS_COMPRESSION_SCOPE_ALL};
  ASSERT_COMM_OK(comm, chorus_comm_set_compression(comm, &o));
  ASSERT_COMM_OK(comm, chorus_comm_set_compression_min_bytes(comm, 0));
  float buf[4096];
  fill_input(buf, 4096, DATA_RANDOM, 3, rank);
  chorus_status_t st = chorus_allreduce(buf, buf, 4096, CHORUS_FLOAT32, CHORUS_SUM, comm);
  int across = ranks_hosts_active(4);
  if (st == CHORUS_ERR_MISMATCH || (across && st == CHORUS_ERR_REMOTE)) return 0;
  printf("WRONG rank %d: a call whose codec differs between ranks returned %s: %s\n", rank, chorus_status_name(st),
         chorus_comm_last_error(comm));
  return 1;
}

TEST_EX(mismatch_one_host, 120, "quick") {
  setenv("CHORUS_TIMEOUT_SEC", "20", 1);
  ASSERT_EQ(run_ranks(4, mismatch_rank, NULL), 0);
  unsetenv("CHORUS_TIMEOUT_SEC");
}

TEST_EX(mismatch_hosts, 120, "quick") {
  setenv("CHORUS_TIMEOUT_SEC", "20", 1);
  ranks_set_hosts(4, k2x2_rr);
  ASSERT_EQ(run_ranks(4, mismatch_rank, NULL), 0);
  ranks_set_hosts(0, NULL);
  unsetenv("CHORUS_TIMEOUT_SEC");
}

/* ---- the setting itself ---- */

static int api_rank(chorus_comm_t* comm, int rank, void* arg) {
  (void)rank, (void)arg;
  chorus_compression_opts_t o;
  ASSERT_OK(chorus_comm_get_compression(comm, &o)); /* CHORUS_COMPRESSION=topk:1% */
  ASSERT_EQ((int)o.codec, (int)CHORUS_COMPRESSION_TOPK);
  ASSERT_TRUE(fabs(o.topk_fraction - 0.01) < 1e-12);
  ASSERT_EQ((int)o.scope, (int)CHORUS_COMPRESSION_SCOPE_ALL);
  size_t min_bytes = 0;
  ASSERT_OK(chorus_comm_get_compression_min_bytes(comm, &min_bytes));
  ASSERT_EQ(min_bytes, (size_t)100); /* CHORUS_COMPRESSION_MIN_BYTES=100 */
  ASSERT_STATUS(chorus_comm_get_compression_min_bytes(comm, NULL), CHORUS_ERR_INVALID_ARG);
  chorus_compression_opts_t bad[] = {{(chorus_compression_t)6, 0, CHORUS_COMPRESSION_SCOPE_ALL},
                                     {(chorus_compression_t)-1, 0, CHORUS_COMPRESSION_SCOPE_ALL},
                                     {CHORUS_COMPRESSION_TOPK, 0.0, CHORUS_COMPRESSION_SCOPE_ALL},
                                     {CHORUS_COMPRESSION_TOPK, 1.5, CHORUS_COMPRESSION_SCOPE_ALL},
                                     {CHORUS_COMPRESSION_INT8, 0, (chorus_compression_scope_t)2}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ASSERT_STATUS(chorus_comm_set_compression(comm, &bad[i]), CHORUS_ERR_INVALID_ARG);
    ASSERT_TRUE(strstr(chorus_comm_last_error(comm), "chorus_comm_set_compression") != NULL);
  }
  ASSERT_STATUS(chorus_comm_get_compression(comm, NULL), CHORUS_ERR_INVALID_ARG);
  chorus_compression_opts_t int4 = {CHORUS_COMPRESSION_INT4, 0.5, CHORUS_COMPRESSION_SCOPE_INTER_HOST};
  ASSERT_OK(chorus_comm_set_compression(comm, &int4));
  ASSERT_OK(chorus_comm_get_compression(comm, &o));
  ASSERT_EQ((int)o.codec, (int)CHORUS_COMPRESSION_INT4);
  ASSERT_TRUE(o.topk_fraction == 0.0); /* only top-k keeps a fraction */
  ASSERT_OK(chorus_comm_set_compression(comm, NULL));
  ASSERT_OK(chorus_comm_get_compression(comm, &o));
  ASSERT_EQ((int)o.codec, (int)CHORUS_COMPRESSION_TOPK);
  return 0;
}

TEST_EX(api_and_env, 120, "quick") {
  ASSERT_STR_EQ(chorus_compression_name(CHORUS_COMPRESSION_INT8), "int8");
  ASSERT_STR_EQ(chorus_compression_name(CHORUS_COMPRESSION_NONE), "none");
  ASSERT_NULL(chorus_compression_name((chorus_compression_t)42));
  ASSERT_NULL(chorus_compression_name((chorus_compression_t)6)); /* the lossless form is not a codec to name */
  ASSERT_STATUS(chorus_comm_set_compression(NULL, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_get_compression(NULL, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_comm_set_compression_min_bytes(NULL, 0), CHORUS_ERR_INVALID_ARG);
  setenv("CHORUS_COMPRESSION", "topk:1%", 1);
  setenv("CHORUS_COMPRESSION_SCOPE", "all", 1);
  setenv("CHORUS_COMPRESSION_MIN_BYTES", "100", 1);
  ASSERT_EQ(run_ranks(2, api_rank, NULL), 0);
  /* Bad settings: the communicator is refused with a message naming the variable. */
  const char* bad_env[][2] = {{"CHORUS_COMPRESSION", "int3"},  {"CHORUS_COMPRESSION", "topk:0"},
                              {"CHORUS_COMPRESSION", "topk:x"}, {"CHORUS_COMPRESSION", "topk:150%"},
                              {"CHORUS_COMPRESSION_SCOPE", "host"}, {"CHORUS_COMPRESSION_MIN_BYTES", "-1"},
                              {"CHORUS_COMPRESSION_MIN_BYTES", "64k"}};
  for (size_t i = 0; i < sizeof(bad_env) / sizeof(bad_env[0]); i++) {
    setenv("CHORUS_COMPRESSION", "int8", 1);
    setenv("CHORUS_COMPRESSION_SCOPE", "all", 1);
    setenv(bad_env[i][0], bad_env[i][1], 1);
    /* refused (no handle left) with a warning that names the variable and what it expects */
    ASSERT_STATUS(ranks_create_alone(), CHORUS_ERR_INVALID_ARG);
  }
  unsetenv("CHORUS_COMPRESSION");
  unsetenv("CHORUS_COMPRESSION_SCOPE");
  unsetenv("CHORUS_COMPRESSION_MIN_BYTES");
}

/* ---- error feedback and per-call options (chorus_allreduce_ex) ---- */

enum { EF_CALLS = 3, EF_COUNT = 5003 };

typedef struct {
  chorus_compression_opts_t opts;
  uint64_t hash[EF_CALLS][MAX_RANKS];
  atomic_int problems;
} ef_plan_t;

/* The flat compressed allreduce with every member's residual carried from call to call, members
 * in rank order: what chorus_allreduce_ex must give on one host with scope all. */
static void reference_ef(const chorus_codec_t* codec, int n, int call_no, float* const* residuals, float* out) {
  size_t count = EF_COUNT;
  float* in = malloc(count * sizeof(float));
  void* enc = malloc(chorus__codec_bytes(codec, count) + 64);
  ASSERT_TRUE(in && enc);
  if (codec->kind == CHORUS_CODEC_TOPK) {
    memset(out, 0, count * sizeof(float));
    for (int m = 0; m < n; m++) {
      fill_input(in, count, DATA_RANDOM, 100 + call_no, m);
      for (size_t i = 0; i < count; i++) residuals[m][i] += in[i];
      chorus__codec_encode(codec, enc, residuals[m], count, residuals[m]);
      chorus__codec_decode_add(codec, out, enc, count);
    }
  } else {
    for (int b = 0; b < n; b++) {
      size_t first, len;
      segment(count, n, b, &first, &len);
      for (int m = 0; m < n; m++) {
        fill_input(in, count, DATA_RANDOM, 100 + call_no, m);
        float* r = residuals[m] + first;
        for (size_t i = 0; i < len; i++) r[i] += in[first + i];
        chorus__codec_encode(codec, enc, r, len, r);
        if (m == 0) chorus__codec_decode(codec, out + first, enc, len);
        else chorus__codec_decode_add(codec, out + first, enc, len);
      }
      chorus__codec_encode(codec, enc, out + first, len, NULL);
      chorus__codec_decode(codec, out + first, enc, len);
    }
  }
  free(in);
  free(enc);
}

static int ef_rank(chorus_comm_t* comm, int rank, void* arg) {
  ef_plan_t* p = arg;
  int n = 0, one_host = !ranks_hosts_active(4) && !ranks_hosts_active(8) && !ranks_hosts_active(6);
  ASSERT_OK(chorus_comm_size(comm, &n));
  chorus_residual_t* residual = NULL;
  ASSERT_COMM_OK(comm, chorus_residual_create(comm, EF_COUNT, &residual));
  chorus_codec_t codec = {(chorus_codec_kind_t)p->opts.codec, p->opts.topk_fraction};
  float* ref_res[MAX_RANKS];
  for (int m = 0; m < n; m++) ASSERT_NOT_NULL(ref_res[m] = calloc(EF_COUNT, sizeof(float)));
  float *in = malloc(EF_COUNT * sizeof(float)), *out = malloc(EF_COUNT * sizeof(float)),
        *want = malloc(EF_COUNT * sizeof(float));
  ASSERT_TRUE(in && out && want);
  chorus_allreduce_opts_t opts = {&p->opts, residual};
  for (int k = 0; k < EF_CALLS; k++) {
    fill_input(in, EF_COUNT, DATA_RANDOM, 100 + k, rank);
    ASSERT_COMM_OK(comm, chorus_allreduce_ex(in, out, EF_COUNT, CHORUS_FLOAT32, CHORUS_SUM, &opts, comm));
    p->hash[k][rank] = hash_floats(out, EF_COUNT);
    if (!one_host) continue;
    reference_ef(&codec, n, k, ref_res, want);
    if (memcmp(want, out, EF_COUNT * sizeof(float)) != 0) {
      printf("WRONG rank %d, call %d with error feedback (%s): not the reference\n", rank, k,
             chorus_compression_name(p->opts.codec));
      atomic_fetch_add(&p->problems, 1);
    }
  }
  for (int m = 0; m < n; m++) free(ref_res[m]);
  free(in);
  free(out);
  free(want);
  ASSERT_OK(chorus_residual_destroy(residual));
  return 0;
}

static void run_ef(int n, const int* hosts, chorus_compression_scope_t scope) {
  static const chorus_compression_t codecs[] = {CHORUS_COMPRESSION_INT8, CHORUS_COMPRESSION_INT4,
                                                CHORUS_COMPRESSION_TOPK};
  for (size_t c = 0; c < sizeof(codecs) / sizeof(codecs[0]); c++) {
    static ef_plan_t p;
    memset(&p, 0, sizeof(p));
    p.opts = (chorus_compression_opts_t){codecs[c], 0.05, scope};
    ranks_set_hosts(hosts ? n : 0, hosts);
    ASSERT_EQ(run_ranks(n, ef_rank, &p), 0);
    ranks_set_hosts(0, NULL);
    for (int k = 0; k < EF_CALLS; k++)
      for (int r = 1; r < n; r++)
        if (p.hash[k][r] != p.hash[k][0]) FAIL("%s call %d: rank %d's result is not rank 0's", chorus_compression_name(codecs[c]), k, r);
    if (atomic_load(&p.problems)) FAIL("%d wrong results (lines above)", atomic_load(&p.problems));
  }
}

/* The communicator has no compression: the call's own options (and residual) apply. */
TEST_EX(ef_one_host_n3, 120, "quick") { run_ef(3, NULL, CHORUS_COMPRESSION_SCOPE_ALL); }
TEST_EX(ef_hosts_2x2_rr, 120, "quick") { run_ef(4, k2x2_rr, CHORUS_COMPRESSION_SCOPE_INTER_HOST); }
TEST_EX(ef_hosts_4x2_rr, 300, "full") { run_ef(8, k4x2_rr, CHORUS_COMPRESSION_SCOPE_INTER_HOST); }

static int ef_errors_rank(chorus_comm_t* comm, int rank, void* arg) {
  chorus_comm_t* other = arg;
  (void)rank;
  float buf[16] = {0};
  chorus_residual_t *r = NULL, *foreign = NULL;
  ASSERT_STATUS(chorus_residual_create(comm, 16, NULL), CHORUS_ERR_INVALID_ARG);
  ASSERT_STATUS(chorus_residual_create(NULL, 16, &r), CHORUS_ERR_INVALID_ARG);
  ASSERT_OK(chorus_residual_create(comm, 8, &r));
  ASSERT_OK(chorus_residual_create(other, 16, &foreign));
  chorus_allreduce_opts_t wrong_count = {NULL, r}, wrong_comm = {NULL, foreign};
  ASSERT_STATUS(chorus_allreduce_ex(buf, buf, 16, CHORUS_FLOAT32, CHORUS_SUM, &wrong_count, comm), CHORUS_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(chorus_comm_last_error(comm), "8 elements") != NULL);
  ASSERT_STATUS(chorus_allreduce_ex(buf, buf, 16, CHORUS_FLOAT32, CHORUS_SUM, &wrong_comm, comm), CHORUS_ERR_INVALID_ARG);
  ASSERT_TRUE(strstr(chorus_comm_last_error(comm), "another communicator") != NULL);
  chorus_compression_opts_t bad = {CHORUS_COMPRESSION_TOPK, 2.0, CHORUS_COMPRESSION_SCOPE_ALL};
  chorus_allreduce_opts_t bad_opts = {&bad, NULL};
  ASSERT_STATUS(chorus_allreduce_ex(buf, buf, 16, CHORUS_FLOAT32, CHORUS_SUM, &bad_opts, comm), CHORUS_ERR_INVALID_ARG);
  /* The refused calls left the communicator working, options or none. */
  ASSERT_COMM_OK(comm, chorus_allreduce_ex(buf, buf, 16, CHORUS_FLOAT32, CHORUS_SUM, NULL, comm));
  ASSERT_OK(chorus_residual_destroy(r));
  ASSERT_OK(chorus_residual_destroy(foreign));
  ASSERT_STATUS(chorus_residual_destroy(NULL), CHORUS_ERR_INVALID_ARG);
  return 0;
}

static int make_other_and_check(chorus_comm_t* comm, int rank, void* arg) {
  (void)arg;
  chorus_comm_t* other = NULL; /* a second communicator of the same ranks */
  ASSERT_COMM_OK(comm, chorus_comm_split(comm, 0, rank, &other));
  int st = ef_errors_rank(comm, rank, other);
  ASSERT_OK(chorus_comm_destroy(other));
  return st;
}

TEST_EX(ef_errors, 120, "quick") { ASSERT_EQ(run_ranks(2, make_other_and_check, NULL), 0); }

/* An overflow met once (an inf, or for fp16 a finite value past 65504) shows in that call's
 * result but does not stay in the residual: the next calls are finite again. */
typedef struct {
  chorus_compression_t codec;
  float poison;
  atomic_int problems;
} poison_t;

static int poison_rank(chorus_comm_t* comm, int rank, void* arg) {
  poison_t* p = arg;
  enum { N = 4099 };
  chorus_residual_t* residual = NULL;
  ASSERT_COMM_OK(comm, chorus_residual_create(comm, N, &residual));
  chorus_compression_opts_t o = {p->codec, 0.1, CHORUS_COMPRESSION_SCOPE_ALL};
  chorus_allreduce_opts_t opts = {&o, residual};
  static float buf[MAX_RANKS][N];
  for (int k = 0; k < 3; k++) {
    fill_input(buf[rank], N, DATA_RANDOM, 200 + k, rank);
    if (k == 0 && rank == 0) buf[rank][5] = p->poison;
    ASSERT_COMM_OK(comm, chorus_allreduce_ex(buf[rank], buf[rank], N, CHORUS_FLOAT32, CHORUS_SUM, &opts, comm));
    size_t nonfinite = 0;
    for (size_t i = 0; i < N; i++) nonfinite += !isfinite(buf[rank][i]);
    if ((k == 0) != (nonfinite > 0)) {
      printf("WRONG rank %d, %s, call %d: %zu non-finite results (the overflow was in call 0 only)\n", rank,
             chorus_compression_name(p->codec), k, nonfinite);
      atomic_fetch_add(&p->problems, 1);
    }
  }
  ASSERT_OK(chorus_residual_destroy(residual));
  return 0;
}

TEST_EX(ef_overflow_does_not_stay, 120, "quick") {
  poison_t cases[] = {{CHORUS_COMPRESSION_INT8, INFINITY, 0}, {CHORUS_COMPRESSION_INT4, NAN, 0},
                      {CHORUS_COMPRESSION_FP16, 70000.0f, 0}, {CHORUS_COMPRESSION_BF16, INFINITY, 0},
                      {CHORUS_COMPRESSION_TOPK, INFINITY, 0}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ASSERT_EQ(run_ranks(3, poison_rank, &cases[i]), 0);
    if (atomic_load(&cases[i].problems)) FAIL("%s: wrong results (lines above)", chorus_compression_name(cases[i].codec));
  }
}

/* zip forced for every allreduce: the calls without a codec (here all of them: one host, scope
 * inter) run as if CHORUS_ALGO did not name it, instead of failing. */
TEST_EX(forced_zip_without_codec_runs_as_is, 120, "quick") {
  setenv("CHORUS_ALGO", "allreduce:zip", 1);
  untouched_t cases[] = {{CHORUS_FLOAT32, CHORUS_SUM}, {CHORUS_INT32, CHORUS_MAX}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) ASSERT_EQ(run_ranks(3, untouched_rank, &cases[i]), 0);
  unsetenv("CHORUS_ALGO");
}
