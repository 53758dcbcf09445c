/*
 * weights: a gpt's parameters to and from safetensors with GPT-2's
 * names; weights.h states the contract.
 *
 * The names and shapes are those of Hugging Face's GPT2LMHeadModel, so
 * that a file written here loads there and the reverse. Both spellings
 * of the names are read (with and without GPT2LMHeadModel's prefix),
 * since files on the Hub come both ways; the head is tied to the token
 * embedding, so no separate lm_head tensor is written. A Llama's tensors
 * have Hugging Face LlamaForCausalLM's names already (gpt.h), lm_head
 * among them when it is untied.
 */
#include "weights.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/fileio.h"

/* The prefix GPT2LMHeadModel's state dict puts before GPT2Model's names. */
#define HF_PREFIX "transformer."

int weights_save(const char *path, gpt *m, st_dtype dtype,
                 const char *const *meta_keys, const char *const *meta_values,
                 size_t n_meta, char *err, size_t errlen) {
  size_t n = gpt_tensor_count(m);
  st_tensor *ts = calloc(n, sizeof *ts);
  const char **keys = malloc((n_meta + 1) * sizeof *keys);
  const char **values = malloc((n_meta + 1) * sizeof *values);
  if (!ts || !keys || !values) {
    free(ts);
    free(keys);
    free(values);
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  const gpt_config *c = gpt_get_config(m);
  float *p = gpt_params(m);
  for (size_t i = 0; i < n; i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    ts[i].name = t->name;
    ts[i].dtype = dtype;
    ts[i].ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++)
      ts[i].shape[d] = t->shape[d];
    ts[i].data = p + t->offset;
    /* The padding rows of the token embedding are not the model's. */
    if (gpt_tensor_vocab_rows(t))
      ts[i].shape[0] = c->vocab_size;
  }
  keys[0] = "format";
  values[0] = "pt";
  for (size_t i = 0; i < n_meta; i++) {
    keys[i + 1] = meta_keys[i];
    values[i + 1] = meta_values[i];
  }
  int rc = st_write(path, ts, n, dtype == ST_BF16, keys, values, n_meta + 1,
                    err, errlen);
  free(ts);
  free(keys);
  free(values);
  return rc;
}

/* "(2 x 3)" for a file's shape. */
static void shape_text(const int64_t *shape, int ndim, char *buf, size_t len) {
  size_t at = 0;
  at += (size_t)snprintf(buf + at, len - at, "(");
  for (int d = 0; d < ndim && at < len; d++)
    at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, d ? " x " : "",
                           shape[d]);
  if (at < len)
    snprintf(buf + at, len - at, ")");
}

/* What follows "<prefix><digits>" in name, or NULL when name is not
 * that. */
static const char *after_layer(const char *name, const char *prefix) {
  size_t k = strlen(prefix);
  if (strncmp(name, prefix, k) != 0)
    return NULL;
  const char *s = name + k;
  if (*s < '0' || *s > '9')
    return NULL;
  while (*s >= '0' && *s <= '9')
    s++;
  return s;
}

/* A tensor of a Hugging Face file that is not a parameter and is not
 * needed: the tied output head, GPT-2's attention masks and the RoPE
 * frequencies older Llama files store (computed here from rope_theta). */
static int ignorable(const char *name) {
  if (strcmp(name, "lm_head.weight") == 0)
    return 1;
  const char *s = after_layer(name, "h.");
  if (s)
    return strcmp(s, ".attn.bias") == 0 || strcmp(s, ".attn.masked_bias") == 0;
  s = after_layer(name, "model.layers.");
  return s && strcmp(s, ".self_attn.rotary_emb.inv_freq") == 0;
}

/* name without the "transformer." prefix. */
static const char *plain_name(const char *name) {
  size_t k = strlen(HF_PREFIX);
  return strncmp(name, HF_PREFIX, k) == 0 ? name + k : name;
}

/* Copies numel elements of s into dst as float32 (BF16 widened: its bits
 * are the top half of a float32's; F16 converted exactly). The file's
 * data may be unaligned. */
static void read_elements(const st_tensor *s, float *dst, size_t numel) {
  if (s->dtype == ST_F32) {
    memcpy(dst, s->data, numel * sizeof(float));
    return;
  }
  const unsigned char *b = s->data;
  for (size_t i = 0; i < numel; i++) {
    uint16_t h;
    memcpy(&h, b + 2 * i, 2);
    if (s->dtype == ST_F16) {
      dst[i] = st_f16_to_f32(h);
    } else {
      uint32_t u = (uint32_t)h << 16;
      memcpy(dst + i, &u, 4);
    }
  }
}

/* The index of the parameter of that name, or gpt_tensor_count(m). */
static size_t param_index(const gpt *m, const char *name) {
  size_t n = gpt_tensor_count(m), i = 0;
  while (i < n && strcmp(gpt_tensor_at(m, i)->name, name) != 0)
    i++;
  return i;
}

/* The files a model's weights are in: one safetensors file, or the shards
 * a Hugging Face model.safetensors.index.json names; their tensors in one
 * list, file by file. */
typedef struct weight_files {
  st_file **f;
  const char **name; /* each file's name in the index (borrowed from the
                        index, only while it is read) */
  size_t nf;
  const st_tensor **t;
  size_t nt;
} weight_files;

static void files_close(weight_files *w) {
  for (size_t i = 0; i < w->nf; i++)
    st_close(w->f[i]);
  free(w->f);
  free(w->name);
  free(w->t);
  memset(w, 0, sizeof *w);
}

/* Opens one more file (name: as the index gives it, or NULL) into w and
 * lists its tensors. 0 or -1 with err. */
static int files_add(weight_files *w, const char *path, const char *name,
                     char *err, size_t errlen) {
  st_file *f;
  if (st_open(path, &f, err, errlen) != 0)
    return -1;
  st_file **nf = realloc(w->f, (w->nf + 1) * sizeof *nf);
  if (nf)
    w->f = nf;
  const char **nn = nf ? realloc(w->name, (w->nf + 1) * sizeof *nn) : NULL;
  if (nn)
    w->name = nn;
  const st_tensor **nt =
      nn ? realloc(w->t, (w->nt + st_count(f)) * sizeof *nt) : NULL;
  if (!nt) {
    st_close(f);
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
  }
  w->t = nt;
  w->name[w->nf] = name;
  w->f[w->nf++] = f;
  for (size_t k = 0; k < st_count(f); k++)
    w->t[w->nt++] = st_at(f, k);
  return 0;
}

static int has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A shard's name as the index gives it: a file beside the index. */
static int shard_name_ok(const char *name) {
  return *name && !strchr(name, '/') && strcmp(name, ".") != 0 &&
         strcmp(name, "..") != 0 && has_suffix(name, ".safetensors");
}

/* Every shard of index (a model.safetensors.index.json: {"weight_map":
 * {tensor: file}}) opened into w, each once, in the order first named;
 * a tensor must be in the shard the map names. 0 or -1 with err. */
static int files_open_index(const char *index, weight_files *w, char *err,
                            size_t errlen) {
  char *text = NULL, *dir = strdup(index);
  size_t len = 0;
  cJSON *j = NULL;
  int rc = -1;
  if (!dir || fileio_read_file(index, &text, &len) != 0) {
    snprintf(err, errlen, "%s: cannot be read", index);
    goto out;
  }
  char *slash = strrchr(dir, '/');
  if (slash)
    slash[1] = '\0';
  else
    dir[0] = '\0';
  j = cJSON_ParseWithLength(text, len);
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(j, "weight_map"), *e;
  if (!cJSON_IsObject(map) || !map->child) {
    snprintf(err, errlen,
             "%s: no \"weight_map\" object of tensor names to shard files",
             index);
    goto out;
  }
  cJSON_ArrayForEach(e, map) {
    if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring)) {
      snprintf(err, errlen,
               "%s: tensor \"%s\" maps to %s%s%s: expected a .safetensors "
               "file beside the index",
               index, e->string, cJSON_IsString(e) ? "\"" : "",
               cJSON_IsString(e) ? e->valuestring : "a non-string",
               cJSON_IsString(e) ? "\"" : "");
      goto out;
    }
    const cJSON *before = map->child;
    while (before != e && strcmp(before->valuestring, e->valuestring) != 0)
      before = before->next;
    if (before != e)
      continue; /* that shard is open already */
    char *shard = fileio_xprintf("%s%s", dir, e->valuestring);
    int bad = !shard || files_add(w, shard, e->valuestring, err, errlen) != 0;
    free(shard);
    if (bad)
      goto out;
  }
  /* Each tensor where the map says it is. */
  for (size_t f = 0, k = 0; f < w->nf; f++)
    for (size_t i = 0; i < st_count(w->f[f]); i++, k++) {
      const cJSON *at = cJSON_GetObjectItemCaseSensitive(map, w->t[k]->name);
      const char *fname = w->name[f];
      if (!cJSON_IsString(at) || strcmp(at->valuestring, fname) != 0) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\" is in %s, but the index's weight_map "
                 "%s%s",
                 index, w->t[k]->name, fname,
                 cJSON_IsString(at) ? "puts it in " : "does not list it",
                 cJSON_IsString(at) ? at->valuestring : "");
        goto out;
      }
    }
  rc = 0;
out:
  cJSON_Delete(j);
  free(text);
  free(dir);
  return rc;
}

/* path: a safetensors file, or a model.safetensors.index.json. */
static int files_open(const char *path, weight_files *w, char *err,
                      size_t errlen) {
  memset(w, 0, sizeof *w);
  int rc = has_suffix(path, ".index.json")
               ? files_open_index(path, w, err, errlen)
               : files_add(w, path, NULL, err, errlen);
  if (rc != 0)
    files_close(w);
  return rc;
}

int weights_load(const char *path, gpt *m, char *err, size_t errlen) {
  weight_files w;
  if (files_open(path, &w, err, errlen) != 0)
    return -1;
  const gpt_config *c = gpt_get_config(m);
  size_t nt = gpt_tensor_count(m);
  /* seen[i]: the file tensor that gave parameter i, +1 (0: none yet). */
  size_t *seen = calloc(nt, sizeof *seen);
  float *p = gpt_params(m);
  char want[64], have[64];
  int rc = -1;
  if (!seen) {
    snprintf(err, errlen, "%s: out of memory", path);
    goto done;
  }
  for (size_t k = 0; k < w.nt; k++) {
    const st_tensor *s = w.t[k];
    const char *name = plain_name(s->name);
    size_t i = param_index(m, name);
    if (i == nt) {
      if (ignorable(name))
        continue;
      snprintf(err, errlen,
               "%s: tensor \"%s\" is not a parameter of this %s (%d "
               "layers): the file is another model",
               path, s->name,
               c->family == GPT_FAMILY_LLAMA ? "Llama" : "GPT-2", c->n_layer);
      goto done;
    }
    const gpt_tensor *t = gpt_tensor_at(m, i);
    if (seen[i]) {
      snprintf(err, errlen, "%s: tensor \"%s\" is there twice (as \"%s\")",
               path, name, w.t[seen[i] - 1]->name);
      goto done;
    }
    seen[i] = k + 1;
    /* The token embedding may come with or without padding rows. */
    int is_wte = gpt_tensor_vocab_rows(t);
    int64_t rows = t->shape[0];
    if (is_wte && s->ndim == 2 && s->shape[0] == c->vocab_size)
      rows = c->vocab_size;
    int64_t shape[2] = {rows, t->ndim == 2 ? t->shape[1] : 0};
    int ok = s->ndim == t->ndim;
    for (int d = 0; ok && d < t->ndim; d++)
      ok = s->shape[d] == shape[d];
    if (!ok) {
      int64_t model_shape[2] = {is_wte ? c->vocab_size : t->shape[0],
                                t->ndim == 2 ? t->shape[1] : 0};
      shape_text(model_shape, t->ndim, want, sizeof want);
      shape_text(s->shape, s->ndim, have, sizeof have);
      snprintf(err, errlen,
               "%s: tensor \"%s\" has shape %s, this model's is %s: the file "
               "is another model",
               path, s->name, have, want);
      goto done;
    }
  }
  for (size_t i = 0; i < nt; i++)
    if (!seen[i]) {
      const gpt_tensor *t = gpt_tensor_at(m, i);
      int64_t model_shape[2] = {
          gpt_tensor_vocab_rows(t) ? c->vocab_size : t->shape[0],
          t->ndim == 2 ? t->shape[1] : 0};
      shape_text(model_shape, t->ndim, want, sizeof want);
      snprintf(err, errlen,
               "%s: tensor \"%s\" %s is missing: the file is another model",
               path, t->name, want);
      goto done;
    }
  /* Every tensor is there with its shape: only now is m changed, so a
   * refused file leaves it as it was. */
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    const st_tensor *s = w.t[seen[i] - 1];
    size_t cols = t->ndim == 2 ? (size_t)t->shape[1] : 1;
    size_t numel = (size_t)s->shape[0] * cols;
    memset(p + t->offset, 0, t->numel * sizeof(float));
    /* wte's padding rows, when the file has them, stay zero too. */
    if (gpt_tensor_vocab_rows(t))
      numel = (size_t)c->vocab_size * cols;
    read_elements(s, p + t->offset, numel);
  }
  rc = 0;
done:
  free(seen);
  files_close(&w);
  return rc;
}

int weights_check_finite(gpt *m, const char *path, char *err, size_t errlen) {
  const float *p = gpt_params(m);
  size_t nt = gpt_tensor_count(m);
  for (size_t i = 0; i < nt; i++) {
    const gpt_tensor *t = gpt_tensor_at(m, i);
    for (size_t k = 0; k < t->numel; k++)
      if (!isfinite(p[t->offset + k])) {
        snprintf(err, errlen,
                 "%s: tensor \"%s\" holds %g at element %zu: the weights are "
                 "not finite numbers (training diverged?)",
                 path, t->name, (double)p[t->offset + k], k);
        return -1;
      }
  }
  return 0;
}
