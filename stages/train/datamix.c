/* The train stage's data mixture; see datamix.h. */
#include "datamix.h"

#include "data/tokfile.h"
#include "lib/fileio.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A source name names a metric (mix_tokens_<name>): [A-Za-z0-9_]{1,40}. */
static int name_ok(const char *z) {
  if (!z[0] || strlen(z) > 40)
    return 0;
  for (; *z; z++)
    if (!((*z >= 'a' && *z <= 'z') || (*z >= 'A' && *z <= 'Z') ||
          (*z >= '0' && *z <= '9') || *z == '_'))
      return 0;
  return 1;
}

/* A whole number from the text: finite and above 0. */
static int parse_positive(const char *z, double *out) {
  char *end;
  double x = strtod(z, &end);
  if (end == z || *end || !isfinite(x) || !(x > 0))
    return -1;
  *out = x;
  return 0;
}

static int set_weight(loader_source *s, double x) {
  s->weight = x;
  return 0;
}

static int set_max_tokens(loader_source *s, double x) {
  if (x < 1 || x >= 1.8e19 || x != floor(x))
    return -1;
  s->max_tokens = (uint64_t)x;
  return 0;
}

static int set_epochs(loader_source *s, double x) {
  s->epochs = x;
  return 0;
}

/* One of the maps keyed by source name: each key must be a source of
 * data_mix and each value what set takes (described by what). */
static int read_map(dagrun_ctx *ctx, const dagrun_host *h, datamix *m,
                    const char *param, const char *what,
                    int (*set)(loader_source *, double)) {
  size_t n = 0;
  h->param_map_size(ctx, param, &n);
  if (n > 0 && m->n == 0) {
    h->fail(ctx, "%s needs data_mix (the sources it names)", param);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    const char *key = "", *value = "";
    h->param_map_entry(ctx, param, i, &key, &value);
    size_t s = 0;
    while (s < m->n && strcmp(m->src[s].name, key) != 0)
      s++;
    if (s == m->n) {
      h->fail(ctx, "%s: '%s' is not a source of data_mix", param, key);
      return -1;
    }
    double x;
    if (parse_positive(value, &x) != 0 || set(&m->src[s], x) != 0) {
      h->fail(ctx, "%s: %s: '%s' must be %s", param, key, value, what);
      return -1;
    }
  }
  return 0;
}

/* data and data_mix: exactly one. */
static int read_sources(dagrun_ctx *ctx, const dagrun_host *h, datamix *m) {
  const char *data = NULL;
  size_t n = 0;
  h->param_string(ctx, "data", &data);
  h->param_map_size(ctx, "data_mix", &n);
  int has_data = data && data[0];
  if (has_data == (n > 0)) {
    h->fail(ctx, has_data ? "data and data_mix exclude each other: give one"
                          : "no data: give data (the tokenize stage's output "
                            "directory) or data_mix (several, with weights)");
    return -1;
  }
  if (n > LOADER_MAX_SOURCES) {
    h->fail(ctx, "data_mix: %zu sources, at most %d", n, LOADER_MAX_SOURCES);
    return -1;
  }
  const char *base = h->dir(ctx, DAGRUN_DIR_DAG);
  for (size_t i = 0; i < n; i++) {
    const char *key = "", *value = "";
    h->param_map_entry(ctx, "data_mix", i, &key, &value);
    if (!name_ok(key)) {
      h->fail(ctx,
              "data_mix: source name '%s' must be 1 to 40 letters, digits "
              "and _ (it names the metric mix_tokens_<name>)",
              key);
      return -1;
    }
    if (!value[0]) {
      h->fail(ctx, "data_mix: %s: no directory given", key);
      return -1;
    }
    m->dir[i] = value[0] == '/' ? strdup(value) : fileio_join(base, value);
    if (!m->dir[i]) {
      h->fail(ctx, "out of memory");
      return -1;
    }
    m->src[i] = (loader_source){.name = key, .weight = 1};
    m->n = i + 1;
  }
  return 0;
}

int datamix_read(dagrun_ctx *ctx, const dagrun_host *h, datamix *m) {
  memset(m, 0, sizeof *m);
  if (read_sources(ctx, h, m) != 0 ||
      read_map(ctx, h, m, "data_weights", "a number above 0", set_weight) ||
      read_map(ctx, h, m, "data_max_tokens", "a whole number of tokens above 0",
               set_max_tokens) ||
      read_map(ctx, h, m, "data_epochs", "a number of epochs above 0",
               set_epochs))
    return -1;
  for (size_t i = 0; i < m->n; i++)
    if (m->src[i].max_tokens && m->src[i].epochs > 0) {
      h->fail(ctx,
              "%s: data_max_tokens and data_epochs are both set: give "
              "one budget",
              m->src[i].name);
      return -1;
    }
  return 0;
}

/* Source i's directory against the first's (first): one vocabulary and
 * the same tokenizer. 0, or -1 with err. */
static int same_tokenizer(const datamix *m, size_t i, const tokdata *first,
                          const tokdata *part, char *err, size_t errlen) {
  if (part->vocab_size != first->vocab_size) {
    snprintf(err, errlen,
             "data_mix: %s (%s) has a vocabulary of %d tokens, but %s (%s) "
             "has %d: every source must be tokenized with one tokenizer",
             m->src[i].name, part->dir, part->vocab_size, m->src[0].name,
             first->dir, first->vocab_size);
    return -1;
  }
  tokdata_tokref a = {m->src[0].name, first->tokenizer,
                      first->tokenizer_sha256};
  tokdata_tokref b = {m->src[i].name, part->tokenizer, part->tokenizer_sha256};
  char sub[1024];
  if (tokdata_same_tokenizer(&a, &b, sub, sizeof sub) != 0) {
    snprintf(err, errlen,
             "data_mix: %s: every source must be tokenized with one "
             "tokenizer",
             sub);
    return -1;
  }
  return 0;
}

/* Moves part's files onto the ends of td's lists (part keeps none). */
static int take_files(tokdata *td, tokdata *part) {
  char **tr = realloc(td->train, (td->ntrain + part->ntrain + 1) * sizeof *tr);
  if (tr)
    td->train = tr;
  char **va = realloc(td->val, (td->nval + part->nval + 1) * sizeof *va);
  if (va)
    td->val = va;
  if (!tr || !va)
    return -1;
  memcpy(td->train + td->ntrain, part->train, part->ntrain * sizeof *tr);
  memcpy(td->val + td->nval, part->val, part->nval * sizeof *va);
  td->ntrain += part->ntrain;
  td->nval += part->nval;
  td->train[td->ntrain] = td->val[td->nval] = NULL;
  part->ntrain = part->nval = 0;
  return 0;
}

int datamix_open(dagrun_ctx *ctx, const dagrun_host *h, datamix *m,
                 tokdata *td) {
  char err[2048];
  size_t first_file[LOADER_MAX_SOURCES];
  int rc = -1;
  memset(td, 0, sizeof *td);
  for (size_t i = 0; i < m->n; i++) {
    tokdata part;
    if (tokdata_open("/", m->dir[i], &part, err, sizeof err) != 0) {
      h->fail(ctx, "data_mix: %s: %s", m->src[i].name, err);
      goto done;
    }
    if (i == 0) {
      *td = part;
      td->train = td->val = NULL;
      td->ntrain = td->nval = 0;
      td->dir = strdup(part.dir);
      td->tokenizer = strdup(part.tokenizer);
      if (!td->dir || !td->tokenizer) {
        h->fail(ctx, "data_mix: %s: out of memory", m->src[0].name);
        tokdata_free(&part);
        goto done;
      }
    } else if (same_tokenizer(m, i, td, &part, err, sizeof err)) {
      h->fail(ctx, "%s", err);
      tokdata_free(&part);
      goto done;
    }
    first_file[i] = td->ntrain;
    m->src[i].npaths = part.ntrain;
    m->val_first[i] = td->nval;
    m->val_n[i] = part.nval;
    int ok = take_files(td, &part) == 0;
    tokdata_free(&part);
    if (!ok) {
      h->fail(ctx, "out of memory");
      goto done;
    }
  }
  for (size_t i = 0; i < m->n; i++)
    m->src[i].paths = (const char *const *)td->train + first_file[i];
  rc = 0;
done:
  return rc;
}

cJSON *datamix_json(const datamix *m, const loader *l, const double *val_loss) {
  cJSON *o = cJSON_CreateObject();
  double wsum = 0, served = 0;
  for (size_t i = 0; i < m->n; i++) {
    wsum += m->src[i].weight;
    served += l ? (double)loader_source_tokens(l, i) : 0;
  }
  for (size_t i = 0; o && i < m->n; i++) {
    const loader_source *s = &m->src[i];
    cJSON *e = cJSON_AddObjectToObject(o, s->name);
    cJSON_AddStringToObject(e, "dir", m->dir[i]);
    cJSON_AddNumberToObject(e, "weight", s->weight / wsum);
    if (s->max_tokens)
      cJSON_AddNumberToObject(e, "max_tokens", (double)s->max_tokens);
    if (s->epochs > 0)
      cJSON_AddNumberToObject(e, "epochs", s->epochs);
    if (l) {
      double t = (double)loader_source_tokens(l, i);
      cJSON_AddNumberToObject(e, "tokens", t);
      cJSON_AddNumberToObject(e, "share", served > 0 ? t / served : 0);
    }
    if (val_loss && isfinite(val_loss[i]))
      cJSON_AddNumberToObject(e, "val_loss", val_loss[i]);
  }
  return o;
}

void datamix_free(datamix *m) {
  for (size_t i = 0; i < m->n; i++)
    free(m->dir[i]);
  memset(m, 0, sizeof *m);
}
