/*
 * matrix.h - shared machinery of the collective tests: one collective call with its buffers,
 * inputs and independently computed expected result (mx_op_*), and the matrix driver that runs
 * a collective over every registered algorithm x count x dtype x op x root x in-place on
 * ranks-as-threads, checking every rank's result bitwise (mx_run_matrix).
 */
#ifndef CHORUS_TEST_MATRIX_H
#define CHORUS_TEST_MATRIX_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"
#include "coll/task.h"

/* Point-to-point patterns. CH_COLL_SEND stands for blocking send + recv (ordered so that no
 * rank waits on a peer that waits on it), CH_COLL_SENDRECV for chorus_sendrecv. */
enum { MX_P2P_RING = 0, MX_P2P_PAIRS = 1 };

typedef struct {
  chorus_coll_t coll;
  size_t count; /* the count argument of the call (per block for allgather/alltoall/...) */
  chorus_dtype_t dtype;
  chorus_op_t op; /* reducing collectives only */
  int root;       /* rooted collectives only */
  int pattern;    /* CH_COLL_SEND / CH_COLL_SENDRECV only */
  int in_place;
  uint64_t seed; /* makes every call's data different */
  /* Variable-size collectives: 0: displacements NULL (blocks back to back); 1: blocks in
   * reverse rank order with gaps that must stay untouched, empty blocks placed far outside
   * the buffer (vmatrix.c). count is the scale of the per-rank counts (0: all empty). */
  int layout;
} mx_spec_t;

/* One rank's side of one call. */
typedef struct {
  mx_spec_t s;
  int rank, nranks;
  size_t esize;
  unsigned char* send_alloc; /* guard | send_bytes | guard; NULL when unused */
  size_t send_bytes;
  unsigned char* recv_alloc; /* guard | recv_bytes | guard; NULL when unused */
  size_t recv_bytes;
  const void* send_arg; /* what the call is given */
  void* recv_arg;
  int peer_dst, peer_src;  /* p2p: -1 when this rank takes no part */
  unsigned char* check_at; /* the bytes this rank verifies; NULL: nothing to verify */
  size_t check_bytes;
  const unsigned char* expect; /* what check_at must hold */
  unsigned char* expect_owned;
  unsigned char* send_copy; /* out of place: the input, to check the call left it alone */
  chorus_req_t* req[2];
  int nreq;
  /* Variable-size collectives: the arrays the call is given (NULL where it passes NULL), in
   * one allocation the non-blocking path frees right after posting (the library copies them). */
  size_t* v_mem;
  size_t v_scalar; /* sendcount (allgatherv, gatherv) or recvcount (scatterv) */
  const size_t *v_sendcounts, *v_sdispls, *v_recvcounts, *v_rdispls;
} mx_op_t;

/* The expectation that every rank shares (allreduce, reduce, broadcast, allgather), in
 * elements; 0 for collectives whose expectations differ per rank. */
size_t mx_common_expect_elems(const mx_spec_t* s, int nranks);
/* Computes elements [lo, hi) of that shared expectation into out (the whole buffer's base). */
void mx_common_expect_range(const mx_spec_t* s, int nranks, void* out, size_t lo, size_t hi);

/* Allocates and fills the buffers of rank `rank`. common_expect: the shared expectation when
 * the caller computed it (mx_common_expect_*), or NULL to compute it here. */
void mx_op_prepare(mx_op_t* op, const mx_spec_t* s, int rank, int nranks,
                   const void* common_expect);
/* The blocking call(s). */
chorus_status_t mx_op_run(mx_op_t* op, chorus_comm_t* comm);
/* The non-blocking call(s); the requests land in op->req[0 .. nreq). */
chorus_status_t mx_op_post(mx_op_t* op, chorus_comm_t* comm);
/* Compares the result bitwise with the expectation, checks the guard bytes around every buffer
 * and that an out-of-place input is unchanged. Prints the first difference (at most
 * mx_report_limit reports per process). Returns the number of problems found (0: good). */
int mx_op_verify(const mx_op_t* op);
/* Frees buffers (not requests). */
void mx_op_release(mx_op_t* op);

/* "allreduce count=7 float16 sum in_place" */
const char* mx_spec_str(const mx_spec_t* s, char* buf, size_t size);
const char* mx_coll_name(chorus_coll_t coll);
int mx_coll_reduces(chorus_coll_t coll);
int mx_coll_rooted(chorus_coll_t coll);
int mx_coll_has_in_place(chorus_coll_t coll);

/* ---- variable-size collectives (vmatrix.c) ---- */

int mx_coll_is_v(chorus_coll_t coll);
/* Buffers, arrays and expectation of a variable-size call (called by mx_op_prepare). */
void mx_vop_prepare(mx_op_t* op);
/* The blocking call (req NULL) or the non-blocking one. */
chorus_status_t mx_vop_call(mx_op_t* op, chorus_comm_t* comm, chorus_req_t** req);
/* Overwrites and frees the arrays (after a non-blocking post: the library must have copied). */
void mx_vop_drop_arrays(mx_op_t* op);

/* Shared with vmatrix.c: a buffer with poisoned guards (and body when poison_body), its body,
 * and the expectation buffer an op owns. */
unsigned char* mx_alloc_guarded(size_t bytes, int poison_body);
unsigned char* mx_body(unsigned char* alloc);
unsigned char* mx_own_expect(mx_op_t* op, size_t bytes);
enum { MX_POISON_BYTE = 0xa5 };

/* ---- algorithms ---- */

enum { MX_MAX_ALGOS = 32 };
/* The algorithm names registered for coll (chorus__algos[]), in registry order. */
int mx_algo_names(chorus_coll_t coll, const char** names, int max);
/* Sets CHORUS_ALGO to force `name` for coll (NULL: unset, automatic selection). Call it only
 * while no rank thread exists: the library reads it when a communicator is created. */
void mx_force_algo(chorus_coll_t coll, const char* name);

/* ---- the matrix ---- */

extern const size_t mx_small_counts[4]; /* {0, 1, 7, 1023} */
extern const size_t mx_big_count;       /* (1 << 20) + 3 */

/* Reductions of the full product, to keep time down where it adds little coverage. */
enum {
  MX_ROTATE_ROOTS = 1,   /* one root per combination, rotating, instead of every root */
  MX_COVER_OPS = 2,      /* reducing collectives: each dtype with two ops (one out of place,
                            one in place), each op with four dtypes, instead of all five ops */
  MX_SIZE_DTYPES = 4,    /* data movement: one dtype per element size (int8, float16,
                            float32, float64); a mover sees nothing else of a dtype */
  MX_AUTO_IF_SINGLE = 8, /* one registered algorithm: run it through automatic selection only
                            (which can choose nothing else) */
};

/* Runs the matrix of coll on nranks ranks over counts: for "auto" and every registered
 * algorithm, one communicator per rank, then every count x dtype x op x root/pattern x
 * in-place, reduced by `flags` (MX_*). Prints one line per algorithm; fails the case on any
 * wrong result (after running every algorithm, so that all failures are listed). */
void mx_run_matrix(chorus_coll_t coll, int nranks, const size_t* counts, size_t ncounts,
                   unsigned flags);
/* mx_small_counts, the full product. */
void mx_run_small(chorus_coll_t coll, int nranks);
/* mx_big_count (there to exercise chunking and pipelining) with every reduction above: the
 * kernels per dtype x op and the roots are covered by the small counts. */
void mx_run_big(chorus_coll_t coll, int nranks);
/* Counts {4099, 20011} with CHORUS_BUFF_SIZE=4096 and the smallest shared-memory rings and
 * slots, so that chunking, slot reuse and ring wrap-around run at sanitizer-friendly sizes;
 * roots rotate. */
void mx_run_chunked(chorus_coll_t coll, int nranks);
/* Counts {0, 1, 1023, 20011} with CHORUS_SHM_DISABLE=1: same-host ranks over TCP; roots
 * rotate. */
void mx_run_tcp(chorus_coll_t coll, int nranks);
/* Counts {262147, (1 << 20) + 3} over TCP with 3 sockets per peer (striped messages), with
 * mx_run_big's reductions. */
void mx_run_striped(chorus_coll_t coll, int nranks);

/* Variable-size collectives: count scales {0, 1, 7, 1023} (irregular per-rank counts with
 * empty blocks and one large one, vmatrix.c), every dtype, op, root, in place and layout, with
 * 4 KiB chunks, automatic selection (one algorithm each); _tcp: shared memory disabled. */
void mx_run_v(chorus_coll_t coll, int nranks);
void mx_run_v_tcp(chorus_coll_t coll, int nranks);
/* mx_run_v on emulated hosts (mx_run_hosts). */
void mx_run_v_hosts(chorus_coll_t coll, int nranks, const int* host_of);

/* Ranks on emulated hosts (rank r on host host_of[r]: shared memory inside a host, TCP
 * between hosts): counts {0, 1, 7, 1023, 20011} with 4 KiB chunks, roots rotating. */
void mx_run_hosts(chorus_coll_t coll, int nranks, const int* host_of);
/* mx_run_hosts without shared memory (CHORUS_SHM_DISABLE): the two-level algorithms' steps
 * inside a host run as rings over TCP. */
void mx_run_hosts_tcp(chorus_coll_t coll, int nranks, const int* host_of);

#endif /* CHORUS_TEST_MATRIX_H */
