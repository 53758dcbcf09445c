/* A flat array sharded over a group; see zslice.h. */
#include "zslice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int zslice_check_stage(int stage, const char *who, char *err, size_t errlen) {
  if (stage >= 0 && stage <= 2)
    return 0;
  snprintf(err, errlen,
           "%s: zero_stage %d over the data-parallel group (0, 1 or 2: the "
           "parameters are not sharded over it)",
           who, stage);
  return -1;
}

void zslice_init(zslice *z, comm *c, size_t n) {
  z->c = c;
  z->D = c ? comm_size(c) : 1;
  z->d = c ? comm_rank(c) : 0;
  z->n = n;
  z->S = (n + (size_t)z->D - 1) / (size_t)z->D;
  z->lo = (size_t)z->d * z->S;
  z->own = z->lo < n ? (n - z->lo < z->S ? n - z->lo : z->S) : 0;
}

size_t zslice_cut(const optim_group *g, size_t ng, size_t lo, size_t len,
                  size_t local, size_t pad, optim_group *out) {
  size_t k = 0, hi = lo + len;
  for (size_t i = 0; i < ng; i++) {
    size_t a = g[i].offset > lo ? g[i].offset : lo;
    size_t b = g[i].offset + g[i].numel < hi ? g[i].offset + g[i].numel : hi;
    if (a < b)
      out[k++] = (optim_group){local + (a - lo), b - a, g[i].decay};
  }
  if (pad > len)
    out[k++] = (optim_group){local + len, pad - len, 0};
  return k;
}

int zslice_optim(const zslice *z, const optim_config *oc, const optim_group *g,
                 size_t ng, optim **out, char *err, size_t errlen) {
  optim_group *cut = calloc(ng + 1, sizeof *cut);
  if (!cut) {
    snprintf(err, errlen, "zslice: out of memory");
    return -1;
  }
  size_t k = zslice_cut(g, ng, z->lo, z->own, 0, z->S, cut);
  int rc = optim_create(oc, z->S, cut, k, out, err, errlen);
  free(cut);
  return rc;
}

int zslice_reduce(zslice *z, const float *full, float *slice, float scale,
                  char *err, size_t errlen) {
  if (z->D == 1)
    memmove(slice, full, z->S * sizeof(float));
  else if (comm_reduce_scatter_sum(z->c, full, slice, z->S, err, errlen) != 0)
    return -1;
  for (size_t i = 0; i < z->S; i++)
    slice[i] *= scale;
  return 0;
}

int zslice_gather(zslice *z, float *full, char *err, size_t errlen) {
  if (z->D == 1)
    return 0;
  return comm_allgather(z->c, full + z->lo, full, z->S, err, errlen);
}

/* The state floats a parameter has in o (AdamW 2, Lion 1). */
static size_t per_param(optim *o, size_t S) {
  return S ? optim_state_floats(o) / S : 0;
}

void zslice_take(const zslice *z, const float *in, float *piece) {
  if (z->own)
    memcpy(piece, in + z->lo, z->own * sizeof(float));
  memset(piece + z->own, 0, (z->S - z->own) * sizeof(float));
}

int zslice_gather_to(zslice *z, const float *piece, float *out, float *tmp,
                     char *err, size_t errlen) {
  if (z->D == 1) {
    memcpy(out, piece, z->n * sizeof(float));
    return 0;
  }
  if (comm_allgather(z->c, piece, tmp, z->S, err, errlen) != 0)
    return -1;
  memcpy(out, tmp, z->n * sizeof(float));
  return 0;
}

int zslice_state_gather(zslice *z, optim *o, float *out, char *err,
                        size_t errlen) {
  size_t k = per_param(o, z->S), DS = (size_t)z->D * z->S;
  float *tmp = malloc(DS * sizeof(float) + 1);
  if (!tmp) {
    snprintf(err, errlen, "zslice: out of memory gathering the state");
    return -1;
  }
  int rc = 0;
  for (size_t j = 0; j < k && rc == 0; j++)
    rc = zslice_gather_to(z, optim_state(o) + j * z->S, out + j * z->n, tmp,
                          err, errlen);
  free(tmp);
  return rc;
}

void zslice_state_take(const zslice *z, const float *state, size_t stride,
                       optim *o) {
  size_t k = per_param(o, z->S);
  for (size_t j = 0; j < k; j++)
    zslice_take(z, state + j * stride, optim_state(o) + j * z->S);
}
