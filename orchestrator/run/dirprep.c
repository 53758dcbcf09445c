/*
 * dirprep: task directories made ahead of launch on a thread of their own
 * (dirprep.h).
 */
#include "dirprep.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A task's state, which both threads move forward with compare-and-swap:
 * whoever takes it out of PENDING owns the making. */
enum { PENDING, MAKING, READY, UNUSABLE, CLAIMED };

struct dirprep {
  const char *run_path;
  size_t n;
  _Atomic unsigned char *state; /* per task */
  /* Guarded by mu: the tasks pushed and not yet taken, in push order. */
  pthread_mutex_t mu;
  pthread_cond_t more;
  size_t *queue, head, tail;
  const char **names; /* per task, set by push */
  int stop, idle;
  int started; /* thread runs */
  pthread_t thread;
};

/* Makes dir, or, for <run>/<task>, accepts one that exists. */
static int make_dir(const char *dir, int may_exist) {
  return mkdir(dir, 0755) == 0 || (may_exist && errno == EEXIST) ? 0 : -1;
}

/* Task's directories and empty log, as launch would make them. 0, or -1
 * when any is refused or attempt-1/ already existed (then launch makes
 * what is missing and reports a failure itself). */
static int make_task(const dirprep *d, const char *name) {
  char path[4096];
  int n = snprintf(path, sizeof path, "%s/%s", d->run_path, name);
  if (n < 0 || (size_t)n + sizeof "/attempt-1/log" > sizeof path)
    return -1;
  if (make_dir(path, 1) != 0)
    return -1;
  snprintf(path + n, sizeof path - (size_t)n, "/out");
  if (make_dir(path, 1) != 0)
    return -1;
  snprintf(path + n, sizeof path - (size_t)n, "/attempt-1");
  if (make_dir(path, 0) != 0)
    return -1;
  snprintf(path + n, sizeof path - (size_t)n, "/attempt-1/log");
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return -1;
  close(fd);
  return 0;
}

static void *prepare(void *arg) {
  dirprep *d = arg;
  pthread_mutex_lock(&d->mu);
  for (;;) {
    while (!d->stop && d->head == d->tail) {
      d->idle = 1;
      pthread_cond_wait(&d->more, &d->mu);
      d->idle = 0;
    }
    if (d->stop)
      break;
    size_t task = d->queue[d->head++];
    const char *name = d->names[task];
    pthread_mutex_unlock(&d->mu);
    unsigned char expect = PENDING;
    if (atomic_compare_exchange_strong(&d->state[task], &expect, MAKING)) {
      unsigned char done = make_task(d, name) == 0 ? READY : UNUSABLE;
      expect = MAKING;
      atomic_compare_exchange_strong(&d->state[task], &expect, done);
    }
    pthread_mutex_lock(&d->mu);
  }
  pthread_mutex_unlock(&d->mu);
  return NULL;
}

dirprep *dirprep_create(const char *run_path, size_t n_tasks) {
  dirprep *d = calloc(1, sizeof *d);
  if (!d)
    return NULL;
  d->run_path = run_path;
  d->n = n_tasks;
  d->state = calloc(n_tasks ? n_tasks : 1, sizeof *d->state);
  d->queue = calloc(n_tasks ? n_tasks : 1, sizeof *d->queue);
  d->names = calloc(n_tasks ? n_tasks : 1, sizeof *d->names);
  if (!d->state || !d->queue || !d->names) {
    free(d->state);
    free(d->queue);
    free(d->names);
    free(d);
    return NULL;
  }
  for (size_t i = 0; i < n_tasks; i++)
    atomic_init(&d->state[i], PENDING);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->more, NULL);
  /* Signals are the loop's (libuv's handlers, the stop signals that
   * main.c blocks at times): the thread starts with all of them blocked. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&d->thread, NULL, prepare, d);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    dirprep_destroy(d);
    return NULL;
  }
  d->started = 1;
  return d;
}

void dirprep_push(dirprep *d, size_t task, const char *name) {
  if (!d || task >= d->n || d->tail == d->n)
    return;
  pthread_mutex_lock(&d->mu);
  d->names[task] = name;
  d->queue[d->tail++] = task;
  /* A wake-up costs a system call: only when the thread sleeps. */
  if (d->idle)
    pthread_cond_signal(&d->more);
  pthread_mutex_unlock(&d->mu);
}

int dirprep_claim(dirprep *d, size_t task) {
  if (!d || task >= d->n)
    return 0;
  /* MAKING: the thread is at it; the caller makes them too rather than
   * wait (both accept what the other made, but attempt-1/ is then not
   * known to be new). */
  unsigned char was = atomic_exchange(&d->state[task], CLAIMED);
  return was == READY;
}

int dirprep_ready(dirprep *d, size_t task) {
  return d && task < d->n && atomic_load(&d->state[task]) == READY;
}

void dirprep_destroy(dirprep *d) {
  if (!d)
    return;
  if (d->started) {
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_signal(&d->more);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
  }
  pthread_cond_destroy(&d->more);
  pthread_mutex_destroy(&d->mu);
  free(d->state);
  free(d->queue);
  free(d->names);
  free(d);
}
