/*
 * sigrecord.c - a rank program for test_signals.sh: records every SIGINT/SIGTERM/SIGHUP it
 * receives together with the PID of its sender, so the test can tell a signal forwarded by
 * chorus-run from one delivered directly (e.g. by a terminal to the whole process group).
 * Usage: sigrecord DIR  - writes DIR/rank.R.pid, then appends "SIGNO SENDER_PID" lines to
 * DIR/signals.R; exits 0 one second after the first signal, or 1 after 20 s without any.
 */
#ifndef _GNU_SOURCE /* also set by CMake for the whole project */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define QUIET_AFTER_FIRST_SEC 1
#define GIVE_UP_SEC 20

static int write_pid_file(const char* dir, const char* rank) {
  char tmp[4096], path[4096];
  snprintf(tmp, sizeof tmp, "%s/rank.%s.pid.tmp", dir, rank);
  snprintf(path, sizeof path, "%s/rank.%s.pid", dir, rank);
  FILE* f = fopen(tmp, "w");
  if (!f) return -1;
  fprintf(f, "%d\n", (int)getpid());
  if (fclose(f) != 0) return -1;
  return rename(tmp, path); /* atomic: the test never reads a half-written file */
}

int main(int argc, char** argv) {
  const char* rank = getenv("CHORUS_RANK");
  if (argc != 2 || !rank) {
    fprintf(stderr, "usage: sigrecord DIR (run under chorus-run)\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL); /* received by sigtimedwait only, with the sender */
  if (write_pid_file(argv[1], rank) != 0) {
    perror("sigrecord: pid file");
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/signals.%s", argv[1], rank);
  int nsignals = 0;
  struct timespec wait = {GIVE_UP_SEC, 0};
  for (;;) {
    siginfo_t si;
    int sig = sigtimedwait(&set, &si, &wait);
    if (sig < 0 && errno == EINTR) continue;
    if (sig < 0) return nsignals > 0 ? 0 : 1; /* EAGAIN: the quiet period is over */
    FILE* f = fopen(path, "a");
    if (!f) return 2;
    fprintf(f, "%d %d\n", sig, (int)si.si_pid);
    fclose(f);
    nsignals++;
    wait.tv_sec = QUIET_AFTER_FIRST_SEC; /* catch a duplicate, if any */
  }
}
