/* log.c - the log sink: level and subsystem filters parsed once, one write per line. */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/param.h"

int chorus__log_level = CH_LOG_WARN;
uint32_t chorus__log_mask = ~0u;

static FILE* log_out;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static char log_host[64];

static const char* const level_names[] = {"NONE", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
static const char* const subsys_names[] = {
#define CHORUS_XX_(name, str) str,
    CHORUS_SUBSYS_MAP(CHORUS_XX_)
#undef CHORUS_XX_
};
enum { NSUBSYS = sizeof(subsys_names) / sizeof(subsys_names[0]) };

static int parse_level(const char* s) {
  for (int i = 0; i <= CH_LOG_TRACE; i++)
    if (strcasecmp(s, level_names[i]) == 0) return i;
  return -1;
}

/* "all", "tcp,boot" or "^tcp" (everything but tcp). */
static uint32_t parse_mask(const char* s) {
  int exclude = (s[0] == '^');
  if (exclude) s++;
  if (strcasecmp(s, "all") == 0) return exclude ? 0 : ~0u;
  uint32_t mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    for (int i = 0; i < NSUBSYS; i++)
      if (strcasecmp(tok, subsys_names[i]) == 0) mask |= 1u << i;
  return exclude ? ~mask : mask;
}

/* Expands %h (host) and %p (pid) in CHORUS_LOG_FILE. */
static void expand_path(const char* pattern, char* out, size_t outlen) {
  size_t o = 0;
  for (const char* p = pattern; *p && o + 1 < outlen; p++) {
    if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
      int n = (p[1] == 'h') ? snprintf(out + o, outlen - o, "%s", log_host)
                            : snprintf(out + o, outlen - o, "%d", (int)getpid());
      o += (n > 0) ? (size_t)n : 0;
      p++;
    } else {
      out[o++] = *p;
    }
  }
  out[o < outlen ? o : outlen - 1] = '\0';
}

static void log_setup(void) {
  gethostname(log_host, sizeof(log_host) - 1);
  log_out = stderr;
  int level = parse_level(chorus__param_str(CHORUS_PARAM_LOG_LEVEL));
  if (level < 0) {
    fprintf(stderr, "CHORUS WARN CHORUS_LOG_LEVEL=%s is not one of none,error,warn,info,debug,trace; using warn\n",
            chorus__param_str(CHORUS_PARAM_LOG_LEVEL));
    level = CH_LOG_WARN;
  }
  chorus__log_mask = parse_mask(chorus__param_str(CHORUS_PARAM_LOG_SUBSYS));
  const char* file = chorus__param_str(CHORUS_PARAM_LOG_FILE);
  if (file[0]) {
    char path[512];
    expand_path(file, path, sizeof(path));
    FILE* f = fopen(path, "a");
    if (f) {
      setvbuf(f, NULL, _IOLBF, 0);
      log_out = f;
    } else {
      fprintf(stderr, "CHORUS WARN cannot open CHORUS_LOG_FILE %s; logging to stderr\n", path);
    }
  }
  __atomic_store_n(&chorus__log_level, level, __ATOMIC_RELAXED);
}

void chorus__log_init(void) { pthread_once(&log_once, log_setup); }

void chorus__log(int level, uint32_t subsys, int rank, const char* file, int line,
                 const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* sub = "";
  for (int i = 0; i < NSUBSYS; i++)
    if (subsys == (1u << i)) sub = subsys_names[i];
  const char* base = strrchr(file, '/');
  char where[96] = "";
  if (level <= CH_LOG_WARN) snprintf(where, sizeof(where), " (%s:%d)", base ? base + 1 : file, line);
  char rankstr[16] = "";
  if (rank >= 0) snprintf(rankstr, sizeof(rankstr), "[%d] ", rank);
  fprintf(log_out ? log_out : stderr, "%s:%d:%ld %sCHORUS %s %s%s%s%s\n", log_host, (int)getpid(),
          (long)syscall(SYS_gettid), rankstr, level_names[level], sub, sub[0] ? " " : "", msg, where);
}
