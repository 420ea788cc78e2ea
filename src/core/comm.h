/*
 * comm.h - the communicator: identity and topology, settings read from the environment at
 * creation, the connections (transport), and the progress engine's state (task queue, the
 * thread that currently drives progress, the background thread for non-blocking calls).
 */
#ifndef CHORUS_COMM_H
#define CHORUS_COMM_H

#include <pthread.h>
#include <stdint.h>

#include "algo/algo.h"
#include "coll/task.h"
#include "core/store.h"
#include "core/topo.h"
#include "core/trace.h"
#include "transport/transport.h"

/* What a waiting thread polls before it sleeps (CHORUS_SPIN_US=-1) on one host, and across hosts
 * in calls that are not latency-bound (tune.c); the least any wait polls then. A peer on
 * another core answers within microseconds, one that computes takes far longer. */
#define CHORUS_SPIN_ONE_HOST_US 50

/* The same on one host whose ranks outnumber the CPUs they may run on. There a waiter yields
 * the core between its polls, so polling longer costs the ranks it waits for little, while a
 * sleep halts the virtual CPU once both of its ranks sleep, and waking it costs tens of
 * microseconds: 4 ranks on 2 CPUs, 2 MiB calls took 0.84-0.99x the time of a 50 us spin
 * (alltoall 512 KiB 0.67x), 8 ranks, 256 KiB allreduce and alltoall 0.59x and 0.48x; 1000 and
 * 2000 us gained no more, and calls of up to 32 KiB stayed level (gathers up to 32 KiB took
 * 0.36-0.87x). docs/sweep.md, "Waits where ranks share CPUs". */
#define CHORUS_SPIN_SHARED_CORES_US 500

/* Scratch blocks a communicator keeps for its next calls, and their bytes together (scratch.c). */
#define CHORUS_SCRATCH_KEPT 64
#define CHORUS_SCRATCH_KEPT_BYTES ((size_t)512 << 20)

struct chorus_req {
  chorus_task_t task; /* a request is its task; freed when both the user and the engine are done */
  int user_released;  /* chorus_req_free was called */
  int deferred;       /* atomic: a call of a group still open, posted by chorus_group_end */
  struct chorus_req *live_prev, *live_next; /* every request not yet freed, for destroy */
};

struct chorus_comm {
  int rank, nranks;
  int local_rank, local_size, host_count;
  chorus_topo_t topo;
  char host_id[CHORUS_ADDR_LEN]; /* this rank's host identity (config, CHORUS_HOST_ID, or derived) */
  uint64_t comm_id;
  uint8_t secret[CHORUS_SECRET_BYTES];
  char name[64];
  char tcp_cc[16]; /* CHORUS_SOCKET_CC ("": the system's); the kernel's names fit 15 characters */
  int split_count; /* splits made from this communicator, for child ids */

  /* Settings (config struct, else CHORUS_* variables, else defaults). */
  int timeout_sec;
  int connect_timeout_sec;
  int retry_count;
  int nsocks;
  int spin_us;       /* how long waits poll before they sleep: CHORUS_SPIN_US, resolved */
  int spin_small_us; /* the same for calls of at most cost.spin_bytes (tune.c) */
  int spin_by_link;  /* CHORUS_SPIN_US=-1: tune.c derives spin_small_us from the links */
  int oversubscribed; /* more ranks on this host than CPUs they may run on: waiters yield at once */
  int machine_crowded; /* more ranks on this rank's machine (emulated hosts may share one) than CPUs they may run on */
  size_t chunk_bytes; /* CHORUS_BUFF_SIZE */
  size_t msg_chunk_bytes; /* what engines cut messages into: chunk_bytes per socket of a TCP peer */
  int shm_enabled;
  size_t shm_ring_bytes;
  size_t shm_slot_bytes;
  size_t shm_stream_bytes; /* calls that read and write this many bytes of a rank's buffers or more
                              stream their output (core/cache.c); 0: never */
  int shm_single_copy;     /* CHORUS_SHM_SINGLE_COPY: peers' buffers may be read with process_vm_readv */
  size_t p2p_eager_bytes;      /* point-to-point messages up to this size go without rendezvous */
  size_t p2p_unexpected_bytes; /* bound on buffered unexpected messages (match.h) */
  size_t group_fuse_bytes;     /* largest fused group operation (coll/group.c); 0: none */
  /* Gradient compression of float32 sum/avg allreduces (coll/compress.c): the setting in force
   * (mu) and the one CHORUS_COMPRESSION gave, which chorus_comm_set_compression(NULL) restores. */
  chorus_compression_opts_t compression, compression_env;
  size_t compression_min_bytes; /* the setting leaves smaller calls exact (mu) */
  int zeros; /* CHORUS_ZEROS: CHORUS_ZEROS_OFF, _ON or _AUTO (coll/compress.c) */
  size_t zeros_min_bytes; /* CHORUS_ZEROS_MIN_BYTES */
  char algo_spec[256];                                      /* CHORUS_ALGO as given */
  chorus_algo_rule_t rules[CH_COLL_COUNT][CHORUS_MAX_ALGO_RULES]; /* resolved per collective */
  int nrules[CH_COLL_COUNT];
  chorus_cost_ctx_t cost; /* the cost model's links and shape (select.c) */

  chorus_transport_t tp;

  /* Engine. mu guards the queue, the role flags, the error state and posting (checks,
   * selection, sequence numbers): one lock per small blocking call, not two. */
  pthread_mutex_t mu;
  pthread_cond_t cv;         /* task completed, role released (threads waiting for either) */
  chorus_task_t *head, *tail; /* collectives, run one at a time in posting order */
  chorus_task_t *p2p_head, *p2p_tail; /* point-to-point operations, all in progress at once */
  chorus_req_t* live;        /* non-blocking requests not yet freed */
  chorus_req_t* spare_reqs;  /* freed requests kept for the next calls (linked by live_next; mu) */
  size_t nspare;
  void* scratch[CHORUS_SCRATCH_KEPT]; /* scratch blocks calls gave back, for the next (scratch.c; mu) */
  struct {                   /* the last selection per collective, keyed by what decides it */
    const chorus_algo_t* algo;
    uint64_t key[3];
    double us; /* its predicted time */
  } picked[CH_COLL_COUNT];
  int progressing;           /* a thread holds the right to drive progress */
  int cv_waiters;            /* threads waiting on cv: nobody to wake when 0 */
  pthread_cond_t bg_cv;      /* the background thread waits here for work to take over */
  int bg_waiting;            /* it does */
  int bg_held;               /* threads in chorus__engine_hold_bg: do not wake it between waits */
  int sleeping;              /* that thread sleeps in epoll: posting must wake it */
  uint64_t next_seq;         /* collectives */
  uint64_t* p2p_send_seq;    /* per peer: messages sent (the pair's message numbers) */
  uint64_t* p2p_recv_seq;    /* per peer: receives posted (for the log and recorder) */
  uint64_t p2p_any_seq;      /* receives posted from any source */
  uint64_t last_activity_ns; /* last time any transfer moved */
  /* For status answers after a timeout (conn.c): collectives posted and completed, and the
   * arguments of the last one posted. */
  uint64_t coll_posted, coll_done;
  chorus_coll_args_t last_coll;
  int broken;
  chorus_status_t broken_status;
  chorus_blame_t blame; /* whom this rank's verdict (or a peer's give-up frame) blamed */
  int abort_requested; /* atomic: chorus_comm_abort */
  char last_error[1024];
  pthread_t bg_thread;
  int bg_started, bg_stop;

  chorus_recorder_t recorder;
  struct chorus_comm* trace_next; /* the process's list of communicators, for SIGUSR1 dumps */
};

/* Records an error sentence as the communicator's last error and logs it once. */
void chorus__comm_set_error(chorus_comm_t* comm, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reads the settings (cfg may be NULL) into comm; errors name the variable. */
chorus_status_t chorus__comm_read_settings(chorus_comm_t* comm, const chorus_config_t* cfg);

/* Allocates a communicator shell (locks, counters) for nranks ranks. */
chorus_status_t chorus__comm_alloc(chorus_comm_t** out, int nranks, int rank);
/* Frees everything; the engine must be idle. */
void chorus__comm_free(chorus_comm_t* comm);

/* Cuts messages to TCP peers over `socks` of their sockets (1..nsocks) from now on, and sizes
 * engines' chunks to match. Every rank must hold the same count before its next message to a
 * peer that might be striped (tune.c agrees on it during the link probe). */
void chorus__comm_set_stripes(chorus_comm_t* comm, int socks);
/* Connects the communicator given every rank's info and this rank's listener, then derives
 * the topology. Used by bootstrap (store) and split (parent allgather). */
chorus_status_t chorus__comm_connect(chorus_comm_t* comm, int listen_fd,
                                     const chorus_peer_info_t* infos);
/* This process's host identity (CHORUS_HOST_ID, else hostname + boot id). */
void chorus__host_id(char* out, size_t outlen);
/* This rank's machine, whatever host id it claims: the kernel's boot id (the host id if unreadable). */
void chorus__machine_id(const chorus_comm_t* comm, char* out, size_t len);
/* What this rank tells its peers about itself at bootstrap (its listening address aside). */
void chorus__peer_info_self(const chorus_comm_t* comm, chorus_peer_info_t* me);

/* ---- engine (progress.c) ---- */
/* Queues a task built by src/coll (comm->mu held); starts the background thread for
 * non-blocking tasks. drive_first: the caller may drive it a moment first, when the engine is
 * idle (progress.c). */
chorus_status_t chorus__engine_post(chorus_comm_t* comm, chorus_task_t* t, int drive_first);
/* Drives progress until t completes; returns its status. */
chorus_status_t chorus__engine_wait(chorus_comm_t* comm, chorus_task_t* t);
/* Post and wait in one step, for blocking calls (one clock reading). comm->mu is held on entry
 * and on return (released while waiting); *queued says whether t was queued. */
chorus_status_t chorus__engine_run(chorus_comm_t* comm, chorus_task_t* t, int* queued);
/* How long a wait for target (NULL: the queue) polls before it sleeps (progress.c). */
uint64_t chorus__engine_spin_ns(const chorus_comm_t* comm, const chorus_task_t* target);
/* Non-blocking check: one progress pass if no other thread drives progress. */
int chorus__engine_test(chorus_comm_t* comm, chorus_task_t* t);
/* Marks the communicator broken with st and the sentence in comm->last_error; fails every
 * queued task; shuts the connections. Called with comm->mu held. */
void chorus__engine_fail(chorus_comm_t* comm, chorus_status_t st);
/* Waits for every queued task, then stops the background thread. */
void chorus__engine_drain(chorus_comm_t* comm);
void chorus__engine_release(chorus_comm_t* comm, chorus_req_t* req);
/* A zeroed request for a call that needs one on the heap (non-blocking, or in a group): a
 * freed one kept by the communicator, else a new one; NULL when out of memory. mu held. */
chorus_req_t* chorus__engine_new_req(chorus_comm_t* comm);
void chorus__engine_free_spare_reqs(chorus_comm_t* comm);
void chorus__scratch_release(chorus_comm_t* comm); /* frees the kept scratch blocks */
/* Releases n requests of comm that have completed, under one lock (chorus_group_end). */
void chorus__engine_release_done(chorus_comm_t* comm, chorus_req_t* const* reqs, size_t n);
/* hold = 1: a thread is about to wait for several tasks in a row (chorus_group_end), driving
 * them itself: between two waits, the queued work stays with it rather than go to the
 * background thread. hold = 0 ends that, handing what is left to the background thread. */
void chorus__engine_hold_bg(chorus_comm_t* comm, int hold);
/* For requests that complete without a task of their own (members of a fused group
 * operation): attach puts req among the communicator's requests (freed by destroy if the user
 * never does), complete ends it with st (freeing it if the user released it). mu held. */
void chorus__engine_attach(chorus_comm_t* comm, chorus_req_t* req);
void chorus__engine_complete(chorus_comm_t* comm, chorus_req_t* req, chorus_status_t st);


/* For chorus-diag: the transport name used to reach `peer` ("self", "tcp") and its host id
 * and listening address; NULL for an invalid peer. */
const char* chorus__comm_peer_transport(const chorus_comm_t* comm, int peer);
/* The congestion control this rank's first TCP socket to another rank runs ("" without one). */
void chorus__comm_tcp_cc(const chorus_comm_t* comm, char* buf, size_t len);
const char* chorus__comm_peer_host(const chorus_comm_t* comm, int peer);
const char* chorus__comm_peer_addr(const chorus_comm_t* comm, int peer);

#endif /* CHORUS_COMM_H */
