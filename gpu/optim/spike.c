/*
 * spike: the loss-spike guard (spike.h). A z-score of the step's loss and
 * grad norm against the mean and standard deviation of the last `window`
 * accepted steps.
 */
#include "spike.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

int spike_init(spike_guard *g, const spike_config *cfg, char *err,
               size_t errlen) {
  if (!cfg)
    return fail(err, errlen, "spike guard: no configuration");
  if (cfg->window < 1 || cfg->window > SPIKE_MAX_WINDOW)
    return fail(err, errlen, "spike guard: window must be 1..%d steps, got %d",
                SPIKE_MAX_WINDOW, cfg->window);
  /* One remembered step has no spread; the floor on the deviation would
   * then make the slightest rise a spike. */
  if (cfg->min_history < 2 || cfg->min_history > cfg->window)
    return fail(err, errlen,
                "spike guard: min_history must be 2..window (%d), got %d",
                cfg->window, cfg->min_history);
  if (!(cfg->min_rise >= 0.0) || !isfinite(cfg->min_rise))
    return fail(err, errlen, "spike guard: min_rise must be >= 0, got %g",
                cfg->min_rise);
  if (!(cfg->threshold > 0.0) || !isfinite(cfg->threshold))
    return fail(err, errlen,
                "spike guard: threshold must be a z-score > 0, got %g",
                cfg->threshold);
  switch (cfg->policy) {
  case SPIKE_SKIP:
  case SPIKE_RESET:
  case SPIKE_ROLLBACK:
    break;
  case SPIKE_LOWER_LR:
    if (!(cfg->lr_factor > 0.0 && cfg->lr_factor <= 1.0))
      return fail(err, errlen,
                  "spike guard: lr_factor must lie in (0, 1], got %g",
                  cfg->lr_factor);
    if (cfg->lr_steps < 0)
      return fail(err, errlen, "spike guard: lr_steps must be >= 0, got %d",
                  cfg->lr_steps);
    break;
  default:
    return fail(err, errlen, "spike guard: unknown policy %d",
                (int)cfg->policy);
  }
  memset(g, 0, sizeof *g);
  g->cfg = *cfg;
  return 0;
}

/* How many deviations x lies above the mean of the n values in ring
 * (*mean_out gets the mean). The deviation has a floor relative to the
 * mean, so that a perfectly flat history does not turn rounding noise
 * into an infinite z. */
static double zscore(const double *ring, int n, double x, double *mean_out) {
  double sum = 0.0;
  for (int i = 0; i < n; i++)
    sum += ring[i];
  const double mean = sum / n;
  double ss = 0.0;
  for (int i = 0; i < n; i++)
    ss += (ring[i] - mean) * (ring[i] - mean);
  double sd = sqrt(ss / n);
  const double sd_min = 1e-3 * fabs(mean) + 1e-8;
  if (sd < sd_min)
    sd = sd_min;
  *mean_out = mean;
  return (x - mean) / sd;
}

int spike_check(spike_guard *g, double loss, double gnorm, double *z) {
  if (!isfinite(loss) || !isfinite(gnorm)) {
    g->events++;
    if (g->cfg.policy == SPIKE_LOWER_LR)
      g->lowered_steps_left = g->cfg.lr_steps + 1;
    if (z)
      *z = INFINITY;
    return 1;
  }
  if (g->n >= g->cfg.min_history) {
    /* The ring's order does not matter to a mean and a deviation, but the
     * summation order is fixed by the slots, so a resumed run computes
     * the same z bit for bit. */
    double ml, mg;
    const double zl = zscore(g->loss, g->n, loss, &ml);
    const double zg = zscore(g->gnorm, g->n, gnorm, &mg);
    const double zm = zl > zg ? zl : zg;
    const double rise = 1.0 + g->cfg.min_rise;
    const int spike = (zl > g->cfg.threshold && loss > ml * rise) ||
                      (zg > g->cfg.threshold && gnorm > mg * rise);
    if (z)
      *z = zm;
    if (spike) {
      g->events++;
      /* This step and the next lr_steps run at the lowered rate. */
      if (g->cfg.policy == SPIKE_LOWER_LR)
        g->lowered_steps_left = g->cfg.lr_steps + 1;
      return 1;
    }
  } else if (z) {
    *z = 0.0;
  }
  g->loss[g->head] = loss;
  g->gnorm[g->head] = gnorm;
  g->head = (g->head + 1) % g->cfg.window;
  if (g->n < g->cfg.window)
    g->n++;
  return 0;
}

void spike_forget(spike_guard *g) {
  g->n = 0;
  g->head = 0;
}

double spike_lr_factor(spike_guard *g) {
  if (g->cfg.policy != SPIKE_LOWER_LR || g->lowered_steps_left <= 0)
    return 1.0;
  g->lowered_steps_left--;
  return g->cfg.lr_factor;
}
