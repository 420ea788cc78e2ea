/*
 * chorus-run.c - the launcher: starts N ranks of a program on this host (with --nnodes, this
 * host's share of a multi-host job) with the environment that chorus_comm_init_env (and
 * torchrun-style code) reads, relays their output (optionally prefixed with the rank), and tears the whole job down when a rank fails, when the
 * job times out, or when chorus-run itself is signalled. Single-threaded: one poll() loop over
 * a signalfd (SIGCHLD and the forwarded signals) and, with --prefix, the ranks' output pipes.
 */
#ifndef _GNU_SOURCE /* also set by CMake for the whole project */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

extern char** environ;

#define DRAIN_AFTER_EXIT_SEC 1.0      /* how long output pipes may outlive the ranks */
#define LINE_CAP_BYTES (32 * 1024)    /* longer lines are relayed in pieces */
#define PREFIX_MAX_BYTES 16           /* "[1023] " plus slack */
#define EXIT_TIMEOUT 124
#define EXIT_CANNOT_EXEC 126
#define EXIT_NOT_FOUND 127


/* ---- job state ---- */

typedef struct {
  int fd;            /* read end of the rank's pipe; -1 once closed */
  int out_fd;        /* where its lines go: STDOUT_FILENO or STDERR_FILENO */
  char* buf;         /* pending bytes of an incomplete line, LINE_CAP_BYTES, lazily allocated */
  size_t len;
  int at_line_start; /* the next byte relayed starts a line and needs the prefix */
} stream_t;

typedef struct {
  pid_t pid; /* 0 if never started */
  int alive; /* started and not yet reaped: only such pids are ever signalled */
  stream_t out, err;
} rank_t;

typedef enum { END_NONE, END_RANK_FAILED, END_TIMEOUT, END_SIGNAL, END_LAUNCH_FAILED } end_t;

typedef struct {
  options_t opt;
  rank_t* ranks;
  int nalive;
  int sig_fd;
  sigset_t orig_mask;            /* restored in each rank before exec */
  struct sigaction orig_pipe_sa; /* SIGPIPE and SIGCHLD dispositions, likewise */
  struct sigaction orig_chld_sa;
  end_t end;          /* why the job is ending; the first cause wins */
  int exit_code;      /* for END_RANK_FAILED, END_TIMEOUT, END_LAUNCH_FAILED */
  int cause_signaled; /* END_RANK_FAILED: the reported rank was killed by a signal */
  int signalled;      /* chorus-run has sent the ranks a signal */
  int first_signal;   /* for END_SIGNAL: re-raised on exit */
  int nsignals;       /* forwardable signals received */
  double deadline;    /* --timeout, monotonic seconds; 0 = none */
  double term_at;     /* pending SIGTERM after --term-delay; 0 = none */
  double kill_at;     /* pending SIGKILL after the grace period; 0 = none */
  double drain_until; /* set when the last rank is reaped */
  int out_broken[3];  /* writing to fd 1/2 failed (e.g. EPIPE): discard further output */
  char* scratch;      /* assembles prefixed lines for one write() */
  int* cpus;          /* --bind core: the CPUs; local rank l of node I takes cpus[(I*N + l) % ncpus] */
  int ncpus;          /* 0: ranks are not bound */
} job_t;

/* ---- small helpers ---- */

static double now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void say(const char* fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  /* One write so that the line is not interleaved with relayed rank output. */
  ssize_t ignored = write(STDERR_FILENO, line, (size_t)n);
  (void)ignored;
}

static int write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static const int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};

static int is_ignored(int sig) {
  struct sigaction sa;
  return sigaction(sig, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
}

/* Blocks SIGCHLD and the forwarded signals (unless ignored at start) and reads them from a
 * signalfd, so that poll() is the only place chorus-run waits. */
static int setup_signals(job_t* job) {
  struct sigaction dfl = {.sa_handler = SIG_DFL}, ign = {.sa_handler = SIG_IGN};
  sigaction(SIGCHLD, &dfl, &job->orig_chld_sa); /* SIG_IGN would reap the ranks for us */
  sigaction(SIGPIPE, &ign, &job->orig_pipe_sa); /* a closed stdout must not kill the job */
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  for (size_t i = 0; i < sizeof kForwarded / sizeof kForwarded[0]; i++)
    if (!is_ignored(kForwarded[i])) sigaddset(&mask, kForwarded[i]);
  if (sigprocmask(SIG_BLOCK, &mask, &job->orig_mask) != 0) return -1;
  job->sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  return job->sig_fd < 0 ? -1 : 0;
}

static void signal_alive_ranks(job_t* job, int sig) {
  job->signalled = 1;
  for (int r = 0; r < job->opt.nranks; r++)
    if (job->ranks[r].alive) kill(job->ranks[r].pid, sig);
}

/* SIGTERM now, SIGKILL after the grace period unless everything is gone by then. */
static void terminate_ranks(job_t* job, int sig) {
  signal_alive_ranks(job, sig);
  /* A stopped rank (SIGSTOP, a debugger let go) would sit on the signal for the whole grace
   * period: wake it, after the signal, so that the first thing it meets is the signal. */
  signal_alive_ranks(job, SIGCONT);
  job->term_at = 0;
  if (job->kill_at == 0) job->kill_at = now_sec() + job->opt.grace_sec;
}

static void kill_ranks_now(job_t* job) {
  signal_alive_ranks(job, SIGKILL);
  job->term_at = 0;
  job->kill_at = 0;
}

/* ---- launching ---- */

/* --bind: the CPUs chorus-run may run on, in order, when the ranks are to be pinned. Auto pins
 * when the ranks spread evenly: a CPU each, or the same number on every CPU (round robin).
 * Oversubscribed ranks that take turns on a core then wait for the one beside them instead of
 * being moved between cores: on 2 CPUs, 4 ranks took 0.70 of the time at 1 MiB allreduce and
 * 0.79 at 1 KiB broadcast (medians of 6 alternating runs). Uneven counts stay free to move, so
 * that the scheduler can balance them. */
static void choose_cpus(job_t* job) {
  if (job->opt.bind == BIND_NONE) return;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int n = CPU_COUNT(&allowed);
  if (n <= 0 || (job->opt.bind == BIND_AUTO && job->opt.nranks > n && job->opt.nranks % n != 0)) return;
  job->cpus = calloc((size_t)n, sizeof *job->cpus);
  if (!job->cpus) return;
  for (int cpu = 0; cpu < CPU_SETSIZE && job->ncpus < n; cpu++)
    if (CPU_ISSET(cpu, &allowed)) job->cpus[job->ncpus++] = cpu;
}

/* The CPU slot of local rank r counts the ranks of the nodes before this one, so that the
 * chorus-runs of several nodes sharing one machine (an emulated cluster, or a laptop trying a
 * multi-host job) spread their ranks over its CPUs instead of all pinning their first rank to
 * the first CPU: 2 nodes x 1 rank on 2 CPUs both ran on CPU 0, at half the TCP throughput of
 * the ranks left unpinned. On a machine of its own a node still gets N distinct CPUs. */
static int cpu_slot(const options_t* o, int r) { return o->rank_base + r; }

/* Runs in the child between fork and exec. chorus-run has a single thread, so this is safe
 * even though execvpe may allocate while searching PATH. Never returns. */
static void exec_rank(const job_t* job, const rank_env_t* env, int rank, pid_t parent, int status_wr,
                      int out_wr, int err_wr) {
  setpgid(0, 0); /* see the help text: terminal signals reach chorus-run only */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(EXIT_CANNOT_EXEC);
  sigaction(SIGPIPE, &job->orig_pipe_sa, NULL);
  sigaction(SIGCHLD, &job->orig_chld_sa, NULL);
  sigprocmask(SIG_SETMASK, &job->orig_mask, NULL);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0 && devnull != STDIN_FILENO) {
    dup2(devnull, STDIN_FILENO);
    close(devnull);
  }
  if (job->ncpus > 0) { /* --bind core */
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(job->cpus[cpu_slot(&job->opt, rank) % job->ncpus], &one);
    sched_setaffinity(0, sizeof one, &one); /* a failure leaves the rank unbound, no worse */
  }
  if (out_wr >= 0) dup2(out_wr, STDOUT_FILENO); /* dup2 clears O_CLOEXEC on the copy */
  if (err_wr >= 0) dup2(err_wr, STDERR_FILENO);
  execvpe(job->opt.prog_argv[0], job->opt.prog_argv, env->envp);
  int err = errno;
  ssize_t ignored = write(status_wr, &err, sizeof err);
  (void)ignored;
  _exit(err == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC);
}

static void init_stream(stream_t* s, int fd, int out_fd) {
  s->fd = fd;
  s->out_fd = out_fd;
  s->buf = NULL;
  s->len = 0;
  s->at_line_start = 1;
}

/* Waits until the child has exec'd (the CLOEXEC pipe closes) or reports why it could not. */
static int wait_for_exec(int status_rd) {
  int err = 0;
  ssize_t got;
  do got = read(status_rd, &err, sizeof err);
  while (got < 0 && errno == EINTR);
  return got == (ssize_t)sizeof err ? err : 0;
}

static void close_pair(int p[2]) {
  for (int i = 0; i < 2; i++)
    if (p[i] >= 0) close(p[i]);
}

/* Starts local rank r. Returns 0, or an exit code for chorus-run after printing why. */
static int launch_rank(job_t* job, rank_env_t* env, int r) {
  int status_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (pipe2(status_pipe, O_CLOEXEC) != 0 ||
      (job->opt.prefix && (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0))) {
    say(PROG ": cannot start rank %d: pipe: %s", r, strerror(errno));
    close_pair(status_pipe), close_pair(out_pipe), close_pair(err_pipe);
    return 1;
  }
  set_rank_vars(env, &job->opt, r);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) exec_rank(job, env, r, parent, status_pipe[1], out_pipe[1], err_pipe[1]);
  int fork_errno = errno;
  close(status_pipe[1]);
  if (job->opt.prefix) close(out_pipe[1]), close(err_pipe[1]);
  if (pid < 0) {
    say(PROG ": cannot start rank %d: fork: %s", r, strerror(fork_errno));
    close(status_pipe[0]), close_pair(out_pipe), close_pair(err_pipe);
    return 1;
  }
  setpgid(pid, pid); /* also done by the child; whichever runs first wins the race */
  rank_t* rk = &job->ranks[r];
  rk->pid = pid;
  rk->alive = 1;
  job->nalive++;
  init_stream(&rk->out, out_pipe[0], STDOUT_FILENO);
  init_stream(&rk->err, err_pipe[0], STDERR_FILENO);
  if (job->opt.prefix) /* the loop reads them only as far as they hold data */
    fcntl(out_pipe[0], F_SETFL, O_NONBLOCK), fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  int exec_errno = wait_for_exec(status_pipe[0]);
  close(status_pipe[0]);
  if (exec_errno == 0) return 0;
  say(PROG ": cannot execute '%s': %s", job->opt.prog_argv[0], strerror(exec_errno));
  return exec_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_CANNOT_EXEC;
}

static void launch_all(job_t* job, rank_env_t* env) {
  for (int r = 0; r < job->opt.nranks; r++) {
    int rc = launch_rank(job, env, r);
    if (rc != 0) {
      job->end = END_LAUNCH_FAILED;
      job->exit_code = rc;
      terminate_ranks(job, SIGTERM);
      return;
    }
  }
}

/* ---- output relay (--prefix) ---- */

static void emit(job_t* job, int out_fd, const char* p, size_t n) {
  if (n == 0 || job->out_broken[out_fd]) return;
  if (write_all(out_fd, p, n) != 0) job->out_broken[out_fd] = 1;
}

/* Relays every complete line in s->buf, prefixed; keeps the incomplete tail. At EOF, or when
 * the tail fills the buffer, relays the tail too (at EOF completed with a newline). */
static void relay_lines(job_t* job, int rank, stream_t* s, int at_eof) {
  char prefix[PREFIX_MAX_BYTES];
  size_t prefix_len =
      (size_t)snprintf(prefix, sizeof prefix, "[%d] ", global_rank(&job->opt, rank));
  char* out = job->scratch;
  size_t out_len = 0, start = 0;
  for (size_t i = 0; i < s->len; i++) {
    if (s->buf[i] != '\n') continue;
    if (s->at_line_start) memcpy(out + out_len, prefix, prefix_len), out_len += prefix_len;
    memcpy(out + out_len, s->buf + start, i + 1 - start);
    out_len += i + 1 - start;
    start = i + 1;
    s->at_line_start = 1;
  }
  size_t tail = s->len - start;
  if (tail > 0 && (at_eof || s->len == LINE_CAP_BYTES)) {
    if (s->at_line_start) memcpy(out + out_len, prefix, prefix_len), out_len += prefix_len;
    memcpy(out + out_len, s->buf + start, tail);
    out_len += tail;
    start = s->len;
    s->at_line_start = 0;
  }
  if (at_eof && !s->at_line_start) out[out_len++] = '\n', s->at_line_start = 1;
  emit(job, s->out_fd, out, out_len);
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
}

static void close_stream(job_t* job, int rank, stream_t* s) {
  if (s->buf) relay_lines(job, rank, s, 1);
  free(s->buf);
  s->buf = NULL;
  close(s->fd);
  s->fd = -1;
}

typedef enum { READ_EMPTY, READ_MORE, READ_EOF } read_result_t;

/* Reads what the pipe holds now, never blocking and at most a few buffers, so that one
 * chatty rank cannot starve the others. READ_MORE: there may be more to read at once. */
static read_result_t read_stream(job_t* job, int rank, stream_t* s) {
  for (int round = 0; round < 8; round++) {
    if (!s->buf && !(s->buf = malloc(LINE_CAP_BYTES))) {
      say(PROG ": out of memory: dropping the output of rank %d", rank);
      close_stream(job, rank, s);
      return READ_EOF;
    }
    ssize_t got = read(s->fd, s->buf + s->len, LINE_CAP_BYTES - s->len);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) return READ_EMPTY;
    if (got <= 0) {
      close_stream(job, rank, s);
      return READ_EOF;
    }
    s->len += (size_t)got;
    relay_lines(job, rank, s, 0);
  }
  return READ_MORE;
}

/* Relays what a rank wrote before it exited, so that its last lines come before the line
 * that reports its end. Bounded, in case a child of the rank keeps writing to the pipe. */
static void drain_rank(job_t* job, int r) {
  stream_t* streams[2] = {&job->ranks[r].out, &job->ranks[r].err};
  for (int i = 0; i < 2; i++)
    for (int batch = 0; batch < 16 && streams[i]->fd >= 0; batch++)
      if (read_stream(job, r, streams[i]) != READ_MORE) break;
}

/* ---- reaping and failure handling ---- */

static void report_failure(int r, pid_t pid, int status, int* code) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    say(PROG ": rank %d (pid %d) killed by signal %d (%s)", r, (int)pid, sig, strsignal(sig));
    *code = 128 + sig;
  } else {
    say(PROG ": rank %d (pid %d) exited with status %d", r, (int)pid, WEXITSTATUS(status));
    *code = WEXITSTATUS(status);
  }
}

static void on_rank_end(job_t* job, int r, int status) {
  rank_t* rk = &job->ranks[r];
  rk->alive = 0;
  job->nalive--;
  if (job->opt.prefix) drain_rank(job, r);
  int failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (!failed) return;
  /* Only the first cause is reported, with one exception: a rank killed by a signal (not one
   * of ours) after others exited with an error is what they failed of. A killed process
   * closes its sockets before it can be reaped, and its peers, told at once by the library,
   * may exit and be reaped first. */
  int earlier_kill = job->end == END_RANK_FAILED && !job->cause_signaled && WIFSIGNALED(status) && !job->signalled;
  if (job->end != END_NONE && !earlier_kill) return;
  job->cause_signaled = WIFSIGNALED(status);
  report_failure(global_rank(&job->opt, r), rk->pid, status, &job->exit_code);
  if (earlier_kill) return;
  job->end = END_RANK_FAILED;
  if (job->opt.term_delay_sec > 0)
    job->term_at = now_sec() + job->opt.term_delay_sec;
  else
    terminate_ranks(job, SIGTERM);
}

static int rank_of_pid(const job_t* job, pid_t pid) {
  for (int r = 0; r < job->opt.nranks; r++)
    if (job->ranks[r].alive && job->ranks[r].pid == pid) return r;
  return -1;
}

static void reap_children(job_t* job) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    int r = rank_of_pid(job, pid);
    if (r >= 0) on_rank_end(job, r, status);
  }
  if (job->nalive == 0 && job->drain_until == 0) job->drain_until = now_sec() + DRAIN_AFTER_EXIT_SEC;
}

static void on_forwarded_signal(job_t* job, int sig) {
  job->nsignals++;
  if (job->end == END_NONE) {
    job->end = END_SIGNAL;
    job->first_signal = sig;
  }
  if (job->nsignals == 1) {
    terminate_ranks(job, sig);
  } else {
    say(PROG ": second signal (%s): sending SIGKILL to %d ranks", strsignal(sig), job->nalive);
    kill_ranks_now(job);
  }
}

static void read_signals(job_t* job) {
  struct signalfd_siginfo si;
  while (read(job->sig_fd, &si, sizeof si) == (ssize_t)sizeof si) {
    if ((int)si.ssi_signo == SIGCHLD)
      reap_children(job);
    else
      on_forwarded_signal(job, (int)si.ssi_signo);
  }
  reap_children(job); /* SIGCHLDs coalesce: always sweep */
}

/* ---- timers ---- */

static void check_timers(job_t* job) {
  double now = now_sec();
  if (job->deadline && now >= job->deadline && job->nalive > 0) {
    job->deadline = 0;
    if (job->end == END_NONE) {
      say(PROG ": timeout: job still running after %g s; terminating %d ranks",
          job->opt.timeout_sec, job->nalive);
      job->end = END_TIMEOUT;
      job->exit_code = EXIT_TIMEOUT;
      terminate_ranks(job, SIGTERM);
    } else if (job->term_at) { /* a rank failed and the others had until now anyway */
      terminate_ranks(job, SIGTERM);
    }
  }
  if (job->term_at && now >= job->term_at) terminate_ranks(job, SIGTERM);
  if (job->kill_at && now >= job->kill_at) {
    job->kill_at = 0;
    if (job->nalive > 0) {
      say(PROG ": %d ranks still running %g s after being asked to stop; sending SIGKILL",
          job->nalive, job->opt.grace_sec);
      kill_ranks_now(job);
    }
  }
}

/* Milliseconds until the nearest timer (rounded up), or -1 for none. */
static int poll_timeout_ms(const job_t* job) {
  double timers[4] = {job->deadline, job->term_at, job->kill_at,
                      job->nalive == 0 ? job->drain_until : 0};
  double nearest = 0, now = now_sec();
  for (int i = 0; i < 4; i++)
    if (timers[i] && (nearest == 0 || timers[i] < nearest)) nearest = timers[i];
  if (nearest == 0) return -1;
  double wait_ms = ceil((nearest - now) * 1e3);
  return wait_ms <= 0 ? 0 : wait_ms > INT_MAX ? INT_MAX : (int)wait_ms;
}

/* ---- the loop ---- */

static int streams_open(const job_t* job) {
  for (int r = 0; r < job->opt.nranks; r++)
    if (job->ranks[r].out.fd >= 0 || job->ranks[r].err.fd >= 0) return 1;
  return 0;
}

static void close_all_streams(job_t* job) {
  for (int r = 0; r < job->opt.nranks; r++) {
    if (job->ranks[r].out.fd >= 0) close_stream(job, r, &job->ranks[r].out);
    if (job->ranks[r].err.fd >= 0) close_stream(job, r, &job->ranks[r].err);
  }
}

typedef struct {
  struct pollfd* fds; /* [0] is the signalfd, then one per open stream */
  stream_t** streams;
  int* stream_rank;
} poll_set_t;

static int alloc_poll_set(poll_set_t* ps, int nranks) {
  size_t cap = 1 + 2 * (size_t)nranks;
  ps->fds = calloc(cap, sizeof *ps->fds);
  ps->streams = calloc(cap, sizeof *ps->streams);
  ps->stream_rank = calloc(cap, sizeof *ps->stream_rank);
  return ps->fds && ps->streams && ps->stream_rank ? 0 : -1;
}

static void free_poll_set(poll_set_t* ps) {
  free(ps->fds), free(ps->streams), free(ps->stream_rank);
}

static nfds_t fill_poll_set(const job_t* job, poll_set_t* ps) {
  nfds_t n = 0;
  ps->fds[n++] = (struct pollfd){.fd = job->sig_fd, .events = POLLIN};
  for (int r = 0; r < job->opt.nranks; r++) {
    stream_t* st[2] = {&job->ranks[r].out, &job->ranks[r].err};
    for (int i = 0; i < 2; i++) {
      if (st[i]->fd < 0) continue;
      ps->streams[n] = st[i];
      ps->stream_rank[n] = r;
      ps->fds[n++] = (struct pollfd){.fd = st[i]->fd, .events = POLLIN};
    }
  }
  return n;
}

/* Last resort if poll() itself fails: no rank may outlive chorus-run unreaped. */
static void kill_and_reap_all(job_t* job) {
  say(PROG ": poll: %s; killing %d ranks", strerror(errno), job->nalive);
  kill_ranks_now(job);
  for (int r = 0; r < job->opt.nranks; r++) {
    int status;
    if (!job->ranks[r].alive) continue;
    while (waitpid(job->ranks[r].pid, &status, 0) < 0 && errno == EINTR) {
    }
    on_rank_end(job, r, status);
  }
}

static void run_loop(job_t* job, poll_set_t* ps) {
  reap_children(job);
  while (job->nalive > 0 || (streams_open(job) && now_sec() < job->drain_until)) {
    nfds_t n = fill_poll_set(job, ps);
    int ready = poll(ps->fds, n, poll_timeout_ms(job));
    if (ready < 0 && errno != EINTR) {
      kill_and_reap_all(job);
      break;
    }
    for (nfds_t i = 1; ready > 0 && i < n; i++)
      if (ps->fds[i].revents) read_stream(job, ps->stream_rank[i], ps->streams[i]);
    read_signals(job);
    check_timers(job);
  }
  close_all_streams(job);
}

/* ---- exit ---- */

static int finish(job_t* job) {
  switch (job->end) {
    case END_NONE: return 0;
    case END_SIGNAL: {
      /* Die of the same signal, so that a calling shell sees an interrupted job. */
      struct sigaction dfl = {.sa_handler = SIG_DFL};
      sigaction(job->first_signal, &dfl, NULL);
      sigset_t one;
      sigemptyset(&one);
      sigaddset(&one, job->first_signal);
      sigprocmask(SIG_UNBLOCK, &one, NULL);
      raise(job->first_signal);
      return 128 + job->first_signal;
    }
    default: return job->exit_code;
  }
}

int main(int argc, char** argv) {
  job_t job;
  memset(&job, 0, sizeof job);
  parse_options(argc, argv, &job.opt);
  rank_env_t env;
  memset(&env, 0, sizeof env);
  job.ranks = calloc((size_t)job.opt.nranks, sizeof *job.ranks);
  job.scratch = malloc(LINE_CAP_BYTES * (PREFIX_MAX_BYTES + 1) + 2);
  poll_set_t ps;
  if (!job.ranks || !job.scratch || alloc_poll_set(&ps, job.opt.nranks) != 0) {
    say(PROG ": out of memory");
    return 1;
  }
  for (int r = 0; r < job.opt.nranks; r++) {
    init_stream(&job.ranks[r].out, -1, STDOUT_FILENO);
    init_stream(&job.ranks[r].err, -1, STDERR_FILENO);
  }
  if (make_rank_env(&job.opt, &env) != 0) {
    free_rank_env(&env);
    return 1;
  }
  if (setup_signals(&job) != 0) {
    say(PROG ": cannot set up signal handling: %s", strerror(errno));
    return 1;
  }
  if (job.opt.timeout_sec > 0) job.deadline = now_sec() + job.opt.timeout_sec;
  choose_cpus(&job);
  launch_all(&job, &env);
  run_loop(&job, &ps);
  free_poll_set(&ps);
  free_rank_env(&env);
  free(job.ranks);
  free(job.scratch);
  free(job.cpus);
  free(job.opt.set_vars);
  close(job.sig_fd);
  return finish(&job);
}
