/* The memory figures of a gang's ranks; see gangmem.h. */
#include "gangmem.h"

#include <stdio.h>

static double mib(uint64_t b) { return (double)b / 1048576.0; }

/* The most any rank held of one kind inside the step. */
static uint64_t most(const gangmem *m, size_t field) {
  uint64_t x = 0;
  for (int q = 0; q < m->N; q++) {
    uint64_t v = *(const uint64_t *)((const char *)&m->rank[q] + field);
    x = v > x ? v : x;
  }
  return x;
}

int gangmem_worse(const gangmem *m, char out[2][GANGMEM_LINE]) {
  if (m->gpu || m->N < 1 || m->stage < 2)
    return 0;
  /* Stages 0-1 hold the whole gradient, stages 0-2 every parameter: 4
   * bytes a parameter, in the step and between. */
  uint64_t whole = 4 * m->rank[0].n_params;
  uint64_t pg = most(m, offsetof(zero_memory, peak_grads));
  uint64_t pp = most(m, offsetof(zero_memory, peak_params));
  int n = 0;
  if (pg >= whole)
    snprintf(out[n++], GANGMEM_LINE,
             "ZeRO stage %d: the gradients' peak inside the step, %.2f MiB, "
             "is no better than stage 1's %.2f MiB (the whole gradient) for "
             "this model: the embeddings' gradient and the layers' in "
             "flight (with grad_accum, a second shard too) outweigh the "
             "shard saved",
             m->stage, mib(pg), mib(whole));
  if (m->stage == 3 && pp >= whole)
    snprintf(out[n++], GANGMEM_LINE,
             "ZeRO stage 3: the parameters' peak inside the step, %.2f MiB, "
             "is no better than stage 2's %.2f MiB (every parameter) for "
             "this model: the two gathered groups outweigh the shard saved",
             mib(pp), mib(whole));
  return n;
}

void gangmem_log(trainrun *r, const gangmem *m) {
  for (int q = 0; q < m->N; q++) {
    const zero_memory *z = &m->rank[q];
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "rank %d memory, peak inside the step (held between steps): "
              "params %.2f (%.2f) MiB, grads %.2f (%.2f) MiB, optimizer "
              "%.2f MiB, activations %.2f (%.2f) MiB",
              q, mib(z->peak_params), mib(z->params), mib(z->peak_grads),
              mib(z->grads), mib(z->optim), mib(z->peak_acts), mib(z->acts));
  }
  const zero_memory *z = &m->rank[0];
  if (m->gpu) /* all allocated at the start: peak = held */
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "rank 0's GPU holds params %.2f MiB (%s), grads %.2f MiB "
              "(FP32%s), optimizer %.2f MiB, activations %.2f MiB (ZeRO's "
              "mixed-precision formula for params + grads + optimizer: "
              "%.2f MiB)",
              mib(z->params),
              m->stage == 3 ? "FP32 master weights and BF16 copy of its "
                              "shard, two gathered layers"
                            : "FP32 master weights of its part and the "
                              "BF16 copy of all",
              mib(z->grads),
              m->stage >= 2 ? ": its part and the layers' buffers" : "",
              mib(z->optim), mib(z->acts), mib(z->f_mixed));
  else
    r->h->log(r->ctx, DAGRUN_LOG_INFO,
              "ZeRO stage %d fp32 formula for a rank: in the step params "
              "%.2f MiB, grads %.2f MiB; between steps params %.2f MiB, "
              "grads %.2f MiB; optimizer %.2f MiB; activations %.2f MiB",
              m->stage, mib(z->f_peak_params), mib(z->f_peak_grads),
              mib(z->f_params), mib(z->f_grads), mib(z->f_optim),
              mib(m->f_acts));
  char w[2][GANGMEM_LINE];
  int n = gangmem_worse(m, w);
  for (int i = 0; i < n; i++)
    r->h->log(r->ctx, DAGRUN_LOG_WARN, "%s", w[i]);
}

/* {params, grads, optim, acts} in bytes. */
static cJSON *kinds(uint64_t p, uint64_t g, uint64_t o, uint64_t a) {
  cJSON *k = cJSON_CreateObject();
  cJSON_AddNumberToObject(k, "params", (double)p);
  cJSON_AddNumberToObject(k, "grads", (double)g);
  cJSON_AddNumberToObject(k, "optim", (double)o);
  cJSON_AddNumberToObject(k, "acts", (double)a);
  return k;
}

void gangmem_summary(const gangmem *m, cJSON *summary) {
  cJSON *mem = cJSON_AddObjectToObject(summary, "memory");
  const zero_memory *z = &m->rank[0];
  cJSON *f = cJSON_AddObjectToObject(mem, "formula");
  cJSON_AddStringToObject(f, "precision", m->gpu ? "mixed" : "fp32");
  if (m->gpu) {
    cJSON_AddNumberToObject(f, "mixed", (double)z->f_mixed);
  } else {
    cJSON_AddItemToObject(
        f, "held", kinds(z->f_params, z->f_grads, z->f_optim, m->f_acts));
    cJSON_AddItemToObject(
        f, "peak",
        kinds(z->f_peak_params, z->f_peak_grads, z->f_optim, m->f_acts));
  }
  cJSON *ranks = cJSON_AddArrayToObject(mem, "ranks");
  for (int q = 0; q < m->N; q++) {
    const zero_memory *x = &m->rank[q];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "rank", q);
    cJSON_AddItemToObject(o, "held",
                          kinds(x->params, x->grads, x->optim, x->acts));
    cJSON_AddItemToObject(
        o, "peak",
        kinds(x->peak_params, x->peak_grads, x->optim, x->peak_acts));
    cJSON_AddItemToArray(ranks, o);
  }
  cJSON *w = cJSON_AddArrayToObject(mem, "worse_than_lower");
  char s[2][GANGMEM_LINE];
  int n = gangmem_worse(m, s);
  for (int i = 0; i < n; i++)
    cJSON_AddItemToArray(w, cJSON_CreateString(s[i]));
}

void gangmem_comm(trainrun *r, const comm_stats *cs, int64_t steps,
                  cJSON *summary) {
  cJSON *o = cJSON_AddObjectToObject(summary, "comm");
  cJSON_AddNumberToObject(o, "rank", 0);
  cJSON_AddNumberToObject(o, "steps", (double)steps);
  char line[1024];
  int n = 0;
  for (int k = 0; k < COMM_NKINDS; k++) {
    if (!cs->calls[k])
      continue;
    cJSON *x = cJSON_AddObjectToObject(o, comm_kind_name((comm_kind)k));
    cJSON_AddNumberToObject(x, "calls", (double)cs->calls[k]);
    cJSON_AddNumberToObject(x, "bytes", cs->bytes[k]);
    cJSON_AddNumberToObject(x, "seconds", cs->seconds[k]);
    if (n < (int)sizeof line)
      n += snprintf(line + n, sizeof line - n,
                    "; %s %llu calls, %.2f MiB, %.3f s",
                    comm_kind_name((comm_kind)k), cs->calls[k],
                    cs->bytes[k] / 1048576.0, cs->seconds[k]);
  }
  r->h->log(r->ctx, DAGRUN_LOG_INFO,
            "rank 0's communication over %lld steps (time inside the comm "
            "calls)%s",
            (long long)steps, n ? line : ": none");
}
