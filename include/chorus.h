/*
 * chorus.h - the one public header of Chorus, a collective-communication library for
 * distributed training on CPUs and ordinary networks.
 *
 * Conventions: every call returns chorus_status_t; CHORUS_OK == 0, CHORUS_INPROGRESS > 0 and
 * every error is negative, so `if (st < 0)` is the error test. Handles are opaque. Counts are
 * element counts (size_t), never bytes. A collective call must be made by every rank of the
 * communicator, in the same order, with matching arguments. Blocking calls are the non-blocking
 * call followed by chorus_wait. Long-form documentation lives in README.md and docs/.
 */
#ifndef CHORUS_H
#define CHORUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CHORUS_VERSION_MAJOR 0
#define CHORUS_VERSION_MINOR 1
#define CHORUS_VERSION_PATCH 0
#define CHORUS_VERSION_CODE \
  (CHORUS_VERSION_MAJOR * 10000 + CHORUS_VERSION_MINOR * 100 + CHORUS_VERSION_PATCH)

#define CHORUS_API __attribute__((visibility("default")))

typedef struct chorus_comm chorus_comm_t; /* a communicator: a group of ranks */
typedef struct chorus_req chorus_req_t;   /* a non-blocking operation in flight */

/* Status codes: name, value, message. */
#define CHORUS_STATUS_MAP(XX)                                                          \
  XX(OK, 0, "success")                                                                 \
  XX(INPROGRESS, 1, "operation in progress")                                           \
  XX(ERR_INVALID_ARG, -1, "invalid argument")                                          \
  XX(ERR_INVALID_USAGE, -2, "invalid usage")                                           \
  XX(ERR_NO_MEMORY, -3, "out of memory")                                               \
  XX(ERR_SYSTEM, -4, "system call failed")                                             \
  XX(ERR_REMOTE, -5, "a peer failed or closed its connection")                         \
  XX(ERR_TIMEOUT, -6, "timed out")                                                     \
  XX(ERR_COMM_BROKEN, -7, "communicator is broken by an earlier error")                \
  XX(ERR_NOT_SUPPORTED, -8, "not supported")                                           \
  XX(ERR_MISMATCH, -9, "ranks made mismatched calls")                                  \
  XX(ERR_PROTOCOL, -10, "protocol violation (bad frame, handshake or secret)")         \
  XX(ERR_INTERNAL, -11, "internal error")                                             \
  XX(ERR_TRUNCATED, -12, "message longer than the receive buffer")

typedef enum {
#define CHORUS_XX_(name, val, str) CHORUS_##name = val,
  CHORUS_STATUS_MAP(CHORUS_XX_)
#undef CHORUS_XX_
} chorus_status_t;

/* Element types: name, size in bytes. float16 is IEEE binary16, bfloat16 the top half of a
 * float32; both are reduced in float32 and rounded to nearest even. */
#define CHORUS_DTYPE_MAP(XX) \
  XX(INT8, "int8", 1)        \
  XX(UINT8, "uint8", 1)      \
  XX(INT32, "int32", 4)      \
  XX(UINT32, "uint32", 4)    \
  XX(INT64, "int64", 8)      \
  XX(UINT64, "uint64", 8)    \
  XX(FLOAT16, "float16", 2)  \
  XX(BFLOAT16, "bfloat16", 2) \
  XX(FLOAT32, "float32", 4)  \
  XX(FLOAT64, "float64", 8)

typedef enum {
#define CHORUS_XX_(name, str, size) CHORUS_##name,
  CHORUS_DTYPE_MAP(CHORUS_XX_)
#undef CHORUS_XX_
  CHORUS_DTYPE_COUNT
} chorus_dtype_t;

/* Reduction operations. AVG is a sum divided once, at the end, by the number of ranks; for
 * integer types the division truncates toward zero (C semantics). */
#define CHORUS_OP_MAP(XX) \
  XX(SUM, "sum")          \
  XX(PROD, "prod")        \
  XX(MAX, "max")          \
  XX(MIN, "min")          \
  XX(AVG, "avg")

typedef enum {
#define CHORUS_XX_(name, str) CHORUS_##name,
  CHORUS_OP_MAP(CHORUS_XX_)
#undef CHORUS_XX_
  CHORUS_OP_COUNT
} chorus_op_t;

/* Opaque bootstrap identity: made by one process with chorus_get_unique_id and handed to all
 * ranks by any means (a file, MPI_Bcast, a store). It carries the store address, a random
 * communicator id and the shared secret that every connection must present. */
typedef struct {
  char internal[128];
} chorus_unique_id_t;

/* Optional settings for a new communicator. Always initialise with CHORUS_CONFIG_INIT so that
 * fields added later keep old binaries working. A zero or NULL field means "use the CHORUS_*
 * environment variable, or its default". */
typedef struct {
  size_t size;             /* sizeof(chorus_config_t), set by CHORUS_CONFIG_INIT */
  unsigned version;        /* CHORUS_VERSION_CODE, set by CHORUS_CONFIG_INIT */
  int timeout_sec;         /* bound on every operation (CHORUS_TIMEOUT_SEC) */
  int connect_timeout_sec; /* bound on set-up and connections (CHORUS_CONNECT_TIMEOUT_SEC) */
  int nsocks_per_peer;     /* TCP sockets per peer (CHORUS_NSOCKS_PER_PEER) */
  const char* name;        /* a label used in log lines; copied */
  /* This rank's host identity (overrides CHORUS_HOST_ID and the hostname + boot id): ranks
   * with equal ids share memory and form one host of the topology. Copied. Lets one process
   * emulate several hosts (tests), or a job group ranks as it knows best. */
  const char* host_id;
} chorus_config_t;

#define CHORUS_CONFIG_INIT {sizeof(chorus_config_t), CHORUS_VERSION_CODE, 0, 0, 0, NULL, NULL}

/* Passing this color to chorus_comm_split leaves the rank out of every new communicator. */
#define CHORUS_SPLIT_NOCOLOR (-1)

/* ---- names and versions (not collective, never fail) ---- */

/* "CHORUS_ERR_TIMEOUT" for CHORUS_ERR_TIMEOUT; "CHORUS_UNKNOWN_STATUS" for other values. */
CHORUS_API const char* chorus_status_name(chorus_status_t st);
/* A short sentence for the status, e.g. "timed out". */
CHORUS_API const char* chorus_status_str(chorus_status_t st);
/* "float32"; NULL for a value that is not a chorus_dtype_t. */
CHORUS_API const char* chorus_dtype_name(chorus_dtype_t dtype);
/* Bytes per element; 0 for a value that is not a chorus_dtype_t. */
CHORUS_API size_t chorus_dtype_size(chorus_dtype_t dtype);
/* "sum"; NULL for a value that is not a chorus_op_t. */
CHORUS_API const char* chorus_op_name(chorus_op_t op);
/* CHORUS_VERSION_CODE of the library actually loaded. */
CHORUS_API int chorus_version(void);

/* ---- communicator lifecycle ---- */

/* Makes a new unique id. Called by one process (normally the future rank 0), which then serves
 * the bootstrap store for the ranks that join with this id; the store stops by itself once all
 * ranks have joined. The store listens on the interface named by CHORUS_SOCKET_IFNAME, else on
 * the one that routes to MASTER_ADDR when that is set, else on loopback (a single-host job);
 * chorus_comm_init fails at once, naming the cause, when a rank on another host (another host
 * id: chorus_config_t.host_id) is given an id whose store is on loopback. Returns OK,
 * ERR_INVALID_ARG, ERR_SYSTEM. Not collective. */
CHORUS_API chorus_status_t chorus_get_unique_id(chorus_unique_id_t* id);
/* As chorus_get_unique_id, for ids whose ranks may be on other hosts: the store listens on the
 * interface that routes to `peer` (a host name or IPv4 address the other ranks reach too, such
 * as the rendezvous host; a loopback peer keeps the job on loopback); when peer is NULL or empty
 * (and MASTER_ADDR is unset) or has no route, on the first interface that is up and is neither
 * loopback nor docker*, veth*, virbr* or br-* (loopback if there is none). CHORUS_SOCKET_IFNAME
 * still wins. */
CHORUS_API chorus_status_t chorus_get_unique_id_near(chorus_unique_id_t* id, const char* peer);

/* Creates a communicator of nranks ranks in which the caller is `rank` (0 <= rank < nranks).
 * Collective over all nranks callers of the same id; blocks until every rank has joined or the
 * connect timeout expires. cfg may be NULL. Returns OK, ERR_INVALID_ARG, ERR_TIMEOUT (naming the
 * store address or the ranks that never joined), ERR_MISMATCH (a rank that joined for another
 * nranks, or a rank number another process holds already: naming both), ERR_PROTOCOL,
 * ERR_SYSTEM, ERR_NO_MEMORY. */
CHORUS_API chorus_status_t chorus_comm_init(chorus_comm_t** comm, int nranks, int rank,
                                            const chorus_unique_id_t* id,
                                            const chorus_config_t* cfg);

/* Creates a communicator from the environment, trying in order: CHORUS_RANK/CHORUS_SIZE/
 * CHORUS_ADDR (host:port of the store that rank 0 serves); torchrun's RANK/WORLD_SIZE/
 * MASTER_ADDR/MASTER_PORT; Slurm's SLURM_PROCID/SLURM_NTASKS; Open MPI's OMPI_COMM_WORLD_RANK/
 * OMPI_COMM_WORLD_SIZE (the last two need CHORUS_ADDR or MASTER_ADDR/MASTER_PORT for the store).
 * CHORUS_SECRET, when set, is the shared secret. Collective. Returns as chorus_comm_init, plus
 * ERR_INVALID_ARG naming a missing or malformed variable. */
CHORUS_API chorus_status_t chorus_comm_init_env(chorus_comm_t** comm, const chorus_config_t* cfg);

/* Splits comm into disjoint communicators, one per color; ranks are ordered by (key, old rank).
 * A rank passing CHORUS_SPLIT_NOCOLOR gets *newcomm = NULL. Collective over comm. Returns OK,
 * ERR_INVALID_ARG, ERR_COMM_BROKEN, and the errors of chorus_comm_init. */
CHORUS_API chorus_status_t chorus_comm_split(chorus_comm_t* comm, int color, int key,
                                             chorus_comm_t** newcomm);

/* Waits for the communicator's operations, then frees it and every resource it holds (sockets,
 * threads, segments). Requests of the communicator must be freed first or are freed here. Not
 * collective, but a rank should destroy only after its peers no longer need it. NULL is OK;
 * a communicator destroyed already is ERR_INVALID_ARG; one with calls in the calling thread's
 * open group (chorus_group_start) is ERR_INVALID_USAGE. */
CHORUS_API chorus_status_t chorus_comm_destroy(chorus_comm_t* comm);

/* Marks the communicator broken and wakes every waiter at once: operations in flight end with
 * ERR_COMM_BROKEN and peers see their connections close. Never blocks; may be called from any
 * thread, repeatedly. The handle must still be released with chorus_comm_destroy. */
CHORUS_API chorus_status_t chorus_comm_abort(chorus_comm_t* comm);

/* Queries. Each returns OK or ERR_INVALID_ARG (NULL arguments). local_rank/local_size are the
 * caller's position among the ranks on its host; host_count the number of distinct hosts. */
CHORUS_API chorus_status_t chorus_comm_rank(const chorus_comm_t* comm, int* rank);
CHORUS_API chorus_status_t chorus_comm_size(const chorus_comm_t* comm, int* size);
CHORUS_API chorus_status_t chorus_comm_local_rank(const chorus_comm_t* comm, int* local_rank);
CHORUS_API chorus_status_t chorus_comm_local_size(const chorus_comm_t* comm, int* local_size);
CHORUS_API chorus_status_t chorus_comm_host_count(const chorus_comm_t* comm, int* host_count);

/* The full sentence describing the last error on this communicator (naming the operation,
 * sequence number and peer), or "" if none. Valid until the next call on comm. For a NULL,
 * destroyed or never-created comm (which every call refuses with ERR_INVALID_ARG without
 * reading it), the calling thread's message about it. */
CHORUS_API const char* chorus_comm_last_error(const chorus_comm_t* comm);

/* Writes the communicator's flight recorder (its last operations: kind, sequence number, dtype,
 * count, root, algorithm, state, timestamps, status) as JSON to path, or to stderr when path is
 * NULL. SIGUSR1 does the same for every communicator of the process (CHORUS_DUMP_ON_SIGNAL).
 * Not collective. Returns OK, ERR_INVALID_ARG, ERR_SYSTEM (path cannot be written). */
CHORUS_API chorus_status_t chorus_comm_dump(chorus_comm_t* comm, const char* path);

/* ---- gradient compression ----
 * A communicator can compress what its float32 sum/avg allreduces send: each rank quantises
 * its own data once before the reduce-scatter and the owner of each reduced block quantises it
 * once more before the allgather; the sums are taken in float32 in a fixed order, and every
 * rank decodes the same bytes, so results are bitwise identical on every rank (but not equal to
 * an uncompressed allreduce). Scope INTER_HOST (the default) compresses only what crosses
 * hosts: the two-level allreduce stays exact inside each host and its rails carry the codec's
 * form; on one host nothing changes, and a communicator whose hosts hold unequal rank counts
 * compresses every rank's data (the flat compressed allreduce). Scope ALL compresses at every
 * level, one host included. Other dtypes, other ops and the other collectives are sent
 * uncompressed, and so are calls under the communicator's min_bytes (below), calls whose
 * algorithm CHORUS_ALGO forces to one that does not compress (every algorithm but `hier` and
 * `zip`; a forced `zip` lets calls without a codec run as if not forced) and top-k calls of
 * 2^32 elements or more (its indices are 32-bit). Every rank of a communicator must use the
 * same setting: the codec is part of each call's signature, so ranks that differ get
 * ERR_MISMATCH. Wire forms (src/reduce/codec.h): FP16 and BF16 round to nearest even; INT8
 * and INT4 keep one float32 scale per 2048 elements (a chunk holding an infinity or NaN
 * decodes to NaN throughout; a chunk whose largest magnitude is below 2^-120 decodes to 0);
 * TOPK keeps the ceil(fraction x n) elements of largest magnitude of each block it sends, as
 * index/value pairs, ties to the lower index. */
typedef enum {
  CHORUS_COMPRESSION_NONE = 0,
  CHORUS_COMPRESSION_FP16 = 1,
  CHORUS_COMPRESSION_BF16 = 2,
  CHORUS_COMPRESSION_INT8 = 3,
  CHORUS_COMPRESSION_INT4 = 4,
  CHORUS_COMPRESSION_TOPK = 5
} chorus_compression_t;

typedef enum {
  CHORUS_COMPRESSION_SCOPE_INTER_HOST = 0, /* only the data that crosses hosts */
  CHORUS_COMPRESSION_SCOPE_ALL = 1         /* every level, one host included */
} chorus_compression_scope_t;

typedef struct {
  chorus_compression_t codec;
  double topk_fraction; /* TOPK: the fraction of elements kept, in (0, 1] */
  chorus_compression_scope_t scope;
} chorus_compression_opts_t;

/* Sets the compression of the allreduces posted on comm from now on (opts NULL: back to
 * CHORUS_COMPRESSION and CHORUS_COMPRESSION_SCOPE, read when the communicator was created). Not
 * collective, but every rank must make the same change before the same call. Returns OK or
 * ERR_INVALID_ARG (unknown codec or scope, a TOPK fraction outside (0, 1]). */
CHORUS_API chorus_status_t chorus_comm_set_compression(chorus_comm_t* comm, const chorus_compression_opts_t* opts);
/* The communicator's current setting. Returns OK or ERR_INVALID_ARG. */
CHORUS_API chorus_status_t chorus_comm_get_compression(const chorus_comm_t* comm, chorus_compression_opts_t* opts);
/* The communicator's setting leaves allreduces of fewer bytes than min_bytes (count x 4)
 * uncompressed, so that a loss, a metric or a batch-norm statistic stays exact while gradients
 * shrink; 0 compresses every size. CHORUS_COMPRESSION_MIN_BYTES gives the first value (65536).
 * Grouped calls under it stay exact even when the group fuses them into a larger operation. A
 * call's own compression (chorus_allreduce_ex) applies at any size. Not collective, but every
 * rank must make the same change before the same call. Returns OK or ERR_INVALID_ARG. */
CHORUS_API chorus_status_t chorus_comm_set_compression_min_bytes(chorus_comm_t* comm, size_t min_bytes);
CHORUS_API chorus_status_t chorus_comm_get_compression_min_bytes(const chorus_comm_t* comm, size_t* min_bytes);
/* "int8"; NULL for a value that is not a chorus_compression_t. */
CHORUS_API const char* chorus_compression_name(chorus_compression_t codec);

/* Error feedback: the state of one gradient buffer, `count` float32 of what compression dropped
 * from this rank's contribution (zero at first). An allreduce given it (chorus_allreduce_ex)
 * adds it to the data it encodes, then keeps what this encoding dropped, so nothing is lost
 * for good, only late: int4 and top-k need it to converge. Across hosts with scope inter-host
 * the encoded data is the host's sum of a segment the rank carries over its rail, and the
 * residual keeps that segment's loss; the final re-encoding of each reduced block is not fed
 * back, and what an overflow or a NaN left in it (x - inf) is dropped rather than fed back, so one
 * overflowed step does not spoil the next. One handle per buffer (a DDP bucket), used with one
 * communicator and one count, by one call at a time; calls that are not compressed leave it as
 * it is. Destroy it after its last
 * call has completed (not collective). Returns OK, ERR_INVALID_ARG, ERR_NO_MEMORY. */
typedef struct chorus_residual chorus_residual_t;
CHORUS_API chorus_status_t chorus_residual_create(chorus_comm_t* comm, size_t count, chorus_residual_t** residual);
CHORUS_API chorus_status_t chorus_residual_destroy(chorus_residual_t* residual);

/* An allreduce with options: its own compression instead of the communicator's (part of the
 * call's signature, like the setting), and an error-feedback residual. NULL fields (or opts)
 * mean the communicator's setting and no residual. */
typedef struct {
  const chorus_compression_opts_t* compression;
  chorus_residual_t* residual;
} chorus_allreduce_opts_t;

/* ---- registered memory ----
 * Buffers that every rank of a host can map, so same-host collectives on them copy nothing
 * into staging areas (the models are NCCL's ncclMemAlloc and HCCL's symmetric windows). */

/* Allocates `bytes` of registered memory on every rank; the ranks of each host map each
 * other's regions. Collective: every rank calls it with the same size, in the same order. A
 * collective of a communicator on one host whose send and receive buffers lie in registered
 * memory on every rank takes the zero-copy path (every rank must do the same, or the call fails
 * with ERR_MISMATCH); on several hosts the memory is usable by every collective and is treated
 * as any other buffer. Returns OK, ERR_INVALID_ARG, ERR_NO_MEMORY, ERR_SYSTEM,
 * ERR_NOT_SUPPORTED (the ranks of some host share no memory: CHORUS_SHM_DISABLE), and the
 * errors of a collective. */
CHORUS_API chorus_status_t chorus_mem_alloc(chorus_comm_t* comm, size_t bytes, void** ptr);
/* Releases memory from chorus_mem_alloc. Not collective; the memory lives on until every rank
 * has freed it (or destroyed the communicator). Returns OK or ERR_INVALID_ARG. */
CHORUS_API chorus_status_t chorus_mem_free(chorus_comm_t* comm, void* ptr);

/* ---- collectives (blocking) ----
 * In place when sendbuf == recvbuf (for allgather/gather: when sendbuf is the caller's slot of
 * recvbuf). Every call returns OK, ERR_INVALID_ARG, ERR_COMM_BROKEN, ERR_NOT_SUPPORTED (a forced
 * CHORUS_ALGO that cannot serve the call), ERR_MISMATCH, ERR_REMOTE, ERR_TIMEOUT, ERR_NO_MEMORY. */

/* chorus_allreduce with options (above): ERR_INVALID_ARG also for an invalid compression or a
 * residual made for another communicator or count. */
CHORUS_API chorus_status_t chorus_allreduce_ex(const void* sendbuf, void* recvbuf, size_t count, chorus_dtype_t dtype,
                                               chorus_op_t op, const chorus_allreduce_opts_t* opts, chorus_comm_t* comm);

/* recvbuf[i] = op over ranks of sendbuf[i], on every rank; count elements. */
CHORUS_API chorus_status_t chorus_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                            chorus_dtype_t dtype, chorus_op_t op,
                                            chorus_comm_t* comm);
/* Root's sendbuf (count elements) lands in every rank's recvbuf; sendbuf is read on root only. */
CHORUS_API chorus_status_t chorus_broadcast(const void* sendbuf, void* recvbuf, size_t count,
                                            chorus_dtype_t dtype, int root, chorus_comm_t* comm);
/* Like allreduce, but only root's recvbuf receives the result (recvbuf unused elsewhere). */
CHORUS_API chorus_status_t chorus_reduce(const void* sendbuf, void* recvbuf, size_t count,
                                         chorus_dtype_t dtype, chorus_op_t op, int root,
                                         chorus_comm_t* comm);
/* recvbuf (nranks * sendcount) holds every rank's sendbuf, in rank order. */
CHORUS_API chorus_status_t chorus_allgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                            chorus_dtype_t dtype, chorus_comm_t* comm);
/* sendbuf holds nranks * recvcount elements; rank r's recvbuf gets block r of the reduction.
 * In place when recvbuf == sendbuf + r * recvcount elements. */
CHORUS_API chorus_status_t chorus_reduce_scatter(const void* sendbuf, void* recvbuf,
                                                 size_t recvcount, chorus_dtype_t dtype,
                                                 chorus_op_t op, chorus_comm_t* comm);
/* Block j (count elements) of rank i's sendbuf lands as block i of rank j's recvbuf. */
CHORUS_API chorus_status_t chorus_alltoall(const void* sendbuf, void* recvbuf, size_t count,
                                           chorus_dtype_t dtype, chorus_comm_t* comm);
/* Root's recvbuf (nranks * sendcount) receives every rank's sendbuf in rank order. */
CHORUS_API chorus_status_t chorus_gather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                         chorus_dtype_t dtype, int root, chorus_comm_t* comm);
/* Block r (recvcount elements) of root's sendbuf lands in rank r's recvbuf. */
CHORUS_API chorus_status_t chorus_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                          chorus_dtype_t dtype, int root, chorus_comm_t* comm);
/* Returns once every rank has entered the barrier. */
CHORUS_API chorus_status_t chorus_barrier(chorus_comm_t* comm);

/* ---- variable-size collectives (MPI's v-forms) ----
 * Counts and displacements are in elements, one per rank, indexed by rank. A displacement
 * array may be NULL: the blocks then lie back to back in rank order (displs[i] = the sum of the
 * counts before i). An empty block's displacement is never used. Receive blocks must not
 * overlap each other; send blocks may. The arrays are read and copied when the call is made
 * (after a non-blocking twin returns they may be freed or changed). Any rank's count may be 0.
 * Ranks must agree on the counts: where all see them (allgatherv's and reduce_scatterv's
 * recvcounts, the same on every rank), and pair by pair (what rank a sends rank b is what b
 * expects from a). A disagreement is found in the frames (the counts travel with the data,
 * empty blocks included): the ranks that exchange data with a disagreeing rank fail with
 * ERR_MISMATCH, and their give-up frames fail the ranks still in the call with ERR_MISMATCH
 * too; never is data of another size delivered (a rank whose own exchanges
 * all agreed may have completed, with the data it expected). Statuses: those of every
 * collective above; ERR_INVALID_ARG also for a NULL counts array the rank uses, a block that
 * ends beyond the address space ((displacement + count) x dtype size over SIZE_MAX / 2),
 * overlapping receive blocks, and a rank's own counts that contradict each other
 * (allgatherv's sendcount vs recvcounts[rank], alltoallv's sendcounts[rank] vs
 * recvcounts[rank], ...). In place: each call below says when. Algorithms: ring (allgatherv,
 * reduce_scatterv), pairwise (alltoallv), linear (gatherv, scatterv). */

/* Rank i's sendbuf (sendcount elements, == recvcounts[i]) lands in every rank's recvbuf at
 * displs[i]. In place when sendbuf == recvbuf + displs[rank] elements. Statuses: the above;
 * ERR_MISMATCH when ranks pass different recvcounts. */
CHORUS_API chorus_status_t chorus_allgatherv(const void* sendbuf, size_t sendcount, void* recvbuf,
                                             const size_t* recvcounts, const size_t* displs,
                                             chorus_dtype_t dtype, chorus_comm_t* comm);
/* sendbuf holds sum(recvcounts) elements, the n blocks back to back in rank order (no
 * displacements, as MPI_Reduce_scatter); rank r's recvbuf gets block r (recvcounts[r]
 * elements) of the element-wise reduction over ranks. In place when recvbuf == sendbuf + the
 * sum of recvcounts[0 .. r) elements (the result overwrites the rank's own input block).
 * Statuses: the above; ERR_MISMATCH when ranks pass different recvcounts. */
CHORUS_API chorus_status_t chorus_reduce_scatterv(const void* sendbuf, void* recvbuf,
                                                  const size_t* recvcounts, chorus_dtype_t dtype,
                                                  chorus_op_t op, chorus_comm_t* comm);
/* The sendcounts[j] elements at sdispls[j] of rank i's sendbuf land at rdispls[i] of rank j's
 * recvbuf, which expects recvcounts[i] of them. In place when sendbuf == recvbuf: each block of
 * recvbuf (recvcounts, rdispls) is sent to its rank and replaced by what that rank sends;
 * sendcounts and sdispls must then be NULL or equal recvcounts and rdispls. Statuses: the
 * above; ERR_MISMATCH when a rank sends a peer another count than the peer expects. */
CHORUS_API chorus_status_t chorus_alltoallv(const void* sendbuf, const size_t* sendcounts,
                                            const size_t* sdispls, void* recvbuf,
                                            const size_t* recvcounts, const size_t* rdispls,
                                            chorus_dtype_t dtype, chorus_comm_t* comm);
/* Root's recvbuf receives rank i's sendbuf (sendcount elements) at displs[i], recvcounts[i]
 * elements. recvbuf, recvcounts and displs are read on root only (may be NULL elsewhere). In
 * place when root's sendbuf == recvbuf + displs[root] elements. The root confirms each block it
 * accepts with an empty frame, so a rank whose count it does not expect learns it too.
 * Statuses: the above; ERR_MISMATCH when a rank's sendcount is not root's recvcounts[rank]. */
CHORUS_API chorus_status_t chorus_gatherv(const void* sendbuf, size_t sendcount, void* recvbuf,
                                          const size_t* recvcounts, const size_t* displs,
                                          chorus_dtype_t dtype, int root, chorus_comm_t* comm);
/* The sendcounts[i] elements at displs[i] of root's sendbuf land in rank i's recvbuf
 * (recvcount elements). sendbuf, sendcounts and displs are read on root only (may be NULL
 * elsewhere). In place when root's recvbuf == sendbuf + displs[root] elements. Every rank
 * confirms its block with an empty frame to the root, so the root learns of a rank that
 * expects another count. Statuses: the above; ERR_MISMATCH when a rank's recvcount is not
 * root's sendcounts[rank]. */
CHORUS_API chorus_status_t chorus_scatterv(const void* sendbuf, const size_t* sendcounts,
                                           const size_t* displs, void* recvbuf, size_t recvcount,
                                           chorus_dtype_t dtype, int root, chorus_comm_t* comm);

/* ---- point to point (not collective) ----
 * Matching (as in MPI): a message goes to the earliest-posted receive of its destination whose
 * source (a rank, or CHORUS_ANY_SOURCE) and tag (0..CHORUS_TAG_MAX, or CHORUS_ANY_TAG) accept
 * it; messages from one rank to another with the same tag are received in the order they were
 * sent (they never overtake each other; messages of different tags or senders may). The
 * calls without a tag use tag 0.
 * Progress: point-to-point operations progress independently of each other and of the
 * communicator's collectives (which keep their own order): a rank may post chorus_irecv from
 * a peer and then chorus_isend to it while the peer does the same, or run collectives while
 * receives wait. A blocking send returns once its message left: at once for a message of at
 * most CHORUS_P2P_EAGER_BYTES (64 KiB; the receiver buffers it if its receive is not posted
 * yet), else once the receiver posted the matching receive (the payload then goes straight
 * into the receive buffer). So two ranks that both make a blocking send of a large message to
 * each other before receiving wait on each other (until the timeout): post the receives first
 * (chorus_irecv), or use chorus_sendrecv or a group. A send to oneself completes when its
 * receive is posted. Memory for messages that arrive before their receive is bounded by
 * CHORUS_P2P_UNEXPECTED_BYTES per communicator (64 MiB; past it they wait in the connection).
 * Sizes: the receive's count is the capacity of its buffer. A shorter message is received
 * (its count is reported, see chorus_msg_info_t); a longer one fills the buffer and fails
 * the receive with ERR_TRUNCATED; one of another dtype fails it with ERR_MISMATCH (nothing is
 * written). Both fail only that receive (the communicator stays usable), the sender's call
 * succeeds. A peer's death, a timeout (nothing moved for CHORUS_TIMEOUT_SEC; the message names
 * the operation, its number, peer and tag) and chorus_comm_abort fail every pending
 * operation, point-to-point included, and break the communicator; a receive from any source
 * alone does not fail because one possible sender closed its side after its last message. */
#define CHORUS_ANY_SOURCE (-1)
#define CHORUS_ANY_TAG (-1)
#define CHORUS_TAG_MAX 0x7fffffff

/* What a completed receive got. */
typedef struct {
  int source;   /* the rank that sent the message */
  int tag;      /* its tag */
  size_t count; /* its elements (more than the buffer holds when the receive is ERR_TRUNCATED) */
} chorus_msg_info_t;

CHORUS_API chorus_status_t chorus_send(const void* buf, size_t count, chorus_dtype_t dtype,
                                       int peer, chorus_comm_t* comm);
/* peer may be CHORUS_ANY_SOURCE (chorus_recv_tag reports who sent it). */
CHORUS_API chorus_status_t chorus_recv(void* buf, size_t count, chorus_dtype_t dtype, int peer,
                                       chorus_comm_t* comm);
/* With a tag; info (may be NULL) receives the message's source, tag and count. Returns OK,
 * ERR_TRUNCATED, ERR_MISMATCH (another dtype), or the errors of any call. */
CHORUS_API chorus_status_t chorus_send_tag(const void* buf, size_t count, chorus_dtype_t dtype,
                                           int peer, int tag, chorus_comm_t* comm);
CHORUS_API chorus_status_t chorus_recv_tag(void* buf, size_t count, chorus_dtype_t dtype, int peer,
                                           int tag, chorus_comm_t* comm, chorus_msg_info_t* info);
/* Sends sendcount elements to dst and receives up to recvcount elements from src (tag 0),
 * both at once. */
CHORUS_API chorus_status_t chorus_sendrecv(const void* sendbuf, size_t sendcount, int dst,
                                           void* recvbuf, size_t recvcount, int src,
                                           chorus_dtype_t dtype, chorus_comm_t* comm);

/* ---- groups (as ncclGroupStart/ncclGroupEnd) ----
 * Between chorus_group_start and the matching chorus_group_end (they nest; the calling
 * thread's outermost pair counts) the calls of this thread are gathered instead of run:
 * - a blocking call returns CHORUS_OK at once (after its argument checks); it runs, and its
 *   buffers are read and written, by chorus_group_end, which waits for it and returns the
 *   first error of the group's blocking calls (a receive's chorus_msg_info_t is filled then);
 * - a non-blocking call returns a request that completes after chorus_group_end; waiting on
 *   it before (chorus_wait) is ERR_INVALID_USAGE, chorus_test says not done.
 * chorus_group_end posts the calls of each communicator together: allreduces of the same
 * dtype and op are fused into one allreduce over the concatenation of their vectors (in
 * pieces of at most CHORUS_GROUP_FUSE_BYTES, 1 MiB on one host and 4 MiB across hosts; read and written where they are by the
 * algorithms that can (shm on one host, hier's rails across hosts), else packed into a library
 * buffer), allgathers of the same dtype into one allgather,
 * barriers into one barrier; the other collectives run one after the other in the order
 * posted (fused ones in the place of their first call), and point-to-point calls progress
 * together, so a group of sends and receives to and from many peers completes whatever their
 * order. As with collectives, every rank must make the same collective calls in its group:
 * the group's shape (the kinds, dtypes, ops, roots and counts of its collectives) is part of
 * the fused operations' signature, so ranks whose groups differ get ERR_MISMATCH (across
 * hosts, a rank that hears of it only through a peer closing its connection: ERR_REMOTE),
 * never results cut at the wrong places. The calls of a group must not depend on each other's
 * results. chorus_group_end returns ERR_INVALID_USAGE without an open group. */
CHORUS_API chorus_status_t chorus_group_start(void);
CHORUS_API chorus_status_t chorus_group_end(void);

/* ---- non-blocking twins: same arguments plus *req; the buffers must stay untouched until the
 * request completes. Collectives of a communicator complete in posting order; point-to-point
 * operations complete as their messages arrive. They progress in a background thread of the
 * communicator; a collective whose buffers are at most 256 KiB, posted outside a group to an
 * idle communicator on a host with a CPU per rank, is first driven by the posting thread, as a
 * blocking call is, until CHORUS_SPIN_US (50 us at most) pass without progress, so a small one
 * often completes in the call. ---- */
CHORUS_API chorus_status_t chorus_iallreduce(const void* sendbuf, void* recvbuf, size_t count,
                                             chorus_dtype_t dtype, chorus_op_t op,
                                             chorus_comm_t* comm, chorus_req_t** req);
CHORUS_API chorus_status_t chorus_iallreduce_ex(const void* sendbuf, void* recvbuf, size_t count, chorus_dtype_t dtype,
                                                chorus_op_t op, const chorus_allreduce_opts_t* opts, chorus_comm_t* comm,
                                                chorus_req_t** req);
CHORUS_API chorus_status_t chorus_ibroadcast(const void* sendbuf, void* recvbuf, size_t count,
                                             chorus_dtype_t dtype, int root, chorus_comm_t* comm,
                                             chorus_req_t** req);
CHORUS_API chorus_status_t chorus_ireduce(const void* sendbuf, void* recvbuf, size_t count,
                                          chorus_dtype_t dtype, chorus_op_t op, int root,
                                          chorus_comm_t* comm, chorus_req_t** req);
CHORUS_API chorus_status_t chorus_iallgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                             chorus_dtype_t dtype, chorus_comm_t* comm,
                                             chorus_req_t** req);
CHORUS_API chorus_status_t chorus_ireduce_scatter(const void* sendbuf, void* recvbuf,
                                                  size_t recvcount, chorus_dtype_t dtype,
                                                  chorus_op_t op, chorus_comm_t* comm,
                                                  chorus_req_t** req);
CHORUS_API chorus_status_t chorus_ialltoall(const void* sendbuf, void* recvbuf, size_t count,
                                            chorus_dtype_t dtype, chorus_comm_t* comm,
                                            chorus_req_t** req);
CHORUS_API chorus_status_t chorus_igather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                          chorus_dtype_t dtype, int root, chorus_comm_t* comm,
                                          chorus_req_t** req);
CHORUS_API chorus_status_t chorus_iscatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                           chorus_dtype_t dtype, int root, chorus_comm_t* comm,
                                           chorus_req_t** req);
CHORUS_API chorus_status_t chorus_ibarrier(chorus_comm_t* comm, chorus_req_t** req);
CHORUS_API chorus_status_t chorus_iallgatherv(const void* sendbuf, size_t sendcount, void* recvbuf,
                                              const size_t* recvcounts, const size_t* displs,
                                              chorus_dtype_t dtype, chorus_comm_t* comm,
                                              chorus_req_t** req);
CHORUS_API chorus_status_t chorus_ireduce_scatterv(const void* sendbuf, void* recvbuf,
                                                   const size_t* recvcounts, chorus_dtype_t dtype,
                                                   chorus_op_t op, chorus_comm_t* comm,
                                                   chorus_req_t** req);
CHORUS_API chorus_status_t chorus_ialltoallv(const void* sendbuf, const size_t* sendcounts,
                                             const size_t* sdispls, void* recvbuf,
                                             const size_t* recvcounts, const size_t* rdispls,
                                             chorus_dtype_t dtype, chorus_comm_t* comm,
                                             chorus_req_t** req);
CHORUS_API chorus_status_t chorus_igatherv(const void* sendbuf, size_t sendcount, void* recvbuf,
                                           const size_t* recvcounts, const size_t* displs,
                                           chorus_dtype_t dtype, int root, chorus_comm_t* comm,
                                           chorus_req_t** req);
CHORUS_API chorus_status_t chorus_iscatterv(const void* sendbuf, const size_t* sendcounts,
                                            const size_t* displs, void* recvbuf, size_t recvcount,
                                            chorus_dtype_t dtype, int root, chorus_comm_t* comm,
                                            chorus_req_t** req);
CHORUS_API chorus_status_t chorus_isend(const void* buf, size_t count, chorus_dtype_t dtype,
                                        int peer, chorus_comm_t* comm, chorus_req_t** req);
CHORUS_API chorus_status_t chorus_irecv(void* buf, size_t count, chorus_dtype_t dtype, int peer,
                                        chorus_comm_t* comm, chorus_req_t** req);
CHORUS_API chorus_status_t chorus_isendrecv(const void* sendbuf, size_t sendcount, int dst,
                                            void* recvbuf, size_t recvcount, int src,
                                            chorus_dtype_t dtype, chorus_comm_t* comm,
                                            chorus_req_t** req);
CHORUS_API chorus_status_t chorus_isend_tag(const void* buf, size_t count, chorus_dtype_t dtype,
                                            int peer, int tag, chorus_comm_t* comm,
                                            chorus_req_t** req);
CHORUS_API chorus_status_t chorus_irecv_tag(void* buf, size_t count, chorus_dtype_t dtype, int peer,
                                            int tag, chorus_comm_t* comm, chorus_req_t** req);

/* Sets *done to 1 when the request has completed (then returns its final status), else to 0
 * and returns CHORUS_INPROGRESS. Never blocks. */
CHORUS_API chorus_status_t chorus_test(chorus_req_t* req, int* done);
/* Blocks until the request completes and returns its status. Waiting spins briefly, then
 * sleeps; it is bounded by the communicator's timeout. */
CHORUS_API chorus_status_t chorus_wait(chorus_req_t* req);
/* Releases a request. Releasing one still in flight is allowed: it completes in the
 * background and its result is discarded. NULL is ignored. */
CHORUS_API void chorus_req_free(chorus_req_t* req);
/* What a completed receive request (chorus_irecv, chorus_irecv_tag, chorus_isendrecv) got:
 * returns OK and fills *info once the receive has matched a message (also when it completed
 * with ERR_TRUNCATED or ERR_MISMATCH), CHORUS_INPROGRESS before, ERR_INVALID_ARG for NULL
 * arguments and requests of other calls, or the request's error when it failed before
 * matching (a broken communicator). Never blocks. */
CHORUS_API chorus_status_t chorus_req_info(chorus_req_t* req, chorus_msg_info_t* info);

#ifdef __cplusplus
}
#endif

#endif /* CHORUS_H */
