/*
 * runner.c - main() of every harness test binary. Runs each registered case in its own forked
 * process under a time limit (killed on expiry), prints one line per case and a summary
 * "N passed, N failed, N skipped". `./t` runs all cases, `./t NAME...` the named ones,
 * `./t --list` lists them, `./t --no-fork NAME` runs one in this process (for a debugger).
 * Exit status: 0 if nothing failed, 77 (CTest's SKIP_RETURN_CODE) if the one case run skipped.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"

#ifndef TEST_TIMEOUT_MULTIPLIER
#define TEST_TIMEOUT_MULTIPLIER 1
#endif

enum { EXIT_SKIPPED = 77, SKIP_REASON_MAX = 512 };

static test_case_t* cases_head;
static test_case_t* cases_tail;
/* Write end of the pipe that carries a skip reason from the case process to the runner. */
static int skip_reason_fd = -1;
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

static __thread int thread_rank = -1;
static __thread char thread_context[256];

void test__register(test_case_t* tc) {
  /* Appending keeps the order of definition (constructors of one file run in that order). */
  tc->next = NULL;
  if (cases_tail)
    cases_tail->next = tc;
  else
    cases_head = tc;
  cases_tail = tc;
}

void test_set_rank(int rank) { thread_rank = rank; }
int test_get_rank(void) { return thread_rank; }

void test_set_context(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(thread_context, sizeof(thread_context), fmt, ap);
  va_end(ap);
}

const char* test_get_context(void) { return thread_context; }

double test_now_sec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int test_timeout_multiplier(void) {
  const char* env = getenv("CHORUS_TEST_TIMEOUT_MULTIPLIER");
  int mult = env ? atoi(env) : 0;
  return mult >= 1 ? mult : TEST_TIMEOUT_MULTIPLIER;
}

void test__fail(const char* file, int line, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  /* Only the first failing thread reports; the others wait here until _exit ends them all. */
  pthread_mutex_lock(&fail_lock);
  fflush(stdout);
  char rank_tag[32] = "";
  if (thread_rank >= 0) snprintf(rank_tag, sizeof(rank_tag), " [rank %d]", thread_rank);
  fprintf(stderr, "%s:%d:%s%s%s%s %s\n", file, line, rank_tag, thread_context[0] ? " [" : "",
          thread_context, thread_context[0] ? "]" : "", msg);
  fflush(stderr);
  _exit(1);
}

void test__skip(const char* fmt, ...) {
  char msg[SKIP_REASON_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fflush(stdout);
  if (skip_reason_fd >= 0) {
    ssize_t unused = write(skip_reason_fd, msg, strlen(msg));
    (void)unused;
  } else {
    fprintf(stderr, "skipped: %s\n", msg);
  }
  exit(EXIT_SKIPPED);
}

static test_case_t* find_case(const char* name) {
  for (test_case_t* tc = cases_head; tc; tc = tc->next)
    if (strcmp(tc->name, name) == 0) return tc;
  return NULL;
}

static void on_sigchld(int sig) { (void)sig; }

/* In the child: become a process group of its own (so that the runner can kill whatever the
 * case started), die with the runner, and run the case. Never returns. */
__attribute__((noreturn)) static void run_in_child(test_case_t* tc, pid_t runner_pid,
                                                   int reason_fd) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_UNBLOCK, &chld, NULL);
  signal(SIGCHLD, SIG_DFL);
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != runner_pid) _exit(1); /* the runner died before prctl took effect */
  skip_reason_fd = reason_fd;
  tc->fn();
  fflush(stdout);
  exit(0);
}

/* Waits for pid up to timeout_sec. Returns 1 and the wait status when it ended, 0 when it was
 * killed on expiry. Leftover members of its process group are killed in both cases. */
static int wait_with_timeout(pid_t pid, double timeout_sec, int* wstatus) {
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  double deadline = test_now_sec() + timeout_sec;
  int ended = 0;
  for (;;) {
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    /* WNOWAIT: the child stays a zombie, so its pid (= its group id) cannot be reused before
     * the group is killed below. */
    if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) {
      ended = 1;
      break;
    }
    double left_sec = deadline - test_now_sec();
    if (left_sec <= 0) break;
    struct timespec ts = {(time_t)left_sec, (long)((left_sec - (double)(time_t)left_sec) * 1e9)};
    sigtimedwait(&chld, NULL, &ts);
  }
  kill(-pid, SIGKILL);
  if (!ended) kill(pid, SIGKILL);
  while (waitpid(pid, wstatus, 0) < 0 && errno == EINTR) {
  }
  return ended;
}

typedef enum { RESULT_PASS, RESULT_FAIL, RESULT_SKIP } result_t;

static result_t run_case_forked(test_case_t* tc) {
  int mult = test_timeout_multiplier();
  int timeout_sec = tc->timeout_sec * mult;
  /* CLOEXEC: programs the case executes must not hold the write end; O_NONBLOCK: a
   * descendant that escaped the group kill cannot block the runner's read. */
  int reason_pipe[2];
  if (pipe2(reason_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    perror("pipe");
    return RESULT_FAIL;
  }
  fflush(stdout);
  fflush(stderr);
  double start_sec = test_now_sec();
  pid_t runner_pid = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    close(reason_pipe[0]);
    close(reason_pipe[1]);
    return RESULT_FAIL;
  }
  if (pid == 0) {
    close(reason_pipe[0]);
    run_in_child(tc, runner_pid, reason_pipe[1]);
  }
  setpgid(pid, pid); /* also here, so the group exists before any kill (no race) */
  close(reason_pipe[1]);
  int wstatus = 0;
  int ended = wait_with_timeout(pid, timeout_sec, &wstatus);
  double elapsed_sec = test_now_sec() - start_sec;

  char reason[SKIP_REASON_MAX + 1] = "";
  ssize_t got = read(reason_pipe[0], reason, SKIP_REASON_MAX);
  if (got > 0) reason[got] = '\0';
  close(reason_pipe[0]);

  if (!ended) {
    printf("FAIL %s: timed out after %d s\n", tc->name, timeout_sec);
    return RESULT_FAIL;
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) {
    printf("ok   %s (%.2f s)\n", tc->name, elapsed_sec);
    return RESULT_PASS;
  }
  if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == EXIT_SKIPPED) {
    printf("SKIP %s: %s\n", tc->name, reason[0] ? reason : "(no reason given)");
    return RESULT_SKIP;
  }
  if (WIFSIGNALED(wstatus))
    printf("FAIL %s (%.2f s): killed by signal %d (%s)\n", tc->name, elapsed_sec, WTERMSIG(wstatus),
           strsignal(WTERMSIG(wstatus)));
  else
    printf("FAIL %s (%.2f s): exit status %d\n", tc->name, elapsed_sec, WEXITSTATUS(wstatus));
  return RESULT_FAIL;
}

static void usage(const char* prog) {
  fprintf(stderr,
          "usage: %s [--list] [--no-fork] [NAME...]\n"
          "  no NAME: run every case; each case runs in its own process with a time limit\n"
          "  --list: print the case names, their time limits (s) and labels\n"
          "  --no-fork: run the named cases in this process, without a time limit (debugging)\n"
          "  CHORUS_TEST_TIMEOUT_MULTIPLIER=N scales every time limit (build default %d)\n",
          prog, TEST_TIMEOUT_MULTIPLIER);
}

/* The library's own operation timeout should fire before the case's, so that a hang ends as a
 * clear CHORUS_ERR_TIMEOUT rather than a kill; the caller's setting wins. */
static void set_library_timeout_default(void) {
  char value[32];
  snprintf(value, sizeof(value), "%d", 30 * test_timeout_multiplier());
  setenv("CHORUS_TIMEOUT_SEC", value, 0);
}

int main(int argc, char** argv) {
  int list = 0, no_fork = 0, nnames = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--list") == 0)
      list = 1;
    else if (strcmp(argv[i], "--no-fork") == 0)
      no_fork = 1;
    else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(argv[0]);
      return 0;
    } else if (argv[i][0] == '-') {
      usage(argv[0]);
      return 2;
    } else if (!find_case(argv[i])) {
      fprintf(stderr, "%s: no case named '%s' (see --list)\n", argv[0], argv[i]);
      return 2;
    } else {
      nnames++;
    }
  }
  if (list) {
    for (test_case_t* tc = cases_head; tc; tc = tc->next)
      printf("%s %d %s\n", tc->name, tc->timeout_sec, tc->labels);
    return 0;
  }
  set_library_timeout_default();
  if (no_fork) {
    for (int i = 1; i < argc; i++)
      if (argv[i][0] != '-') find_case(argv[i])->fn();
    return 0;
  }

  /* SIGCHLD stays blocked in the runner: wait_with_timeout collects it with sigtimedwait. */
  signal(SIGCHLD, on_sigchld);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, NULL);

  int passed = 0, failed = 0, skipped = 0;
  for (test_case_t* tc = cases_head; tc; tc = tc->next) {
    if (nnames > 0) {
      int wanted = 0;
      for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], tc->name) == 0) wanted = 1;
      if (!wanted) continue;
    }
    switch (run_case_forked(tc)) {
      case RESULT_PASS: passed++; break;
      case RESULT_FAIL: failed++; break;
      case RESULT_SKIP: skipped++; break;
    }
    fflush(stdout);
  }
  printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (failed > 0) return 1;
  if (skipped > 0 && passed == 0) return EXIT_SKIPPED;
  return 0;
}
