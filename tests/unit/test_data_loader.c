/*
 * The training data loader (gpu/data/dataloader.h): batches are windows of
 * real token files, the same for the same seed with or without the
 * prefetch thread, a sequential epoch visits every window once, and a
 * saved position continues with exactly the batches that would have come.
 *
 * (tests/unit/test_loader.c is the plugin loader's test; its loader.h
 * comes first on the include path, hence the relative include.)
 */
#include "data/dataloader.h"
#include "data/tokfile.h"
#include "testlib.h"

#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#define EOT 0u
#define T_ 16
#define B_ 5

/* Two files whose tokens, eot aside, are all different: a token says which
 * file and position it came from. f0 has 1000 tokens, f1 537. */
static uint32_t f0[1000], f1[537];
static const uint32_t *ftok[2] = {f0, f1};
static const uint64_t flen[2] = {1000, 537};
static const char *fpaths[2];

/* Writes documents of 1..37 tokens, each led by the eot id, until exactly
 * n tokens; the ids written go to out. */
static void write_tokens(const char *path, uint32_t vocab, uint32_t first_id,
                         uint32_t *out, size_t n) {
  char err[512] = "";
  tokfile_writer *w = NULL;
  CHECK_INT(tokfile_writer_create(path, vocab, EOT, &w, err, sizeof err), 0);
  size_t at = 0;
  uint32_t id = first_id;
  int len = 1;
  while (at < n) {
    size_t k = (size_t)len;
    if (at + 1 + k > n)
      k = n - at - 1;
    uint32_t doc[64];
    for (size_t j = 0; j < k; j++)
      doc[j] = id++;
    out[at++] = EOT;
    memcpy(out + at, doc, k * sizeof(uint32_t));
    at += k;
    CHECK_INT(tokfile_writer_add_doc(w, doc, k, err, sizeof err), 0);
    len = len % 37 + 1;
  }
  CHECK_INT(tokfile_writer_finish(w, NULL, err, sizeof err), 0);
}

/* A loader of c, which must open (NULL, with the reason, when not). */
static loader *create(const loader_config *c) {
  char err[512] = "";
  loader *l = NULL;
  CHECK_INT(loader_create(c, &l, err, sizeof err), 0);
  if (!l)
    fprintf(stderr, "loader_create: %s\n", err);
  return l;
}

static loader *make(loader_order order, int shuffle, uint64_t seed,
                    int prefetch) {
  loader_config c = {.paths = fpaths,
                     .npaths = 2,
                     .B = B_,
                     .T = T_,
                     .order = order,
                     .shuffle = shuffle,
                     .seed = seed,
                     .prefetch = prefetch};
  return create(&c);
}

typedef struct batch {
  uint32_t in[B_ * T_], tg[B_ * T_];
} batch;

/* Where row b of a batch was cut from: checks that its T+1 tokens are
 * consecutive tokens of one file (so targets are inputs shifted by one)
 * and returns file * 1e6 + start, or -1. */
static long locate(const batch *x, int b) {
  uint32_t win[T_ + 1];
  memcpy(win, x->in + b * T_, T_ * sizeof(uint32_t));
  win[T_] = x->tg[b * T_ + T_ - 1];
  for (int t = 0; t + 1 < T_; t++)
    if (x->tg[b * T_ + t] != x->in[b * T_ + t + 1])
      return -1;
  int j = 0;
  while (j <= T_ && win[j] == EOT)
    j++;
  if (j > T_)
    return -1;
  for (int f = 0; f < 2; f++)
    for (uint64_t p = 0; p < flen[f]; p++) {
      if (ftok[f][p] != win[j])
        continue;
      if (p < (uint64_t)j || p - (uint64_t)j + T_ + 1 > flen[f])
        return -1;
      uint64_t s = p - (uint64_t)j;
      if (memcmp(ftok[f] + s, win, sizeof win) != 0)
        return -1;
      return f * 1000000L + (long)s;
    }
  return -1;
}

static void take(loader *l, batch *v, int n) {
  for (int i = 0; i < n; i++)
    CHECK_INT(loader_next(l, v[i].in, v[i].tg), 0);
}

static void test_basics(void) {
  loader *l = make(LOADER_RANDOM, 0, 1, 0);
  if (!l)
    return;
  CHECK_INT(loader_vocab_size(l), 4000);
  CHECK_INT(loader_tokens(l), 1537);
  /* (1000-1)/16 + (537-1)/16 = 62 + 33 windows. */
  CHECK_INT(loader_batches_per_epoch(l), 95 / B_);
  loader_destroy(l);
  loader_destroy(NULL);
}

static void test_random(void) {
  loader *a = make(LOADER_RANDOM, 0, 42, 0), *b = make(LOADER_RANDOM, 0, 42, 0),
         *c = make(LOADER_RANDOM, 0, 43, 0);
  if (!a || !b || !c)
    return;
  enum { N = 200 };
  static batch va[N], vb[N], vc[N];
  take(a, va, N);
  take(b, vb, N);
  take(c, vc, N);
  CHECK(memcmp(va, vb, sizeof va) == 0);
  CHECK(memcmp(va, vc, sizeof va) != 0);
  /* Every window inside one file; both files drawn from, roughly by size
   * (1000 - 16 against 537 - 16 starts: 65% from f0). */
  int bad = 0, from[2] = {0, 0};
  for (int i = 0; i < N; i++)
    for (int r = 0; r < B_; r++) {
      long w = locate(&va[i], r);
      if (w < 0)
        bad++;
      else
        from[w / 1000000]++;
    }
  CHECK_INT(bad, 0);
  CHECK(from[0] > 550 && from[0] < 750);
  CHECK(from[1] > 250 && from[1] < 450);
  loader_pos p;
  loader_get_pos(a, &p);
  CHECK_INT(p.batches, N);
  loader_destroy(a);
  loader_destroy(b);
  loader_destroy(c);
}

/* One epoch of 19 batches: every window (start a multiple of T, inside a
 * file) exactly once. Returns the epoch's windows in order. */
static void check_epoch(loader *l, long *order) {
  static batch v[19];
  take(l, v, 19);
  static int seen[2][62];
  memset(seen, 0, sizeof seen);
  int bad = 0, k = 0;
  for (int i = 0; i < 19; i++)
    for (int r = 0; r < B_; r++) {
      long w = locate(&v[i], r);
      order[k++] = w;
      if (w < 0 || (w % 1000000) % T_ != 0) {
        bad++;
        continue;
      }
      seen[w / 1000000][(w % 1000000) / T_]++;
    }
  CHECK_INT(bad, 0);
  int once = 0;
  for (int f = 0; f < 2; f++)
    for (int i = 0; i < (f ? 33 : 62); i++)
      once += seen[f][i] == 1;
  CHECK_INT(once, 95);
}

static void test_sequential(void) {
  long e0[95], e1[95], s0[95], s1[95], t0[95];
  loader *l = make(LOADER_SEQUENTIAL, 0, 7, 0);
  if (!l)
    return;
  check_epoch(l, e0);
  loader_pos p;
  loader_get_pos(l, &p);
  CHECK_INT(p.epoch, 1);
  check_epoch(l, e1);
  /* No shuffle: file order, both epochs alike. */
  int inorder = 1;
  for (int i = 0; i < 95; i++)
    inorder &= e0[i] == (i < 62 ? i * T_ : 1000000L + (i - 62) * T_);
  CHECK(inorder);
  CHECK(memcmp(e0, e1, sizeof e0) == 0);
  loader_destroy(l);

  l = make(LOADER_SEQUENTIAL, 1, 7, 0);
  loader *m = make(LOADER_SEQUENTIAL, 1, 8, 2);
  if (!l || !m)
    return;
  check_epoch(l, s0);
  check_epoch(l, s1);
  check_epoch(m, t0);
  /* Shuffled: each epoch in its own order, and by seed. */
  CHECK(memcmp(s0, e0, sizeof s0) != 0);
  CHECK(memcmp(s0, s1, sizeof s0) != 0);
  CHECK(memcmp(s0, t0, sizeof s0) != 0);
  loader_destroy(l);
  loader_destroy(m);

  /* B that does not divide the windows: an epoch ends mid-batch and the
   * next begins in the same batch. 95 windows, B = 7: 13 batches + 4. */
  loader_config c = {.paths = fpaths,
                     .npaths = 2,
                     .B = 7,
                     .T = T_,
                     .order = LOADER_SEQUENTIAL,
                     .shuffle = 0,
                     .seed = 1};
  char err[256];
  CHECK_INT(loader_create(&c, &l, err, sizeof err), 0);
  if (!l)
    return;
  CHECK_INT(loader_batches_per_epoch(l), 13);
  uint32_t in[7 * T_], tg[7 * T_];
  for (int i = 0; i < 14; i++)
    loader_next(l, in, tg);
  /* Batch 13 holds windows 91..97: 91..94 of epoch 0, then 0..2 again. */
  CHECK_INT(in[4 * T_], f0[0]);
  CHECK_INT(in[4 * T_ + 1], f0[1]);
  CHECK_INT(in[6 * T_ + 3], f0[2 * T_ + 3]);
  CHECK_INT(in[3 * T_], f1[32 * T_]);
  loader_get_pos(l, &p);
  CHECK_INT(p.epoch, 1);
  loader_destroy(l);
}

/* The same batches with the prefetch thread as without it. */
static void test_prefetch_same(void) {
  enum { N = 60 };
  static batch v0[N], v1[N], v2[N];
  loader_order orders[2] = {LOADER_RANDOM, LOADER_SEQUENTIAL};
  for (int o = 0; o < 2; o++) {
    loader *a = make(orders[o], 1, 5, 0), *b = make(orders[o], 1, 5, 1),
           *c = make(orders[o], 1, 5, 4);
    if (!a || !b || !c)
      return;
    take(a, v0, N);
    take(b, v1, N);
    take(c, v2, N);
    CHECK(memcmp(v0, v1, sizeof v0) == 0);
    CHECK(memcmp(v0, v2, sizeof v0) == 0);
    loader_pos pa, pc;
    loader_get_pos(a, &pa);
    loader_get_pos(c, &pc);
    CHECK(memcmp(&pa, &pc, sizeof pa) == 0);
    loader_destroy(a);
    loader_destroy(b);
    loader_destroy(c);
  }
}

/* Take 7, save the position, take 5; a new loader set to the position
 * serves the same 5. Also the same loader, set back (the ring refilled). */
static void test_resume(void) {
  loader_order orders[2] = {LOADER_RANDOM, LOADER_SEQUENTIAL};
  int prefetches[2] = {0, 3};
  for (int o = 0; o < 2; o++)
    for (int pf = 0; pf < 2; pf++) {
      batch first[7], want[5], got[5];
      loader *a = make(orders[o], 1, 99, prefetches[pf]);
      if (!a)
        return;
      take(a, first, 7);
      loader_pos p;
      loader_get_pos(a, &p);
      CHECK_INT(p.batches, 7);
      take(a, want, 5);

      for (int pf2 = 0; pf2 < 2; pf2++) {
        loader *b = make(orders[o], 1, 99, prefetches[pf2]);
        if (!b)
          return;
        CHECK_INT(loader_set_pos(b, &p), 0);
        take(b, got, 5);
        CHECK(memcmp(want, got, sizeof want) == 0);
        loader_destroy(b);
      }

      CHECK_INT(loader_set_pos(a, &p), 0);
      take(a, got, 5);
      CHECK(memcmp(want, got, sizeof want) == 0);
      /* Back to the start: the first batches again. */
      loader_pos p0;
      memset(&p0, 0, sizeof p0);
      loader *fresh = make(orders[o], 1, 99, 0);
      if (fresh) {
        loader_get_pos(fresh, &p0);
        loader_destroy(fresh);
      }
      CHECK_INT(loader_set_pos(a, &p0), 0);
      take(a, got, 5);
      CHECK(memcmp(first, got, sizeof got) == 0);
      loader_destroy(a);
    }

  /* A sequential position whose epoch does not follow from its batches
   * (other files or another B) is refused. */
  loader *l = make(LOADER_SEQUENTIAL, 1, 3, 2);
  if (!l)
    return;
  loader_pos p;
  loader_get_pos(l, &p);
  p.batches = 19 * 3 + 2;
  p.epoch = 1;
  CHECK_INT(loader_set_pos(l, &p), -1);
  p.epoch = 3;
  CHECK_INT(loader_set_pos(l, &p), 0);
  loader_destroy(l);
}

/* Ids above 65535 come from 4-byte files as uint32. */
static void test_wide(void) {
  static uint32_t w[300];
  const char *p = test_path("wide.tok");
  write_tokens(p, 70000, 69000, w, 300);
  const char *paths[1] = {p};
  loader_config c = {.paths = paths,
                     .npaths = 1,
                     .B = 2,
                     .T = 8,
                     .order = LOADER_SEQUENTIAL,
                     .seed = 1};
  char err[256];
  loader *l = NULL;
  CHECK_INT(loader_create(&c, &l, err, sizeof err), 0);
  if (!l)
    return;
  CHECK_INT(loader_vocab_size(l), 70000);
  uint32_t in[16], tg[16];
  loader_next(l, in, tg);
  CHECK(memcmp(in, w, 8 * sizeof(uint32_t)) == 0);
  CHECK(memcmp(tg, w + 1, 8 * sizeof(uint32_t)) == 0);
  CHECK(memcmp(in + 8, w + 8, 8 * sizeof(uint32_t)) == 0);
  CHECK(in[1] > 65535);
  loader_destroy(l);
}

static void refused(const char *const *paths, size_t n, int T,
                    const char *want) {
  loader_config c = {.paths = paths,
                     .npaths = n,
                     .B = 2,
                     .T = T,
                     .order = LOADER_RANDOM,
                     .seed = 1,
                     .prefetch = 2};
  char err[1024] = "";
  loader *l = (loader *)1;
  CHECK_INT(loader_create(&c, &l, err, sizeof err), -1);
  CHECK(l == NULL);
  CHECK_STR(err, want);
}

static void test_errors(void) {
  char want[1024];
  refused(fpaths, 0, 8, "loader: no token files given");

  /* Too short for one window, in one file or in each of several. */
  static uint32_t s[10];
  const char *shortp = test_path("short.tok");
  write_tokens(shortp, 4000, 3000, s, 10);
  const char *one[1] = {shortp};
  snprintf(want, sizeof want,
           "%s: 10 tokens, fewer than one window of T+1 = 11", shortp);
  refused(one, 1, 10, want);
  const char *both[2] = {fpaths[1], fpaths[0]};
  snprintf(want, sizeof want,
           "no token file holds one window of T+1 = 1001 tokens (the "
           "largest, %s, has 1000; windows never cross files)",
           fpaths[0]);
  refused(both, 2, 1000, want);

  /* Another vocabulary: both files named. */
  const char *mixed[3] = {fpaths[0], shortp, test_path("wide.tok")};
  snprintf(want, sizeof want,
           "%s: vocab_size 70000, but %s has vocab_size 4000 (all token "
           "files of a loader must share one vocabulary)",
           mixed[2], fpaths[0]);
  refused(mixed, 3, 4, want);

  /* Missing and corrupt files: tokfile's own messages. */
  const char *missing[2] = {fpaths[0], test_path("nope.tok")};
  loader_config c = {.paths = missing, .npaths = 2, .B = 1, .T = 4};
  char err[1024] = "";
  loader *l = NULL;
  CHECK_INT(loader_create(&c, &l, err, sizeof err), -1);
  CHECK(strstr(err, "nope.tok") != NULL);

  static uint32_t cbuf[200];
  const char *corrupt = test_path("corrupt.tok");
  write_tokens(corrupt, 4000, 1, cbuf, 200);
  int fd = open(corrupt, O_RDWR);
  unsigned char byte = 0x77;
  CHECK(pwrite(fd, &byte, 1, 128 + 100) == 1);
  close(fd);
  const char *bad[2] = {fpaths[0], corrupt};
  c.paths = bad;
  CHECK_INT(loader_create(&c, &l, err, sizeof err), -1);
  CHECK(strstr(err, corrupt) != NULL);
  CHECK(strstr(err, "checksum mismatch") != NULL);

  c.paths = fpaths;
  c.T = 0;
  CHECK_INT(loader_create(&c, &l, err, sizeof err), -1);
  CHECK_STR(err, "loader: B = 1 and T = 0 must both be positive");
}

/* ---- Mixtures ---- */

/* A mixture of f0 (source 0) and f1 (source 1) at weights w0, w1 and
 * budgets (tokens) m0, m1, B rows of T_. */
static loader *make_mix(double w0, double w1, uint64_t m0, uint64_t m1, int B,
                        uint64_t seed, int prefetch) {
  loader_source src[2] = {{.name = "web",
                           .paths = fpaths,
                           .npaths = 1,
                           .weight = w0,
                           .max_tokens = m0},
                          {.name = "code",
                           .paths = fpaths + 1,
                           .npaths = 1,
                           .weight = w1,
                           .max_tokens = m1}};
  loader_config c = {.sources = src,
                     .nsources = 2,
                     .B = B,
                     .T = T_,
                     .order = LOADER_RANDOM,
                     .seed = seed,
                     .prefetch = prefetch};
  return create(&c);
}

/* The source a row came from: f0's ids are below 2000, f1's from 2000
 * (every window holds a token that is not the eot). */
static int row_source(const uint32_t *in) {
  for (int t = 0; t < T_; t++)
    if (in[t] != EOT)
      return in[t] >= 2000;
  return -1;
}

/* 0.8 / 0.2 over 1,000 steps of 8 rows: the tokens drawn from each within
 * 2% of those shares, every row a real window of its source, the counts
 * the loader reports the ones drawn, and the same batches with the
 * prefetch thread as without. */
static void test_mix_shares(void) {
  enum { N = 1000, MB = 8 };
  loader *a = make_mix(0.8, 0.2, 0, 0, MB, 11, 0);
  loader *b = make_mix(4, 1, 0, 0, MB, 11, 3); /* the same weights */
  if (!a || !b)
    return;
  uint32_t in[MB * T_], tg[MB * T_], in2[MB * T_], tg2[MB * T_];
  uint64_t rows[2] = {0, 0};
  int same = 1, bad = 0;
  for (int i = 0; i < N; i++) {
    CHECK_INT(loader_next(a, in, tg), 0);
    loader_next(b, in2, tg2);
    same &= memcmp(in, in2, sizeof in) == 0 && memcmp(tg, tg2, sizeof tg) == 0;
    for (int r = 0; r < MB; r++) {
      int s = row_source(in + r * T_);
      if (s < 0) {
        bad++;
        continue;
      }
      rows[s]++;
      if (i < 40) {
        batch x;
        memcpy(x.in, in + r * T_, T_ * sizeof(uint32_t));
        memcpy(x.tg, tg + r * T_, T_ * sizeof(uint32_t));
        long w = locate(&x, 0);
        bad += w < 0 || w / 1000000 != s;
      }
    }
  }
  CHECK_INT(bad, 0);
  CHECK(same);
  double share = (double)rows[0] / (double)(rows[0] + rows[1]);
  printf("mixture 0.8/0.2 over %d steps of %d rows: %.4f / %.4f\n", N, MB,
         share, 1 - share);
  CHECK(fabs(share - 0.8) < 0.02);
  CHECK_INT(loader_sources(a), 2);
  CHECK_INT(loader_source_tokens(a, 0), rows[0] * T_);
  CHECK_INT(loader_source_tokens(a, 1), rows[1] * T_);
  CHECK_INT(loader_max_batches(a), UINT64_MAX);
  loader_destroy(a);
  loader_destroy(b);
}

/* One source without a budget draws what the plain paths draw, so a run
 * that names no mixture is unchanged. */
static void test_mix_one_source(void) {
  loader_source one = {
      .name = "all", .paths = fpaths, .npaths = 2, .weight = 3};
  loader_config c = {.sources = &one,
                     .nsources = 1,
                     .B = B_,
                     .T = T_,
                     .order = LOADER_RANDOM,
                     .seed = 42};
  char err[256];
  loader *m = NULL, *p = make(LOADER_RANDOM, 0, 42, 0);
  CHECK_INT(loader_create(&c, &m, err, sizeof err), 0);
  if (!m || !p)
    return;
  static batch vm[50], vp[50];
  take(m, vm, 50);
  take(p, vp, 50);
  CHECK(memcmp(vm, vp, sizeof vm) == 0);
  CHECK_INT(loader_source_tokens(m, 0), 50 * B_ * T_);
  loader_destroy(m);
  loader_destroy(p);
}

/* A source at its budget drops out and the other takes every row; with
 * every source budgeted the loader ends after the batches they hold. */
static void test_mix_budget(void) {
  enum { MB = 8 };
  uint32_t in[MB * T_], tg[MB * T_];
  /* code: 160 tokens = 10 rows of 16, then web alone. */
  loader *l = make_mix(0.5, 0.5, 0, 160, MB, 5, 2);
  if (!l)
    return;
  int late = 0;
  for (int i = 0; i < 100; i++) {
    CHECK_INT(loader_next(l, in, tg), 0);
    for (int r = 0; i >= 50 && r < MB; r++)
      late += row_source(in + r * T_) == 1;
  }
  CHECK_INT(loader_source_tokens(l, 1), 160);
  CHECK_INT(loader_source_tokens(l, 0), 100 * MB * T_ - 160);
  CHECK_INT(late, 0);
  loader_destroy(l);

  /* web: 300 tokens = 19 rows (the 19th starts below the budget), code:
   * 100 = 7 rows: 26 rows, 3 batches of 8; then the end, position kept. */
  l = make_mix(1, 1, 300, 100, MB, 5, 2);
  if (!l)
    return;
  CHECK_INT(loader_max_batches(l), 3);
  for (int i = 0; i < 3; i++)
    CHECK_INT(loader_next(l, in, tg), 0);
  loader_pos before, after;
  loader_get_pos(l, &before);
  CHECK_INT(loader_next(l, in, tg), 1);
  loader_get_pos(l, &after);
  CHECK(memcmp(&before, &after, sizeof before) == 0);
  CHECK(before.rows[0] <= 19 && before.rows[1] <= 7);
  CHECK_INT(before.rows[0] + before.rows[1], 24);
  loader_destroy(l);
}

/* A position taken mid-mixture continues with the very batches (other
 * prefetch included); positions this mixture cannot have made are
 * refused. */
static void test_mix_resume(void) {
  enum { MB = 4 };
  static uint32_t want[20][2 * MB * T_], got[2 * MB * T_];
  loader *a = make_mix(0.7, 0.3, 0, 2000, MB, 77, 0);
  if (!a)
    return;
  uint32_t in[MB * T_], tg[MB * T_];
  for (int i = 0; i < 37; i++)
    loader_next(a, in, tg);
  loader_pos p;
  loader_get_pos(a, &p);
  for (int i = 0; i < 20; i++)
    loader_next(a, want[i], want[i] + MB * T_);
  loader *b = make_mix(0.7, 0.3, 0, 2000, MB, 77, 3);
  if (!b)
    return;
  CHECK_INT(loader_set_pos(b, &p), 0);
  int same = 1;
  for (int i = 0; i < 20; i++) {
    loader_next(b, got, got + MB * T_);
    same &= memcmp(got, want[i], sizeof got) == 0;
  }
  CHECK(same);
  loader_pos q = p;
  q.rows[0]++; /* rows that do not sum to batches x B */
  CHECK_INT(loader_set_pos(b, &q), -1);
  q = p;
  q.rows[0] -= 1;
  q.rows[2] = 1; /* a third source */
  CHECK_INT(loader_set_pos(b, &q), -1);
  q = p;
  q.rows[1] = 2000 / T_ + 1; /* beyond code's budget of 125 rows */
  q.rows[0] = q.batches * MB - q.rows[1];
  CHECK_INT(loader_set_pos(b, &q), -1);
  loader_destroy(a);
  loader_destroy(b);
}

static void mix_refused(loader_source *src, size_t n, int T, const char *want) {
  loader_config c = {.sources = src,
                     .nsources = n,
                     .B = 2,
                     .T = T,
                     .order = LOADER_RANDOM,
                     .seed = 1};
  char err[1024] = "";
  loader *l = (loader *)1;
  CHECK_INT(loader_create(&c, &l, err, sizeof err), -1);
  CHECK(l == NULL);
  CHECK_STR(err, want);
}

static void test_mix_errors(void) {
  const char *shortp = test_path("short.tok"), *widep = test_path("wide.tok");
  loader_source src[2] = {
      {.name = "web", .paths = fpaths, .npaths = 1, .weight = 1},
      {.name = "code", .paths = fpaths + 1, .npaths = 1, .weight = 0}};
  mix_refused(src, 2, 8, "loader: source code needs a weight above 0");
  src[1].weight = -2;
  mix_refused(src, 2, 8, "loader: source code needs a weight above 0");
  src[1].weight = 1;
  src[1].max_tokens = 10;
  src[1].epochs = 1;
  mix_refused(src, 2, 8,
              "loader: source code has both a token and an epoch "
              "budget");
  src[1].max_tokens = 0;
  src[1].epochs = -1;
  mix_refused(src, 2, 8,
              "loader: source code needs epochs of 0 (none) or "
              "more");
  src[1].epochs = 0;
  src[1].paths = &shortp;
  mix_refused(src, 2, 10,
              "source code: no token file holds one window of "
              "T+1 = 11 tokens (windows never cross files)");
  src[1].paths = &widep;
  char want[1024];
  snprintf(want, sizeof want,
           "%s: vocab_size 70000, but %s has vocab_size 4000 (all token "
           "files of a loader must share one vocabulary)",
           widep, fpaths[0]);
  mix_refused(src, 2, 4, want);
  loader_config c = {.sources = src,
                     .nsources = 2,
                     .B = 2,
                     .T = 4,
                     .order = LOADER_SEQUENTIAL};
  loader *l = NULL;
  CHECK_INT(loader_create(&c, &l, want, sizeof want), -1);
  CHECK_STR(want, "loader: a mixture is drawn in random order");
}

int main(void) {
  if (test_tmpdir_make("dataloader") != 0)
    return 1;
  fpaths[0] = strdup(test_path("f0.tok"));
  fpaths[1] = strdup(test_path("f1.tok"));
  write_tokens(fpaths[0], 4000, 1, f0, 1000);
  write_tokens(fpaths[1], 4000, 2000, f1, 537);
  test_basics();
  test_random();
  test_sequential();
  test_prefetch_same();
  test_resume();
  test_wide();
  test_errors();
  test_mix_shares();
  test_mix_one_source();
  test_mix_budget();
  test_mix_resume();
  test_mix_errors();
  const char *names[] = {"f0.tok", "f1.tok", "wide.tok", "short.tok",
                         "corrupt.tok"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    unlink(test_path("%s", names[i]));
  rmdir(test_tmpdir());
  free((char *)fpaths[0]);
  free((char *)fpaths[1]);
  TEST_DONE();
}
