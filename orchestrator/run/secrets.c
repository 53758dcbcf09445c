#include "secrets.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "dagfile/template.h"

struct secrets {
  char **v;
  size_t *len;
  size_t n, cap, max_len;
};

struct secrets_stream {
  const secrets *set;
  secrets_sink sink;
  void *ud;
  sbuf held; /* bytes that may still begin a secret */
};

secrets *secrets_create(void) { return xcalloc(1, sizeof(secrets)); }

void secrets_destroy(secrets *set) {
  if (!set)
    return;
  for (size_t i = 0; i < set->n; i++) {
    /* Do not leave secrets in freed memory. */
    memset(set->v[i], 0, set->len[i]);
    free(set->v[i]);
  }
  free(set->v);
  free(set->len);
  free(set);
}

void secrets_add(secrets *set, const char *z) {
  size_t n = z ? strlen(z) : 0;
  if (!set || n < SECRETS_MIN_LEN)
    return;
  for (size_t i = 0; i < set->n; i++)
    if (set->len[i] == n && memcmp(set->v[i], z, n) == 0)
      return;
  if (set->n == set->cap) {
    set->cap = set->cap ? 2 * set->cap : 8;
    set->v = xrealloc(set->v, set->cap * sizeof(char *));
    set->len = xrealloc(set->len, set->cap * sizeof(size_t));
  }
  set->v[set->n] = xstrdup(z);
  set->len[set->n++] = n;
  if (n > set->max_len)
    set->max_len = n;
}

size_t secrets_count(const secrets *set) { return set ? set->n : 0; }

size_t secrets_max_len(const secrets *set) { return set ? set->max_len : 0; }

/* Masks b[0..n) into out and returns how many bytes it consumed: all of
 * them when final, else it stops where the rest may still begin a
 * secret. */
static size_t mask_into(const secrets *set, const char *b, size_t n, int final,
                        sbuf *out) {
  size_t i = 0, lit = 0;
  while (i < n) {
    size_t best = 0;
    int partial = 0;
    for (size_t k = 0; k < set->n; k++) {
      const char *z = set->v[k];
      size_t len = set->len[k], avail = n - i;
      if (b[i] != z[0])
        continue;
      if (avail >= len) {
        if (len > best && memcmp(b + i, z, len) == 0)
          best = len;
      } else if (!final && memcmp(b + i, z, avail) == 0) {
        partial = 1;
      }
    }
    if (partial)
      break; /* wait for more: a longer secret may match here */
    if (best) {
      sbuf_add(out, b + lit, i - lit);
      sbuf_puts(out, SECRETS_MASK);
      i += best;
      lit = i;
    } else {
      i++;
    }
  }
  sbuf_add(out, b + lit, i - lit);
  return i;
}

char *secrets_mask(const secrets *set, const char *text) {
  if (!text)
    return NULL;
  if (!set || set->n == 0)
    return xstrdup(text);
  sbuf out = {0};
  (void)mask_into(set, text, strlen(text), 1, &out);
  sbuf_putc(&out, '\0'); /* an empty text still gives a string */
  out.n--;
  return sbuf_take(&out);
}

void secrets_mask_json(const secrets *set, cJSON *j) {
  if (!set || set->n == 0 || !j)
    return;
  for (cJSON *it = j->child; it; it = it->next)
    secrets_mask_json(set, it);
  if (cJSON_IsString(j) && j->valuestring) {
    char *m = secrets_mask(set, j->valuestring);
    if (strcmp(m, j->valuestring) != 0)
      cJSON_SetValuestring(j, m);
    free(m);
  }
  /* A key is written as plainly as a value: an output named after a
   * secret would show it in outputs.json, run.json and the store. */
  if (j->string && !(j->type & cJSON_StringIsConst)) {
    char *m = secrets_mask(set, j->string);
    if (strcmp(m, j->string) != 0) {
      /* cJSON frees a key with its own hooks: allocate it with them. */
      size_t n = strlen(m) + 1;
      char *key = cJSON_malloc(n);
      if (!key) {
        fputs("dagrun: out of memory\n", stderr);
        abort();
      }
      memcpy(key, m, n);
      cJSON_free(j->string);
      j->string = key;
    }
    free(m);
  }
}

secrets *secrets_with_forms(const secrets *set, char *(*form)(const char *)) {
  secrets *out = secrets_create();
  for (size_t i = 0; set && i < set->n; i++) {
    secrets_add(out, set->v[i]);
    char *f = form(set->v[i]);
    secrets_add(out, f);
    if (f)
      memset(f, 0, strlen(f)); /* as secrets_destroy does */
    free(f);
  }
  return out;
}

/* ---- which params are secret ------------------------------------------ */

/* Calls fn for every secret param name of s: those listed in `secrets:`,
 * then those used by a webhook (a name may come twice). */
static void each_secret_param(const spec *s,
                              void (*fn)(void *ud, const char *name,
                                         const ynode *at),
                              void *ud) {
  for (size_t i = 0; i < s->n_secrets; i++)
    fn(ud, s->secrets[i], s->secret_nodes[i]);
  const ynode *al = s->alerts;
  if (!al || al->kind != YNODE_SEQ)
    return;
  for (size_t i = 0; i < al->n; i++) {
    const ynode *w = ynode_get(al->items[i], "webhook");
    if (!w || w->kind != YNODE_SCALAR)
      continue;
    for (const char *p = strstr(w->str, "${params."); p;
         p = strstr(p + 1, "${params.")) {
      const char *z = p + 9;
      size_t n =
          strspn(z, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                    "0123456789_-");
      char *name = xstrndup(z, n);
      fn(ud, name, w);
      free(name);
    }
  }
}

/* The text of a param value as it would appear in a log: a string as is,
 * anything else as JSON. Caller frees; NULL for null. */
static char *value_text(const cJSON *v) {
  if (!v || cJSON_IsNull(v))
    return NULL;
  if (cJSON_IsString(v))
    return xstrdup(v->valuestring);
  char *t = cJSON_PrintUnformatted(v);
  char *out = t ? xstrdup(t) : NULL;
  cJSON_free(t);
  return out;
}

typedef struct collect_ctx {
  secrets *set;
  const cJSON *params;
} collect_ctx;

/* Adds form (freed here, may be NULL) unless it holds raw whole: then
 * masking raw hides all of the value in it already, and the text keeps
 * its quotes around the mask ('***', not ***). */
static void add_form(secrets *set, const char *raw, char *form) {
  if (form && !strstr(form, raw))
    secrets_add(set, form);
  if (form)
    memset(form, 0, strlen(form)); /* as secrets_destroy does */
  free(form);
}

/* A secret param's value v and every form in which a template writes it
 * into a command or a file: |sh quotes it ('a'\''b'), |json escapes it
 * ("a\"b"), and a JSON string holding it escapes it without the quotes.
 * A value with a ', ", \ or a control character differs in those forms,
 * and masking only the raw text would let them through. */
static void add_value(secrets *set, const cJSON *v) {
  char *raw = value_text(v);
  if (!raw)
    return;
  secrets_add(set, raw);
  char *scalar = tmpl_scalar_text(v);
  if (scalar)
    add_form(set, raw, tmpl_sh_quote(scalar));
  free(scalar);
  char *j = cJSON_PrintUnformatted(v);
  if (j && cJSON_IsString(v)) {
    size_t n = strlen(j);
    add_form(set, raw, n >= 2 ? xstrndup(j + 1, n - 2) : NULL);
  }
  add_form(set, raw, j ? xstrdup(j) : NULL);
  if (j)
    memset(j, 0, strlen(j));
  cJSON_free(j);
  memset(raw, 0, strlen(raw));
  free(raw);
}

static void collect_param(void *ud, const char *name, const ynode *at) {
  (void)at;
  collect_ctx *c = ud;
  add_value(c->set, cJSON_GetObjectItemCaseSensitive(c->params, name));
}

/* The values of the ${env:NAME} references in a webhook template. */
static void collect_env(secrets *set, const char *tmpl) {
  for (const char *p = strstr(tmpl, "${env:"); p; p = strstr(p + 1, "${env:")) {
    const char *z = p + 6;
    size_t n = strcspn(z, ":}");
    char *name = xstrndup(z, n);
    secrets_add(set, getenv(name));
    free(name);
  }
}

/* The URL and the parts of it that are secrets: user, password, path and
 * query (scheme, host and port are not: alerts.jsonl shows them). */
static void collect_url(secrets *set, const char *url) {
  secrets_add(set, url);
  CURLU *u = curl_url();
  CURLUPart parts[4] = {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_PATH,
                        CURLUPART_QUERY};
  for (int k = 0; u && k < 4; k++) {
    char *z = NULL;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, parts[k], &z, 0) == CURLUE_OK && z)
      secrets_add(set, z);
    curl_free(z);
  }
  curl_url_cleanup(u);
}

secrets *secrets_collect(const spec *s, const cJSON *params,
                         const rundir *run) {
  secrets *set = secrets_create();
  collect_ctx c = {set, params};
  each_secret_param(s, collect_param, &c);
  const ynode *al = s->alerts;
  if (!al || al->kind != YNODE_SEQ)
    return set;
  tmpl_env te = {0};
  te.s = s;
  te.params = params;
  rundir_tmpl(run, &te);
  for (size_t i = 0; i < al->n; i++) {
    const ynode *w = ynode_get(al->items[i], "webhook");
    if (!w || w->kind != YNODE_SCALAR)
      continue;
    collect_env(set, w->str);
    diags d = {0};
    cJSON *url = NULL;
    if (tmpl_resolve(&te, SIZE_MAX, w, &url, &d) == 0 && cJSON_IsString(url))
      collect_url(set, url->valuestring);
    cJSON_Delete(url);
    diags_free(&d);
  }
  return set;
}

typedef struct redact_ctx {
  cJSON *params;
  secrets *set;
} redact_ctx;

static void redact_param(void *ud, const char *name, const ynode *at) {
  (void)at;
  redact_ctx *c = ud;
  cJSON *v = cJSON_GetObjectItemCaseSensitive(c->params, name);
  if (!v)
    return;
  add_value(c->set, v);
  cJSON_ReplaceItemInObjectCaseSensitive(c->params, name,
                                         cJSON_CreateString(SECRETS_REDACTED));
}

void secrets_redact_params(const spec *s, cJSON *params) {
  if (!cJSON_IsObject(params))
    return;
  redact_ctx c = {params, secrets_create()};
  each_secret_param(s, redact_param, &c);
  secrets_mask_json(c.set, params);
  secrets_destroy(c.set);
}

typedef struct warn_ctx {
  const spec *s;
  const cJSON *params;
  FILE *f;
  strmap seen;
} warn_ctx;

static void warn_param(void *ud, const char *name, const ynode *at) {
  warn_ctx *c = ud;
  size_t dummy;
  if (strmap_get(&c->seen, name, &dummy))
    return;
  strmap_put(&c->seen, name, 1);
  char *z = value_text(cJSON_GetObjectItemCaseSensitive(c->params, name));
  if (z && strlen(z) < SECRETS_MIN_LEN)
    fprintf(c->f,
            "%s:%d:%d: warning: secret param '%s' is shorter than %d bytes: "
            "it is redacted from run.json and the store but not masked in "
            "logs\n",
            c->s->path, at ? at->line : 0, at ? at->col : 0, name,
            SECRETS_MIN_LEN);
  free(z);
}

void secrets_warn(const spec *s, const cJSON *params, FILE *f) {
  if (!params)
    return;
  warn_ctx c = {s, params, f, {0}};
  each_secret_param(s, warn_param, &c);
  strmap_free(&c.seen);
}

/* ---- streaming -------------------------------------------------------- */

secrets_stream *secrets_stream_create(const secrets *set, secrets_sink sink,
                                      void *ud) {
  secrets_stream *m = xcalloc(1, sizeof(*m));
  m->set = set;
  m->sink = sink;
  m->ud = ud;
  return m;
}

static void stream_run(secrets_stream *m, int final) {
  if (m->held.n == 0)
    return;
  if (!m->set || m->set->n == 0) {
    m->sink(m->ud, m->held.s, m->held.n);
    m->held.n = 0;
    return;
  }
  sbuf out = {0};
  size_t used = mask_into(m->set, m->held.s, m->held.n, final, &out);
  memmove(m->held.s, m->held.s + used, m->held.n - used);
  m->held.n -= used;
  if (out.n)
    m->sink(m->ud, out.s, out.n);
  sbuf_free(&out);
}

void secrets_stream_write(secrets_stream *m, const char *p, size_t n) {
  if (n == 0)
    return;
  sbuf_add(&m->held, p, n);
  stream_run(m, 0);
}

void secrets_stream_flush(secrets_stream *m) { stream_run(m, 1); }

void secrets_stream_destroy(secrets_stream *m) {
  if (!m)
    return;
  sbuf_free(&m->held);
  free(m);
}
