/*
 * The optimizers, the LR schedule, grad-norm clipping and the spike guard
 * against values computed by hand. tests/integration/test_optim_torch.sh
 * compares whole runs with PyTorch.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>

#include "optim/optim.h"
#include "optim/spike.h"
#include "testlib.h"

/* ---- lr_at ---- */

static void test_lr_cosine_linear(void) {
  lr_schedule s = {.max_lr = 1.0,
                   .min_lr = 0.1,
                   .warmup_steps = 10,
                   .total_steps = 110,
                   .decay = LR_COSINE};
  /* Warmup: max * (step+1) / warmup. */
  CHECK_NEAR(lr_at(&s, 0), 0.1, 1e-12);
  CHECK_NEAR(lr_at(&s, 4), 0.5, 1e-12);
  CHECK_NEAR(lr_at(&s, 9), 1.0, 1e-12);
  /* Decay over [10, 110): p = (step - 10) / 100. */
  CHECK_NEAR(lr_at(&s, 10), 1.0, 1e-12);
  /* p = 0.25: 0.1 + 0.9 * 0.5 * (1 + cos(pi/4)) */
  CHECK_NEAR(lr_at(&s, 35), 0.868198052, 1e-9);
  CHECK_NEAR(lr_at(&s, 60), 0.55, 1e-12);
  /* p = 0.99 at the last step, 1 (clamped) after it. */
  CHECK_NEAR(lr_at(&s, 109), 0.100222, 1e-6);
  CHECK_NEAR(lr_at(&s, 110), 0.1, 1e-12);
  CHECK_NEAR(lr_at(&s, 500), 0.1, 1e-12);

  s.decay = LR_LINEAR;
  CHECK_NEAR(lr_at(&s, 4), 0.5, 1e-12);
  CHECK_NEAR(lr_at(&s, 10), 1.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 35), 0.775, 1e-12);
  CHECK_NEAR(lr_at(&s, 60), 0.55, 1e-12);
  CHECK_NEAR(lr_at(&s, 109), 0.109, 1e-12);
  CHECK_NEAR(lr_at(&s, 110), 0.1, 1e-12);
  CHECK_NEAR(lr_at(&s, 1000), 0.1, 1e-12);
}

static void test_lr_constant(void) {
  lr_schedule s = {.max_lr = 2.0,
                   .min_lr = 0.0,
                   .warmup_steps = 0,
                   .total_steps = 100,
                   .decay = LR_CONSTANT,
                   .cooldown_steps = 10};
  CHECK_NEAR(lr_at(&s, 0), 2.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 89), 2.0, 1e-12);
  /* Cooldown over steps 90..99, min_lr reached at the last step. */
  CHECK_NEAR(lr_at(&s, 90), 1.8, 1e-12);
  CHECK_NEAR(lr_at(&s, 94), 1.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 99), 0.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 150), 0.0, 1e-12);

  /* No cooldown: constant, also past the end. */
  s.cooldown_steps = 0;
  CHECK_NEAR(lr_at(&s, 99), 2.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 1000), 2.0, 1e-12);

  /* With warmup, which comes first. */
  s.warmup_steps = 4;
  s.cooldown_steps = 10;
  CHECK_NEAR(lr_at(&s, 0), 0.5, 1e-12);
  CHECK_NEAR(lr_at(&s, 3), 2.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 4), 2.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 99), 0.0, 1e-12);
}

static void test_lr_edges(void) {
  /* Warmup 0: the decay starts at max_lr on step 0. */
  lr_schedule s = {.max_lr = 1.0,
                   .min_lr = 0.0,
                   .warmup_steps = 0,
                   .total_steps = 100,
                   .decay = LR_COSINE};
  CHECK_NEAR(lr_at(&s, 0), 1.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 50), 0.5, 1e-12);
  CHECK_NEAR(lr_at(&s, 100), 0.0, 1e-12);
  /* Warmup 1: step 0 is already at max_lr. */
  s.warmup_steps = 1;
  CHECK_NEAR(lr_at(&s, 0), 1.0, 1e-12);
  /* total <= warmup: warmup as usual, max_lr right after it, then min_lr
   * (the decay span is taken as one step), never a division by zero. */
  s.warmup_steps = 10;
  s.total_steps = 5;
  CHECK_NEAR(lr_at(&s, 3), 0.4, 1e-12);
  CHECK_NEAR(lr_at(&s, 10), 1.0, 1e-12);
  CHECK_NEAR(lr_at(&s, 11), 0.0, 1e-12);
  s.decay = LR_LINEAR;
  CHECK_NEAR(lr_at(&s, 11), 0.0, 1e-12);
  s.total_steps = 10;
  CHECK(isfinite(lr_at(&s, 10)));
  /* A negative step counts as step 0. */
  CHECK_NEAR(lr_at(&s, -5), 0.1, 1e-12);
}

/* ---- clipping ---- */

static void test_clip(void) {
  float g[2] = {3, 4};
  CHECK_NEAR(optim_clip_grad_norm(g, 2, 10.0), 5.0, 1e-12);
  CHECK(g[0] == 3.0f && g[1] == 4.0f); /* below max: untouched */
  CHECK_NEAR(optim_clip_grad_norm(g, 2, 0.0), 5.0, 1e-12);
  CHECK(g[0] == 3.0f && g[1] == 4.0f); /* max 0: no clipping */
  /* At max, torch's 1e-6 still scales, by 5 / (5 + 1e-6). */
  CHECK_NEAR(optim_clip_grad_norm(g, 2, 5.0), 5.0, 1e-12);
  CHECK(g[0] < 3.0f && g[0] > 2.99999f);
  CHECK_NEAR(optim_clip_grad_norm(g, 2, 1.0), 5.0, 1e-5);
  /* torch's coefficient: max / (norm + 1e-6). */
  CHECK_NEAR(g[0], 3.0 / (5.0 + 1e-6), 1e-7);
  CHECK_NEAR(g[1], 4.0 / (5.0 + 1e-6), 1e-7);
  CHECK_NEAR(optim_clip_grad_norm(g, 2, 0.0), 1.0, 1e-6);
  CHECK_NEAR(optim_clip_grad_norm(NULL, 0, 1.0), 0.0, 0.0);

  /* A large array: the norm is right and does not depend on the number
   * of threads, to the last bit, nor do the clipped gradients. */
  const size_t n = 1000003;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  CHECK(a && b);
  if (!a || !b) {
    free(a);
    free(b);
    return;
  }
  uint32_t x = 12345;
  long double ref = 0;
  for (size_t i = 0; i < n; i++) {
    x = x * 1664525u + 1013904223u;
    a[i] = (float)((double)(x >> 8) / (1 << 24) - 0.5) * 3.0f;
    ref += (long double)a[i] * a[i];
  }
  memcpy(b, a, n * sizeof *a);
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  double n1 = optim_clip_grad_norm(a, n, 1.0);
  omp_set_num_threads(2);
  double n2 = optim_clip_grad_norm(b, n, 1.0);
  CHECK(n1 == n2);
  CHECK(memcmp(a, b, n * sizeof *a) == 0);
  CHECK_NEAR(n1, (double)sqrtl(ref), 1e-9 * n1);
  omp_set_num_threads(7);
  double n7 = optim_clip_grad_norm(b, n, 0.0);
  omp_set_num_threads(1);
  double n1b = optim_clip_grad_norm(a, n, 0.0);
  CHECK(n7 == n1b);
  CHECK_NEAR(n7, 1.0, 1e-5); /* clipped to max_norm */
  omp_set_num_threads(saved);
  free(a);
  free(b);
}

/* ---- optimizers ---- */

static const optim_group groups4[2] = {{0, 2, 1}, {2, 2, 0}};

static void test_create_errors(void) {
  char err[256] = "";
  optim *o = (optim *)1;
  optim_config c = {OPTIM_ADAMW, 0.9f, 0.999f, 1e-8f, 0.1f};
  optim_group overlap[2] = {{0, 3, 1}, {2, 2, 0}};
  CHECK(optim_create(&c, 4, overlap, 2, &o, err, sizeof err) == -1);
  CHECK(o == NULL);
  CHECK(strstr(err, "overlap") != NULL);
  optim_group gap[2] = {{0, 1, 1}, {2, 2, 0}};
  CHECK(optim_create(&c, 4, gap, 2, &o, err, sizeof err) == -1);
  CHECK(strstr(err, "gap") != NULL);
  optim_group shortg[1] = {{0, 3, 1}};
  CHECK(optim_create(&c, 4, shortg, 1, &o, err, sizeof err) == -1);
  CHECK(strstr(err, "cover") != NULL);
  optim_group past[1] = {{0, 5, 1}};
  CHECK(optim_create(&c, 4, past, 1, &o, err, sizeof err) == -1);
  /* Groups in any order are fine. */
  optim_group rev[2] = {{2, 2, 0}, {0, 2, 1}};
  CHECK(optim_create(&c, 4, rev, 2, &o, err, sizeof err) == 0);
  optim_destroy(o);
  c.beta1 = 1.0f;
  CHECK(optim_create(&c, 4, groups4, 2, &o, err, sizeof err) == -1);
  CHECK(strstr(err, "beta1") != NULL);
  c.beta1 = 0.9f;
  c.eps = 0.0f;
  CHECK(optim_create(&c, 4, groups4, 2, &o, err, sizeof err) == -1);
  CHECK(strstr(err, "eps") != NULL);
  c.eps = 1e-8f;
  c.weight_decay = -1.0f;
  CHECK(optim_create(&c, 4, groups4, 2, &o, err, sizeof err) == -1);
  CHECK(strstr(err, "weight_decay") != NULL);
  optim_destroy(NULL);
}

static void test_adamw(void) {
  char err[256];
  optim *o = NULL;
  optim_config c = {OPTIM_ADAMW, 0.9f, 0.999f, 1e-8f, 0.1f};
  CHECK(optim_create(&c, 4, groups4, 2, &o, err, sizeof err) == 0);
  if (!o)
    return;
  CHECK_INT(optim_state_floats(o), 8);
  CHECK_INT(optim_get_t(o), 0);
  float p[4] = {1, -2, 0.5f, 3};
  const float g1[4] = {0.1f, -0.2f, 0.0f, 4.0f};
  const float g2[4] = {-0.3f, 0.5f, 0.0f, -1.0f};
  /* Step 1: m/(1-b1) = g and sqrt(v/(1-b2)) = |g|, so each parameter
   * moves by lr (less eps); the first two also decay by 1 - lr*wd. A zero
   * gradient moves nothing (0 / eps). */
  optim_step(o, p, g1, 0.01f);
  CHECK_INT(optim_get_t(o), 1);
  CHECK_NEAR(p[0], 0.999 - 0.01, 1e-6);
  CHECK_NEAR(p[1], -1.998 + 0.01, 1e-6);
  CHECK(p[2] == 0.5f);
  CHECK_NEAR(p[3], 2.99, 1e-6); /* no decay group */
  const float *st = optim_state(o);
  CHECK_NEAR(st[0], 0.01, 1e-8); /* m = (1-b1) g */
  CHECK_NEAR(st[3], 0.4, 1e-7);
  CHECK_NEAR(st[4 + 1], 4e-5, 1e-11); /* v = (1-b2) g^2 */
  CHECK_NEAR(st[4 + 3], 0.016, 1e-9);
  /* Step 2 by hand (in double, from the formula of optim.h):
   * element 0: m = -0.021, v = 9.999e-5, m^ = -0.021/0.19,
   * v^ = 9.999e-5/0.001999, p = 0.989*0.999 - 0.01 m^/(sqrt(v^)+eps). */
  optim_step(o, p, g2, 0.01f);
  CHECK_NEAR(p[0], 0.992952899, 2e-6);
  CHECK_NEAR(p[1], -1.990434153, 2e-6);
  CHECK(p[2] == 0.5f);
  CHECK_NEAR(p[3], 2.985305318, 2e-6);

  /* Reset: t and moments back to zero; the next step is a first step. */
  optim_reset(o);
  CHECK_INT(optim_get_t(o), 0);
  int zero = 1;
  for (size_t i = 0; i < optim_state_floats(o); i++)
    zero &= optim_state(o)[i] == 0.0f;
  CHECK(zero);
  float q[4] = {1, -2, 0.5f, 3};
  optim_step(o, q, g1, 0.01f);
  CHECK_NEAR(q[0], 0.989, 1e-6);
  CHECK_NEAR(q[3], 2.99, 1e-6);
  optim_set_t(o, 41);
  CHECK_INT(optim_get_t(o), 41);
  optim_destroy(o);

  /* weight_decay 0: a decay group does not decay. */
  c.weight_decay = 0.0f;
  CHECK(optim_create(&c, 4, groups4, 2, &o, err, sizeof err) == 0);
  float r[4] = {1, -2, 0.5f, 3};
  optim_step(o, r, g1, 0.01f);
  CHECK_NEAR(r[0], 0.99, 1e-6);
  optim_destroy(o);
}

static void test_lion(void) {
  char err[256];
  optim *o = NULL;
  optim_config c = {OPTIM_LION, 0.9f, 0.99f, 0.0f, 1.0f};
  CHECK(optim_create(&c, 4, groups4, 2, &o, err, sizeof err) == 0);
  if (!o)
    return;
  CHECK_INT(optim_state_floats(o), 4);
  float p[4] = {1, -2, 0.5f, 3};
  const float g1[4] = {0.5f, -0.5f, 0.0f, 2.0f};
  /* lr 0.1, wd 1: decay multiplies by 0.9; the update is +-lr, and 0
   * where the interpolation is 0 (sign(0) = 0). */
  optim_step(o, p, g1, 0.1f);
  CHECK_NEAR(p[0], 0.8, 1e-6);
  CHECK_NEAR(p[1], -1.7, 1e-6);
  CHECK(p[2] == 0.5f);
  CHECK_NEAR(p[3], 2.9, 1e-6);                /* no decay group */
  CHECK_NEAR(optim_state(o)[0], 0.005, 1e-8); /* m = (1-b2) g */
  CHECK_NEAR(optim_state(o)[3], 0.02, 1e-8);
  /* Step 2: element 0 has g = -0.01 but b1 m + (1-b1) g = 0.0035 > 0, so
   * it still moves down (the sign follows the momentum, not g). */
  const float g2[4] = {-0.01f, -0.01f, 0.0f, -1.0f};
  optim_step(o, p, g2, 0.1f);
  CHECK_NEAR(p[0], 0.8 * 0.9 - 0.1, 1e-6);
  CHECK_NEAR(p[1], -1.7 * 0.9 + 0.1, 1e-6);
  CHECK(p[2] == 0.5f);
  CHECK_NEAR(p[3], 3.0, 1e-6);
  CHECK_NEAR(optim_state(o)[0], 0.00485, 1e-8);
  CHECK_INT(optim_get_t(o), 2);
  optim_reset(o);
  CHECK(optim_state(o)[0] == 0.0f && optim_state(o)[3] == 0.0f);
  CHECK_INT(optim_get_t(o), 0);
  optim_destroy(o);
}

/* The update is elementwise: any number of threads gives the same bits. */
static void test_step_threads(void) {
  const size_t n = 100001;
  optim_group gr[3] = {{0, 40000, 1}, {40000, 1, 0}, {40001, 60000, 1}};
  float *p1 = malloc(n * sizeof *p1), *p2 = malloc(n * sizeof *p2);
  float *g = malloc(n * sizeof *g);
  CHECK(p1 && p2 && g);
  if (!p1 || !p2 || !g)
    goto out;
  for (size_t i = 0; i < n; i++) {
    p1[i] = p2[i] = (float)sin((double)i);
    g[i] = (float)cos(0.37 * (double)i);
  }
  for (int kind = 0; kind < 2; kind++) {
    optim_config c = {(optim_kind)kind, 0.9f, 0.95f, 1e-8f, 0.1f};
    optim *a = NULL, *b = NULL;
    char err[256];
    CHECK(optim_create(&c, n, gr, 3, &a, err, sizeof err) == 0);
    CHECK(optim_create(&c, n, gr, 3, &b, err, sizeof err) == 0);
    if (!a || !b) {
      optim_destroy(a);
      optim_destroy(b);
      continue;
    }
    int saved = omp_get_max_threads();
    for (int s = 0; s < 3; s++) {
      omp_set_num_threads(1);
      optim_step(a, p1, g, 1e-3f);
      omp_set_num_threads(3);
      optim_step(b, p2, g, 1e-3f);
    }
    omp_set_num_threads(saved);
    CHECK(memcmp(p1, p2, n * sizeof *p1) == 0);
    CHECK(memcmp(optim_state(a), optim_state(b),
                 optim_state_floats(a) * sizeof(float)) == 0);
    optim_destroy(a);
    optim_destroy(b);
  }
out:
  free(p1);
  free(p2);
  free(g);
}

/* ---- spike guard ---- */

static spike_config spike_cfg(int window, int min_history) {
  spike_config c = {.window = window,
                    .min_history = min_history,
                    .threshold = 6.0,
                    .policy = SPIKE_SKIP,
                    .lr_factor = 0.1,
                    .lr_steps = 3};
  return c;
}

/* Feeds k ordinary steps: loss around `loss`, grad norm around 1, with a
 * spread of 1%. Returns how many were judged spikes. */
static int feed(spike_guard *g, int k, double loss) {
  int spikes = 0;
  for (int i = 0; i < k; i++) {
    double w = (i % 2) ? 0.01 : -0.01;
    spikes += spike_check(g, loss * (1 + w), 1.0 + w, NULL);
  }
  return spikes;
}

static void test_spike_init(void) {
  spike_guard g;
  char err[256];
  spike_config c = spike_cfg(50, 20);
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  c.window = 0;
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  CHECK(strstr(err, "window") != NULL);
  c.window = SPIKE_MAX_WINDOW + 1;
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  c = spike_cfg(10, 11);
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  CHECK(strstr(err, "min_history") != NULL);
  c = spike_cfg(10, 1);
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  c = spike_cfg(10, 5);
  c.threshold = 0;
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  CHECK(strstr(err, "threshold") != NULL);
  c = spike_cfg(10, 5);
  c.policy = SPIKE_LOWER_LR;
  c.lr_factor = 0;
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  CHECK(strstr(err, "lr_factor") != NULL);
  c.lr_factor = 0.5;
  c.lr_steps = -1;
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  CHECK(strstr(err, "lr_steps") != NULL);
  c = spike_cfg(10, 5);
  c.policy = (spike_policy)9;
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  CHECK(strstr(err, "policy") != NULL);
}

static void test_spike_verdicts(void) {
  spike_guard g;
  char err[256];
  spike_config c = spike_cfg(10, 5);
  double z = -1;

  /* Before min_history: no verdict, whatever the loss. */
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  CHECK_INT(feed(&g, 4, 2.0), 0);
  CHECK_INT(spike_check(&g, 100.0, 1.0, &z), 0);
  CHECK(z == 0.0);
  CHECK_INT(g.events, 0);

  /* After it: a clear spike is flagged, counted, kept out of the window. */
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  CHECK_INT(feed(&g, 5, 2.0), 0);
  CHECK_INT(spike_check(&g, 2.02, 1.0, &z), 0); /* ordinary */
  CHECK(z < 6);
  CHECK_INT(g.n, 6);
  CHECK_INT(spike_check(&g, 4.0, 1.0, &z), 1);
  CHECK(z > 6);
  CHECK_INT(g.events, 1);
  CHECK_INT(g.n, 6);
  /* The same spike again is still a spike (it did not join the window). */
  CHECK_INT(spike_check(&g, 4.0, 1.0, &z), 1);
  CHECK_INT(g.events, 2);
  /* The grad norm alone can make a spike; a low loss never does. */
  CHECK_INT(spike_check(&g, 2.0, 5.0, &z), 1);
  CHECK_INT(spike_check(&g, 0.1, 1.0, &z), 0);
  CHECK_INT(g.events, 3);

  /* NaN and Inf: always spikes, even with no history. */
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  CHECK_INT(spike_check(&g, NAN, 1.0, &z), 1);
  CHECK(isinf(z));
  CHECK_INT(spike_check(&g, 2.0, INFINITY, NULL), 1);
  CHECK_INT(spike_check(&g, -INFINITY, 1.0, NULL), 1);
  CHECK_INT(g.events, 3);
  CHECK_INT(g.n, 0);

  /* A perfectly flat history: tiny noise is not a spike (the deviation
   * has a floor of 1e-3 of the mean), a real rise still is. */
  c = spike_cfg(50, 20);
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  for (int i = 0; i < 30; i++)
    CHECK_INT(spike_check(&g, 3.0, 1.0, NULL), 0);
  CHECK_INT(spike_check(&g, 3.0001, 1.00001, &z), 0);
  CHECK(isfinite(z) && z < 1);
  CHECK_INT(spike_check(&g, 3.03, 1.0, &z), 1);
  CHECK_NEAR(z, 0.03 / (3e-3 + 1e-8), 1e-2);
  /* Flat at zero (the floor's absolute part). */
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  for (int i = 0; i < 30; i++)
    spike_check(&g, 0.0, 0.0, NULL);
  CHECK_INT(spike_check(&g, 1e-12, 0.0, &z), 0);

  /* min_rise: on a quiet stretch a 10% rise is many deviations but not a
   * spike; a 50% rise is. */
  c.min_rise = 0.3;
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  for (int i = 0; i < 30; i++)
    CHECK_INT(spike_check(&g, 3.0 + 0.01 * (i % 2), 1.0, NULL), 0);
  CHECK_INT(spike_check(&g, 3.3, 1.0, &z), 0);
  CHECK(z > 6);
  CHECK_INT(spike_check(&g, 4.5, 1.0, &z), 1);
  CHECK_INT(spike_check(&g, 3.0, 1.2, NULL), 0);
  CHECK_INT(spike_check(&g, 3.0, 2.0, NULL), 1);
  /* spike_forget: no verdicts until min_history steps again; the count
   * stays. */
  uint64_t events = g.events;
  spike_forget(&g);
  CHECK_INT(spike_check(&g, 100.0, 50.0, &z), 0);
  CHECK_INT(g.events, events);
  c.min_rise = -1;
  CHECK(spike_init(&g, &c, err, sizeof err) == -1);
  CHECK(strstr(err, "min_rise") != NULL);
}

static void test_spike_window(void) {
  spike_guard g;
  char err[256];
  spike_config c = spike_cfg(5, 5);
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  /* A window of losses around 10 and 1, then only 1: a loss of 5 is
   * ordinary for the mixed window and a spike once the 10s have left. */
  CHECK_INT(feed(&g, 3, 10.0), 0);
  CHECK_INT(feed(&g, 2, 1.0), 0);
  CHECK_INT(g.n, 5);
  CHECK_INT(spike_check(&g, 5.0, 1.0, NULL), 0);
  CHECK_INT(feed(&g, 5, 1.0), 0);
  CHECK_INT(g.n, 5);
  CHECK_INT(spike_check(&g, 5.0, 1.0, NULL), 1);
}

static void test_spike_lower_lr(void) {
  spike_guard g;
  char err[256];
  spike_config c = spike_cfg(10, 5);
  c.policy = SPIKE_LOWER_LR;
  c.lr_factor = 0.25;
  c.lr_steps = 3;
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  CHECK_INT(feed(&g, 5, 2.0), 0);
  CHECK(spike_lr_factor(&g) == 1.0);
  CHECK_INT(spike_check(&g, 50.0, 1.0, NULL), 1);
  /* The spike's own step and the next lr_steps run lowered. */
  for (int i = 0; i < 4; i++)
    CHECK(spike_lr_factor(&g) == 0.25);
  CHECK(spike_lr_factor(&g) == 1.0);
  CHECK(spike_lr_factor(&g) == 1.0);
  CHECK_INT(g.lowered_steps_left, 0);
  /* A second spike mid-countdown starts it again. */
  CHECK_INT(spike_check(&g, 50.0, 1.0, NULL), 1);
  CHECK(spike_lr_factor(&g) == 0.25);
  CHECK(spike_lr_factor(&g) == 0.25);
  CHECK_INT(spike_check(&g, 50.0, 1.0, NULL), 1);
  CHECK_INT(g.lowered_steps_left, 4);
  CHECK_INT(g.events, 3);

  /* Other policies never lower the rate. */
  c.policy = SPIKE_SKIP;
  CHECK(spike_init(&g, &c, err, sizeof err) == 0);
  CHECK_INT(feed(&g, 5, 2.0), 0);
  CHECK_INT(spike_check(&g, 50.0, 1.0, NULL), 1);
  CHECK(spike_lr_factor(&g) == 1.0);
}

int main(void) {
  test_lr_cosine_linear();
  test_lr_constant();
  test_lr_edges();
  test_clip();
  test_create_errors();
  test_adamw();
  test_lion();
  test_step_threads();
  test_spike_init();
  test_spike_verdicts();
  test_spike_window();
  test_spike_lower_lr();
  TEST_DONE();
}
