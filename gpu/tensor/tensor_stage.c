/* The part of a tensor shard a pipeline stage keeps; see
 * tensor_stage.h. */
#include "tensor_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parameter group tensor i's flat offset lies in. */
static size_t group_of(const gpt *model, size_t i) {
  size_t off = gpt_tensor_at(model, i)->offset, ng = gpt_group_count(model);
  for (size_t g = 0; g < ng; g++) {
    size_t go, gn;
    gpt_group_range(model, g, &go, &gn);
    if (off >= go && off < go + gn)
      return g;
  }
  return ng;
}

/* Whether stage s of P has group g (n_layer L + 2 groups). */
static int stage_has(int g, int s, int P, int L) {
  int lo = 1 + s * (L / P), hi = 1 + (s + 1) * (L / P);
  return (g == 0 && s == 0) || (g >= lo && g < hi) ||
         (g == L + 1 && s == P - 1);
}

int tensor_stage_init(tensor_stage *st, const gpt *model,
                      const tensor_layout *lay, int s, int P, char *err,
                      size_t errlen) {
  memset(st, 0, sizeof *st);
  const gpt_config *cfg = gpt_get_config(model);
  int L = cfg->n_layer;
  int tied = !(cfg->family == GPT_FAMILY_LLAMA && cfg->untied_head);
  size_t nt = gpt_tensor_count(model), nrepl;
  st->nt = nt;
  st->nshard = tensor_layout_floats(lay, &nrepl);
  st->at = calloc(nt, sizeof *st->at);
  st->numel = calloc(nt, sizeof *st->numel);
  st->sh = calloc(nt, sizeof *st->sh);
  if (!st->at || !st->numel || !st->sh) {
    tensor_stage_free(st);
    snprintf(err, errlen, "tensor_stage: out of memory");
    return -1;
  }
  for (size_t i = 0; i < nt; i++) {
    size_t numel;
    tensor_layout_tensor(lay, i, &st->sh[i], &numel);
    int head = tied && i == 0 && P > 1; /* the tied head's embedding */
    if (head)
      st->tied_n = numel;
    if (stage_has((int)group_of(model, i), s, P, L) || (head && s == P - 1))
      st->numel[i] = numel;
  }
  /* Packed in the shard's order: the replicated tensors stay first. */
  size_t *order = malloc(nt * sizeof *order);
  if (!order) {
    tensor_stage_free(st);
    snprintf(err, errlen, "tensor_stage: out of memory");
    return -1;
  }
  for (size_t i = 0; i < nt; i++)
    order[i] = i;
  for (size_t i = 1; i < nt; i++) /* insertion sort by shard offset */
    for (size_t j = i; j > 0 && st->sh[order[j - 1]] > st->sh[order[j]]; j--) {
      size_t x = order[j];
      order[j] = order[j - 1];
      order[j - 1] = x;
    }
  for (size_t k = 0; k < nt; k++) {
    size_t i = order[k];
    st->at[i] = st->n;
    st->n += st->numel[i];
    if (st->sh[i] < nrepl)
      st->nrepl = st->n;
  }
  free(order);
  st->has_tied = st->tied_n && (s == 0 || s == P - 1);
  st->tied_at = st->has_tied ? st->at[0] : 0;
  return 0;
}

void tensor_stage_free(tensor_stage *st) {
  free(st->at);
  free(st->numel);
  free(st->sh);
  memset(st, 0, sizeof *st);
}

void tensor_stage_take(const tensor_stage *st, const float *shard,
                       float *part) {
  for (size_t i = 0; i < st->nt; i++)
    if (st->numel[i])
      memcpy(part + st->at[i], shard + st->sh[i], st->numel[i] * sizeof(float));
}

void tensor_stage_put(const tensor_stage *st, const float *part, float *shard,
                      int skip_tied) {
  for (size_t i = 0; i < st->nt; i++)
    if (st->numel[i] && !(skip_tied && i == 0 && st->tied_n))
      memcpy(shard + st->sh[i], part + st->at[i], st->numel[i] * sizeof(float));
}

int tensor_stage_once(const tensor_stage *st, int last, size_t from, size_t hi,
                      size_t r[2][2]) {
  if (!st->has_tied || !last) {
    r[0][0] = from;
    r[0][1] = hi;
    return 1;
  }
  size_t ca = st->tied_at, cb = st->tied_at + st->tied_n;
  r[0][0] = from;
  r[0][1] = ca < hi ? (ca > from ? ca : from) : hi;
  r[1][0] = cb > from ? (cb < hi ? cb : hi) : from;
  r[1][1] = hi;
  return 2;
}

int tensor_stage_join(const tensor_stage *st, comm *pp, const float *part,
                      size_t k, float *shard, char *err, size_t errlen) {
  int last = comm_rank(pp) == comm_size(pp) - 1;
  memset(shard, 0, (1 + k) * st->nshard * sizeof(float));
  for (size_t j = 0; j <= k; j++)
    tensor_stage_put(st, part + j * st->n, shard + j * st->nshard, last);
  return comm_allreduce_sum(pp, shard, (1 + k) * st->nshard, err, errlen);
}
