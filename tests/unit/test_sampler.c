/*
 * test_sampler: model/sampler.h on given logits. Greedy is the argmax,
 * top_k 1 is the argmax at any temperature, a seed gives the same draws;
 * the draws follow the softmax at the temperature over the top k, and
 * over top-p's nucleus (the smallest set of mass >= p, ties kept
 * together); the repetition penalty divides positive and multiplies
 * negative logits of the ids seen; with top_p 1 and penalty 1 every draw
 * equals an independent reference of the sampler as it was before them,
 * bit for bit; out-of-range options are refused by name.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "data/rng.h"
#include "model/sampler.h"
#include "testlib.h"

static double uniform(uint64_t *s) {
  return (double)(rng_splitmix64(s) >> 11) / 9007199254740992.0;
}

static uint32_t pick(const float *lg, int V, double temp, int k, double p,
                     double pen, const uint8_t *seen, uint64_t *st) {
  sampler_opts o = {temp, k, p, pen};
  return sampler_pick(&o, lg, V, seen, st);
}

static void test_greedy(void) {
  float lg[300];
  uint64_t s = 5;
  for (int trial = 0; trial < 20; trial++) {
    int best = 0;
    for (int v = 0; v < 300; v++) {
      lg[v] = (float)(uniform(&s) * 10 - 5);
      if (lg[v] > lg[best])
        best = v;
    }
    uint64_t st = (uint64_t)trial, before = st;
    CHECK_INT(pick(lg, 300, 0.0, 40, 1, 1, NULL, &st), best);
    CHECK(st == before); /* greedy draws nothing */
    /* top_k 1, or a tiny nucleus, is the argmax whatever the temperature */
    CHECK_INT(pick(lg, 300, 5.0, 1, 1, 1, NULL, &st), best);
    CHECK_INT(pick(lg, 300, 0.01, 1, 1, 1, NULL, &st), best);
    CHECK_INT(pick(lg, 300, 1.0, 0, 1e-9, 1, NULL, &st), best);
  }
  /* Ties go to the lowest id, greedy or top_k 1. */
  for (int v = 0; v < 300; v++)
    lg[v] = 0.0f;
  lg[201] = lg[17] = lg[250] = 3.0f;
  uint64_t st = 1;
  CHECK_INT(pick(lg, 300, 0.0, 0, 1, 1, NULL, &st), 17);
  CHECK_INT(pick(lg, 300, -1.0, 0, 1, 1, NULL, &st), 17);
  CHECK_INT(pick(lg, 300, 1.0, 1, 1, 1, NULL, &st), 17);
  /* Only the first vocab_size logits count. */
  lg[299] = 100.0f;
  CHECK_INT(pick(lg, 299, 0.0, 0, 1, 1, NULL, &st), 17);
}

static void test_seeded(void) {
  float lg[500];
  uint64_t s = 11;
  uint8_t seen[500];
  for (int v = 0; v < 500; v++) {
    lg[v] = (float)(uniform(&s) * 4 - 1);
    seen[v] = v % 3 == 0;
  }
  uint64_t a = 42, b = 42, c = 43;
  int differ = 0, distinct = 0;
  uint32_t prev = 0;
  for (int i = 0; i < 200; i++) {
    uint64_t before = a;
    uint32_t x = pick(lg, 500, 1.0, 50, 0.9, 1.3, seen, &a);
    uint32_t y = pick(lg, 500, 1.0, 50, 0.9, 1.3, seen, &b);
    uint32_t z = pick(lg, 500, 1.0, 50, 0.9, 1.3, seen, &c);
    CHECK(a != before); /* the state advances */
    CHECK_INT(x, y);
    differ += x != z;
    distinct += i > 0 && x != prev;
    prev = x;
  }
  CHECK(differ > 100); /* another seed, other draws */
  CHECK(distinct > 100);
}

/* Frequencies of n draws against want: within 5 sigma (an id of
 * probability 0 never drawn). */
static void check_freq(const float *lg, int V, double temp, int k, double p,
                       double pen, const uint8_t *seen, const double *want) {
  enum { N = 20000 };
  int count[8] = {0};
  uint64_t st = 777;
  for (int i = 0; i < N; i++) {
    uint32_t id = pick(lg, V, temp, k, p, pen, seen, &st);
    CHECK(id < (uint32_t)V);
    if (id < (uint32_t)V)
      count[id]++;
  }
  for (int v = 0; v < V; v++) {
    double f = (double)count[v] / N;
    double sigma = sqrt(want[v] * (1 - want[v]) / N);
    if (fabs(f - want[v]) > 5 * sigma + 1e-12)
      fprintf(stderr,
              "id %d: frequency %g, expected %g (T %g, k %d, p %g, "
              "penalty %g)\n",
              v, f, want[v], temp, k, p, pen);
    CHECK(fabs(f - want[v]) <= 5 * sigma + 1e-12);
  }
}

static void test_distribution(void) {
  float two[2] = {0.0f, 1.0f};
  double p1 = 1 / (1 + exp(-1.0));
  check_freq(two, 2, 1.0, 0, 1, 1, NULL, (double[]){1 - p1, p1});
  double p2 = 1 / (1 + exp(-0.5)); /* temperature 2 halves the gap */
  check_freq(two, 2, 2.0, 0, 1, 1, NULL, (double[]){1 - p2, p2});
  /* top_k 2 of 4: ids 0 and 3 are never drawn, 1 and 2 by softmax. */
  float four[4] = {-1.0f, 1.5f, 2.0f, -3.0f};
  double q = 1 / (1 + exp(-0.5));
  check_freq(four, 4, 1.0, 2, 1, 1, NULL, (double[]){0, 1 - q, q, 0});
}

/* top-p: probabilities .5 .3 .15 .05 (ids shuffled). p .7: .5 < .7 <=
 * .8, so the nucleus is the first two, renormalized; p .45: the first
 * alone; p .9: three of them; with top_k 2 first, p .9 keeps the two. */
static void test_top_p(void) {
  float lg[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
  check_freq(lg, 4, 1.0, 0, 0.7, 1, NULL,
             (double[]){0, 0.5 / 0.8, 0, 0.3 / 0.8});
  check_freq(lg, 4, 1.0, 0, 0.45, 1, NULL, (double[]){0, 1, 0, 0});
  check_freq(lg, 4, 1.0, 0, 0.9, 1, NULL,
             (double[]){0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95});
  check_freq(lg, 4, 1.0, 2, 0.9, 1, NULL,
             (double[]){0, 0.5 / 0.8, 0, 0.3 / 0.8});
  /* The mass is the one at the temperature: at T 0.5 the probabilities
   * are proportional to .25 .09 .0225 .0025, and .25/.365 = .685 < .7. */
  double z = 0.25 + 0.09 + 0.0225 + 0.0025;
  check_freq(lg, 4, 0.5, 0, 0.7, 1, NULL,
             (double[]){0, 0.25 / (z - 0.025), 0, 0.09 / (z - 0.025)});
  /* Ties: logits 2, 1, 1, 0. The nucleus of p .6 ends at the first id
   * of logit 1 (mass .534, then .731); its twin is kept with it, the
   * same whichever of the two has the lower id. */
  float tie[4] = {1.0f, 2.0f, 0.0f, 1.0f};
  float tie2[4] = {1.0f, 0.0f, 2.0f, 1.0f};
  double e = exp(1.0), s3 = e * e + 2 * e;
  check_freq(tie, 4, 1.0, 0, 0.6, 1, NULL,
             (double[]){e / s3, e * e / s3, 0, e / s3});
  check_freq(tie2, 4, 1.0, 0, 0.6, 1, NULL,
             (double[]){e / s3, 0, e * e / s3, e / s3});
}

/* CTRL's penalty: a seen positive logit divided, a seen negative one
 * multiplied, unseen ones untouched; greedy and sampling alike. */
static void test_penalty(void) {
  uint8_t seen[4] = {1, 0, 1, 0};
  float pos[4] = {3.0f, 2.0f, 0.5f, 0.0f};
  uint64_t st = 3;
  CHECK_INT(pick(pos, 4, 0.0, 0, 1, 1.0, seen, &st), 0);
  CHECK_INT(pick(pos, 4, 0.0, 0, 1, 1.4, seen, &st), 0); /* 3/1.4 > 2 */
  CHECK_INT(pick(pos, 4, 0.0, 0, 1, 2.0, seen, &st), 1); /* 1.5 < 2 */
  float neg[4] = {-1.0f, -1.5f, -9.0f, -9.0f};
  CHECK_INT(pick(neg, 4, 0.0, 0, 1, 1.0, seen, &st), 0);
  CHECK_INT(pick(neg, 4, 0.0, 0, 1, 2.0, seen, &st), 1); /* -2 < -1.5 */
  /* Below 1 it favours what was seen: a seen -9 becomes -0.9, above the
   * unseen -1 and -1.5. */
  uint8_t only2[4] = {0, 0, 1, 0};
  CHECK_INT(pick(neg, 4, 0.0, 0, 1, 0.1, only2, &st), 2);
  /* Sampling: logits 1, 1, 1 with id 0 seen and penalty 2: e^.5 : e : e. */
  float flat[3] = {1.0f, 1.0f, 1.0f};
  uint8_t s0[3] = {1, 0, 0};
  double a = exp(0.5), b = exp(1.0), z = a + 2 * b;
  check_freq(flat, 3, 1.0, 0, 1, 2.0, s0, (double[]){a / z, b / z, b / z});
  /* Negative: -1 seen becomes -2: e^-2 : e^-1. */
  float mone[2] = {-1.0f, -1.0f};
  double c = exp(-2.0), d = exp(-1.0);
  check_freq(mone, 2, 1.0, 0, 1, 2.0, s0, (double[]){c / (c + d), d / (c + d)});
}

/* The sampler before top_p and the penalty, written the plain way: every
 * id sorted (higher logit first, lower id on ties; NaN as -inf), the
 * top k, softmax at t, one draw scaled to the sum and spent in order. */
typedef struct ranked {
  float l;
  uint32_t id;
} ranked;

static int cmp_ranked(const void *pa, const void *pb) {
  const ranked *a = pa, *b = pb;
  if (a->l != b->l)
    return a->l > b->l ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

static uint32_t reference(const float *lg, int V, double t, int k,
                          uint64_t *st) {
  ranked *r = malloc((size_t)V * sizeof *r);
  for (int v = 0; v < V; v++)
    r[v] = (ranked){isnan(lg[v]) ? -INFINITY : lg[v], (uint32_t)v};
  qsort(r, (size_t)V, sizeof *r, cmp_ranked);
  uint32_t id = r[0].id;
  if (t > 0) {
    uint64_t bits = rng_splitmix64(st);
    int n = k > 0 && k < V ? k : V;
    double mx = r[0].l, sum = 0;
    if (isfinite(mx)) {
      for (int a = 0; a < n; a++)
        sum += exp((r[a].l - mx) / t);
      double u = (double)(bits >> 11) / 9007199254740992.0 * sum;
      id = r[n - 1].id;
      for (int a = 0; a < n; a++)
        if ((u -= exp((r[a].l - mx) / t)) <= 0) {
          id = r[a].id;
          break;
        }
    }
  }
  free(r);
  return id;
}

static void test_old_behaviour(void) {
  enum { V = 700 };
  static float lg[V];
  static const double temps[] = {0, 0.3, 0.8, 1, 2.5};
  static const int ks[] = {0, 1, 5, 40, 256, 300, V, V + 5};
  uint64_t s = 99;
  int mismatches = 0, draws = 0;
  for (int trial = 0; trial < 40; trial++) {
    for (int v = 0; v < V; v++)
      lg[v] = (float)(uniform(&s) * 12 - 6);
    if (trial % 5 == 0) /* ties */
      for (int v = 0; v < V; v += 7)
        lg[v] = 1.25f;
    if (trial % 7 == 0)
      lg[trial] = NAN;
    for (size_t ti = 0; ti < sizeof temps / sizeof *temps; ti++)
      for (size_t ki = 0; ki < sizeof ks / sizeof *ks; ki++) {
        uint64_t a = (uint64_t)trial * 1000 + ti * 10 + ki, b = a;
        for (int j = 0; j < 5; j++) {
          uint32_t x = pick(lg, V, temps[ti], ks[ki], 1.0, 1.0, NULL, &a);
          uint32_t y = reference(lg, V, temps[ti], ks[ki], &b);
          mismatches += x != y || a != b;
          draws++;
        }
      }
  }
  fprintf(stderr, "old behaviour: %d of %d draws differ\n", mismatches, draws);
  CHECK_INT(mismatches, 0);
  /* A penalty of 1 with ids seen changes nothing either. */
  uint8_t seen[V];
  memset(seen, 1, sizeof seen);
  uint64_t a = 5, b = 5;
  for (int j = 0; j < 50; j++)
    CHECK_INT(pick(lg, V, 0.9, 40, 1.0, 1.0, seen, &a),
              reference(lg, V, 0.9, 40, &b));
}

static void test_check(void) {
  char err[256];
  struct {
    sampler_opts o;
    const char *name;
  } bad[] = {
      {{1, 0, 0.0, 1}, "top_p"},
      {{1, 0, -0.1, 1}, "top_p"},
      {{1, 0, 1.01, 1}, "top_p"},
      {{1, 0, NAN, 1}, "top_p"},
      {{1, 0, 1, 0.0}, "repetition_penalty"},
      {{1, 0, 1, -1.2}, "repetition_penalty"},
      {{1, 0, 1, INFINITY}, "repetition_penalty"},
      {{1, 0, 1, NAN}, "repetition_penalty"},
      {{NAN, 0, 1, 1}, "temperature"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    err[0] = '\0';
    CHECK_INT(sampler_check(&bad[i].o, err, sizeof err), -1);
    CHECK(strstr(err, bad[i].name) != NULL);
  }
  sampler_opts ok[] = {{0.8, 40, 1.0, 1.0},
                       {0, 0, 1e-6, 0.01},
                       {2, 1, 0.5, 100},
                       SAMPLER_OPTS_INIT};
  for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
    CHECK_INT(sampler_check(&ok[i], err, sizeof err), 0);
}

int main(void) {
  test_greedy();
  test_seeded();
  test_distribution();
  test_top_p();
  test_penalty();
  test_old_behaviour();
  test_check();
  TEST_DONE();
}
