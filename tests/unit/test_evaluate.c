/*
 * test_evaluate: evaluate_model (gpu/model/evaluate.h) on real token
 * files against the same batches computed by hand: the loss is the mean
 * of gpt_forward's losses, the accuracy a brute-force count of positions
 * whose likeliest id is the target, perplexity exp(loss); two calls agree
 * to the bit, and a cancelled evaluation stops with -1. evaluate_tokens
 * and evaluate_endings against one forward per scored token, each with
 * the context their contract promises; their bad inputs refused.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "data/dataloader.h"
#include "data/rng.h"
#include "data/tokfile.h"
#include "lib/fileio.h"
#include "model/evaluate.h"
#include "model/gpt.h"
#include "testlib.h"

#define V_ 10
#define B_ 3
#define T_ 8

static char dir[] = "/tmp/dagrun-evaluate-XXXXXX";
static char err[512];
static const char *paths[2];

static void write_tokens(const char *path, size_t n, uint64_t seed) {
  tokfile_writer *w = NULL;
  CHECK_INT(
      tokfile_writer_create(path, V_, TOKFILE_NO_EOT, &w, err, sizeof err), 0);
  uint32_t doc[50];
  /* Documents of 50 tokens, mostly counting up (so a model can be right
   * about some), now and then a random one. */
  for (size_t at = 0; at < n; at += 50) {
    for (int j = 0; j < 50; j++)
      doc[j] = rng_splitmix64(&seed) % 4 == 0
                   ? (uint32_t)(rng_splitmix64(&seed) % V_)
                   : (uint32_t)((at + (size_t)j) % V_);
    CHECK_INT(tokfile_writer_add_doc(w, doc, 50, err, sizeof err), 0);
  }
  CHECK_INT(tokfile_writer_finish(w, NULL, err, sizeof err), 0);
}

static loader *make_loader(int B) {
  loader_config c = {.paths = paths,
                     .npaths = 2,
                     .B = B,
                     .T = T_,
                     .order = LOADER_SEQUENTIAL,
                     .seed = 3};
  loader *l = NULL;
  if (loader_create(&c, &l, err, sizeof err) != 0)
    fprintf(stderr, "loader_create: %s\n", err);
  return l;
}

static gpt *make_model(void) {
  gpt_config cfg = {.n_layer = 2,
                    .n_head = 2,
                    .n_embd = 16,
                    .block_size = T_,
                    .vocab_size = V_};
  gpt *m = NULL;
  if (gpt_config_finish(&cfg, err, sizeof err) != 0 ||
      gpt_create(&cfg, &m, err, sizeof err) != 0) {
    fprintf(stderr, "model: %s\n", err);
    return NULL;
  }
  gpt_init(m, 5);
  /* Large random moves: logits far from uniform, so that accuracy and
   * loss say something about this model in particular. */
  float *p = gpt_params(m);
  uint64_t s = 8;
  size_t pad0 = (size_t)V_ * 16, pad1 = (size_t)cfg.padded_vocab * 16;
  for (size_t i = 0; i < gpt_num_params(m); i++)
    if (i < pad0 || i >= pad1)
      p[i] += 0.6f * (float)((double)(rng_splitmix64(&s) >> 11) /
                                 9007199254740992.0 * 2 -
                             1);
  return m;
}

/* The reference: the first nwin windows from a fresh loader, one at a
 * time (B = 1: the sequential order serves the same windows in the same
 * order as B_ rows at a time), by hand. */
static void by_hand(gpt *m, uint64_t nwin, double *loss, double *acc) {
  loader *l = make_loader(1);
  uint32_t in[T_], tg[T_];
  double sum = 0;
  uint64_t ok = 0;
  int Vp = gpt_get_config(m)->padded_vocab;
  for (uint64_t w = 0; w < nwin; w++) {
    float lo = 0;
    loader_next(l, in, tg);
    CHECK_INT(gpt_forward(m, in, tg, 1, T_, &lo, err, sizeof err), 0);
    sum += lo;
    const float *lg = gpt_logits(m);
    for (int i = 0; i < T_; i++) {
      /* The target is the argmax when no other id beats it, and no
       * lower id ties it. */
      const float *r = lg + (size_t)i * Vp;
      int best = 1;
      for (int v = 0; v < V_; v++)
        if (v != (int)tg[i] &&
            (r[v] > r[tg[i]] || (r[v] == r[tg[i]] && v < (int)tg[i])))
          best = 0;
      ok += best;
    }
  }
  *loss = sum / (double)nwin;
  *acc = (double)ok / (double)(nwin * T_);
  loader_destroy(l);
}

static int polls;
static int cancel_after_two(void *arg) {
  (void)arg;
  return ++polls > 2;
}
static int never(void *arg) {
  (void)arg;
  polls++;
  return 0;
}

/* -log p(seq[len - 1] | seq[0, len - 1)) by a forward of its own. */
static double tok_loss(gpt *m, const uint32_t *seq, size_t len) {
  const gpt_config *c = gpt_get_config(m);
  float unused;
  CHECK_INT(
      gpt_forward(m, seq, NULL, 1, (int)len - 1, &unused, err, sizeof err), 0);
  const float *r = gpt_logits(m) + (len - 2) * (size_t)c->padded_vocab;
  double mx = -INFINITY, s = 0;
  for (int v = 0; v < c->vocab_size; v++)
    mx = r[v] > mx ? r[v] : mx;
  for (int v = 0; v < c->vocab_size; v++)
    s += exp(r[v] - mx);
  return mx + log(s) - r[seq[len - 1]];
}

/* Token i (i >= 1) is scored after the window's first token up to it:
 * the window starts at ((i - 1) / T) * T. */
static void test_tokens(gpt *m) {
  enum { N = 30 };
  uint32_t ids[N];
  uint64_t s = 17;
  for (int i = 0; i < N; i++)
    ids[i] = (uint32_t)(rng_splitmix64(&s) % V_);
  double want = 0;
  for (size_t i = 1; i < N; i++) {
    size_t start = (i - 1) / T_ * T_;
    want += tok_loss(m, ids + start, i - start + 1);
  }
  for (int b = 1; b <= 4; b++) {
    eval_sum sum = {0};
    CHECK_INT(
        evaluate_tokens(m, ids, N, T_, b, NULL, NULL, &sum, err, sizeof err),
        0);
    CHECK_INT(sum.tokens, N - 1);
    CHECK_NEAR(sum.loss_sum, want, 1e-5 * want);
  }
  /* One window's mean is gpt_forward's own loss on it. */
  eval_sum one = {0};
  float loss;
  CHECK_INT(
      evaluate_tokens(m, ids, T_ + 1, T_, 1, NULL, NULL, &one, err, sizeof err),
      0);
  CHECK_INT(gpt_forward(m, ids, ids + 1, 1, T_, &loss, err, sizeof err), 0);
  CHECK_NEAR(one.loss_sum / (double)one.tokens, loss, 1e-5 * loss);
  /* Sums add up across calls; fewer than 2 tokens add nothing. */
  CHECK_INT(
      evaluate_tokens(m, ids, 1, T_, 1, NULL, NULL, &one, err, sizeof err), 0);
  CHECK_INT(one.tokens, T_);
  ids[7] = V_;
  err[0] = '\0';
  CHECK_INT(
      evaluate_tokens(m, ids, N, T_, 2, NULL, NULL, &one, err, sizeof err), -1);
  CHECK(strstr(err, "vocab_size") != NULL);
  CHECK_INT(
      evaluate_tokens(m, ids, N, T_ + 1, 2, NULL, NULL, &one, err, sizeof err),
      -1);
}

/* Each ending's mean loss, batched and padded, equals its tokens scored
 * one forward at a time after the context; a context too long for the
 * model loses its first tokens. */
static void test_endings(gpt *m) {
  uint32_t ctx[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0};
  uint32_t e0[1] = {6}, e1[3] = {6, 7, 8}, e2[2] = {3, 3}, e3[7] = {1};
  const uint32_t *ends[4] = {e0, e1, e2, e3};
  size_t nends[4] = {1, 3, 2, 7};
  for (size_t nctx = 1; nctx <= 10; nctx += 4) {
    double got[4] = {0};
    CHECK_INT(
        evaluate_endings(m, ctx, nctx, ends, nends, 4, got, err, sizeof err),
        0);
    for (int i = 0; i < 4; i++) {
      /* The sequence the contract describes: the context's last tokens,
       * as many as fit before the ending in T_. */
      uint32_t seq[T_];
      size_t keep = nctx < T_ - nends[i] ? nctx : T_ - nends[i];
      memcpy(seq, ctx + nctx - keep, keep * sizeof *seq);
      memcpy(seq + keep, ends[i], nends[i] * sizeof *seq);
      double want = 0;
      for (size_t j = 0; j < nends[i]; j++)
        want += tok_loss(m, seq, keep + j + 1);
      want /= (double)nends[i];
      CHECK_NEAR(got[i], want, 1e-5 * want);
    }
  }
  double out[4];
  size_t too_long[1] = {T_};
  err[0] = '\0';
  CHECK_INT(
      evaluate_endings(m, ctx, 3, ends, too_long, 1, out, err, sizeof err), -1);
  CHECK(strstr(err, "ending 0") != NULL);
  CHECK_INT(evaluate_endings(m, ctx, 0, ends, nends, 4, out, err, sizeof err),
            -1);
  CHECK(strstr(err, "no context") != NULL);
  uint32_t bad[1] = {V_ + 3};
  const uint32_t *bends[1] = {bad};
  size_t one[1] = {1};
  CHECK_INT(evaluate_endings(m, ctx, 3, bends, one, 1, out, err, sizeof err),
            -1);
}

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 1;
  }
  char *p0 = fileio_join(dir, "a.tok"), *p1 = fileio_join(dir, "b.tok");
  paths[0] = p0;
  paths[1] = p1;
  write_tokens(p0, 300, 1);
  write_tokens(p1, 150, 2);
  gpt *m = make_model();
  loader *ld = make_loader(B_);
  CHECK(m && ld);
  if (!m || !ld)
    TEST_DONE();
  uint64_t epoch = loader_batches_per_epoch(ld);
  /* 450 tokens: 37 + 18 windows of 9 (T+1) (windows never cross files),
   * 3 per batch: 18 full batches and one window more. */
  uint64_t windows = loader_windows_per_epoch(ld);
  CHECK_INT(windows, 55);
  CHECK_INT(epoch, 18);

  loader_pos start;
  loader_get_pos(ld, &start);
  eval_result r = {0}, r2 = {0};
  CHECK_INT(evaluate_model(m, ld, B_, T_, 4, never, NULL, &r, err, sizeof err),
            0);
  CHECK_INT(polls, 4);
  double want_loss, want_acc;
  by_hand(m, 4 * B_, &want_loss, &want_acc);
  CHECK_INT(r.batches, 4);
  CHECK_INT(r.tokens, 4 * B_ * T_);
  CHECK_NEAR(r.loss, want_loss, 1e-6 * want_loss);
  CHECK_NEAR(r.perplexity, exp(r.loss), 1e-9 * r.perplexity);
  CHECK_NEAR(r.accuracy, want_acc, 1e-12);
  CHECK(r.accuracy > 0.05 && r.accuracy < 0.95); /* the count means something */
  CHECK(fabs(r.loss - log((double)V_)) > 0.05);  /* not a uniform model */
  fprintf(stderr, "4 batches: loss %.5f (by hand %.5f), accuracy %.4f (%.4f)\n",
          r.loss, want_loss, r.accuracy, want_acc);

  /* From the same position again: the same result, to the bit. */
  loader_set_pos(ld, &start);
  CHECK_INT(evaluate_model(m, ld, B_, T_, 4, NULL, NULL, &r2, err, sizeof err),
            0);
  CHECK(memcmp(&r, &r2, sizeof r) == 0);

  /* max_batches 0: every window of the split, once, the last batch's
   * window (55 is no multiple of 3) included. */
  loader_set_pos(ld, &start);
  CHECK_INT(evaluate_model(m, ld, B_, T_, 0, NULL, NULL, &r, err, sizeof err),
            0);
  CHECK_INT(r.windows, windows);
  CHECK_INT(r.tokens, windows * T_);
  CHECK_INT(r.batches, epoch + 1);
  by_hand(m, windows, &want_loss, &want_acc);
  CHECK_NEAR(r.loss, want_loss, 1e-6 * want_loss);
  CHECK_NEAR(r.accuracy, want_acc, 1e-12);
  /* More than an epoch: the epoch's full batches (what the train stage's
   * eval_batches and a device's fixed-size batches count). */
  loader_set_pos(ld, &start);
  CHECK_INT(evaluate_model(m, ld, B_, T_, epoch * 5, NULL, NULL, &r2, err,
                           sizeof err),
            0);
  CHECK_INT(r2.batches, epoch);
  CHECK_INT(r2.windows, epoch * B_);
  by_hand(m, epoch * B_, &want_loss, &want_acc);
  CHECK_NEAR(r2.loss, want_loss, 1e-6 * want_loss);

  /* Cancelled on the third poll: -1, "cancelled", out untouched. */
  polls = 0;
  eval_result r3 = {.loss = -7};
  err[0] = '\0';
  CHECK_INT(evaluate_model(m, ld, B_, T_, 0, cancel_after_two, NULL, &r3, err,
                           sizeof err),
            -1);
  CHECK(strstr(err, "cancelled") != NULL);
  CHECK_INT(polls, 3);
  CHECK(r3.loss == -7);

  test_tokens(m);
  test_endings(m);

  loader_destroy(ld);
  gpt_destroy(m);
  fileio_remove_tree(dir);
  free(p0);
  free(p1);
  TEST_DONE();
}
