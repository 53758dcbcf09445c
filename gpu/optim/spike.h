/*
 * spike: the loss-spike guard. It keeps a rolling window of recent
 * losses and grad norms; a step whose loss or grad norm lies more than
 * `threshold` standard deviations above the window's mean (a z-score,
 * once the window holds at least `min_history` steps) and at least
 * `min_rise` (a fraction) above that mean is a spike, and the caller
 * applies the configured policy. The rise condition keeps a quiet stretch,
 * whose deviation is tiny, from calling ordinary batch-to-batch noise a
 * spike. Spikes are not added to the
 * window, so one bad batch does not raise the bar for the next.
 */
#ifndef DAGRUN_SPIKE_H
#define DAGRUN_SPIKE_H

#include <stddef.h>
#include <stdint.h>

typedef enum spike_policy {
  SPIKE_SKIP = 0,     /* do not apply this step's update */
  SPIKE_LOWER_LR = 1, /* apply it at lr * lr_factor, and for the next
                         lr_steps steps */
  SPIKE_RESET = 2,    /* skip the update and zero the optimizer moments */
  SPIKE_ROLLBACK = 3  /* reload the last checkpoint, skip the batches since */
} spike_policy;

typedef struct spike_config {
  int window;       /* steps remembered (e.g. 50) */
  int min_history;  /* steps before any verdict (e.g. 20) */
  double threshold; /* z-score (e.g. 6) */
  double min_rise;  /* e.g. 0.3: at least 30% above the mean; 0 = any */
  spike_policy policy;
  double lr_factor; /* SPIKE_LOWER_LR: e.g. 0.1 */
  int lr_steps;     /* SPIKE_LOWER_LR: e.g. 100 */
} spike_config;

/* The guard's whole state, plain data so checkpoints save it as bytes. */
#define SPIKE_MAX_WINDOW 1024
typedef struct spike_guard {
  spike_config cfg;
  int n, head;                        /* entries in the ring, next slot */
  double loss[SPIKE_MAX_WINDOW], gnorm[SPIKE_MAX_WINDOW];
  int lowered_steps_left;
  uint64_t events;                    /* spikes seen */
} spike_guard;

/* Checks cfg (window 1..SPIKE_MAX_WINDOW, ...) and clears the state.
 * 0 or -1 with err. */
int spike_init(spike_guard *g, const spike_config *cfg, char *err,
               size_t errlen);
/* Judges one step. Returns 1 for a spike (counted; *z gets the larger
 * z-score), 0 otherwise (and the step joins the window). A NaN or
 * infinite loss or norm is always a spike. */
int spike_check(spike_guard *g, double loss, double gnorm, double *z);
/* Empties the window, keeping the event count: after the optimizer's
 * moments are reset, the first updates are unlike the ones before, and
 * the old statistics would call them spikes. */
void spike_forget(spike_guard *g);
/* The LR multiplier for this step under SPIKE_LOWER_LR (1 otherwise);
 * counts down the lowered steps. Call once per applied step. */
double spike_lr_factor(spike_guard *g);

#endif /* DAGRUN_SPIKE_H */
