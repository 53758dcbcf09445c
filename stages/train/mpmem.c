/* The memory figures of a model-parallel gang's ranks; see mpmem.h. */
#include "mpmem.h"

#include <stdio.h>
#include <string.h>

static double mib(uint64_t b) { return (double)b / 1048576.0; }

void mpmem_step_start(void) {
  /* "5" resets VmHWM to the current RSS (Linux 4.0 and later). */
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (f) {
    fputs("5", f);
    fclose(f);
  }
}

uint64_t mpmem_rss_peak(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f)
    return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
      break;
  fclose(f);
  return (uint64_t)kb * 1024;
}

void mpmem_measure(const gpt *model, const optim *full, const gpt_memory *part,
                   int in_model, uint64_t first_stage_tied,
                   const zslice_memory *between, mpmem_rank *out) {
  uint64_t wp = 4 * (uint64_t)gpt_capacity(model, GPT_BUF_PARAMS);
  uint64_t wg = 4 * (uint64_t)gpt_capacity(model, GPT_BUF_GRADS);
  *out = (mpmem_rank){.formula = *part, .whole = {wp, wg}};
  gpt_memory *h = &out->held;
  h->params = wp + (in_model ? 0 : part->params);
  h->grads = wg + (in_model ? 0 : part->grads);
  h->optim = part->optim + (full ? 4 * (uint64_t)optim_state_floats(full) : 0);
  /* The whole model's own activations: rank 0's validation's. */
  h->acts = part->acts + (gpt_allocated_bytes(model) - wp - wg);
  h->total = h->params + h->grads + h->optim + h->acts;
  out->peak_grads = h->grads + first_stage_tied;
  out->rss_peak = mpmem_rss_peak();
  if (!between)
    return;
  gpt_memory *b = &out->between;
  out->has_between = 1;
  b->params = wp + between->params;
  b->grads = wg + between->grads;
  b->optim = between->optim + (h->optim - part->optim);
  b->total = b->params + b->grads + b->optim;
}

int mpmem_gather(comm *c, const mpmem_rank *mine, mpmem_rank *all, char *err,
                 size_t errlen) {
  int me = comm_rank(c), N = comm_size(c);
  for (int q = 0; q < N; q++) {
    mpmem_rank x = q == me ? *mine : (mpmem_rank){0};
    if (comm_broadcast(c, &x, sizeof x, q, err, errlen) != 0)
      return -1;
    if (me == 0)
      all[q] = x;
  }
  return 0;
}

/* The held bytes of kind k (0 params, 1 grads, 2 optim). */
static uint64_t kind(const gpt_memory *m, int k) {
  return k == 0 ? m->params : k == 1 ? m->grads : m->optim;
}

int mpmem_worse(const mpmem_rank *all, int N, const gpt_memory *one,
                char out[3][MPMEM_LINE]) {
  static const char *const name[3] = {"parameters", "gradients",
                                      "optimizer state"};
  static const char *const why[3] = {
      "the whole model's parameter array, which rank 0 keeps for "
      "validation, samples and checkpoints",
      "its part's gradients and the step's own buffers: the first "
      "pipeline stage's of the tied embedding, ZeRO's reduced slice",
      "rank 0's one-process optimizer over the whole model, which the "
      "checkpoints are gathered into"};
  int nout = 0;
  for (int k = 0; k < 3; k++) {
    char who[192] = "";
    int n = 0, len = 0;
    for (int q = 0; q < N; q++) {
      if (kind(&all[q].held, k) < kind(one, k))
        continue;
      n++;
      if (len < (int)sizeof who - 16)
        len += snprintf(who + len, sizeof who - (size_t)len, "%s%d",
                        n > 1 ? ", " : "", q);
    }
    if (n)
      snprintf(out[nout++], MPMEM_LINE,
               "rank%s %s: the %s inside the step %s no better than one "
               "process's %.2f MiB for this model (%s)",
               n > 1 ? "s" : "", who, name[k], k == 2 ? "is" : "are",
               mib(kind(one, k)), why[k]);
  }
  return nout;
}

void mpmem_log(trainrun *r, const mpmem_rank *all, int N,
               const gpt_memory *one) {
  for (int q = 0; q < N; q++) {
    const mpmem_rank *x = &all[q];
    const gpt_memory *h = &x->held, *f = &x->formula;
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "rank %d memory inside the step (the layout's formula for its "
              "part): params %.2f (%.2f) MiB, of them the whole model's "
              "%.2f; grads %.2f (%.2f) MiB, of them the whole model's %.2f%s; "
              "optimizer %.2f (%.2f) MiB; activations %.2f (%.2f) MiB; "
              "process peak resident %.2f MiB (measured)",
              q, mib(h->params), mib(f->params), mib(x->whole[0]),
              mib(h->grads), mib(f->grads), mib(x->whole[1]),
              x->peak_grads > h->grads ? " (and the tied gradient's buffer)"
                                       : "",
              mib(h->optim), mib(f->optim), mib(h->acts), mib(f->acts),
              mib(x->rss_peak));
  }
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "one process training the same micro-batch: params %.2f MiB, "
            "grads %.2f MiB, optimizer %.2f MiB, activations %.2f MiB",
            mib(one->params), mib(one->grads), mib(one->optim), mib(one->acts));
  char w[3][MPMEM_LINE];
  int n = mpmem_worse(all, N, one, w);
  for (int i = 0; i < n; i++)
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "%s", w[i]);
}

/* {params, grads, optim, acts} in bytes. */
static cJSON *kinds(const gpt_memory *m, uint64_t grads) {
  cJSON *k = cJSON_CreateObject();
  cJSON_AddNumberToObject(k, "params", (double)m->params);
  cJSON_AddNumberToObject(k, "grads", (double)grads);
  cJSON_AddNumberToObject(k, "optim", (double)m->optim);
  cJSON_AddNumberToObject(k, "acts", (double)m->acts);
  return k;
}

void mpmem_summary(const mpmem_rank *all, int N, const gpt_memory *one,
                   cJSON *summary) {
  cJSON *mem = cJSON_AddObjectToObject(summary, "memory");
  cJSON_AddItemToObject(mem, "one_process", kinds(one, one->grads));
  cJSON *ranks = cJSON_AddArrayToObject(mem, "ranks");
  for (int q = 0; q < N; q++) {
    const mpmem_rank *x = &all[q];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", q);
    cJSON_AddItemToObject(o, "peak", kinds(&x->held, x->peak_grads));
    cJSON_AddItemToObject(o, "formula", kinds(&x->formula, x->formula.grads));
    if (x->has_between) { /* the activations' slots stay: not said */
      cJSON *b = kinds(&x->between, x->between.grads);
      cJSON_DeleteItemFromObject(b, "acts");
      cJSON_AddItemToObject(o, "between_steps", b);
    }
    cJSON *w = cJSON_AddObjectToObject(o, "whole_model");
    cJSON_AddNumberToObject(w, "params", (double)x->whole[0]);
    cJSON_AddNumberToObject(w, "grads", (double)x->whole[1]);
    cJSON_AddNumberToObject(o, "rss_peak", (double)x->rss_peak);
    cJSON_AddItemToArray(ranks, o);
  }
  cJSON *w = cJSON_AddArrayToObject(mem, "worse_than_one_process");
  char s[3][MPMEM_LINE];
  int n = mpmem_worse(all, N, one, s);
  for (int i = 0; i < n; i++)
    cJSON_AddItemToArray(w, cJSON_CreateString(s[i]));
}
