/*
 * tokjson: the tokenizer's files, Hugging Face's tokenizer.json (load and
 * save) and GPT-2's vocab.json + merges.txt (load). bpe.h states the
 * contract of bpe_load_hf, bpe_load_gpt2 and bpe_save_hf.
 *
 * Only what dagrun's BPE computes is accepted: a byte-level BPE model
 * with GPT-2's pre-tokenizer, alone or after Hugging Face's Digits (as
 * SmolLM's tokenizer.json has them, in a Sequence). A file that asks
 * for anything else (another model type, normalizer or pre-tokenizer) is
 * refused with the field named, rather than loaded into a tokenizer that
 * would give other ids than the library that wrote it.
 *
 * Vocab files spell a token's bytes with GPT-2's byte-to-unicode map
 * (space is "Ġ"); specials are spelled as their own text.
 */
#include "bpe_internal.h"
#include "lib/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small helpers -------------------------------------------------- */

/* The whole file (lib/fileio.h's reader), failing with
 * "PATH: cannot open: REASON" as the tokenizer's errors read. */
static int read_json_source(const char *path, char **out, size_t *len, char *err,
                     size_t errlen) {
  *out = NULL;
  int rc = fileio_read_file(path, out, len);
  if (rc != 0)
    snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-rc));
  return rc != 0 ? -1 : 0;
}

/* A token's bytes spelled in GPT-2's byte-level alphabet (UTF-8, each
 * byte 1 or 2 bytes long). Writes into out (room for 2n + 1). */
static size_t bytes_to_bytelevel(const char *p, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t cp = bpe_byte_to_cp((uint8_t)p[i]);
    if (cp < 0x80) {
      out[k++] = (char)cp;
    } else {
      out[k++] = (char)(0xC0 | (cp >> 6));
      out[k++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  out[k] = '\0';
  return k;
}

/* The bytes a byte-level spelled string stands for (out has room for
 * n). Returns the length, or -1 if s has a character outside the
 * alphabet. */
static long bytelevel_to_bytes(const char *s, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    uint32_t cp;
    if (c < 0x80) {
      cp = c;
      i++;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < n &&
               ((unsigned char)s[i + 1] & 0xC0) == 0x80) {
      cp = ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
      i += 2;
    } else {
      return -1;
    }
    int b = bpe_cp_to_byte(cp);
    if (b < 0)
      return -1;
    out[k++] = (char)b;
  }
  return (long)k;
}

/* A map from vocab strings (as spelled in the file) to ids. */
typedef struct smap {
  const char **key;
  size_t *klen;
  uint32_t *id;
  size_t mask;
} smap;

static int smap_init(smap *m, size_t n) {
  size_t cap = 16;
  while (cap < 2 * n + 2)
    cap *= 2;
  m->key = calloc(cap, sizeof *m->key);
  m->klen = calloc(cap, sizeof *m->klen);
  m->id = calloc(cap, sizeof *m->id);
  m->mask = cap - 1;
  return m->key && m->klen && m->id ? 0 : -1;
}

static void smap_free(smap *m) {
  free(m->key);
  free(m->klen);
  free(m->id);
}

/* Returns the id of key, or UINT32_MAX; with add, inserts it (an
 * existing key keeps its id; *dup set). */
static uint32_t smap_get(smap *m, const char *k, size_t n, int add, uint32_t id,
                         int *dup) {
  size_t i = bpe_hash_bytes(k, n) & m->mask;
  while (m->key[i]) {
    if (m->klen[i] == n && memcmp(m->key[i], k, n) == 0) {
      if (dup)
        *dup = 1;
      return m->id[i];
    }
    i = (i + 1) & m->mask;
  }
  if (!add)
    return UINT32_MAX;
  m->key[i] = k;
  m->klen[i] = n;
  m->id[i] = id;
  return id;
}

/* What both loaders collect before building. */
typedef struct vocab_in {
  const char *what; /* the file, for messages */
  size_t nvocab_entries;
  smap map;
  bpe_tokdef *defs;
  char *bytes; /* decoded token bytes, for defs */
  size_t nbytes;
  uint32_t nvocab;
  bpe_merge *merges;
  size_t nmerges;
  uint32_t *specials; /* the added tokens' ids */
  uint8_t *flags;     /* and their BPE_ADDED_* */
  size_t nspecials;
} vocab_in;

static void vocab_in_free(vocab_in *v) {
  smap_free(&v->map);
  free(v->defs);
  free(v->bytes);
  free(v->merges);
  free(v->specials);
  free(v->flags);
}

/* An added token's flags (BPE_ADDED_*) into *fl: each true, false or
 * absent (as tokenizers.js reads them: false, and normalized = not
 * special); single_word true is refused, dagrun does not do it. */
static int read_added_flags(const vocab_in *v, const cJSON *tok,
                            const char *content, uint8_t *fl, char *err,
                            size_t errlen) {
  static const struct {
    const char *name;
    uint8_t bit;
  } names[] = {{"special", BPE_ADDED_SPECIAL},
               {"lstrip", BPE_ADDED_LSTRIP},
               {"rstrip", BPE_ADDED_RSTRIP},
               {"normalized", BPE_ADDED_NORMALIZED},
               {"single_word", 0}};
  *fl = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tok, names[i].name);
    if (f && !cJSON_IsBool(f)) {
      snprintf(err, errlen,
               "%s: added token \"%s\": \"%s\" is neither true nor false",
               v->what, content, names[i].name);
      return -1;
    }
    if (!f && names[i].bit == BPE_ADDED_NORMALIZED)
      *fl |= *fl & BPE_ADDED_SPECIAL ? 0 : BPE_ADDED_NORMALIZED;
    if (!cJSON_IsTrue(f))
      continue;
    if (!names[i].bit) {
      snprintf(err, errlen,
               "%s: added token \"%s\": single_word true is not supported "
               "(Hugging Face's tokenizers and tokenizers.js match it "
               "differently)",
               v->what, content);
      return -1;
    }
    *fl |= names[i].bit;
  }
  return 0;
}

/* Reads a {"token": id, ...} object into v (map and defs). specials,
 * when given, are (content, id) pairs whose bytes are their own text. */
static int read_vocab(vocab_in *v, const cJSON *vocab, const cJSON *added,
                      char *err, size_t errlen) {
  size_t n = 0, total = 0;
  int64_t maxid = -1;
  const cJSON *it;
  cJSON_ArrayForEach(it, vocab) {
    if (!cJSON_IsNumber(it) || it->valuedouble < 0 ||
        it->valuedouble >= (double)UINT32_MAX - 1 ||
        it->valuedouble != (double)(int64_t)it->valuedouble) {
      snprintf(err, errlen, "%s: vocab entry \"%s\" has no valid id", v->what,
               it->string);
      return -1;
    }
    if ((int64_t)it->valuedouble > maxid)
      maxid = (int64_t)it->valuedouble;
    total += strlen(it->string);
    n++;
  }
  cJSON_ArrayForEach(it, added) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (!cJSON_IsNumber(id) || id->valuedouble < 0 ||
        id->valuedouble >= (double)UINT32_MAX - 1 || !cJSON_IsString(c) ||
        !c->valuestring[0]) {
      snprintf(err, errlen,
               "%s: an added_tokens entry lacks a valid id or content",
               v->what);
      return -1;
    }
    if ((int64_t)id->valuedouble > maxid)
      maxid = (int64_t)id->valuedouble;
    total += strlen(c->valuestring);
    v->nspecials++;
  }
  if (maxid < 0) {
    snprintf(err, errlen, "%s: the vocabulary is empty", v->what);
    return -1;
  }
  v->nvocab = (uint32_t)maxid + 1;
  v->nvocab_entries = n;
  if (smap_init(&v->map, n) ||
      !(v->defs = calloc(v->nvocab, sizeof *v->defs)) ||
      !(v->bytes = malloc(total + 1)) ||
      !(v->specials = malloc((v->nspecials + 1) * sizeof *v->specials)) ||
      !(v->flags = malloc(v->nspecials + 1))) {
    snprintf(err, errlen, "%s: out of memory", v->what);
    return -1;
  }
  /* Specials first: their ids hold their text, whatever the vocab's
   * spelling of the same id. */
  size_t k = 0;
  cJSON_ArrayForEach(it, added) {
    uint32_t id =
        (uint32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
    const char *c =
        cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
    if (v->defs[id].len) {
      snprintf(err, errlen, "%s: added token id %u is given twice", v->what,
               id);
      return -1;
    }
    size_t cl = strlen(c);
    memcpy(v->bytes + v->nbytes, c, cl);
    v->defs[id] = (bpe_tokdef){v->bytes + v->nbytes, cl};
    v->nbytes += cl;
    if (read_added_flags(v, it, c, &v->flags[k], err, errlen))
      return -1;
    v->specials[k++] = id;
  }
  cJSON_ArrayForEach(it, vocab) {
    uint32_t id = (uint32_t)it->valuedouble;
    size_t sl = strlen(it->string);
    int dup = 0;
    /* Keys come from the parsed JSON, which outlives the map. */
    smap_get(&v->map, it->string, sl, 1, id, &dup);
    if (dup) {
      snprintf(err, errlen, "%s: vocab token \"%s\" is given twice", v->what,
               it->string);
      return -1;
    }
    int special = 0;
    for (size_t i = 0; i < v->nspecials; i++)
      special |= v->specials[i] == id;
    if (special)
      continue;
    if (v->defs[id].len) {
      snprintf(err, errlen, "%s: id %u is given to two tokens (\"%s\")",
               v->what, id, it->string);
      return -1;
    }
    long bl = bytelevel_to_bytes(it->string, sl, v->bytes + v->nbytes);
    if (bl <= 0) {
      snprintf(err, errlen,
               "%s: vocab token \"%s\" (id %u) is not spelled in GPT-2's "
               "byte-level alphabet (is this a byte-level BPE?)",
               v->what, it->string, id);
      return -1;
    }
    v->defs[id] = (bpe_tokdef){v->bytes + v->nbytes, (size_t)bl};
    v->nbytes += (size_t)bl;
  }
  return 0;
}

/* Whether a text can hold a and b so that they share bytes: one inside
 * the other, or an end of one the start of the other. */
static int tokens_overlap(const bpe_tokdef *a, const bpe_tokdef *b) {
  if (memmem(a->p, a->len, b->p, b->len) || memmem(b->p, b->len, a->p, a->len))
    return 1;
  for (size_t k = 1; k < a->len && k < b->len; k++)
    if (memcmp(a->p + a->len - k, b->p, k) == 0 ||
        memcmp(b->p + b->len - k, a->p, k) == 0)
      return 1;
  return 0;
}

/* The added tokens dagrun would split otherwise than Hugging Face: a
 * strip next to a token that has whitespace at its edge (the strip would
 * eat into it), and a normalized token that can overlap a not normalized
 * one (Hugging Face's tokenizers matches the latter first, tokenizers.js
 * both at once). Refused naming both tokens and the flag. */
static int check_added(const vocab_in *v, char *err, size_t errlen) {
  const bpe_tokdef *d = v->defs;
  for (size_t i = 0; i < v->nspecials; i++) {
    const bpe_tokdef *a = &d[v->specials[i]];
    uint8_t fa = v->flags[i];
    for (size_t j = 0; j < v->nspecials; j++) {
      const bpe_tokdef *b = &d[v->specials[j]];
      uint8_t fb = v->flags[j];
      const char *flag = NULL;
      if ((fa & BPE_ADDED_LSTRIP) && bpe_space_run(b->p, b->len, 0))
        flag = "lstrip true next to a token that ends with whitespace";
      else if ((fa & BPE_ADDED_RSTRIP) && bpe_space_run(b->p, b->len, 1))
        flag = "rstrip true next to a token that starts with whitespace";
      else if ((fa & BPE_ADDED_NORMALIZED) && !(fb & BPE_ADDED_NORMALIZED) &&
               tokens_overlap(a, b))
        flag = "normalized true, overlapping a normalized false token";
      if (flag) {
        snprintf(err, errlen,
                 "%s: added token \"%.*s\": %s (\"%.*s\") is not "
                 "supported",
                 v->what, (int)a->len, a->p, flag, (int)b->len, b->p);
        return -1;
      }
    }
  }
  return 0;
}

/* Adds merge number r, "a" + "b" as spelled in the file. */
static int add_merge(vocab_in *v, size_t r, const char *a, size_t la,
                     const char *b, size_t lb, char *err, size_t errlen) {
  uint32_t ia = smap_get(&v->map, a, la, 0, 0, NULL);
  uint32_t ib = smap_get(&v->map, b, lb, 0, 0, NULL);
  if (ia == UINT32_MAX || ib == UINT32_MAX) {
    snprintf(err, errlen,
             "%s: merge %zu (\"%.*s %.*s\") names unknown "
             "token \"%.*s\"",
             v->what, r + 1, (int)la, a, (int)lb, b,
             (int)(ia == UINT32_MAX ? la : lb), ia == UINT32_MAX ? a : b);
    return -1;
  }
  char stackb[512], *ab = la + lb <= sizeof stackb ? stackb : malloc(la + lb);
  if (!ab) {
    snprintf(err, errlen, "%s: out of memory", v->what);
    return -1;
  }
  memcpy(ab, a, la);
  memcpy(ab + la, b, lb);
  uint32_t ix = smap_get(&v->map, ab, la + lb, 0, 0, NULL);
  if (ix == UINT32_MAX)
    snprintf(err, errlen,
             "%s: merge %zu (\"%.*s %.*s\") makes \"%.*s\", "
             "which is not in the vocabulary",
             v->what, r + 1, (int)la, a, (int)lb, b, (int)(la + lb), ab);
  if (ab != stackb)
    free(ab);
  if (ix == UINT32_MAX)
    return -1;
  v->merges[v->nmerges++] = (bpe_merge){ia, ib, ix};
  return 0;
}

static int finish_build(vocab_in *v, bpe **out, char *err, size_t errlen) {
  char msg[384];
  if (bpe_build(out, v->nvocab, v->defs, v->merges, v->nmerges, v->specials,
                v->nspecials, msg, sizeof msg) != 0) {
    snprintf(err, errlen, "%s: %s", v->what, msg);
    return -1;
  }
  memcpy((*out)->added_flags, v->flags, v->nspecials);
  for (size_t i = 0; i < v->nspecials; i++)
    (*out)->nplain += !(v->flags[i] & BPE_ADDED_SPECIAL);
  return 0;
}

/* Parses JSON; on error says where (line:col). */
static cJSON *parse_json(const char *path, const char *buf, size_t len,
                         char *err, size_t errlen) {
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
  if (!root) {
    size_t line = 1, col = 1;
    const char *at = end ? end : buf;
    for (const char *p = buf; p < at && p < buf + len; p++) {
      if (*p == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    snprintf(err, errlen, "%s:%zu:%zu: not valid JSON", path, line, col);
  }
  return root;
}

/* ---- loading tokenizer.json ------------------------------------------ */

static const char *type_of(const cJSON *o) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
  return cJSON_IsString(t) ? t->valuestring : "";
}

/* GPT-2's ByteLevel: its pattern, no space added in front. */
static int check_byte_level(const cJSON *bl, const char *path, char *err,
                            size_t errlen) {
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bl, "add_prefix_space")) ||
      cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(bl, "use_regex"))) {
    snprintf(err, errlen,
             "%s: ByteLevel with add_prefix_space true or use_regex false "
             "is not supported",
             path);
    return -1;
  }
  return 0;
}

/* The pre-tokenizers pretok does: none or ByteLevel (GPT-2), and a
 * Sequence of ByteLevel alone or of Digits then ByteLevel (SmolLM's),
 * which sets *digits. Anything else is refused with what it is named. */
static int read_pre_tokenizer(const cJSON *pre, const char *path,
                              pretok_digits *digits, char *err, size_t errlen) {
  *digits = PRETOK_DIGITS_NONE;
  if (!pre || cJSON_IsNull(pre))
    return 0;
  if (strcmp(type_of(pre), "ByteLevel") == 0)
    return check_byte_level(pre, path, err, errlen);
  static const char supported[] =
      "(only ByteLevel with GPT-2's pattern, alone or after Digits in a "
      "Sequence)";
  if (strcmp(type_of(pre), "Sequence") != 0) {
    snprintf(err, errlen, "%s: pre_tokenizer \"%s\" is not supported %s", path,
             type_of(pre), supported);
    return -1;
  }
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
  int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : 0;
  const cJSON *first = cJSON_GetArrayItem(list, 0);
  const cJSON *last = cJSON_GetArrayItem(list, n - 1);
  int has_digits = n == 2 && strcmp(type_of(first), "Digits") == 0;
  if (n < 1 || n > 2) {
    snprintf(err, errlen,
             "%s: pre_tokenizer Sequence of %d members is not supported %s",
             path, n, supported);
    return -1;
  }
  /* Digits then ByteLevel, or ByteLevel alone: the first member that
   * is not where it should be is named. */
  int bad = n == 2 && !has_digits                     ? 0
            : strcmp(type_of(last), "ByteLevel") != 0 ? n - 1
                                                      : -1;
  if (bad >= 0) {
    snprintf(err, errlen,
             "%s: pre_tokenizer Sequence member %d (\"%s\") is not "
             "supported %s",
             path, bad + 1, type_of(cJSON_GetArrayItem(list, bad)), supported);
    return -1;
  }
  if (has_digits)
    *digits = cJSON_IsTrue(
                  cJSON_GetObjectItemCaseSensitive(first, "individual_digits"))
                  ? PRETOK_DIGITS_INDIVIDUAL
                  : PRETOK_DIGITS_CONTIGUOUS;
  return check_byte_level(last, path, err, errlen);
}

int bpe_load_hf(const char *path, bpe **out, char *err, size_t errlen) {
  *out = NULL;
  char *buf;
  size_t len;
  if (read_json_source(path, &buf, &len, err, errlen))
    return -1;
  cJSON *root = parse_json(path, buf, len, err, errlen);
  free(buf);
  if (!root)
    return -1;
  vocab_in v = {.what = path};
  int rc = -1;
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  if (!cJSON_IsObject(model)) {
    snprintf(err, errlen, "%s: no \"model\" object (not a tokenizer.json?)",
             path);
    goto done;
  }
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(model, "type");
  if (mt && strcmp(type_of(model), "BPE") != 0) {
    snprintf(err, errlen, "%s: model.type is \"%s\", not \"BPE\"", path,
             type_of(model));
    goto done;
  }
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  if (!cJSON_IsObject(vocab)) {
    snprintf(err, errlen, "%s: no model.vocab object", path);
    goto done;
  }
  if (!cJSON_IsArray(merges)) {
    snprintf(err, errlen, "%s: no model.merges array", path);
    goto done;
  }
  /* What would change the ids in ways this tokenizer does not do. */
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (norm && !cJSON_IsNull(norm)) {
    snprintf(err, errlen, "%s: a normalizer (\"%s\") is not supported", path,
             type_of(norm));
    goto done;
  }
  pretok_digits digits;
  if (read_pre_tokenizer(
          cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), path,
          &digits, err, errlen))
    goto done;
  static const char *const affixes[] = {"continuing_subword_prefix",
                                        "end_of_word_suffix"};
  for (int i = 0; i < 2; i++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
    if (cJSON_IsString(a) && a->valuestring[0]) {
      snprintf(err, errlen, "%s: model.%s is not supported", path, affixes[i]);
      goto done;
    }
  }
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added)) {
    snprintf(err, errlen, "%s: added_tokens is not an array", path);
    goto done;
  }
  if (read_vocab(&v, vocab, cJSON_IsArray(added) ? added : NULL, err, errlen) ||
      check_added(&v, err, errlen))
    goto done;
  size_t nm = (size_t)cJSON_GetArraySize(merges);
  if (!(v.merges = malloc((nm + 1) * sizeof *v.merges))) {
    snprintf(err, errlen, "%s: out of memory", path);
    goto done;
  }
  size_t r = 0;
  const cJSON *it;
  cJSON_ArrayForEach(it, merges) {
    if (cJSON_IsString(it)) {
      /* "a b": byte-level spellings have no space, so the one space
       * splits it. */
      const char *s = it->valuestring, *sp = strchr(s, ' ');
      if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) {
        snprintf(err, errlen, "%s: merge %zu (\"%s\") is not \"a b\"", path,
                 r + 1, s);
        goto done;
      }
      if (add_merge(&v, r, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), err,
                    errlen))
        goto done;
    } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
               cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
      const char *a = cJSON_GetArrayItem(it, 0)->valuestring;
      const char *b = cJSON_GetArrayItem(it, 1)->valuestring;
      if (add_merge(&v, r, a, strlen(a), b, strlen(b), err, errlen))
        goto done;
    } else {
      snprintf(err, errlen,
               "%s: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", path,
               r + 1);
      goto done;
    }
    r++;
  }
  rc = finish_build(&v, out, err, errlen);
  if (rc == 0 && pretok_set_digits((*out)->pt, digits, err, errlen) != 0) {
    bpe_destroy(*out);
    *out = NULL;
    rc = -1;
  }
done:
  vocab_in_free(&v);
  cJSON_Delete(root);
  return rc;
}

/* ---- loading GPT-2's files ------------------------------------------- */

int bpe_load_gpt2(const char *vocab_path, const char *merges_path, bpe **out,
                  char *err, size_t errlen) {
  *out = NULL;
  char *buf, *mbuf = NULL;
  size_t len, mlen;
  if (read_json_source(vocab_path, &buf, &len, err, errlen))
    return -1;
  cJSON *root = parse_json(vocab_path, buf, len, err, errlen);
  free(buf);
  if (!root)
    return -1;
  vocab_in v = {.what = vocab_path};
  cJSON *added = NULL;
  int rc = -1;
  if (!cJSON_IsObject(root)) {
    snprintf(err, errlen, "%s: not a JSON object of token -> id", vocab_path);
    goto done;
  }
  /* GPT-2's one special, when the vocabulary has it. */
  const cJSON *eot = cJSON_GetObjectItemCaseSensitive(root, "<|endoftext|>");
  if (!(added = cJSON_CreateArray()))
    goto oom;
  if (cJSON_IsNumber(eot)) {
    cJSON *a = cJSON_CreateObject();
    if (!a)
      goto oom;
    cJSON_AddItemToArray(added, a);
    if (!cJSON_AddNumberToObject(a, "id", eot->valuedouble) ||
        !cJSON_AddStringToObject(a, "content", "<|endoftext|>") ||
        !cJSON_AddTrueToObject(a, "special"))
      goto oom;
  }
  if (read_vocab(&v, root, added, err, errlen))
    goto done;
  if (read_json_source(merges_path, &mbuf, &mlen, err, errlen))
    goto done;
  size_t nlines = 1;
  for (size_t i = 0; i < mlen; i++)
    nlines += mbuf[i] == '\n';
  if (!(v.merges = malloc(nlines * sizeof *v.merges)))
    goto oom;
  v.what = merges_path;
  size_t lineno = 0, r = 0;
  for (char *p = mbuf, *end = mbuf + mlen; p < end;) {
    char *nl = memchr(p, '\n', (size_t)(end - p));
    char *le = nl ? nl : end;
    lineno++;
    size_t n = (size_t)(le - p);
    if (n && p[n - 1] == '\r')
      n--;
    /* The "#version: 0.2" header and blank lines are not merges. */
    if (n && !(lineno == 1 && p[0] == '#')) {
      char *sp = memchr(p, ' ', n);
      if (!sp || sp == p || sp == p + n - 1 ||
          memchr(sp + 1, ' ', (size_t)(p + n - sp - 1))) {
        snprintf(err, errlen, "%s:%zu: not \"a b\"", merges_path, lineno);
        goto done;
      }
      char msg[300];
      if (add_merge(&v, r, p, (size_t)(sp - p), sp + 1,
                    (size_t)(p + n - sp - 1), msg, sizeof msg)) {
        /* Point at the line rather than the merge number. */
        const char *what = strstr(msg, "names unknown");
        if (!what)
          what = strstr(msg, "makes");
        snprintf(err, errlen,
                 "%s:%zu: merge \"%.*s\" %s (does %s go with "
                 "this merges file?)",
                 merges_path, lineno, (int)n, p, what ? what : msg, vocab_path);
        goto done;
      }
      r++;
    }
    p = nl ? nl + 1 : end;
  }
  v.what = vocab_path;
  rc = finish_build(&v, out, err, errlen);
  goto done;
oom:
  snprintf(err, errlen, "%s: out of memory", vocab_path);
done:
  free(mbuf);
  vocab_in_free(&v);
  cJSON_Delete(added);
  cJSON_Delete(root);
  return rc;
}

/* ---- saving tokenizer.json ------------------------------------------- */

static cJSON *byte_level(int add_prefix_space, int trim_offsets) {
  cJSON *o = cJSON_CreateObject();
  if (!o)
    return NULL;
  cJSON_AddStringToObject(o, "type", "ByteLevel");
  cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
  cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
  cJSON_AddBoolToObject(o, "use_regex", 1);
  return o;
}

/* Sequence [Digits, bl] (bl is taken, freed on failure), or NULL. */
static cJSON *digits_then(cJSON *bl, int individual) {
  cJSON *seq = cJSON_CreateObject(), *d = cJSON_CreateObject();
  cJSON *list = cJSON_CreateArray();
  if (!seq || !d || !list) {
    cJSON_Delete(seq);
    cJSON_Delete(d);
    cJSON_Delete(list);
    cJSON_Delete(bl);
    return NULL;
  }
  cJSON_AddStringToObject(seq, "type", "Sequence");
  cJSON_AddItemToObject(seq, "pretokenizers", list);
  cJSON_AddStringToObject(d, "type", "Digits");
  cJSON_AddBoolToObject(d, "individual_digits", individual);
  cJSON_AddItemToArray(list, d);
  cJSON_AddItemToArray(list, bl);
  return seq;
}

/* Writes data to path through a temporary name: fsync, rename, fsync the
 * directory, so a crash leaves the old file or the new one. */
static int write_atomic(const char *path, const char *data, size_t len,
                        char *err, size_t errlen) {
  size_t pl = strlen(path);
  char *tmp = malloc(pl + 32);
  char *dircopy = strdup(path);
  int fd = -1, rc = -1;
  if (!tmp || !dircopy) {
    snprintf(err, errlen, "%s: out of memory", path);
    goto done;
  }
  snprintf(tmp, pl + 32, "%s.tmp.%ld", path, (long)getpid());
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "%s: cannot create: %s", tmp, strerror(errno));
    goto done;
  }
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, data + off, len - off);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(errno));
      goto fail;
    }
    off += (size_t)w;
  }
  if (fsync(fd) != 0) {
    snprintf(err, errlen, "%s: fsync failed: %s", tmp, strerror(errno));
    goto fail;
  }
  if (close(fd) != 0) {
    fd = -1;
    snprintf(err, errlen, "%s: close failed: %s", tmp, strerror(errno));
    goto fail;
  }
  fd = -1;
  if (rename(tmp, path) != 0) {
    snprintf(err, errlen, "%s: cannot rename into place: %s", path,
             strerror(errno));
    goto fail;
  }
  int dfd = open(dirname(dircopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  rc = 0;
  goto done;
fail:
  if (fd >= 0)
    close(fd);
  unlink(tmp);
done:
  free(tmp);
  free(dircopy);
  return rc;
}

int bpe_save_hf(const bpe *b, const char *path, char *err, size_t errlen) {
  cJSON *root = cJSON_CreateObject();
  char *sa = NULL, *text = NULL;
  int rc = -1;
  size_t maxlen = 0;
  for (uint32_t i = 0; i < b->nvocab; i++)
    if (b->tok_len[i] > maxlen)
      maxlen = b->tok_len[i];
  sa = malloc(4 * maxlen + 4);
  if (!root || !sa)
    goto oom;
  cJSON_AddStringToObject(root, "version", "1.0");
  cJSON_AddNullToObject(root, "truncation");
  cJSON_AddNullToObject(root, "padding");
  cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
  if (!added)
    goto oom;
  for (size_t i = 0; i < b->nadded; i++) {
    uint32_t id = b->added[i];
    cJSON *a = cJSON_CreateObject();
    if (!a)
      goto oom;
    cJSON_AddItemToArray(added, a);
    memcpy(sa, b->blob + b->tok_off[id], b->tok_len[id]);
    sa[b->tok_len[id]] = '\0';
    cJSON_AddNumberToObject(a, "id", id);
    cJSON_AddStringToObject(a, "content", sa);
    uint8_t fl = b->added_flags[i];
    cJSON_AddBoolToObject(a, "single_word", 0);
    cJSON_AddBoolToObject(a, "lstrip", fl & BPE_ADDED_LSTRIP);
    cJSON_AddBoolToObject(a, "rstrip", fl & BPE_ADDED_RSTRIP);
    cJSON_AddBoolToObject(a, "normalized", fl & BPE_ADDED_NORMALIZED);
    cJSON_AddBoolToObject(a, "special", fl & BPE_ADDED_SPECIAL);
  }
  cJSON_AddNullToObject(root, "normalizer");
  /* GPT-2's own settings, as in its tokenizer.json; after Digits as
   * SmolLM's when the tokenizer was loaded with them. */
  cJSON *pre = byte_level(0, 1);
  pretok_digits digits = pretok_get_digits(b->pt);
  if (pre && digits != PRETOK_DIGITS_NONE)
    pre = digits_then(pre, digits == PRETOK_DIGITS_INDIVIDUAL);
  if (!pre)
    goto oom;
  cJSON_AddItemToObject(root, "pre_tokenizer", pre);
  cJSON_AddItemToObject(root, "post_processor", byte_level(1, 0));
  cJSON_AddItemToObject(root, "decoder", byte_level(1, 1));
  cJSON *model = cJSON_AddObjectToObject(root, "model");
  if (!model)
    goto oom;
  cJSON_AddStringToObject(model, "type", "BPE");
  cJSON_AddNullToObject(model, "dropout");
  cJSON_AddNullToObject(model, "unk_token");
  cJSON_AddStringToObject(model, "continuing_subword_prefix", "");
  cJSON_AddStringToObject(model, "end_of_word_suffix", "");
  cJSON_AddBoolToObject(model, "fuse_unk", 0);
  cJSON_AddBoolToObject(model, "byte_fallback", 0);
  cJSON_AddBoolToObject(model, "ignore_merges", 0);
  cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
  cJSON *merges = cJSON_AddArrayToObject(model, "merges");
  if (!vocab || !merges)
    goto oom;
  for (uint32_t i = 0; i < b->nvocab; i++) {
    if (!b->tok_len[i])
      continue;
    if (b->is_added[i]) {
      memcpy(sa, b->blob + b->tok_off[i], b->tok_len[i]);
      sa[b->tok_len[i]] = '\0';
    } else {
      bytes_to_bytelevel(b->blob + b->tok_off[i], b->tok_len[i], sa);
    }
    cJSON *num = cJSON_CreateNumber(i);
    if (!num)
      goto oom;
    cJSON_AddItemToObject(vocab, sa, num);
  }
  for (size_t r = 0; r < b->nmerges; r++) {
    const bpe_merge *m = &b->merges[r];
    size_t k = bytes_to_bytelevel(b->blob + b->tok_off[m->left],
                                  b->tok_len[m->left], sa);
    sa[k++] = ' ';
    bytes_to_bytelevel(b->blob + b->tok_off[m->right], b->tok_len[m->right],
                       sa + k);
    cJSON *s = cJSON_CreateString(sa);
    if (!s)
      goto oom;
    cJSON_AddItemToArray(merges, s);
  }
  if (!(text = cJSON_Print(root)))
    goto oom;
  size_t tl = strlen(text);
  text[tl] = '\n'; /* cJSON_Print's NUL becomes the final newline */
  rc = write_atomic(path, text, tl + 1, err, errlen);
  goto done;
oom:
  snprintf(err, errlen, "%s: out of memory", path);
done:
  cJSON_Delete(root);
  cJSON_free(text);
  free(sa);
  return rc;
}
