/*
 * netguard: the replay cache and the request deadlines of the HTTP API
 * (netguard.h).
 */
#include "netguard.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/util.h"
#include "lib/clock.h"

/* How often the watchdog looks at the connections: a late connection is
 * shut down at most this long after its deadline. */
#define GUARD_TICK_NS 200000000L

/* ---- Replay cache ---- */

typedef struct replay_entry {
  unsigned char mac[32];
  int64_t until; /* unix seconds; at or before now: a free slot */
} replay_entry;

struct guard_replay {
  pthread_mutex_t mu;
  unsigned n;
  replay_entry *e;
};

guard_replay *guard_replay_create(unsigned n) {
  guard_replay *r = xcalloc(1, sizeof *r);
  pthread_mutex_init(&r->mu, NULL);
  r->n = n;
  r->e = xcalloc(n, sizeof *r->e);
  return r;
}

void guard_replay_destroy(guard_replay *r) {
  if (!r)
    return;
  pthread_mutex_destroy(&r->mu);
  free(r->e);
  free(r);
}

int guard_replay_add(guard_replay *r, const unsigned char mac[32],
                     int64_t until, int64_t now) {
  /* A linear scan: the cache holds a few thousand entries and is looked
   * at once per signed POST, which a person or a script sends, so a
   * hash table would buy microseconds at the price of its code. */
  pthread_mutex_lock(&r->mu);
  replay_entry *free_slot = NULL;
  int rc = 0;
  for (unsigned i = 0; i < r->n; i++) {
    replay_entry *e = &r->e[i];
    if (e->until <= now) {
      if (!free_slot)
        free_slot = e;
    } else if (memcmp(e->mac, mac, 32) == 0) {
      rc = 1;
      break;
    }
  }
  if (rc == 0 && !free_slot)
    rc = 2;
  if (rc == 0) {
    memcpy(free_slot->mac, mac, 32);
    free_slot->until = until;
  }
  pthread_mutex_unlock(&r->mu);
  return rc;
}

/* ---- Request deadlines ---- */

struct guard_conn {
  int fd;
  double start;  /* monotonic: when its current request began */
  int answering; /* its request is complete: no deadline */
  int shut;      /* already shut down by the watchdog */
  guard_conn *prev, *next;
};

struct guard_deadlines {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t thread;
  double seconds;
  int stop;          /* under mu */
  guard_conn *conns; /* under mu */
};

static void *watchdog(void *arg) {
  guard_deadlines *d = arg;
  pthread_mutex_lock(&d->mu);
  while (!d->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += GUARD_TICK_NS;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&d->cv, &d->mu, &ts);
    double now = clock_monotonic();
    /* Under mu, so that guard_conn_end (called before libmicrohttpd
     * closes the socket) cannot run meanwhile: fd is still this
     * connection's, not a number the kernel gave to another one. */
    for (guard_conn *c = d->conns; c; c = c->next)
      if (!c->answering && !c->shut && now - c->start > d->seconds) {
        shutdown(c->fd, SHUT_RDWR);
        c->shut = 1;
      }
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

guard_deadlines *guard_deadlines_create(double seconds) {
  guard_deadlines *d = xcalloc(1, sizeof *d);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, NULL);
  d->seconds = seconds;
  if (pthread_create(&d->thread, NULL, watchdog, d) != 0) {
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
    return NULL;
  }
  return d;
}

void guard_deadlines_destroy(guard_deadlines *d) {
  if (!d)
    return;
  pthread_mutex_lock(&d->mu);
  d->stop = 1;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->thread, NULL);
  pthread_mutex_destroy(&d->mu);
  pthread_cond_destroy(&d->cv);
  free(d);
}

guard_conn *guard_conn_begin(guard_deadlines *d, int fd) {
  guard_conn *c = xcalloc(1, sizeof *c);
  c->fd = fd;
  c->start = clock_monotonic();
  pthread_mutex_lock(&d->mu);
  c->next = d->conns;
  if (d->conns)
    d->conns->prev = c;
  d->conns = c;
  pthread_mutex_unlock(&d->mu);
  return c;
}

void guard_conn_answering(guard_deadlines *d, guard_conn *c) {
  pthread_mutex_lock(&d->mu);
  c->answering = 1;
  pthread_mutex_unlock(&d->mu);
}

void guard_conn_idle(guard_deadlines *d, guard_conn *c) {
  pthread_mutex_lock(&d->mu);
  c->answering = 0;
  c->start = clock_monotonic();
  pthread_mutex_unlock(&d->mu);
}

void guard_conn_end(guard_deadlines *d, guard_conn *c) {
  pthread_mutex_lock(&d->mu);
  if (c->prev)
    c->prev->next = c->next;
  else
    d->conns = c->next;
  if (c->next)
    c->next->prev = c->prev;
  pthread_mutex_unlock(&d->mu);
  free(c);
}
