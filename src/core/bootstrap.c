/*
 * bootstrap.c - creating communicators: the unique id (store address, communicator id,
 * secret), joining through the store (publish this rank's listener and host, read everyone
 * else's, connect), creation from launcher environments, and split (which uses the parent
 * communicator instead of a store).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "coll/coll.h"
#include "coll/tune.h"
#include "core/live.h"
#include "core/log.h"
#include "core/param.h"

#define UNIQUE_ID_MAGIC 0x43484944u /* "CHID" */

typedef struct {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
  uint64_t comm_id;
  uint8_t secret[CHORUS_SECRET_BYTES];
  char store_addr[CHORUS_ADDR_LEN];
  uint64_t host_hash; /* rank 0's host identity, hashed; 0: unknown */
} unique_id_t;

_Static_assert(sizeof(unique_id_t) <= sizeof(chorus_unique_id_t), "unique id too large");

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void random_bytes(void* buf, size_t len) {
  if (getrandom(buf, len, 0) == (ssize_t)len) return;
  /* Fallback: time and pid through the mixer; only reached without getrandom. */
  uint64_t seed = chorus__now_ns() ^ ((uint64_t)getpid() << 32);
  for (size_t i = 0; i < len; i++) ((uint8_t*)buf)[i] = (uint8_t)(seed = mix64(seed));
}

/* A secret given as text (CHORUS_SECRET) becomes 16 bytes by hashing. */
static void secret_from_text(const char* text, uint8_t out[CHORUS_SECRET_BYTES]) {
  uint64_t h1 = 0x6a09e667f3bcc908ull, h2 = 0xbb67ae8584caa73bull;
  for (const char* p = text; *p; p++) {
    h1 = mix64(h1 ^ (uint8_t)*p);
    h2 = mix64(h2 + (uint8_t)*p);
  }
  memcpy(out, &h1, 8);
  memcpy(out + 8, &h2, 8);
}

static uint64_t hash_text(const char* text) {
  uint64_t h = 0x6a09e667f3bcc908ull;
  for (const char* p = text; *p; p++) h = mix64(h ^ (uint8_t)*p);
  return h ? h : 1;
}

static uint64_t my_host_hash(void) {
  char host[CHORUS_ADDR_LEN];
  chorus__host_id(host, sizeof(host));
  return hash_text(host);
}

static int is_loopback_ip(const char* ip) { return strncmp(ip, "127.", 4) == 0; }

/* Does something listen at this loopback address? (Ranks that only pretend to be on other
 * hosts, with CHORUS_HOST_ID, share the loopback.) On loopback a connect is answered at once. */
static int loopback_answers(const char* hostport) {
  struct sockaddr_storage sa;
  socklen_t salen;
  char err[128];
  if (chorus__sock_resolve(hostport, &sa, &salen, err, sizeof(err)) < 0) return 0;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1; /* cannot tell: let the store connection decide */
  int ok = connect(fd, (struct sockaddr*)&sa, salen) == 0;
  close(fd);
  return ok;
}

/* Where the store listens: the named interface (CHORUS_SOCKET_IFNAME); else the interface that
 * routes to `peer` (the rendezvous host the other ranks also reach, e.g. MASTER_ADDR: a
 * loopback peer keeps a single-host job on loopback); else, for `fallback_any`, the first
 * interface that is up and is neither loopback nor a container's or VM's (as NCCL does),
 * loopback when there is none; else loopback. */
static chorus_status_t pick_store_ip(const char* peer, int fallback_any, char* ip, size_t iplen,
                                     char* err, size_t errlen) {
  const char* ifspec = chorus__param_str(CHORUS_PARAM_SOCKET_IFNAME);
  if (ifspec[0]) return chorus__sock_pick_ip(ifspec, ip, iplen, err, errlen);
  if (peer && peer[0]) {
    char hostport[CHORUS_ADDR_LEN + 8];
    snprintf(hostport, sizeof(hostport), "%s:1", peer); /* the port does not matter for a route */
    if (chorus__sock_route_ip(hostport, ip, iplen, err, errlen) >= 0) return CHORUS_OK;
    CH_WARN(-1, "chorus_get_unique_id: %s; choosing an interface by itself", err);
    fallback_any = 1;
  }
  if (fallback_any) return chorus__sock_pick_ip("", ip, iplen, err, errlen);
  snprintf(ip, iplen, "127.0.0.1");
  return CHORUS_OK;
}

static chorus_status_t make_unique_id(chorus_unique_id_t* id, const char* peer, int fallback_any) {
  if (!id) return CHORUS_ERR_INVALID_ARG;
  chorus__log_init();
  unique_id_t u = {.magic = UNIQUE_ID_MAGIC, .version = CHORUS_PROTO_VERSION};
  random_bytes(&u.comm_id, sizeof(u.comm_id));
  random_bytes(u.secret, sizeof(u.secret));
  u.host_hash = my_host_hash();
  char ip[CHORUS_ADDR_LEN], err[256];
  const char* master = getenv("MASTER_ADDR");
  if (!peer || !peer[0]) peer = master;
  chorus_status_t st = pick_store_ip(peer, fallback_any, ip, sizeof(ip), err, sizeof(err));
  if (st < 0) {
    CH_WARN(-1, "chorus_get_unique_id: %s", err);
    return CHORUS_ERR_INVALID_ARG;
  }
  st = chorus__store_server_start(ip, 0, u.secret, u.store_addr, sizeof(u.store_addr), err,
                                  sizeof(err));
  if (st < 0) {
    CH_WARN(-1, "chorus_get_unique_id: %s", err);
    return st;
  }
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &u, sizeof(u));
  return CHORUS_OK;
}

CHORUS_API chorus_status_t chorus_get_unique_id(chorus_unique_id_t* id) {
  return make_unique_id(id, NULL, 0);
}

CHORUS_API chorus_status_t chorus_get_unique_id_near(chorus_unique_id_t* id, const char* peer) {
  return make_unique_id(id, peer, 1);
}

/* Chooses the address this rank listens on: the named interface, else the one that routes to
 * the store (so loopback jobs stay on loopback and multi-host jobs use the store's network). */
static chorus_status_t pick_listen_ip(const char* store_addr, char* ip, size_t iplen, char* err,
                                      size_t errlen) {
  const char* ifspec = chorus__param_str(CHORUS_PARAM_SOCKET_IFNAME);
  if (ifspec[0]) return chorus__sock_pick_ip(ifspec, ip, iplen, err, errlen);
  return chorus__sock_route_ip(store_addr, ip, iplen, err, errlen);
}

/* The store key "<comm id>/what/rank", or "what/rank" before rank 0 has drawn the id
 * (environment mode: the store serves this one communicator). */
static const char* id_key(uint64_t comm_id, const char* what, int rank, char* key, size_t len) {
  if (comm_id) snprintf(key, len, "%016llx/%s/%d", (unsigned long long)comm_id, what, rank);
  else snprintf(key, len, "%s/%d", what, rank);
  return key;
}

static const char* comm_key(const chorus_comm_t* comm, const char* what, int rank, char* key, size_t len) {
  return id_key(comm->comm_id, what, rank, key, len);
}

#define ABORT_POLL_MS 250
/* How long a refusing rank keeps its process's store for the others: a few of their polls. */
#define ABORT_LINGER_MS 3000

/* Waits for key until deadline, looking every ABORT_POLL_MS for the abort entry that a rank
 * which found the job inconsistent leaves (publish_abort): a rank waiting for a peer that will
 * never come (a size mismatch can leave a rank number unused) then fails at once with that
 * rank's sentence instead of at the connect timeout. */
static chorus_status_t get_unless_aborted(chorus_comm_t* comm, chorus_store_t* store, const char* key, void** val,
                                          size_t* len, uint64_t deadline) {
  char abort_key[64];
  comm_key(comm, "abort", 0, abort_key, sizeof(abort_key));
  for (;;) {
    uint64_t now = chorus__now_ns();
    int left_ms = now < deadline ? (int)((deadline - now) / 1000000) : 0;
    int slice_ms = left_ms < ABORT_POLL_MS ? left_ms : ABORT_POLL_MS;
    chorus_status_t st = chorus__store_get(store, key, val, len, slice_ms);
    if (st != CHORUS_ERR_TIMEOUT || slice_ms == left_ms) return st;
    void* why = NULL;
    size_t why_len = 0;
    if (chorus__store_get(store, abort_key, &why, &why_len, 0) >= 0) {
      chorus__comm_set_error(comm, "rank %d of %d: %.*s", comm->rank, comm->nranks, (int)why_len, (const char*)why);
      free(why);
      return CHORUS_ERR_MISMATCH;
    }
  }
}

/* Tells the ranks still waiting in get_unless_aborted that the job cannot form (best effort). */
static void publish_abort(chorus_comm_t* comm, chorus_store_t* store) {
  char abort_key[64];
  comm_key(comm, "abort", 0, abort_key, sizeof(abort_key));
  chorus__store_set(store, abort_key, comm->last_error, strlen(comm->last_error));
  chorus__store_set(store, CHORUS_STORE_LINGER_KEY, "1", 1);
}

/* A rank that refused the job left its reason in the store for the others; when the store is
 * this process's (rank 0 in environment mode, or the rank that drew the id), exiting at once
 * would take it away from ranks still waiting there, which would then see only a lost store.
 * So it waits, briefly, until the store has served everyone (its thread ends once every rank
 * said done or left). */
static void linger_for_readers(void) {
  uint64_t until = chorus__now_ns() + ABORT_LINGER_MS * 1000000ull;
  while (chorus__store_servers_live() > 0 && chorus__now_ns() < until) {
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Every rank was given the settings this rank was (chorus__shared_setting: its own entry's
 * hashes); else the first that differs is named, with this rank's value, and the job aborted. */
static chorus_status_t check_shared_settings(chorus_comm_t* comm, chorus_store_t* store,
                                             const chorus_peer_info_t* infos) {
  const chorus_peer_info_t* me = &infos[comm->rank];
  for (int p = 0; p < comm->nranks; p++)
    for (int i = 0; i < CHORUS_SHARED_SETTINGS; i++) {
      const chorus_peer_info_t* info = &infos[p];
      if (info->shared_settings[i] == me->shared_settings[i]) continue;
      char value[1024];
      const char* name = chorus__shared_setting(comm, i, value, sizeof(value));
      chorus__comm_set_error(comm, "rank %d (host %s): rank %d (host %s, pid %d) was given another %s than this "
                             "rank's \"%s\": every rank of a job needs the same", comm->rank, comm->host_id, p,
                             info->host_id, (int)info->pid, name, value);
      publish_abort(comm, store);
      return CHORUS_ERR_MISMATCH;
    }
  return CHORUS_OK;
}

/* Reads every rank's info from the store, naming the first rank that never published, or one
 * started for another size (launchers given different sizes or node counts on different hosts). */
static chorus_status_t gather_infos(chorus_comm_t* comm, chorus_store_t* store,
                                    chorus_peer_info_t* infos, uint64_t deadline) {
  for (int p = 0; p < comm->nranks; p++) {
    char key[64];
    void* val = NULL;
    size_t len = 0;
    chorus_status_t st = get_unless_aborted(comm, store, comm_key(comm, "peer", p, key, sizeof(key)), &val, &len,
                                            deadline);
    if (st == CHORUS_ERR_TIMEOUT) {
      chorus__comm_set_error(comm, "rank %d of %d: rank %d never joined within %d s", comm->rank, comm->nranks, p,
                             comm->connect_timeout_sec);
      return st;
    }
    if (st == CHORUS_ERR_MISMATCH) return st;
    if (st < 0) {
      chorus__comm_set_error(comm, "rank %d of %d: waiting for rank %d: %s", comm->rank, comm->nranks, p,
                             chorus__store_error(store));
      return st;
    }
    if (len != sizeof(chorus_peer_info_t)) {
      free(val);
      chorus__comm_set_error(comm, "rank %d published a malformed entry in the store", p);
      return CHORUS_ERR_PROTOCOL;
    }
    memcpy(&infos[p], val, len);
    infos[p].host_id[CHORUS_ADDR_LEN - 1] = infos[p].addr[CHORUS_ADDR_LEN - 1] = '\0';
    infos[p].machine[sizeof(infos[p].machine) - 1] = '\0';
    free(val);
    if (infos[p].nranks != comm->nranks) {
      chorus__comm_set_error(comm, "rank %d (host %s): rank %d (host %s, pid %d) was started for a job of %d ranks, "
                             "this rank for %d: were the ranks launched with different sizes?", comm->rank,
                             comm->host_id, p, infos[p].host_id, (int)infos[p].pid, (int)infos[p].nranks, comm->nranks);
      publish_abort(comm, store);
      return CHORUS_ERR_MISMATCH;
    }
  }
  return check_shared_settings(comm, store, infos);
}

/* Takes this rank's number in the store, atomically, before anything else (a second rank 0 must
 * not draw a communicator id of its own): a second process started with the same number (two
 * hosts given the same node rank, or overlapping rank lists) fails here at once, naming the
 * first, instead of overwriting its entry and leaving the job to a timeout. */
static chorus_status_t claim_rank(chorus_comm_t* comm, chorus_store_t* store, const chorus_peer_info_t* me) {
  char key[64];
  int64_t holders = 0;
  chorus_status_t st = chorus__store_add(store, comm_key(comm, "claim", comm->rank, key, sizeof(key)), 1, &holders);
  if (st < 0) {
    chorus__comm_set_error(comm, "rank %d: taking its rank number in the bootstrap store: %s (%s)", comm->rank,
                           chorus_status_name(st), chorus__store_error(store));
    return st;
  }
  if (holders == 1) return CHORUS_OK;
  /* The holder's entry, for the sentence: published under the communicator id. */
  void* val = NULL;
  size_t len = 0;
  chorus_peer_info_t first;
  memset(&first, 0, sizeof(first));
  uint64_t id = comm->comm_id;
  if (!id && chorus__store_get(store, "comm_id", &val, &len, 1000) >= 0 && len == sizeof(id)) memcpy(&id, val, len);
  free(val);
  val = NULL;
  if (id && chorus__store_get(store, id_key(id, "peer", comm->rank, key, sizeof(key)), &val, &len, 1000) >= 0 &&
      len == sizeof(first))
    memcpy(&first, val, len);
  free(val);
  first.host_id[CHORUS_ADDR_LEN - 1] = '\0';
  chorus__comm_set_error(comm, "rank %d (host %s, pid %d): another process holds rank %d already (host %s, pid %d): "
                         "were two hosts given the same node rank, or overlapping ranks?", comm->rank, me->host_id,
                         (int)me->pid, comm->rank, first.host_id[0] ? first.host_id : "?", (int)first.pid);
  return CHORUS_ERR_MISMATCH;
}

/* Returns once every rank has said DONE, when the store's listener is closed: a rank back
 * from its creation cannot reach this store again, so rank 0 may serve the next one on the
 * same address at once (chorus_comm_init_env, destroy, init again: else its listen failed
 * with "address in use", and the others joined the old store). Costs the ranks' skew at the
 * end of creation, which their first collective would wait for anyway. */
static chorus_status_t wait_all_done(chorus_comm_t* comm, chorus_store_t* store, uint64_t deadline) {
  uint64_t now = chorus__now_ns();
  int left_ms = now < deadline ? (int)((deadline - now) / 1000000ull) + 1 : 1;
  void* val = NULL;
  size_t len = 0;
  chorus_status_t st = chorus__store_get(store, CHORUS_STORE_ALL_DONE_KEY, &val, &len, left_ms);
  if (st < 0) {
    chorus__comm_set_error(comm, "rank %d: not every rank finished joining within the connect timeout: %s",
                           comm->rank, chorus__store_error(store));
    return st;
  }
  if (len == 4 && memcmp(val, "lost", 4) == 0)
    CH_INFO(BOOT, comm->rank, "a rank left the bootstrap store without finishing its creation");
  free(val);
  return CHORUS_OK;
}

/* Publishes this rank, reads all ranks, connects. comm_id 0: rank 0 draws one for the store. */
static chorus_status_t join_through_store(chorus_comm_t* comm, const char* store_addr) {
  uint64_t deadline = chorus__now_ns() + (uint64_t)comm->connect_timeout_sec * CHORUS_NS_PER_SEC;
  char err[300] = "", ip[CHORUS_ADDR_LEN], key[64], claim_key[64];
  chorus_store_t* store = NULL;
  chorus_peer_info_t* infos = calloc((size_t)comm->nranks, sizeof(*infos));
  int listen_fd = -1, counted = 1, claimed = 0;
  chorus_peer_info_t me;
  memset(&me, 0, sizeof(me));
  chorus__peer_info_self(comm, &me);
  comm_key(comm, "claim", comm->rank, claim_key, sizeof(claim_key));
  chorus_status_t st = infos ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
  if (st >= 0) st = chorus__store_connect(store_addr, comm->secret, deadline, comm->retry_count, &store, err, sizeof(err));
  if (st < 0) {
    chorus__comm_set_error(comm, "rank %d: %s", comm->rank, err);
    goto out;
  }
  if ((st = claim_rank(comm, store, &me)) < 0) {
    counted = st != CHORUS_ERR_MISMATCH; /* a refused rank's holder says when it is done */
    goto out;
  }
  claimed = 1;
  if (comm->comm_id == 0) { /* environment mode: rank 0 names the communicator */
    void* val = NULL;
    size_t len = 0;
    if (comm->rank == 0) {
      random_bytes(&comm->comm_id, sizeof(comm->comm_id));
      st = chorus__store_set(store, "comm_id", &comm->comm_id, sizeof(comm->comm_id));
    } else {
      st = chorus__store_get(store, "comm_id", &val, &len, comm->connect_timeout_sec * 1000);
      if (st >= 0 && len == sizeof(uint64_t)) memcpy(&comm->comm_id, val, len);
      free(val);
    }
    if (st < 0) {
      chorus__comm_set_error(comm, "rank %d: rank 0 never published the communicator id: %s",
                             comm->rank, chorus__store_error(store));
      goto out;
    }
  }
  st = pick_listen_ip(store_addr, ip, sizeof(ip), err, sizeof(err));
  if (st >= 0) st = chorus__sock_listen(ip, 0, comm->tcp_cc, &listen_fd, me.addr, sizeof(me.addr), err, sizeof(err));
  if (st < 0) {
    chorus__comm_set_error(comm, "rank %d: %s", comm->rank, err);
    goto out;
  }
  st = chorus__store_set(store, comm_key(comm, "peer", comm->rank, key, sizeof(key)), &me, sizeof(me));
  if (st < 0) {
    chorus__comm_set_error(comm, "rank %d: %s", comm->rank, chorus__store_error(store));
    goto out;
  }
  st = gather_infos(comm, store, infos, deadline);
  if (st >= 0) st = chorus__comm_connect(comm, listen_fd, infos);
  if (st >= 0) st = chorus__tune_links(comm, store);
  /* After the probe, not before: its intra-host figure is timed over a ring whose pages fault
   * in, and the one-host prices were set against that figure (docs/sweep.md, "The intra-host
   * probe measures a cold ring"); a warm ring moved small calls to the wrong algorithms. */
  if (st >= 0) chorus__transport_prefault_shm(&comm->tp);
  if (st >= 0) st = chorus__store_done(store, comm->nranks);
  if (st >= 0) {
    counted = 0; /* said already */
    st = wait_all_done(comm, store, deadline);
  }
out:
  if (st < 0 && comm->last_error[0]) CH_WARN(comm->rank, "%s", comm->last_error);
  /* A rank that gives up hands its number back (a retry with the same id may take it) and says
   * it is done, so that the server thread does not outlive the job. */
  if (st < 0 && store && claimed) chorus__store_add(store, claim_key, -1, NULL);
  if (st < 0 && store && counted) chorus__store_done(store, comm->nranks);
  if (listen_fd >= 0) close(listen_fd);
  chorus__store_close(store);
  free(infos);
  if (st == CHORUS_ERR_MISMATCH && claimed) linger_for_readers(); /* a refused claimant told no one */
  return st;
}

static chorus_status_t check_init_args(chorus_comm_t** comm, int nranks, int rank) {
  if (!comm) return CHORUS_ERR_INVALID_ARG;
  *comm = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    chorus__log_init();
    CH_WARN(rank, "chorus_comm_init: rank %d and nranks %d are invalid (need 0 <= rank < nranks)", rank, nranks);
    return CHORUS_ERR_INVALID_ARG;
  }
  return CHORUS_OK;
}

CHORUS_API chorus_status_t chorus_comm_init(chorus_comm_t** comm, int nranks, int rank,
                                            const chorus_unique_id_t* id,
                                            const chorus_config_t* cfg) {
  chorus_status_t st = check_init_args(comm, nranks, rank);
  if (st < 0) return st;
  unique_id_t u;
  if (!id) return CHORUS_ERR_INVALID_ARG;
  memcpy(&u, id->internal, sizeof(u));
  u.store_addr[CHORUS_ADDR_LEN - 1] = '\0';
  if (u.magic != UNIQUE_ID_MAGIC || u.version != CHORUS_PROTO_VERSION) {
    chorus__log_init();
    CH_WARN(rank, "chorus_comm_init: the unique id was not made by chorus_get_unique_id of this version");
    return CHORUS_ERR_INVALID_ARG;
  }
  /* A store on loopback serves its own host only: a rank elsewhere would wait out the
   * connect timeout on a port of its own host. Say so at once. */
  char store_ip[CHORUS_ADDR_LEN];
  snprintf(store_ip, sizeof(store_ip), "%s", u.store_addr);
  store_ip[strcspn(store_ip, ":")] = '\0';
  if (is_loopback_ip(store_ip) && u.host_hash && u.host_hash != my_host_hash() &&
      !loopback_answers(u.store_addr)) {
    char host[CHORUS_ADDR_LEN];
    chorus__host_id(host, sizeof(host));
    chorus__log_init();
    CH_WARN(rank, "chorus_comm_init: rank %d runs on host %s, but the unique id was made on another "
            "host, whose bootstrap store listens on loopback (%s) and cannot be reached from here: "
            "a job that spans hosts needs a network address for the store (set MASTER_ADDR to a "
            "rendezvous address every host reaches, or CHORUS_SOCKET_IFNAME, where the id is made)",
            rank, host, u.store_addr);
    return CHORUS_ERR_INVALID_ARG;
  }
  chorus_comm_t* c = NULL;
  st = chorus__comm_alloc(&c, nranks, rank);
  if (st < 0) return st;
  c->comm_id = u.comm_id;
  memcpy(c->secret, u.secret, sizeof(c->secret));
  st = chorus__comm_read_settings(c, cfg);
  if (st >= 0) st = join_through_store(c, u.store_addr);
  if (st < 0) {
    chorus__comm_free(c);
    return st;
  }
  *comm = c;
  return CHORUS_OK;
}

/* Parses a non-negative decimal integer environment variable; -1 when unset or malformed. */
static long env_long(const char* name) {
  const char* v = getenv(name);
  if (!v || !*v) return -1;
  char* end = NULL;
  long x = strtol(v, &end, 10);
  return (*end == '\0' && x >= 0) ? x : -2;
}

/* Finds rank, size and store address in the launcher variables DESIGN.md lists. */
static chorus_status_t env_identity(int* rank, int* size, char* addr, size_t addrlen, char* err, size_t errlen) {
  static const char* const pairs[][2] = {{"CHORUS_RANK", "CHORUS_SIZE"}, {"RANK", "WORLD_SIZE"},
                                         {"SLURM_PROCID", "SLURM_NTASKS"},
                                         {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                         {"PMI_RANK", "PMI_SIZE"}};
  const char* which = NULL;
  for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]) && !which; i++) {
    long r = env_long(pairs[i][0]), n = env_long(pairs[i][1]);
    if (r == -1 && n == -1) continue;
    if (r < 0 || n < 1 || r >= n) {
      snprintf(err, errlen, "%s=%s and %s=%s are not a valid rank and size", pairs[i][0],
               getenv(pairs[i][0]) ? getenv(pairs[i][0]) : "(unset)", pairs[i][1],
               getenv(pairs[i][1]) ? getenv(pairs[i][1]) : "(unset)");
      return CHORUS_ERR_INVALID_ARG;
    }
    *rank = (int)r;
    *size = (int)n;
    which = pairs[i][0];
  }
  if (!which) {
    snprintf(err, errlen, "no rank in the environment: set CHORUS_RANK/CHORUS_SIZE/CHORUS_ADDR (chorus-run does), "
             "or run under torchrun (RANK/WORLD_SIZE), Slurm or Open MPI");
    return CHORUS_ERR_INVALID_ARG;
  }
  const char* a = getenv("CHORUS_ADDR");
  const char *maddr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
  if (a && *a) snprintf(addr, addrlen, "%s", a);
  else if (maddr && *maddr && mport && *mport) snprintf(addr, addrlen, "%s:%s", maddr, mport);
  else {
    snprintf(err, errlen, "%s is set but no store address is: set CHORUS_ADDR=host:port or MASTER_ADDR and MASTER_PORT", which);
    return CHORUS_ERR_INVALID_ARG;
  }
  return CHORUS_OK;
}

CHORUS_API chorus_status_t chorus_comm_init_env(chorus_comm_t** comm, const chorus_config_t* cfg) {
  if (!comm) return CHORUS_ERR_INVALID_ARG;
  *comm = NULL;
  chorus__log_init();
  int rank = 0, size = 0;
  char addr[CHORUS_ADDR_LEN], err[300];
  chorus_status_t st = env_identity(&rank, &size, addr, sizeof(addr), err, sizeof(err));
  if (st < 0) {
    CH_WARN(-1, "chorus_comm_init_env: %s", err);
    return st;
  }
  chorus_comm_t* c = NULL;
  st = chorus__comm_alloc(&c, size, rank);
  if (st < 0) return st;
  const char* secret = chorus__param_str(CHORUS_PARAM_SECRET);
  /* Without CHORUS_SECRET the secret is derived from the address: it keeps out strays, not
   * attackers; chorus-run always sets a random one. */
  secret_from_text(secret[0] ? secret : addr, c->secret);
  st = chorus__comm_read_settings(c, cfg);
  if (st >= 0 && rank == 0) {
    struct sockaddr_storage sa;
    socklen_t salen;
    char ip[CHORUS_ADDR_LEN], bound[CHORUS_ADDR_LEN];
    st = chorus__sock_resolve(addr, &sa, &salen, err, sizeof(err));
    int port = st >= 0 ? ntohs(((struct sockaddr_in*)&sa)->sin_port) : 0;
    if (st >= 0) inet_ntop(AF_INET, &((struct sockaddr_in*)&sa)->sin_addr, ip, sizeof(ip));
    if (st >= 0) st = chorus__store_server_start(ip, port, c->secret, bound, sizeof(bound), err, sizeof(err));
    if (st < 0 && strcmp(ip, "127.0.0.1") != 0) /* the name may resolve to an address of another interface */
      st = chorus__store_server_start("0.0.0.0", port, c->secret, bound, sizeof(bound), err, sizeof(err));
    if (st < 0) {
      chorus__comm_set_error(c, "rank 0 cannot serve the bootstrap store at %s: %s", addr, err);
      CH_WARN(0, "%s", c->last_error);
    }
  }
  if (st >= 0) st = join_through_store(c, addr);
  if (st < 0) {
    chorus__comm_free(c);
    return st;
  }
  *comm = c;
  return CHORUS_OK;
}

/* ---- split: the parent communicator replaces the store ---- */

typedef struct {
  int32_t color, key, old_rank;
} split_entry_t;

static int cmp_split(const void* a, const void* b) {
  const split_entry_t *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->old_rank - y->old_rank;
}

CHORUS_API chorus_status_t chorus_comm_split(chorus_comm_t* comm, int color, int key,
                                             chorus_comm_t** newcomm) {
  if (!chorus__live_check(comm, "chorus_comm_split") || !newcomm) return CHORUS_ERR_INVALID_ARG;
  *newcomm = NULL;
  if (color < 0 && color != CHORUS_SPLIT_NOCOLOR) {
    chorus__comm_set_error(comm, "chorus_comm_split: color %d is negative (only CHORUS_SPLIT_NOCOLOR may be)", color);
    return CHORUS_ERR_INVALID_ARG;
  }
  int n = comm->nranks;
  split_entry_t mine = {color, key, comm->rank}, *all = calloc((size_t)n, sizeof(*all));
  chorus_peer_info_t me, *infos = calloc((size_t)n, sizeof(*infos));
  memset(&me, 0, sizeof(me));
  chorus__peer_info_self(comm, &me);
  chorus_comm_t* c = NULL;
  int listen_fd = -1;
  char err[300], ip[CHORUS_ADDR_LEN];
  chorus_status_t st = (all && infos) ? CHORUS_OK : CHORUS_ERR_NO_MEMORY;
  if (st >= 0) st = chorus_allgather(&mine, all, sizeof(mine), CHORUS_UINT8, comm);
  if (st >= 0 && color != CHORUS_SPLIT_NOCOLOR) {
    snprintf(ip, sizeof(ip), "%s", comm->tp.peers[comm->rank].addr);
    ip[strcspn(ip, ":")] = '\0';
    st = chorus__sock_listen(ip, 0, comm->tcp_cc, &listen_fd, me.addr, sizeof(me.addr), err, sizeof(err));
    if (st < 0) chorus__comm_set_error(comm, "chorus_comm_split: %s", err);
  }
  /* Every parent rank takes part in both exchanges, members or not. */
  chorus_status_t st2 = chorus_allgather(&me, infos, sizeof(me), CHORUS_UINT8, comm);
  if (st >= 0) st = st2;
  uint64_t split_no = (uint64_t)comm->split_count++;
  if (st < 0 || color == CHORUS_SPLIT_NOCOLOR) goto out;

  int m = 0;
  for (int r = 0; r < n; r++)
    if (all[r].color == color) all[m++] = all[r];
  qsort(all, (size_t)m, sizeof(*all), cmp_split);
  int newrank = 0;
  chorus_peer_info_t* sub = calloc((size_t)m, sizeof(*sub));
  if (!sub) {
    st = CHORUS_ERR_NO_MEMORY;
    goto out;
  }
  for (int i = 0; i < m; i++) {
    sub[i] = infos[all[i].old_rank];
    if (all[i].old_rank == comm->rank) newrank = i;
  }
  st = chorus__comm_alloc(&c, m, newrank);
  if (st >= 0) {
    c->comm_id = mix64(comm->comm_id ^ mix64(split_no * 0x100000001ull + (uint64_t)color));
    memcpy(c->secret, comm->secret, sizeof(c->secret));
    st = chorus__comm_read_settings(c, NULL);
  }
  if (st >= 0) {
    c->timeout_sec = comm->timeout_sec;
    c->connect_timeout_sec = comm->connect_timeout_sec;
    c->nsocks = comm->nsocks;
    memcpy(c->tcp_cc, comm->tcp_cc, sizeof(c->tcp_cc)); /* the listener above has the parent's */
    memcpy(c->host_id, comm->host_id, sizeof(c->host_id));
    c->cost.intra = comm->cost.intra; /* the same links: no probe, unless variables say otherwise */
    c->cost.inter = comm->cost.inter;
    c->cost.inter_ring_bytes_per_us = comm->cost.inter_ring_bytes_per_us;
    st = chorus__comm_connect(c, listen_fd, sub);
    if (st >= 0) chorus__comm_set_stripes(c, comm->tp.stripe_socks); /* and the parent's socket count */
    if (st >= 0) st = chorus__tune_links(c, NULL);
    if (st >= 0) chorus__transport_prefault_shm(&c->tp);
    if (st < 0) chorus__comm_set_error(comm, "chorus_comm_split: %s", c->last_error);
  }
  free(sub);
  if (st < 0) {
    chorus__comm_free(c);
    c = NULL;
  }
out:
  if (listen_fd >= 0) close(listen_fd);
  free(all);
  free(infos);
  *newcomm = c;
  return st;
}
