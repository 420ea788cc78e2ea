/*
 * log.h - leveled, per-subsystem logging configured by CHORUS_LOG_LEVEL / CHORUS_LOG_SUBSYS /
 * CHORUS_LOG_FILE. A disabled level costs one relaxed load and a mask test. Lines look like
 * `host:pid:tid [rank] CHORUS WARN tcp message`.
 */
#ifndef CHORUS_LOG_H
#define CHORUS_LOG_H

#include <stdint.h>

enum { CH_LOG_NONE, CH_LOG_ERROR, CH_LOG_WARN, CH_LOG_INFO, CH_LOG_DEBUG, CH_LOG_TRACE };

#define CHORUS_SUBSYS_MAP(XX) \
  XX(INIT, "init")            \
  XX(COLL, "coll")            \
  XX(ALGO, "algo")            \
  XX(TUNE, "tune")            \
  XX(TCP, "tcp")              \
  XX(BOOT, "boot")            \
  XX(STORE, "store")          \
  XX(TOPO, "topo")

enum {
#define CHORUS_XX_(name, str) CH_SUB_BIT_##name,
  CHORUS_SUBSYS_MAP(CHORUS_XX_)
#undef CHORUS_XX_
};
#define CH_SUB(name) (1u << CH_SUB_BIT_##name)

extern int chorus__log_level;
extern uint32_t chorus__log_mask;

void chorus__log_init(void); /* idempotent; reads the environment once per process */
void chorus__log(int level, uint32_t subsys, int rank, const char* file, int line,
                 const char* fmt, ...) __attribute__((format(printf, 6, 7)));

#define CH_LOG_ON(level, sub) \
  (__atomic_load_n(&chorus__log_level, __ATOMIC_RELAXED) >= (level) && (chorus__log_mask & (sub)))

#define CH_WARN(rank, ...) \
  do { if (CH_LOG_ON(CH_LOG_WARN, ~0u)) chorus__log(CH_LOG_WARN, ~0u, rank, __FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CH_INFO(sub, rank, ...) \
  do { if (CH_LOG_ON(CH_LOG_INFO, CH_SUB(sub))) chorus__log(CH_LOG_INFO, CH_SUB(sub), rank, __FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CH_DEBUG(sub, rank, ...) \
  do { if (CH_LOG_ON(CH_LOG_DEBUG, CH_SUB(sub))) chorus__log(CH_LOG_DEBUG, CH_SUB(sub), rank, __FILE__, __LINE__, __VA_ARGS__); } while (0)
#define CH_TRACE(sub, rank, ...) \
  do { if (CH_LOG_ON(CH_LOG_TRACE, CH_SUB(sub))) chorus__log(CH_LOG_TRACE, CH_SUB(sub), rank, __FILE__, __LINE__, __VA_ARGS__); } while (0)

#endif /* CHORUS_LOG_H */
