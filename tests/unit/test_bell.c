/*
 * test_bell.c - the doorbell (transport/shm.h) in both sleeps: a futex sleeper and an epoll
 * sleeper are both woken by a ring, within a bound far below their timeout; a ring that lands
 * between arming and sleeping is never lost (many rounds, the ringer racing the sleeper).
 */
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "test.h"
#include "transport/shm.h"

typedef struct {
  chorus_shm_bell_t bell;
  int efd, epfd;
  int rounds;
  int work; /* atomic: what the ringer "publishes" before ringing */
} bell_case_t;

static void* ringer(void* p) {
  bell_case_t* c = p;
  for (int i = 1; i <= c->rounds; i++) {
    while (__atomic_load_n(&c->work, __ATOMIC_SEQ_CST) != i - 1) {
    }
    if (i % 7 == 0) usleep(200); /* now and then after the sleeper went to sleep */
    __atomic_store_n(&c->work, i, __ATOMIC_SEQ_CST);
    chorus__shm_bell_ring(&c->bell, c->efd);
  }
  return NULL;
}

/* The sleeper's side of one round: arm, look, sleep (futex or epoll), until the work is there. */
static double wait_round(bell_case_t* c, int want, int use_epoll) {
  double t0 = test_now_sec();
  while (__atomic_load_n(&c->work, __ATOMIC_SEQ_CST) < want) {
    uint32_t seen = chorus__shm_bell_arm(&c->bell);
    if (__atomic_load_n(&c->work, __ATOMIC_SEQ_CST) >= want) {
      chorus__shm_bell_disarm(&c->bell);
      break;
    }
    if (use_epoll) {
      if (chorus__shm_bell_arm_epoll(&c->bell, seen)) {
        struct epoll_event ev;
        if (epoll_wait(c->epfd, &ev, 1, 5000) == 1) {
          uint64_t v;
          ASSERT_EQ(read(c->efd, &v, sizeof(v)), (ssize_t)sizeof(v));
        }
      }
    } else {
      chorus__shm_bell_wait(&c->bell, seen, 5000);
    }
    chorus__shm_bell_disarm(&c->bell);
  }
  return test_now_sec() - t0;
}

static void run_case(int use_epoll) {
  bell_case_t c = {.rounds = 2000};
  c.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  c.epfd = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_TRUE(c.efd >= 0 && c.epfd >= 0);
  struct epoll_event ev = {.events = EPOLLIN};
  ASSERT_EQ(epoll_ctl(c.epfd, EPOLL_CTL_ADD, c.efd, &ev), 0);
  pthread_t th;
  ASSERT_EQ(pthread_create(&th, NULL, ringer, &c), 0);
  double worst = 0;
  for (int i = 1; i <= c.rounds; i++) {
    double took = wait_round(&c, i, use_epoll);
    if (took > worst) worst = took;
  }
  ASSERT_EQ(pthread_join(th, NULL), 0);
  close(c.efd);
  close(c.epfd);
  printf("  %s sleeper: %d rounds, slowest wake %.1f ms\n", use_epoll ? "epoll" : "futex", c.rounds, worst * 1e3);
  /* A lost wake-up costs the whole 5 s timeout; a woken sleeper takes far less even on a
   * loaded 2-core machine. */
  ASSERT_TRUE(worst < 2.0);
}

TEST(futex_sleeper_is_woken) { run_case(0); }
TEST(epoll_sleeper_is_woken_through_its_eventfd) { run_case(1); }

/* A ring without an eventfd copy still wakes an epoll sleeper's futex path harmlessly, and a
 * bell nobody sleeps on is not touched. */
TEST(ring_of_an_awake_bell_writes_nothing) {
  chorus_shm_bell_t bell = {0};
  chorus__shm_bell_ring(&bell, -1);
  ASSERT_EQ(bell.seq, 0u);
  uint32_t seen = chorus__shm_bell_arm(&bell);
  chorus__shm_bell_ring(&bell, -1);
  ASSERT_EQ(bell.seq, seen + 1);
  ASSERT_EQ(chorus__shm_bell_arm_epoll(&bell, seen), 0); /* rung since arming: do not sleep */
  chorus__shm_bell_disarm(&bell);
}
