/*
 * The data loader; see dataloader.h.
 *
 * Every batch is a pure function of a generator state (struct gen): the
 * batches served so far, the RNG state and, for LOADER_SEQUENTIAL, the
 * epoch's window order, which is derived from (seed, epoch) alone. The
 * prefetch thread runs its own copy of that state ahead of the consumer;
 * each prepared batch carries the position after it, which becomes the
 * consumer's position when it is served. So the batches, and the saved
 * positions, are the same with or without the thread.
 */
#include "dataloader.h"

#include "lib/fileio.h"
#include "rng.h"

#include "tokfile.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct lfile {
  tokfile *tf;
  const char *path;     /* borrowed from the config */
  const void *tokens;   /* into the map */
  uint32_t token_bytes; /* 2 or 4 */
  uint64_t n_tokens;
  uint64_t n_starts;  /* LOADER_RANDOM: n_tokens - T, or 0 */
  uint64_t n_windows; /* LOADER_SEQUENTIAL: (n_tokens - 1) / T, or 0 */
} lfile;

/* What one batch is computed from. */
typedef struct gen {
  loader_pos pos;
  uint64_t *perm;      /* LOADER_SEQUENTIAL + shuffle: the epoch's order */
  uint64_t perm_epoch; /* which epoch perm holds; UINT64_MAX: none */
} gen;

typedef struct slot {
  uint32_t *inputs, *targets; /* B*T each */
  loader_pos after;           /* the position once this batch is served */
} slot;

struct loader {
  int B, T;
  loader_order order;
  int shuffle;
  uint64_t seed;
  int test_delay_ms;
  uint32_t vocab_size;
  uint64_t total_tokens;

  lfile *files;
  size_t nfiles;
  uint64_t *cum_starts;  /* nfiles + 1 prefix sums of n_starts */
  uint64_t *cum_windows; /* nfiles + 1 prefix sums of n_windows */
  uint64_t total_starts, total_windows;

  loader_pos cur; /* the consumer's position: the next batch to serve */

  /* Without prefetch: the consumer's generator. With it: the thread's. */
  gen g;

  /* Prefetch ring: count slots ready from head on. */
  int prefetch;
  slot *ring;
  size_t head, count;
  int stop, running;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t not_empty, not_full;
};

/* ---- Where windows are ---- */

/* The file holding index k of a prefix-sum table (cum[0] = 0, strictly
 * below cum[nfiles] = total): the i with cum[i] <= k < cum[i+1]. */
static size_t find_file(const uint64_t *cum, size_t nfiles, uint64_t k) {
  size_t lo = 0, hi = nfiles; /* cum[lo] <= k < cum[hi] */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (cum[mid] <= k)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* The epoch's window order, shuffled by (seed, epoch) with Fisher-Yates
 * from its own RNG, so that it depends on nothing else. */
static void make_perm(const loader *l, gen *g, uint64_t epoch) {
  uint64_t n = l->total_windows;
  for (uint64_t i = 0; i < n; i++)
    g->perm[i] = i;
  uint64_t s[4];
  rng_seed(s, l->seed ^ (0xD1B54A32D192ED03ull * (epoch + 1)));
  for (uint64_t i = n - 1; i > 0; i--) {
    uint64_t j = rng_below(s, i + 1);
    uint64_t t = g->perm[i];
    g->perm[i] = g->perm[j];
    g->perm[j] = t;
  }
  g->perm_epoch = epoch;
}

/* Copies the window of T+1 tokens at start of file f into row b. */
static void copy_window(const loader *l, const lfile *f, uint64_t start, int b,
                        uint32_t *inputs, uint32_t *targets) {
  /* window (T+1) -> inputs[b] (T), targets[b] (T) */
  uint32_t *in = inputs + (size_t)b * (size_t)l->T;
  uint32_t *tg = targets + (size_t)b * (size_t)l->T;
  uint32_t prev = tokfile_get(f->tokens, f->token_bytes, start);
  for (int t = 0; t < l->T; t++) {
    uint32_t next = tokfile_get(f->tokens, f->token_bytes, start + 1 + t);
    in[t] = prev;
    tg[t] = next;
    prev = next;
  }
}

/* Computes the batch at g->pos and advances g->pos past it. */
static void gen_batch(const loader *l, gen *g, uint32_t *inputs,
                      uint32_t *targets) {
  if (l->test_delay_ms) {
    struct timespec d = {l->test_delay_ms / 1000,
                         (long)(l->test_delay_ms % 1000) * 1000000L};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
  }
  if (l->order == LOADER_RANDOM) {
    for (int b = 0; b < l->B; b++) {
      uint64_t k = rng_below(g->pos.rng, l->total_starts);
      size_t i = find_file(l->cum_starts, l->nfiles, k);
      copy_window(l, &l->files[i], k - l->cum_starts[i], b, inputs, targets);
    }
    g->pos.batches++;
    return;
  }
  uint64_t W = l->total_windows;
  uint64_t first = g->pos.batches * (uint64_t)l->B; /* windows served */
  for (int b = 0; b < l->B; b++) {
    uint64_t w = first + (uint64_t)b;
    uint64_t epoch = w / W, k = w % W;
    if (l->shuffle) {
      if (g->perm_epoch != epoch)
        make_perm(l, g, epoch);
      k = g->perm[k];
    }
    size_t i = find_file(l->cum_windows, l->nfiles, k);
    uint64_t start = (k - l->cum_windows[i]) * (uint64_t)l->T;
    copy_window(l, &l->files[i], start, b, inputs, targets);
  }
  g->pos.batches++;
  g->pos.epoch = g->pos.batches * (uint64_t)l->B / W;
}

/* ---- Prefetch thread ---- */

static void *prefetch_main(void *arg) {
  loader *l = arg;
  size_t cap = (size_t)l->prefetch;
  pthread_mutex_lock(&l->mu);
  for (;;) {
    while (!l->stop && l->count == cap)
      pthread_cond_wait(&l->not_full, &l->mu);
    if (l->stop)
      break;
    /* The slot after the ready ones: the consumer does not look at it
     * until count covers it, so it is filled without the lock. */
    slot *s = &l->ring[(l->head + l->count) % cap];
    pthread_mutex_unlock(&l->mu);
    gen_batch(l, &l->g, s->inputs, s->targets);
    s->after = l->g.pos;
    pthread_mutex_lock(&l->mu);
    l->count++;
    pthread_cond_signal(&l->not_empty);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static int prefetch_start(loader *l) {
  l->stop = 0;
  l->head = l->count = 0;
  int rc = pthread_create(&l->thread, NULL, prefetch_main, l);
  if (rc != 0)
    return -rc;
  l->running = 1;
  return 0;
}

static void prefetch_stop(loader *l) {
  if (!l->running)
    return;
  pthread_mutex_lock(&l->mu);
  l->stop = 1;
  pthread_cond_signal(&l->not_full);
  pthread_mutex_unlock(&l->mu);
  pthread_join(l->thread, NULL);
  l->running = 0;
  l->head = l->count = 0;
}

/* ---- Public ---- */

static void free_loader(loader *l) {
  if (l->ring) {
    for (int i = 0; i < l->prefetch; i++) {
      free(l->ring[i].inputs);
      free(l->ring[i].targets);
    }
    free(l->ring);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->not_empty);
    pthread_cond_destroy(&l->not_full);
  }
  for (size_t i = 0; i < l->nfiles; i++)
    tokfile_close(l->files[i].tf);
  free(l->files);
  free(l->cum_starts);
  free(l->cum_windows);
  free(l->g.perm);
  free(l);
}

/* The position a fresh loader starts at. */
static void initial_pos(const loader *l, loader_pos *pos) {
  memset(pos, 0, sizeof(*pos));
  rng_seed(pos->rng, l->seed);
}

/* cfg's values that need no file: 0, or -1 with err. */
static int check_config(const loader_config *cfg, char *err, size_t errlen) {
  if (!cfg->paths || cfg->npaths == 0) {
    fileio_seterr(err, errlen, "loader: no token files given");
    return -1;
  }
  if (cfg->B <= 0 || cfg->T <= 0) {
    fileio_seterr(err, errlen,
                  "loader: B = %d and T = %d must both be positive", cfg->B,
                  cfg->T);
    return -1;
  }
  if (cfg->prefetch < 0) {
    fileio_seterr(err, errlen, "loader: prefetch = %d must not be negative",
                  cfg->prefetch);
    return -1;
  }
  if (cfg->order != LOADER_RANDOM && cfg->order != LOADER_SEQUENTIAL) {
    fileio_seterr(err, errlen, "loader: unknown order %d", (int)cfg->order);
    return -1;
  }
  return 0;
}

/* Opens and verifies cfg's token files into l->files (l->nfiles counts
 * the open ones, for free_loader), with the running sums of window
 * starts and whole windows that map a global index to a file. Refuses
 * files of different vocabularies, and a set with no window of T+1
 * tokens: windows never cross files. 0, or -1 with err. */
static int open_files(loader *l, const loader_config *cfg, char *err,
                      size_t errlen) {
  uint64_t T = (uint64_t)cfg->T;
  size_t largest = 0;
  for (size_t i = 0; i < cfg->npaths; i++) {
    lfile *f = &l->files[i];
    f->path = cfg->paths[i];
    if (tokfile_open(f->path, &f->tf, err, errlen) != 0)
      return -1;
    l->nfiles = i + 1;
    if (tokfile_verify(f->tf, err, errlen) != 0)
      return -1;
    const tokfile_info *h = tokfile_header(f->tf);
    if (i == 0) {
      l->vocab_size = h->vocab_size;
    } else if (h->vocab_size != l->vocab_size) {
      fileio_seterr(err, errlen,
                    "%s: vocab_size %" PRIu32 ", but %s has vocab_size %" PRIu32
                    " (all token files of a loader must share one vocabulary)",
                    f->path, h->vocab_size, cfg->paths[0], l->vocab_size);
      return -1;
    }
    f->tokens = tokfile_tokens(f->tf);
    f->token_bytes = h->token_bytes;
    f->n_tokens = h->n_tokens;
    f->n_starts = f->n_tokens > T ? f->n_tokens - T : 0;
    f->n_windows = f->n_tokens > 0 ? (f->n_tokens - 1) / T : 0;
    l->cum_starts[i + 1] = l->cum_starts[i] + f->n_starts;
    l->cum_windows[i + 1] = l->cum_windows[i] + f->n_windows;
    l->total_tokens += f->n_tokens;
    if (f->n_tokens > l->files[largest].n_tokens)
      largest = i;
  }
  l->total_starts = l->cum_starts[l->nfiles];
  l->total_windows = l->cum_windows[l->nfiles];
  if (l->total_starts == 0) {
    if (l->nfiles == 1)
      fileio_seterr(err, errlen,
                    "%s: %" PRIu64 " tokens, fewer than one window of T+1 = %d",
                    cfg->paths[0], l->files[0].n_tokens, cfg->T + 1);
    else
      fileio_seterr(err, errlen,
                    "no token file holds one window of T+1 = %d tokens (the "
                    "largest, %s, has %" PRIu64 "; windows never cross files)",
                    cfg->T + 1, cfg->paths[largest],
                    l->files[largest].n_tokens);
    return -1;
  }
  return 0;
}

/* With prefetch > 0: the ring of prepared batches and the thread that
 * fills it. 0, or -1 with err. */
static int start_prefetch(loader *l, char *err, size_t errlen) {
  l->ring = calloc((size_t)l->prefetch, sizeof(*l->ring));
  if (!l->ring)
    goto oom;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->not_empty, NULL);
  pthread_cond_init(&l->not_full, NULL);
  size_t n = (size_t)l->B * (size_t)l->T;
  for (int i = 0; i < l->prefetch; i++) {
    l->ring[i].inputs = malloc(n * sizeof(uint32_t));
    l->ring[i].targets = malloc(n * sizeof(uint32_t));
    if (!l->ring[i].inputs || !l->ring[i].targets)
      goto oom;
  }
  int rc = prefetch_start(l);
  if (rc != 0) {
    fileio_seterr(err, errlen, "loader: cannot start the prefetch thread: %s",
                  strerror(-rc));
    return -1;
  }
  return 0;
oom:
  fileio_seterr(err, errlen, "loader: out of memory");
  return -1;
}

int loader_create(const loader_config *cfg, loader **out, char *err,
                  size_t errlen) {
  *out = NULL;
  if (check_config(cfg, err, errlen) != 0)
    return -1;
  loader *l = calloc(1, sizeof(*l));
  if (!l)
    goto oom;
  l->B = cfg->B;
  l->T = cfg->T;
  l->order = cfg->order;
  l->shuffle = cfg->shuffle;
  l->seed = cfg->seed;
  l->prefetch = cfg->prefetch;
  l->test_delay_ms = cfg->test_delay_ms > 0 ? cfg->test_delay_ms : 0;
  l->g.perm_epoch = UINT64_MAX;
  l->files = calloc(cfg->npaths, sizeof(*l->files));
  l->cum_starts = calloc(cfg->npaths + 1, sizeof(uint64_t));
  l->cum_windows = calloc(cfg->npaths + 1, sizeof(uint64_t));
  if (!l->files || !l->cum_starts || !l->cum_windows)
    goto oom;
  if (open_files(l, cfg, err, errlen) != 0)
    goto fail;
  if (l->order == LOADER_SEQUENTIAL && l->shuffle) {
    if (l->total_windows > SIZE_MAX / sizeof(uint64_t))
      goto oom;
    l->g.perm = malloc((size_t)l->total_windows * sizeof(uint64_t));
    if (!l->g.perm)
      goto oom;
  }
  initial_pos(l, &l->cur);
  l->g.pos = l->cur;
  if (l->prefetch > 0 && start_prefetch(l, err, errlen) != 0)
    goto fail;
  *out = l;
  return 0;

oom:
  fileio_seterr(err, errlen, "loader: out of memory");
fail:
  if (l)
    free_loader(l);
  return -1;
}

void loader_destroy(loader *l) {
  if (!l)
    return;
  prefetch_stop(l);
  free_loader(l);
}

int loader_next(loader *l, uint32_t *inputs, uint32_t *targets) {
  /* No thread (none asked for, or a restart failed): g is at cur. */
  if (!l->running) {
    gen_batch(l, &l->g, inputs, targets);
    l->cur = l->g.pos;
    return 0;
  }
  size_t n = (size_t)l->B * (size_t)l->T;
  pthread_mutex_lock(&l->mu);
  while (l->count == 0)
    pthread_cond_wait(&l->not_empty, &l->mu);
  slot *s = &l->ring[l->head];
  pthread_mutex_unlock(&l->mu);
  /* The producer leaves a ready slot alone until it is given back. */
  memcpy(inputs, s->inputs, n * sizeof(uint32_t));
  memcpy(targets, s->targets, n * sizeof(uint32_t));
  l->cur = s->after;
  pthread_mutex_lock(&l->mu);
  l->head = (l->head + 1) % (size_t)l->prefetch;
  l->count--;
  pthread_cond_signal(&l->not_full);
  pthread_mutex_unlock(&l->mu);
  return 0;
}

void loader_get_pos(const loader *l, loader_pos *pos) { *pos = l->cur; }

int loader_set_pos(loader *l, const loader_pos *pos) {
  loader_pos p = *pos;
  if (l->order == LOADER_SEQUENTIAL) {
    /* The epoch follows from the batches served; a position that says
     * otherwise was saved by a loader over other files or another B. */
    if (p.batches > UINT64_MAX / (uint64_t)l->B ||
        p.batches * (uint64_t)l->B / l->total_windows != p.epoch)
      return -1;
  }
  prefetch_stop(l);
  l->cur = p;
  l->g.pos = p;
  if (l->prefetch > 0 && prefetch_start(l) != 0)
    return -1;
  return 0;
}

uint32_t loader_vocab_size(const loader *l) { return l->vocab_size; }

uint64_t loader_tokens(const loader *l) { return l->total_tokens; }

uint64_t loader_batches_per_epoch(const loader *l) {
  return l->total_windows / (uint64_t)l->B;
}

uint64_t loader_windows_per_epoch(const loader *l) { return l->total_windows; }
