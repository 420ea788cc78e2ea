/*
 * args.c - argument checks for every call, done before anything is posted, so that a bad
 * argument returns ERR_INVALID_ARG with a sentence and leaves the communicator usable.
 */
#include <stdint.h>
#include <stdio.h>

#include "coll/coll.h"

void chorus__args_buffer_bytes(const chorus_comm_t* comm, const chorus_coll_args_t* a, size_t esize,
                               size_t* send_bytes, size_t* recv_bytes) {
  size_t n = (size_t)comm->nranks, c = a->count * esize, all = c * n;
  int root = comm->rank == a->root;
  switch (a->coll) {
    case CH_COLL_ALLREDUCE: *send_bytes = c; *recv_bytes = c; break;
    case CH_COLL_BROADCAST: *send_bytes = root ? c : 0; *recv_bytes = c; break;
    case CH_COLL_REDUCE: *send_bytes = c; *recv_bytes = root ? c : 0; break;
    case CH_COLL_ALLGATHER: *send_bytes = c; *recv_bytes = all; break;
    case CH_COLL_REDUCE_SCATTER: *send_bytes = all; *recv_bytes = c; break;
    case CH_COLL_ALLTOALL: *send_bytes = all; *recv_bytes = all; break;
    case CH_COLL_GATHER: *send_bytes = c; *recv_bytes = root ? all : 0; break;
    case CH_COLL_SCATTER: *send_bytes = root ? all : 0; *recv_bytes = c; break;
    case CH_COLL_SEND: *send_bytes = c; *recv_bytes = 0; break;
    case CH_COLL_RECV: *send_bytes = 0; *recv_bytes = c; break;
    case CH_COLL_SENDRECV: *send_bytes = c; *recv_bytes = a->recvcount * esize; break;
    default: *send_bytes = *recv_bytes = 0; break;
  }
}

/* The in-place layouts chorus.h allows: the send block sits exactly where this rank's block
 * of the receive buffer is (or the buffers are the same). */
static int exact_in_place(const chorus_comm_t* comm, const chorus_coll_args_t* a, size_t esize) {
  const char *s = a->sendbuf, *r = a->recvbuf;
  size_t block = a->count * esize;
  if (s == r) return 1;
  switch (a->coll) {
    case CH_COLL_ALLGATHER: return s == r + (size_t)comm->rank * block;
    case CH_COLL_GATHER: return s == r + (size_t)a->root * block;
    case CH_COLL_REDUCE_SCATTER: return r == s + (size_t)comm->rank * block;
    case CH_COLL_SCATTER: return r == s + (size_t)a->root * block;
    default: return 0;
  }
}

chorus_status_t chorus__args_check(chorus_comm_t* comm, const chorus_coll_args_t* a) {
  const char* name = chorus__coll_name(a->coll);
  size_t esize = chorus_dtype_size(a->dtype);
  if (esize == 0) {
    chorus__comm_set_error(comm, "%s: invalid dtype %d", name, (int)a->dtype);
    return CHORUS_ERR_INVALID_ARG;
  }
  if (chorus__coll_reduces(a->coll) && (unsigned)a->op >= CHORUS_OP_COUNT) {
    chorus__comm_set_error(comm, "%s: invalid reduction op %d", name, (int)a->op);
    return CHORUS_ERR_INVALID_ARG;
  }
  int peer_arg = a->coll == CH_COLL_SEND || a->coll == CH_COLL_RECV || a->coll == CH_COLL_SENDRECV;
  int any_ok = a->coll == CH_COLL_RECV && a->root == CHORUS_ANY_SOURCE;
  if ((chorus__coll_rooted(a->coll) || peer_arg) && !any_ok && (a->root < 0 || a->root >= comm->nranks)) {
    chorus__comm_set_error(comm, "%s: %s %d is not a rank of this communicator of %d ranks", name,
                           peer_arg ? "peer" : "root", a->root, comm->nranks);
    return CHORUS_ERR_INVALID_ARG;
  }
  if (a->coll == CH_COLL_SENDRECV && (a->peer < 0 || a->peer >= comm->nranks)) {
    chorus__comm_set_error(comm, "%s: source %d is not a rank of this communicator of %d ranks",
                           name, a->peer, comm->nranks);
    return CHORUS_ERR_INVALID_ARG;
  }
  /* Receives may take any tag; sends need one. */
  int any_tag_ok = a->coll == CH_COLL_RECV && a->tag == CHORUS_ANY_TAG;
  if (peer_arg && !any_tag_ok && (a->tag < 0 || a->tag > CHORUS_TAG_MAX)) {
    chorus__comm_set_error(comm, "%s: tag %d is not in 0..%d%s", name, a->tag, CHORUS_TAG_MAX,
                           a->coll == CH_COLL_RECV ? " (or CHORUS_ANY_TAG)" : "");
    return CHORUS_ERR_INVALID_ARG;
  }
  size_t max_count = SIZE_MAX / esize / (size_t)comm->nranks / 2;
  if (a->count > max_count || a->recvcount > max_count) {
    chorus__comm_set_error(comm, "%s: count %zu overflows the address space", name,
                           a->count > a->recvcount ? a->count : a->recvcount);
    return CHORUS_ERR_INVALID_ARG;
  }
  size_t sb, rb;
  chorus__args_buffer_bytes(comm, a, esize, &sb, &rb);
  if ((sb && !a->sendbuf) || (rb && !a->recvbuf)) {
    chorus__comm_set_error(comm, "%s: %s buffer is NULL but the call moves %zu bytes through it",
                           name, (sb && !a->sendbuf) ? "send" : "receive", (sb && !a->sendbuf) ? sb : rb);
    return CHORUS_ERR_INVALID_ARG;
  }
  if (sb && rb && !exact_in_place(comm, a, esize)) {
    uintptr_t s0 = (uintptr_t)a->sendbuf, r0 = (uintptr_t)a->recvbuf;
    if (s0 < r0 + rb && r0 < s0 + sb) {
      chorus__comm_set_error(comm, "%s: send and receive buffers overlap without being in place "
                             "(see chorus.h for each call's in-place layout)", name);
      return CHORUS_ERR_INVALID_ARG;
    }
  }
  return CHORUS_OK;
}
