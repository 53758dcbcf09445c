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
#include <math.h>
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

/* A source of a mixture: files [lo, hi) of the loader's, its weight as
 * an integer (so that the draw is integer arithmetic on every machine)
 * and its budget in rows (UINT64_MAX: none). */
typedef struct lsource {
  const char *name;
  size_t lo, hi;
  uint64_t w;
  uint64_t max_rows;
} lsource;

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
  const char **paths; /* every source's files in order; owned array */
  lsource src[LOADER_MAX_SOURCES];
  size_t nsrc;
  uint64_t max_batches;  /* UINT64_MAX: no end */
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

/* The source of the next row: drawn among those within their budget in
 * proportion to their weights. One source in: it, with no draw, so that a
 * loader of one source draws what a loader without sources does. */
static size_t pick_source(const loader *l, loader_pos *pos) {
  uint64_t sum = 0;
  size_t in = 0, last = 0;
  for (size_t s = 0; s < l->nsrc; s++)
    if (pos->rows[s] < l->src[s].max_rows) {
      sum += l->src[s].w;
      in++;
      last = s;
    }
  if (in <= 1)
    return last;
  uint64_t r = rng_below(pos->rng, sum);
  for (size_t s = 0;; s++) {
    if (pos->rows[s] >= l->src[s].max_rows)
      continue;
    if (r < l->src[s].w)
      return s;
    r -= l->src[s].w;
  }
}

/* LOADER_RANDOM: B rows, each from a source (pick_source) and a window
 * start uniform over that source's files. */
static void gen_random(const loader *l, gen *g, uint32_t *inputs,
                       uint32_t *targets) {
  for (int b = 0; b < l->B; b++) {
    size_t s = pick_source(l, &g->pos);
    uint64_t lo = l->cum_starts[l->src[s].lo];
    uint64_t k = lo + rng_below(g->pos.rng, l->cum_starts[l->src[s].hi] - lo);
    size_t i = find_file(l->cum_starts, l->nfiles, k);
    copy_window(l, &l->files[i], k - l->cum_starts[i], b, inputs, targets);
    g->pos.rows[s]++;
  }
  g->pos.batches++;
}

/* Computes the batch at g->pos and advances g->pos past it. Past the
 * budgets' end (which loader_next never serves): nothing. */
static void gen_batch(const loader *l, gen *g, uint32_t *inputs,
                      uint32_t *targets) {
  if (l->test_delay_ms) {
    struct timespec d = {l->test_delay_ms / 1000,
                         (long)(l->test_delay_ms % 1000) * 1000000L};
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {
    }
  }
  if (g->pos.batches >= l->max_batches)
    return;
  if (l->order == LOADER_RANDOM) {
    gen_random(l, g, inputs, targets);
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
  free(l->paths);
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

/* A mixture's values: 0, or -1 with err naming the source. */
static int check_sources(const loader_config *cfg, char *err, size_t errlen) {
  if (cfg->nsources > LOADER_MAX_SOURCES) {
    fileio_seterr(err, errlen, "loader: %zu sources, at most %d", cfg->nsources,
                  LOADER_MAX_SOURCES);
    return -1;
  }
  if (cfg->order != LOADER_RANDOM) {
    fileio_seterr(err, errlen, "loader: a mixture is drawn in random order");
    return -1;
  }
  for (size_t s = 0; s < cfg->nsources; s++) {
    const loader_source *x = &cfg->sources[s];
    const char *what = NULL;
    if (!x->paths || x->npaths == 0)
      what = "has no token files";
    else if (!(x->weight > 0) || isinf(x->weight))
      what = "needs a weight above 0";
    else if (!(x->epochs >= 0) || isinf(x->epochs))
      what = "needs epochs of 0 (none) or more";
    else if (x->epochs > 0 && x->max_tokens > 0)
      what = "has both a token and an epoch budget";
    if (what) {
      fileio_seterr(err, errlen, "loader: source %s %s",
                    x->name ? x->name : "?", what);
      return -1;
    }
  }
  return 0;
}

/* cfg's values that need no file: 0, or -1 with err. */
static int check_config(const loader_config *cfg, char *err, size_t errlen) {
  if (cfg->nsources > 0 ? check_sources(cfg, err, errlen) != 0
                        : !cfg->paths || cfg->npaths == 0) {
    if (cfg->nsources == 0)
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
static int open_files(loader *l, const loader_config *cfg, size_t npaths,
                      char *err, size_t errlen) {
  uint64_t T = (uint64_t)cfg->T;
  size_t largest = 0;
  for (size_t i = 0; i < npaths; i++) {
    lfile *f = &l->files[i];
    f->path = l->paths[i];
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
                    f->path, h->vocab_size, l->paths[0], l->vocab_size);
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
                    l->paths[0], l->files[0].n_tokens, cfg->T + 1);
    else
      fileio_seterr(err, errlen,
                    "no token file holds one window of T+1 = %d tokens (the "
                    "largest, %s, has %" PRIu64 "; windows never cross files)",
                    cfg->T + 1, l->paths[largest], l->files[largest].n_tokens);
    return -1;
  }
  return 0;
}

/* Every source's files into l->paths, in order, with each source's range
 * of them (no sources: cfg->paths as one source). The count, or 0 when
 * out of memory. */
static size_t flatten_paths(loader *l, const loader_config *cfg) {
  size_t n = 0;
  l->nsrc = cfg->nsources ? cfg->nsources : 1;
  for (size_t s = 0; s < cfg->nsources; s++)
    n += cfg->sources[s].npaths;
  if (!cfg->nsources)
    n = cfg->npaths;
  l->paths = calloc(n, sizeof(char *));
  if (!l->paths)
    return 0;
  if (!cfg->nsources) {
    memcpy(l->paths, cfg->paths, n * sizeof(char *));
    l->src[0] = (lsource){"data", 0, n, 1, UINT64_MAX};
    return n;
  }
  size_t at = 0;
  for (size_t s = 0; s < cfg->nsources; s++) {
    const loader_source *x = &cfg->sources[s];
    memcpy(l->paths + at, x->paths, x->npaths * sizeof(char *));
    l->src[s] =
        (lsource){x->name ? x->name : "?", at, at + x->npaths, 0, UINT64_MAX};
    at += x->npaths;
  }
  return n;
}

/* Once the files are open: each source's integer weight (2^32 for the
 * heaviest, at least 1), its budget in rows, and the batches all budgets
 * hold. A source without a window of T+1 tokens is refused. 0, or -1. */
static int setup_sources(loader *l, const loader_config *cfg, char *err,
                         size_t errlen) {
  l->max_batches = UINT64_MAX;
  if (!cfg->nsources)
    return 0;
  double wmax = 0;
  uint64_t T = (uint64_t)l->T, rows = 0;
  int all_budgeted = 1;
  for (size_t s = 0; s < l->nsrc; s++)
    wmax = fmax(wmax, cfg->sources[s].weight);
  for (size_t s = 0; s < l->nsrc; s++) {
    const loader_source *x = &cfg->sources[s];
    lsource *d = &l->src[s];
    if (l->cum_starts[d->hi] == l->cum_starts[d->lo]) {
      fileio_seterr(err, errlen,
                    "source %s: no token file holds one window of T+1 = %d "
                    "tokens (windows never cross files)",
                    d->name, l->T + 1);
      return -1;
    }
    d->w = (uint64_t)llround(x->weight / wmax * 4294967296.0);
    if (d->w == 0)
      d->w = 1;
    uint64_t tokens = 0;
    for (size_t i = d->lo; i < d->hi; i++)
      tokens += l->files[i].n_tokens;
    double budget =
        x->epochs > 0 ? x->epochs * (double)tokens : (double)x->max_tokens;
    if (budget > 0 && budget < 1.8e19)
      d->max_rows = (uint64_t)ceil(budget / (double)T);
    all_budgeted &= d->max_rows != UINT64_MAX;
    if (d->max_rows != UINT64_MAX)
      rows += d->max_rows;
  }
  if (all_budgeted)
    l->max_batches = rows / (uint64_t)l->B;
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
  size_t npaths = flatten_paths(l, cfg);
  if (!npaths)
    goto oom;
  l->files = calloc(npaths, sizeof(*l->files));
  l->cum_starts = calloc(npaths + 1, sizeof(uint64_t));
  l->cum_windows = calloc(npaths + 1, sizeof(uint64_t));
  if (!l->files || !l->cum_starts || !l->cum_windows)
    goto oom;
  if (open_files(l, cfg, npaths, err, errlen) != 0 ||
      setup_sources(l, cfg, err, errlen) != 0)
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
  if (l->cur.batches >= l->max_batches)
    return 1;
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

/* Whether p's rows can be this loader's: they sum to the rows served,
 * none beyond its source's budget, none of a source it does not have. */
static int rows_fit(const loader *l, const loader_pos *p) {
  uint64_t sum = 0;
  for (size_t s = 0; s < LOADER_MAX_SOURCES; s++) {
    if (s >= l->nsrc ? p->rows[s] != 0 : p->rows[s] > l->src[s].max_rows)
      return 0;
    sum += p->rows[s];
  }
  return p->batches <= UINT64_MAX / (uint64_t)l->B &&
         sum == p->batches * (uint64_t)l->B;
}

int loader_set_pos(loader *l, const loader_pos *pos) {
  loader_pos p = *pos;
  /* One source: its rows are every row (a position saved before mixtures
   * existed has none). */
  if (l->nsrc == 1 && p.batches <= UINT64_MAX / (uint64_t)l->B) {
    memset(p.rows, 0, sizeof p.rows);
    p.rows[0] = p.batches * (uint64_t)l->B;
  }
  if (l->order == LOADER_RANDOM && !rows_fit(l, &p))
    return -1;
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

void loader_shape(const loader *l, int *B, int *T) {
  *B = l->B;
  *T = l->T;
}

int loader_create_fitting(loader_config *cfg, int min_B, int min_T,
                          loader **out, char *err, size_t errlen) {
  for (;;) {
    if (loader_create(cfg, out, err, errlen) == 0) {
      if (loader_batches_per_epoch(*out) > 0)
        return 0;
      snprintf(err, errlen, "no whole batch of %d x %d tokens in the files",
               cfg->B, cfg->T);
      loader_destroy(*out);
      *out = NULL;
    }
    if (cfg->B / 2 >= min_B && cfg->B > 1)
      cfg->B /= 2;
    else if (cfg->T / 2 >= min_T)
      cfg->T /= 2;
    else
      return -1;
  }
}

size_t loader_sources(const loader *l) { return l->nsrc; }

uint64_t loader_source_tokens(const loader *l, size_t i) {
  return i < l->nsrc ? l->cur.rows[i] * (uint64_t)l->T : 0;
}

uint64_t loader_max_batches(const loader *l) { return l->max_batches; }

uint64_t loader_tokens(const loader *l) { return l->total_tokens; }

uint64_t loader_batches_per_epoch(const loader *l) {
  return l->total_windows / (uint64_t)l->B;
}

uint64_t loader_windows_per_epoch(const loader *l) { return l->total_windows; }
