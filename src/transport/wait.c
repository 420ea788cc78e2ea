/*
 * wait.c - sleeping until a stream or a doorbell has something: epoll over the sockets, or,
 * when only same-host peers are pending, this rank's futex doorbell; with both pending, epoll,
 * where same-host peers wake it through its eventfd (they hold copies: shm_setup.c), so
 * neither kind of event waits for the other.
 */
#include <sys/epoll.h>
#include <unistd.h>

#include "transport/stream.h"

/* While shared-memory transfers wait, a rank sleeps on its doorbell at most this long before it
 * looks at the sockets for peers that hung up. */
#define SHM_LIVENESS_MS 20

/* Which kinds of streams have transfers waiting; whether one could move now (a shared ring
 * with bytes or room, a socket's bytes already read ahead). */
static void pending_kinds(const chorus_transport_t* tp, int* tcp, int* shm, int* ready) {
  *tcp = *shm = *ready = 0;
  for (int p = 0; p < tp->nranks; p++) {
    const chorus_peer_t* peer = &tp->peers[p];
    for (int i = 0; i < peer->nsocks; i++) {
      const chorus_stream_t* s = &peer->socks[i];
      int reads = chorus__stream_wanted(tp, s), sends = s->sendq.count || s->cts_count;
      if (!reads && !sends) continue;
      if (!s->is_shm) {
        *tcp = 1;
        if (reads && chorus__stream_read_ahead_usable(s)) *ready = 1;
        continue;
      }
      *shm = 1;
      if (reads && (!chorus__shm_ring_empty(s->rx_ring) || s->peer_closed)) *ready = 1;
      if (sends && (chorus__shm_ring_space(s->tx_ring, tp->shm.ring_bytes) || s->peer_closed))
        *ready = 1;
    }
  }
}

void chorus__transport_collect_events(chorus_transport_t* tp, int timeout_ms) {
  struct epoll_event evs[64];
  int n = epoll_wait(tp->epfd, evs, 64, timeout_ms);
  for (int i = 0; i < n; i++) {
    chorus_stream_t* s = evs[i].data.ptr;
    if (!s) {
      uint64_t v;
      while (read(tp->wakefd, &v, sizeof(v)) > 0) {
      }
    } else {
      uint32_t e = evs[i].events;
      /* Before the edge: a read that counts this edge must see the hang-up (tcp.c). */
      if (e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) __atomic_store_n(&s->peer_closed, 1, __ATOMIC_RELEASE);
      if (e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) chorus__tcp_edge_rx(s);
      if (e & (EPOLLOUT | EPOLLHUP | EPOLLERR)) chorus__tcp_edge_tx(s);
    }
  }
}

uint32_t chorus__transport_arm(chorus_transport_t* tp) {
  return tp->my_bell ? chorus__shm_bell_arm(tp->my_bell) : 0;
}

void chorus__transport_disarm(chorus_transport_t* tp) {
  if (tp->my_bell) chorus__shm_bell_disarm(tp->my_bell);
}

/* 1 when every local peer holds a copy of this rank's eventfd (they say so in their bells
 * once they took them, at creation). */
static int local_peers_wake_epoll(chorus_transport_t* tp) {
  if (tp->epoll_wakes) return 1;
  for (int i = 0; i < tp->shm.nlocal; i++)
    if (i != tp->shm.my_local && !__atomic_load_n(&chorus__shm_bell(&tp->shm, i)->wakes_all, __ATOMIC_ACQUIRE))
      return 0;
  tp->epoll_wakes = 1;
  return 1;
}

void chorus__transport_wait(chorus_transport_t* tp, int timeout_ms, uint32_t seen) {
  int tcp, shm, ready;
  pending_kinds(tp, &tcp, &shm, &ready);
  if (!tp->my_bell) {
    chorus__transport_collect_events(tp, ready ? 0 : timeout_ms);
    return;
  }
  if (tcp) {
    /* Sockets, and maybe shared memory (rings, or flags of a memory-semantics phase that this
     * function cannot see): epoll, with the doorbell switched to wake it there. */
    if (local_peers_wake_epoll(tp)) {
      int ms = ready || !chorus__shm_bell_arm_epoll(tp->my_bell, seen) ? 0 : timeout_ms;
      chorus__transport_collect_events(tp, ms);
    } else { /* no way to be woken from epoll: look at shared memory every millisecond */
      chorus__transport_collect_events(tp, ready || timeout_ms < 1 ? 0 : 1);
    }
    chorus__transport_disarm(tp);
    return;
  }
  /* Shared-memory transfers, or a memory-semantics collective polling flags: the doorbell. */
  if (!ready) {
    int ms = timeout_ms < SHM_LIVENESS_MS ? timeout_ms : SHM_LIVENESS_MS;
    chorus__shm_bell_wait(tp->my_bell, seen, ms);
  }
  chorus__transport_disarm(tp);
  chorus__transport_collect_events(tp, 0); /* peers that died close their sockets */
}

void chorus__transport_wake(chorus_transport_t* tp) {
  uint64_t one = 1;
  if (tp->wakefd >= 0 && write(tp->wakefd, &one, sizeof(one)) < 0) {
    /* The counter is saturated: a wake-up is already pending. */
  }
  if (tp->my_bell) chorus__shm_bell_ring(tp->my_bell, -1); /* in epoll, the write above wakes it */
}

int chorus__transport_pending_peer(const chorus_transport_t* tp, int* is_send, size_t* bytes_left) {
  for (int pass = 0; pass < 2; pass++) /* receives first: they are what a rank waits for */
    for (int p = 0; p < tp->nranks; p++) {
      const chorus_peer_t* peer = &tp->peers[p];
      for (int i = 0; i < peer->nsocks; i++) {
        const chorus_xfer_queue_t* q = pass == 0 ? &peer->socks[i].recvq : &peer->socks[i].sendq;
        const chorus_xfer_t* x = chorus__xq_head(q);
        if (!x) continue;
        *is_send = pass;
        size_t off, len;
        chorus__part_range(x->wire_bytes, x->nparts, x->nparts > 1 ? i : 0, &off, &len);
        *bytes_left = len - (pass == 0 ? peer->socks[i].rx_off : peer->socks[i].tx_off);
        return p;
      }
      if (peer->is_self) {
        const chorus_xfer_queue_t* q = pass == 0 ? &peer->self_recvq : &peer->self_sendq;
        const chorus_xfer_t* x = chorus__xq_head(q);
        if (x) {
          *is_send = pass;
          *bytes_left = x->nbytes;
          return p;
        }
      }
    }
  return -1;
}
