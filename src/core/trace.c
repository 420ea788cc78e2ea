/*
 * trace.c - the flight recorder, SIGUSR1 dumps and the Chrome-trace file (see trace.h).
 *
 * SIGUSR1: the handler only writes a byte into a pipe (async-signal-safe); a watcher thread
 * reads it and dumps every registered communicator. The handler is installed, and the watcher
 * started, while at least one communicator exists, and only if the application left SIGUSR1 at
 * its default; both are removed with the last communicator.
 */
#include "core/trace.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/comm.h"
#include "core/live.h"
#include "core/log.h"
#include "core/param.h"

static const char* const state_names[] = {"posted", "started", "done", "failed"};

/* ---- the process-wide list, the signal watcher and the trace file ---- */

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static chorus_comm_t* registry;
static int registry_count;
static int signal_pipe[2] = {-1, -1};
static pthread_t watcher;
static int watcher_running;
static struct sigaction previous_usr1;
/* The trace file, shared by the process's communicators. Its own lock, taken inside comm->mu
 * (when an operation ends) and inside registry_mu (open, close), never around either: the
 * SIGUSR1 dump takes registry_mu and then each comm->mu. */
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE* trace_out; /* atomic pointer; written under trace_mu */
static int trace_events;
static int64_t trace_offset_ns; /* realtime - monotonic, so ranks' timelines line up */

static void on_usr1(int sig) {
  (void)sig;
  int saved = errno;
  char b = 'd';
  if (write(signal_pipe[1], &b, 1) < 0) {
    /* The pipe is full: a dump is already pending. */
  }
  errno = saved;
}

static FILE* open_expanded(const char* pattern, int rank, const char* mode) {
  char path[512], host[64] = "host";
  gethostname(host, sizeof(host) - 1);
  size_t o = 0;
  for (const char* p = pattern; *p && o + 32 < sizeof(path); p++) {
    if (p[0] == '%' && (p[1] == 'r' || p[1] == 'p' || p[1] == 'h')) {
      int n = p[1] == 'r'   ? snprintf(path + o, sizeof(path) - o, "%d", rank)
              : p[1] == 'p' ? snprintf(path + o, sizeof(path) - o, "%d", (int)getpid())
                            : snprintf(path + o, sizeof(path) - o, "%s", host);
      o += n > 0 ? (size_t)n : 0;
      p++;
    } else {
      path[o++] = *p;
    }
  }
  path[o] = '\0';
  FILE* f = fopen(path, mode);
  if (!f) CH_WARN(rank, "cannot open %s: %s", path, strerror(errno));
  return f;
}

static void dump_all(void) {
  const char* file = chorus__param_str(CHORUS_PARAM_DUMP_FILE);
  FILE* out = file[0] ? open_expanded(file, -1, "a") : stderr;
  if (!out) return;
  pthread_mutex_lock(&registry_mu);
  for (chorus_comm_t* c = registry; c; c = c->trace_next) chorus__trace_dump(c, out);
  pthread_mutex_unlock(&registry_mu);
  fflush(out);
  if (out != stderr) fclose(out);
}

static void* watcher_main(void* arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "chorus-sigusr1");
  char b;
  while (read(signal_pipe[0], &b, 1) > 0 && b == 'd') dump_all();
  return NULL;
}

static void start_watcher(void) {
  int64_t enabled = 0;
  if (chorus__param_int(CHORUS_PARAM_DUMP_ON_SIGNAL, &enabled, NULL, 0) < 0 || !enabled) return;
  struct sigaction current;
  if (sigaction(SIGUSR1, NULL, &current) != 0 || current.sa_handler != SIG_DFL) return;
  if (pipe2(signal_pipe, O_CLOEXEC) != 0) return;
  if (pthread_create(&watcher, NULL, watcher_main, NULL) != 0) {
    close(signal_pipe[0]);
    close(signal_pipe[1]);
    signal_pipe[0] = signal_pipe[1] = -1;
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, &previous_usr1);
  watcher_running = 1;
}

static void stop_watcher(void) {
  if (!watcher_running) return;
  sigaction(SIGUSR1, &previous_usr1, NULL);
  char stop = 'q';
  if (write(signal_pipe[1], &stop, 1) != 1) {
    /* Cannot happen with an empty pipe; the join below would then block, so close first. */
    close(signal_pipe[1]);
    signal_pipe[1] = -1;
  }
  pthread_join(watcher, NULL);
  close(signal_pipe[0]);
  if (signal_pipe[1] >= 0) close(signal_pipe[1]);
  signal_pipe[0] = signal_pipe[1] = -1;
  watcher_running = 0;
}

static void open_trace(int rank) {
  const char* pattern = chorus__param_str(CHORUS_PARAM_TRACE_FILE);
  pthread_mutex_lock(&trace_mu);
  FILE* f = pattern[0] && !trace_out ? open_expanded(pattern, rank, "w") : NULL;
  if (f) {
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    trace_offset_ns = (int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec - (int64_t)chorus__now_ns();
    fprintf(f, "[\n");
    trace_events = 0;
    __atomic_store_n(&trace_out, f, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&trace_mu);
}

static void close_trace(void) {
  pthread_mutex_lock(&trace_mu);
  if (trace_out) {
    fprintf(trace_out, "\n]\n");
    fclose(trace_out);
    __atomic_store_n(&trace_out, NULL, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&trace_mu);
}

chorus_status_t chorus__trace_comm_init(chorus_comm_t* comm) {
  int64_t cap = 0;
  if (chorus__param_int(CHORUS_PARAM_RECORDER_SIZE, &cap, NULL, 0) < 0) cap = 0;
  if (cap > 0) {
    comm->recorder.entries = calloc((size_t)cap, sizeof(chorus_rec_entry_t));
    if (!comm->recorder.entries) return CHORUS_ERR_NO_MEMORY;
    comm->recorder.cap = (size_t)cap;
  }
  return CHORUS_OK;
}

void chorus__trace_comm_register(chorus_comm_t* comm) {
  pthread_mutex_lock(&registry_mu);
  if (registry_count++ == 0) start_watcher();
  open_trace(comm->rank);
  comm->trace_next = registry;
  registry = comm;
  pthread_mutex_unlock(&registry_mu);
}

void chorus__trace_comm_fini(chorus_comm_t* comm) {
  pthread_mutex_lock(&registry_mu);
  chorus_comm_t** link = &registry;
  while (*link && *link != comm) link = &(*link)->trace_next;
  if (*link) {
    *link = comm->trace_next;
    if (--registry_count == 0) {
      stop_watcher();
      close_trace();
    }
  }
  pthread_mutex_unlock(&registry_mu);
  free(comm->recorder.entries);
  comm->recorder.entries = NULL;
}

/* ---- recording ---- */

static chorus_rec_entry_t* entry_of(chorus_comm_t* comm, const chorus_task_t* t) {
  chorus_recorder_t* r = &comm->recorder;
  if (t->internal || !r->cap || r->recorded - t->rec_index > r->cap) return NULL; /* overwritten since */
  return &r->entries[t->rec_index % r->cap];
}

void chorus__trace_posted(chorus_comm_t* comm, chorus_task_t* t) {
  if (t->internal) return;
  chorus_recorder_t* r = &comm->recorder;
  t->rec_index = r->recorded;
  if (!r->cap) return;
  chorus_rec_entry_t* e = &r->entries[r->recorded++ % r->cap];
  *e = (chorus_rec_entry_t){.seq = t->seq, .count = t->args.count, .post_ns = t->post_ns,
                            .algo = t->algo ? t->algo->name : "?", .root = t->args.root,
                            .status = CHORUS_INPROGRESS, .coll = (uint8_t)t->args.coll,
                            .dtype = (uint8_t)t->args.dtype, .op = (uint8_t)t->args.op,
                            .state = CH_REC_POSTED};
}

void chorus__trace_started(chorus_comm_t* comm, chorus_task_t* t) {
  chorus_rec_entry_t* e = entry_of(comm, t);
  if (!e) return;
  e->start_ns = t->start_ns;
  e->state = CH_REC_STARTED;
}

static void trace_event(chorus_comm_t* comm, const chorus_task_t* t, uint64_t end_ns, chorus_status_t st) {
  if (t->internal || !__atomic_load_n(&trace_out, __ATOMIC_ACQUIRE)) return;
  uint64_t start = t->start_ns ? t->start_ns : t->post_ns;
  const char* op = chorus_op_name(t->args.op);
  const char* codec = chorus__codec_name(t->codec.kind); /* the wire form across hosts: none, zeros, a codec */
  pthread_mutex_lock(&trace_mu);
  if (trace_out) /* still open */
    fprintf(trace_out,
            "%s{\"name\":\"%s\",\"cat\":\"chorus\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d,"
            "\"args\":{\"seq\":%llu,\"algo\":\"%s\",\"count\":%zu,\"dtype\":\"%s\",\"op\":\"%s\",\"root\":%d,"
            "\"bytes\":%zu,\"codec\":\"%s\",\"queued_us\":%.3f,\"status\":\"%s\",\"comm\":\"%016llx\"}}",
            trace_events++ ? ",\n" : "", chorus__coll_name(t->args.coll),
            (double)((int64_t)start + trace_offset_ns) / 1e3, (double)(end_ns - start) / 1e3, comm->rank,
            (int)(comm->comm_id & 0xffff), (unsigned long long)t->seq, t->algo ? t->algo->name : "?", t->args.count,
            chorus_dtype_name(t->args.dtype), op ? op : "", t->args.root, t->args.count * t->dtype_size,
            codec ? codec : "?", (double)(start - t->post_ns) / 1e3, chorus_status_name(st),
            (unsigned long long)comm->comm_id);
  pthread_mutex_unlock(&trace_mu);
}

void chorus__trace_finished(chorus_comm_t* comm, chorus_task_t* t, chorus_status_t st, uint64_t now) {
  /* now: the engine's reading (see task_finish in progress.c). A trace file gets the exact
   * time. */
  if (__atomic_load_n(&trace_out, __ATOMIC_RELAXED)) now = chorus__now_ns();
  chorus_rec_entry_t* e = entry_of(comm, t);
  if (e) {
    e->end_ns = now;
    e->status = st;
    e->state = st == CHORUS_OK ? CH_REC_DONE : CH_REC_FAILED;
  }
  trace_event(comm, t, now, st);
}

void chorus__trace_dump(chorus_comm_t* comm, FILE* out) {
  pthread_mutex_lock(&comm->mu);
  const chorus_recorder_t* r = &comm->recorder;
  uint64_t first = r->recorded > r->cap ? r->recorded - r->cap : 0, now = chorus__now_ns();
  fprintf(out, "{\"comm\":\"%016llx\",\"rank\":%d,\"nranks\":%d,\"host\":\"%s\",\"pid\":%d,\"broken\":%s,"
          "\"last_error\":\"", (unsigned long long)comm->comm_id, comm->rank, comm->nranks,
          chorus__comm_peer_host(comm, comm->rank) ? chorus__comm_peer_host(comm, comm->rank) : "",
          (int)getpid(), comm->broken ? "true" : "false");
  for (const char* p = comm->last_error; *p; p++) /* JSON string escaping of the sentence */
    *p == '"' || *p == '\\' ? fprintf(out, "\\%c", *p) : (unsigned char)*p < 32 ? fputc(' ', out) : fputc(*p, out);
  fprintf(out, "\",\"ops\":[");
  for (uint64_t k = first; k < r->recorded; k++) {
    const chorus_rec_entry_t* e = &r->entries[k % r->cap];
    const char* op = chorus_op_name((chorus_op_t)e->op);
    fprintf(out, "%s\n {\"seq\":%llu,\"kind\":\"%s\",\"dtype\":\"%s\",\"op\":\"%s\",\"count\":%llu,\"root\":%d,"
            "\"algo\":\"%s\",\"state\":\"%s\",\"status\":\"%s\",\"age_us\":%.1f,\"queued_us\":%.1f,\"run_us\":%.1f}",
            k == first ? "" : ",", (unsigned long long)e->seq, chorus__coll_name((chorus_coll_t)e->coll),
            chorus_dtype_name((chorus_dtype_t)e->dtype), op ? op : "", (unsigned long long)e->count, e->root,
            e->algo, state_names[e->state], chorus_status_name((chorus_status_t)e->status),
            (double)(now - e->post_ns) / 1e3, e->start_ns ? (double)(e->start_ns - e->post_ns) / 1e3 : -1.0,
            e->end_ns ? (double)(e->end_ns - e->start_ns) / 1e3 : e->start_ns ? (double)(now - e->start_ns) / 1e3 : -1.0);
  }
  fprintf(out, "\n]}\n");
  pthread_mutex_unlock(&comm->mu);
}

CHORUS_API chorus_status_t chorus_comm_dump(chorus_comm_t* comm, const char* path) {
  if (!chorus__live_check(comm, "chorus_comm_dump")) return CHORUS_ERR_INVALID_ARG;
  FILE* out = path ? fopen(path, "w") : stderr;
  if (!out) {
    chorus__comm_set_error(comm, "chorus_comm_dump: cannot open %s: %s", path, strerror(errno));
    return CHORUS_ERR_SYSTEM;
  }
  chorus__trace_dump(comm, out);
  if (out != stderr) fclose(out);
  return CHORUS_OK;
}
