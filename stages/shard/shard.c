/*
 * shard: the built-in stage that turns a raw text corpus into
 * deduplicated, filtered, shuffled JSONL shards balanced by bytes.
 *
 *   stage: shard
 *   with: {input: [corpus/], separator: "%", shards: 8, val_fraction: 0.02}
 *
 * Two passes, memory bounded by memory_limit:
 *
 * 1. Threads take input files in turn. Each reads its file's documents,
 *    checks UTF-8 and the quality filters, hashes the text (XXH3-128) and
 *    appends the finished output line to its own spool file in the
 *    attempt directory, keeping a 40-byte record per document (hash,
 *    canonical position, spool offset and length).
 * 2. The records are sorted into canonical order (files by path,
 *    documents in file order); duplicates by hash are dropped keeping the
 *    first; the rest are shuffled by seed, split into validation and
 *    training, and dealt to the shard with the fewest bytes so far. Then
 *    threads write the shards from the spools: temporary name, fsync,
 *    rename. The manifest goes last.
 *
 * Nothing in the output depends on the thread count or on timing: the
 * plan is made from the canonical order, and a line's bytes depend only
 * on its document.
 */
#include <dagrun/plugin.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <xxhash.h>

#include "corpus.h"
#include "docfilter.h"
#include "shardplan.h"

#include "common/stagekit.h"
#include "lib/clock.h"
#include "lib/fileio.h"

/* Exit statuses: 2 for params that make no sense (as exec does), 1 for
 * everything else. */
#define SHARD_BAD_PARAMS 2
#define SHARD_FAILED 1

#define MAX_PROBLEMS 100   /* problems listed in the manifest */
#define LOGGED_PROBLEMS 10 /* problems also written to the log */
#define MIN_MEMORY (4ull << 20)
#define MAX_THREADS 256
/* A pass-1 error already recorded with set_fatal. */
#define ERR_REPORTED (-100000)

/* Params with a fixed set of values: checked by dagrun, and mapped by
 * read_cfg with the same arrays. */
static const char *const format_names[] = {[CORPUS_TEXT] = "text",
                                           [CORPUS_JSONL] = "jsonl",
                                           [CORPUS_JSONL + 1] = NULL};
/* Indexed by fail_on_bad. */
static const char *const on_bad_input_names[] = {"skip", "fail", NULL};
static const dagrun_param_choice choices[] = {
    {"format", format_names},
    {"on_bad_input", on_bad_input_names},
    {NULL, NULL},
};

static const dagrun_param_spec params[] = {
    {"input", DAGRUN_PARAM_LIST, NULL, 1,
     "Files, directories (read recursively) and globs of the corpus; "
     "relative paths are relative to the DAG file's directory. Plain or "
     "gzip-compressed (detected by content)"},
    {"exclude", DAGRUN_PARAM_LIST, NULL, 0,
     "fnmatch patterns matched against the base name of files and "
     "directories found in directories and globs, e.g. [\"*.dat\"]"},
    {"format", DAGRUN_PARAM_STRING, "text", 0,
     "text (documents split on separator) or jsonl (one JSON object per "
     "line, text in text_field)"},
    {"separator", DAGRUN_PARAM_STRING, "none", 0,
     "text format: none (one document per file), blank_line, or a line "
     "that separates documents, e.g. \"%\""},
    {"text_field", DAGRUN_PARAM_STRING, "text", 0,
     "jsonl format: the top-level string field holding the text"},
    {"shards", DAGRUN_PARAM_INT, "8", 0, "Number of training shards"},
    {"val_fraction", DAGRUN_PARAM_FLOAT, "0.01", 0,
     "Share of documents for validation, in [0,1)"},
    {"val_shards", DAGRUN_PARAM_INT, "1", 0, "Number of validation shards"},
    {"seed", DAGRUN_PARAM_INT, "1234", 0, "Seed of the document shuffle"},
    {"min_bytes", DAGRUN_PARAM_INT, "0", 0,
     "Drop documents shorter than this many bytes (0: off)"},
    {"max_bytes", DAGRUN_PARAM_INT, "0", 0,
     "Drop documents longer than this many bytes (0: off)"},
    {"min_alpha_ratio", DAGRUN_PARAM_FLOAT, "0", 0,
     "Drop documents whose share of letters (ASCII letters and non-ASCII "
     "characters) among all characters is below this (0: off)"},
    {"max_repeated_line_ratio", DAGRUN_PARAM_FLOAT, "1", 0,
     "Drop documents whose share of non-empty lines repeating an earlier "
     "line is above this (1: off)"},
    {"on_bad_input", DAGRUN_PARAM_STRING, "skip", 0,
     "skip (count and report bad input) or fail (stop at the first: "
     "invalid UTF-8, binary data, empty or unreadable file, FIFO, symlink "
     "loop, bad JSON line)"},
    {"threads", DAGRUN_PARAM_INT, "0", 0, "Worker threads (0: one per CPU)"},
    {"memory_limit", DAGRUN_PARAM_STRING, "512MiB", 0,
     "Memory the stage may use on top of the process's own, e.g. 256MiB, "
     "2GiB; documents larger than 1/64 of it are dropped as too_large"},
    {NULL, 0, NULL, 0, NULL},
};

/* Why a document or file was dropped, in manifest order. BAD marks bad
 * input, which on_bad_input: fail turns into a failed task. */
#define DROPS(X)                                                               \
  X(DUPLICATE, "duplicate", 0)                                                 \
  X(EMPTY, "empty", 0)                                                         \
  X(TOO_SHORT, "too_short", 0)                                                 \
  X(TOO_LONG, "too_long", 0)                                                   \
  X(LOW_ALPHA, "low_alpha", 0)                                                 \
  X(REPEATED_LINES, "repeated_lines", 0)                                       \
  X(TOO_LARGE, "too_large", 0)                                                 \
  X(INVALID_UTF8, "invalid_utf8", 1)                                           \
  X(BINARY, "binary", 1)                                                       \
  X(MALFORMED_JSON, "malformed_json", 1)                                       \
  X(MISSING_FIELD, "missing_field", 1)                                         \
  X(EMPTY_FILE, "empty_file", 1)                                               \
  X(UNREADABLE, "unreadable", 1)

typedef enum drop {
#define X(name, text, bad) DROP_##name,
  DROPS(X)
#undef X
      NDROPS
} drop;

static const char *const drop_names[] = {
#define X(name, text, bad) text,
    DROPS(X)
#undef X
};

static const int drop_is_bad[] = {
#define X(name, text, bad) bad,
    DROPS(X)
#undef X
};

/* The settings, checked. Strings belong to the host. */
typedef struct cfg {
  const char **inputs, **excludes;
  size_t ninputs, nexcludes;
  const char *format_name, *separator, *text_field, *policy, *memory_name;
  corpus_format format;
  corpus_sep sep;
  int64_t shards, val_shards, seed, min_bytes, max_bytes, threads;
  double val_fraction, min_alpha, max_repeat;
  int fail_on_bad;
  uint64_t memory_limit;
  size_t max_doc;        /* memory_limit / 64, clamped */
  unsigned nthreads;     /* threads asked for, resolved */
  unsigned read_threads; /* pass 1 threads after the memory cap */
} cfg;

typedef struct problem {
  uint32_t file;
  uint64_t line;
  drop kind;
  char reason[200];
} problem;

/* A spool: the output lines of one pass-1 thread, in an unlinked file. */
typedef struct spool {
  int fd;
  char *buf;
  size_t n, cap;
  uint64_t off; /* file offset of buf[0] */
} spool;

struct job;

typedef struct worker {
  struct job *job;
  unsigned id;
  pthread_t thread;
  int started;
  corpus_reader *reader;
  docfilter *filter;
  spool sp;
  shard_recs recs;
  uint64_t counts[NDROPS];
  uint64_t read, accepted, text_bytes;
  uint64_t file_problems; /* problems listed for the file being read */
  /* On-disk bytes read of the current file, for the estimate in the
   * too-many-documents message; other threads read it. */
  atomic_uint_least64_t file_offset;
} worker;

typedef struct job {
  dagrun_ctx *ctx;
  const dagrun_host *host;
  const cfg *c;
  corpus_files files;
  worker *workers;
  unsigned nworkers;

  atomic_size_t next;               /* next file (pass 1) or shard (pass 2) */
  atomic_size_t done;               /* files or shards finished */
  atomic_uint_least64_t bytes_done; /* input bytes finished (pass 1) */
  atomic_uint_least64_t nrecs;      /* records held by all workers */
  atomic_int stop;                  /* error, cancel or policy failure */
  uint64_t rec_budget;              /* bytes the records may take */

  pthread_mutex_t lock; /* guards what follows */
  pthread_cond_t cond;
  unsigned running;
  problem problems[MAX_PROBLEMS]; /* the first ones in canonical order */
  size_t nproblems;
  uint64_t nproblems_total;
  /* Policy fail: the first bad input (SIZE_MAX: none). Written under
   * lock, read without it by the readers deciding whether to go on. */
  atomic_size_t fail_file;
  uint64_t fail_line;
  char fail_msg[1024];
  int fatal; /* an error that ends the task */
  char fatal_msg[1024];

  /* Pass 2. */
  shard_rec *recs;
  size_t nrecs_kept;
  size_t *shard_start; /* shard d's records: [shard_start[d], [d+1]) */
  uint64_t *shard_bytes, *shard_docs;
  char (*shard_sha)[65];
  char **tmp_paths; /* temporary shard files created, to clean up */
  unsigned nshards, ntrain;
  size_t copy_buf;
  const char *out_dir;
} job;

/* ------------------------------------------------------------------ */
/* Params                                                               */

/* Reads and checks every param; on error says why through host->fail. */
static int read_params(dagrun_ctx *ctx, const dagrun_host *h, cfg *c) {
  memset(c, 0, sizeof(*c));
  if (h->param_list_size(ctx, "input", &c->ninputs) != 0 || c->ninputs == 0) {
    h->fail(ctx, "input is empty: give files, directories or globs");
    return -1;
  }
  if (h->param_list_size(ctx, "exclude", &c->nexcludes) != 0) {
    h->fail(ctx, "exclude must be a list of patterns");
    return -1;
  }
  c->inputs = calloc(c->ninputs, sizeof(char *));
  c->excludes = calloc(c->nexcludes + 1, sizeof(char *));
  if (!c->inputs || !c->excludes) {
    h->fail(ctx, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < c->ninputs; i++)
    if (h->param_list_item(ctx, "input", i, &c->inputs[i]) != 0) {
      h->fail(ctx, "input item %zu is not a string", i);
      return -1;
    }
  for (size_t i = 0; i < c->nexcludes; i++)
    if (h->param_list_item(ctx, "exclude", i, &c->excludes[i]) != 0) {
      h->fail(ctx, "exclude item %zu is not a string", i);
      return -1;
    }
  if (h->param_string(ctx, "format", &c->format_name) != 0 ||
      h->param_string(ctx, "separator", &c->separator) != 0 ||
      h->param_string(ctx, "text_field", &c->text_field) != 0 ||
      h->param_string(ctx, "on_bad_input", &c->policy) != 0 ||
      h->param_string(ctx, "memory_limit", &c->memory_name) != 0 ||
      h->param_int(ctx, "shards", &c->shards) != 0 ||
      h->param_int(ctx, "val_shards", &c->val_shards) != 0 ||
      h->param_int(ctx, "seed", &c->seed) != 0 ||
      h->param_int(ctx, "min_bytes", &c->min_bytes) != 0 ||
      h->param_int(ctx, "max_bytes", &c->max_bytes) != 0 ||
      h->param_int(ctx, "threads", &c->threads) != 0 ||
      h->param_float(ctx, "val_fraction", &c->val_fraction) != 0 ||
      h->param_float(ctx, "min_alpha_ratio", &c->min_alpha) != 0 ||
      h->param_float(ctx, "max_repeated_line_ratio", &c->max_repeat) != 0) {
    h->fail(ctx, "a param is missing or has the wrong type (is this "
                 "dagrun older than the shard stage?)");
    return -1;
  }
  int k;
  if (stagekit_param_choice(ctx, h, "format", format_names, &k))
    return -1;
  c->format = (corpus_format)k;
  if (strcmp(c->separator, "none") == 0)
    c->sep = CORPUS_SEP_NONE;
  else if (strcmp(c->separator, "blank_line") == 0)
    c->sep = CORPUS_SEP_BLANK;
  else if (!*c->separator || strchr(c->separator, '\n') ||
           strchr(c->separator, '\r') || strlen(c->separator) > 256) {
    h->fail(ctx, "separator must be none, blank_line, or one line of at "
                 "most 256 bytes (such as \"%%\")");
    return -1;
  } else
    c->sep = CORPUS_SEP_LINE;
  if (!*c->text_field) {
    h->fail(ctx, "text_field is empty");
    return -1;
  }
  if (c->shards < 1 || c->shards > 65535) {
    h->fail(ctx, "shards is %lld: it must be at least 1 (and at most 65535)",
            (long long)c->shards);
    return -1;
  }
  if (c->val_shards < 1 || c->shards + c->val_shards > 65536) {
    h->fail(ctx,
            "val_shards is %lld: it must be at least 1, and shards + "
            "val_shards at most 65536",
            (long long)c->val_shards);
    return -1;
  }
  if (!(c->val_fraction >= 0 && c->val_fraction < 1)) {
    h->fail(ctx, "val_fraction is %g: it must be in [0, 1)", c->val_fraction);
    return -1;
  }
  if (c->min_bytes < 0 || c->max_bytes < 0) {
    h->fail(ctx, "min_bytes and max_bytes must be >= 0 (0 turns them off)");
    return -1;
  }
  if (c->max_bytes && c->min_bytes > c->max_bytes) {
    h->fail(ctx,
            "min_bytes (%lld) is above max_bytes (%lld): every "
            "document would be dropped",
            (long long)c->min_bytes, (long long)c->max_bytes);
    return -1;
  }
  if (!(c->min_alpha >= 0 && c->min_alpha <= 1)) {
    h->fail(ctx, "min_alpha_ratio is %g: it must be in [0, 1]", c->min_alpha);
    return -1;
  }
  if (!(c->max_repeat >= 0 && c->max_repeat <= 1)) {
    h->fail(ctx, "max_repeated_line_ratio is %g: it must be in [0, 1]",
            c->max_repeat);
    return -1;
  }
  if (stagekit_param_choice(ctx, h, "on_bad_input", on_bad_input_names,
                            &c->fail_on_bad))
    return -1;
  if (c->threads < 0 || c->threads > MAX_THREADS) {
    h->fail(ctx, "threads is %lld: use 0 (one per CPU) to %d",
            (long long)c->threads, MAX_THREADS);
    return -1;
  }
  if (stagekit_parse_size(c->memory_name, &c->memory_limit) != 0) {
    h->fail(ctx, "memory_limit '%s' is not a size: write e.g. 512MiB or 2GiB",
            c->memory_name);
    return -1;
  }
  if (c->memory_limit < MIN_MEMORY) {
    h->fail(ctx, "memory_limit %s is below the minimum of 4MiB",
            c->memory_name);
    return -1;
  }
  /* The document size limit depends on memory_limit only, never on the
   * thread count, so the output does not either. */
  uint64_t md = c->memory_limit / 64;
  if (md < 16 * 1024)
    md = 16 * 1024;
  if (md > (256u << 20))
    md = 256u << 20;
  c->max_doc = (size_t)md;
  c->nthreads = c->threads ? (unsigned)c->threads : stagekit_cpu_count();
  if (c->nthreads > MAX_THREADS)
    c->nthreads = MAX_THREADS;
  return 0;
}

/* Memory one pass-1 thread may need: read and spool buffers, a record
 * chunk, the document buffer and what the format and filters keep next
 * to it (the JSON tree; 8 bytes per line for the repeated-line filter). */
static uint64_t thread_cost(const cfg *c) {
  uint64_t fixed = 768 * 1024;
  uint64_t per_doc = c->format == CORPUS_JSONL ? 3 : 1;
  if (c->max_repeat < 1)
    per_doc += 4;
  return fixed + per_doc * c->max_doc;
}

/* ------------------------------------------------------------------ */
/* Spools                                                               */

#define SPOOL_BUF (64 * 1024)

/* An unlinked file in dir: gone with the process however it ends. */
static int spool_open(spool *sp, const char *dir, unsigned id, char *err,
                      size_t errlen) {
  memset(sp, 0, sizeof(*sp));
  sp->fd = -1;
  char name[64];
  snprintf(name, sizeof(name), "shard-spool-%u.tmp", id);
  char *path = fileio_join(dir, name);
  if (!path)
    return -ENOMEM;
  sp->fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int e = errno;
  if (sp->fd >= 0)
    unlink(path);
  else
    snprintf(err, errlen, "cannot create spool file %s: %s", path, strerror(e));
  free(path);
  if (sp->fd < 0)
    return -e;
  sp->cap = SPOOL_BUF;
  sp->buf = malloc(sp->cap);
  if (!sp->buf) {
    snprintf(err, errlen, "out of memory");
    return -ENOMEM;
  }
  return 0;
}

static int spool_flush(spool *sp) {
  int rc = fileio_write_all(sp->fd, sp->buf, sp->n);
  if (rc == 0) {
    sp->off += sp->n;
    sp->n = 0;
  }
  return rc;
}

static int spool_put(spool *sp, const char *p, size_t n) {
  while (n > 0) {
    if (sp->n == sp->cap) {
      int rc = spool_flush(sp);
      if (rc)
        return rc;
    }
    size_t k = sp->cap - sp->n < n ? sp->cap - sp->n : n;
    memcpy(sp->buf + sp->n, p, k);
    sp->n += k;
    p += k;
    n -= k;
  }
  return 0;
}

/* Appends {"id":"<hex>","text":"<escaped>"}\n; *off and *len locate it. */
static int spool_line(spool *sp, const char *hex, const char *text, size_t len,
                      uint64_t *off, uint64_t *linelen) {
  *off = sp->off + sp->n;
  char head[64];
  int hn = snprintf(head, sizeof(head), "{\"id\":\"%s\",\"text\":\"", hex);
  int rc = spool_put(sp, head, (size_t)hn);
  size_t done = 0;
  while (rc == 0 && done < len) {
    if (sp->cap - sp->n < 6 && (rc = spool_flush(sp)) != 0)
      break;
    size_t used;
    sp->n += corpus_json_escape(text + done, len - done, sp->buf + sp->n,
                                sp->cap - sp->n, &used);
    done += used;
  }
  if (rc == 0)
    rc = spool_put(sp, "\"}\n", 3);
  *linelen = sp->off + sp->n - *off;
  return rc;
}

static void spool_close(spool *sp) {
  if (sp->fd >= 0)
    close(sp->fd);
  sp->fd = -1;
  free(sp->buf);
  sp->buf = NULL;
}

/* ------------------------------------------------------------------ */
/* Pass 1: read, check, filter, hash, spool                             */

static void set_fatal(job *j, const char *fmt, ...) DAGRUN_PRINTF(2, 3);

static void set_fatal(job *j, const char *fmt, ...) {
  pthread_mutex_lock(&j->lock);
  if (!j->fatal) {
    j->fatal = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->fatal_msg, sizeof(j->fatal_msg), fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&j->lock);
  atomic_store(&j->stop, 1);
}

static int pos_before(uint32_t fa, uint64_t la, uint32_t fb, uint64_t lb) {
  return fa < fb || (fa == fb && la < lb);
}

/* Keeps the first MAX_PROBLEMS problems in canonical order whatever order
 * the threads find them in. */
static void add_problem(job *j, uint32_t file, uint64_t line, drop kind,
                        const char *reason) {
  pthread_mutex_lock(&j->lock);
  j->nproblems_total++;
  size_t n = j->nproblems;
  if (n == MAX_PROBLEMS &&
      !pos_before(file, line, j->problems[n - 1].file, j->problems[n - 1].line))
    goto out;
  if (n == MAX_PROBLEMS)
    n--; /* the last one makes room */
  size_t at = n;
  while (at > 0 && pos_before(file, line, j->problems[at - 1].file,
                              j->problems[at - 1].line)) {
    j->problems[at] = j->problems[at - 1];
    at--;
  }
  problem *p = &j->problems[at];
  p->file = file;
  p->line = line;
  p->kind = kind;
  snprintf(p->reason, sizeof(p->reason), "%s", reason);
  j->nproblems = n + 1;
out:
  pthread_mutex_unlock(&j->lock);
}

/* Counts a dropped document or file, lists it as a problem when it is
 * bad input (or too large: worth knowing where), and with on_bad_input:
 * fail records the earliest bad input. Returns 1 when the thread should
 * stop reading this file. */
static int drop_doc(worker *w, uint64_t *counts, uint32_t file, uint64_t line,
                    drop kind, const char *reason) {
  job *j = w->job;
  counts[kind]++;
  if (!drop_is_bad[kind] && kind != DROP_TOO_LARGE)
    return 0;
  add_problem(j, file, line, kind, reason);
  w->file_problems++;
  if (!drop_is_bad[kind] || !j->c->fail_on_bad)
    return 0;
  pthread_mutex_lock(&j->lock);
  size_t ff = atomic_load(&j->fail_file);
  if (ff == SIZE_MAX || pos_before(file, line, (uint32_t)ff, j->fail_line)) {
    atomic_store(&j->fail_file, file);
    j->fail_line = line;
    const char *path = j->files.v[file].path;
    if (line)
      snprintf(j->fail_msg, sizeof(j->fail_msg), "%s:%llu: %s: %s", path,
               (unsigned long long)line, drop_names[kind], reason);
    else
      snprintf(j->fail_msg, sizeof(j->fail_msg), "%s: %s: %s", path,
               drop_names[kind], reason);
  }
  pthread_mutex_unlock(&j->lock);
  return 1;
}

static uint64_t line_of(const char *text, size_t off, uint64_t first) {
  uint64_t line = first;
  for (const char *p = text; (p = memchr(p, '\n', (size_t)(text + off - p)));
       p++)
    line++;
  return line;
}

static void hash_hex(XXH128_hash_t h, char hex[33]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  static const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 16; i++) {
    hex[2 * i] = digits[c.digest[i] >> 4];
    hex[2 * i + 1] = digits[c.digest[i] & 15];
  }
  hex[32] = '\0';
}

/* A document that passed the reader: UTF-8, filters, hash, spool. */
static int accept_doc(worker *w, uint64_t *counts, uint32_t fi, uint32_t di,
                      const corpus_doc *d, int *stop_file) {
  size_t bad = docfilter_utf8_check(d->text, d->len);
  if (bad != d->len) {
    char why[96];
    snprintf(why, sizeof(why), "invalid UTF-8 at byte %zu of the document",
             bad);
    uint64_t line = w->job->c->format == CORPUS_JSONL
                        ? d->line
                        : line_of(d->text, bad, d->line);
    *stop_file = drop_doc(w, counts, fi, line, DROP_INVALID_UTF8, why);
    return 0;
  }
  docfilter_verdict v;
  if (docfilter_check(w->filter, d->text, d->len, &v) != 0)
    return -ENOMEM;
  static const drop of_verdict[] = {
      [DOCFILTER_TOO_SHORT] = DROP_TOO_SHORT,
      [DOCFILTER_TOO_LONG] = DROP_TOO_LONG,
      [DOCFILTER_LOW_ALPHA] = DROP_LOW_ALPHA,
      [DOCFILTER_REPEATED_LINES] = DROP_REPEATED_LINES,
  };
  if (v != DOCFILTER_KEEP) {
    counts[of_verdict[v]]++;
    return 0;
  }
  XXH128_hash_t h = XXH3_128bits(d->text, d->len);
  char hex[33];
  hash_hex(h, hex);
  shard_rec r = {.hash_hi = h.high64,
                 .hash_lo = h.low64,
                 .file = fi,
                 .doc = di,
                 .spool = (uint16_t)w->id};
  uint64_t linelen;
  int rc = spool_line(&w->sp, hex, d->text, d->len, &r.off, &linelen);
  if (rc != 0)
    return rc;
  r.len = (uint32_t)linelen; /* < 4 GiB: documents are at most 256 MiB */
  if (shard_recs_push(&w->recs, &r) != 0)
    return -ENOMEM;
  job *j = w->job;
  uint64_t n = atomic_fetch_add(&j->nrecs, 1) + 1;
  /* Each reader may hold one partly filled chunk on top. */
  if (shard_recs_bytes((size_t)n) + j->c->read_threads * shard_recs_bytes(1) >
      j->rec_budget) {
    /* Scale what was read to the whole input (files done, and how far
     * each reader is in its file, by size on disk) for a suggestion. */
    atomic_store(&w->file_offset, corpus_reader_offset(w->reader));
    uint64_t total = 0;
    for (size_t i = 0; i < j->files.n; i++)
      total += j->files.v[i].size;
    uint64_t seen = atomic_load(&j->bytes_done);
    for (unsigned i = 0; i < j->c->read_threads; i++)
      seen += atomic_load(&j->workers[i].file_offset);
    double share = total && seen < total ? (double)seen / (double)total : 1.0;
    /* The inverse of the check above, for 10% more documents than the
     * estimate: memory_limit / 2 must hold them. */
    double est = (double)n / share * 1.1;
    double need = 2.0 * (double)(shard_recs_bytes((size_t)est) +
                                 j->c->read_threads * shard_recs_bytes(1));
    uint64_t mib = (uint64_t)(need / 1048576.0) + 1;
    set_fatal(j,
              "%llu documents in the first %.0f%% of the input already need "
              "more than half of memory_limit %s for their records (40 "
              "bytes each); set memory_limit to at least %lluMiB",
              (unsigned long long)n, share * 100.0, j->c->memory_name,
              (unsigned long long)mib);
    return ERR_REPORTED;
  }
  return 1;
}

/* Forgets the records of the file being read, back to n records. */
static void rollback(worker *w, size_t n) {
  size_t k = w->recs.n - n;
  shard_recs_pop(&w->recs, k);
  atomic_fetch_sub(&w->job->nrecs, k);
}

/* Withdraws the problems listed for file fi: it turned out unreadable,
 * and its counts are dropped with it, so the manifest stays consistent. */
static void withdraw_problems(worker *w, uint32_t fi) {
  job *j = w->job;
  pthread_mutex_lock(&j->lock);
  size_t k = 0;
  for (size_t i = 0; i < j->nproblems; i++)
    if (j->problems[i].file != fi)
      j->problems[k++] = j->problems[i];
  j->nproblems = k;
  j->nproblems_total -= w->file_problems;
  pthread_mutex_unlock(&j->lock);
  w->file_problems = 0;
}

/* Reads one file. Its counts and records join the worker's only when the
 * file is read to its end: a file that turns out unreadable halfway
 * counts as one unreadable file, not as part of a corpus. */
static int read_corpus_file(worker *w, uint32_t fi) {
  job *j = w->job;
  const corpus_file *f = &j->files.v[fi];
  uint64_t counts[NDROPS] = {0};
  uint64_t nread = 0, naccepted = 0;
  size_t recs_before = w->recs.n;
  char err[256];
  int stop_file = 0;
  w->file_problems = 0;
  if (f->stat_errno) {
    drop_doc(w, w->counts, fi, 0, DROP_UNREADABLE, strerror(f->stat_errno));
    return 0;
  }
  if (f->not_regular) {
    int loop = strcmp(f->not_regular, "a symlink loop") == 0;
    snprintf(err, sizeof(err),
             loop ? "%s is a symlink loop: it leads back to a directory "
                    "the walk is already in"
                  : "%s is %s, not a regular file",
             f->path, f->not_regular);
    drop_doc(w, w->counts, fi, 0, DROP_UNREADABLE, err);
    return 0;
  }
  if (corpus_reader_open(w->reader, f->path, err, sizeof(err)) != 0) {
    drop_doc(w, w->counts, fi, 0, DROP_UNREADABLE, err);
    return 0;
  }
  uint32_t di = 0;
  for (;;) {
    if ((di & 63) == 0)
      atomic_store(&w->file_offset, corpus_reader_offset(w->reader));
    if ((di & 63) == 0 &&
        (atomic_load(&j->stop) || atomic_load(&j->fail_file) < fi)) {
      corpus_reader_close(w->reader);
      rollback(w, recs_before);
      return 0;
    }
    corpus_doc d;
    int rc = corpus_reader_next(w->reader, &d, err, sizeof(err));
    if (rc == 0)
      break;
    if (rc < 0) {
      corpus_reader_close(w->reader);
      rollback(w, recs_before);
      if (rc == CORPUS_ENOMEM)
        return -ENOMEM;
      if (rc == CORPUS_ECANCELED)
        return 0; /* stop is set; the task ends with its reason */
      withdraw_problems(w, fi);
      drop_doc(w, w->counts, fi, 0,
               rc == CORPUS_EBINARY ? DROP_BINARY : DROP_UNREADABLE, err);
      return 0;
    }
    if (di == UINT32_MAX) {
      set_fatal(j, "%s: more than 4294967295 documents in one file", f->path);
      return ERR_REPORTED;
    }
    nread++;
    char why[256];
    switch (d.status) {
    case CORPUS_DOC_OK:
      rc = accept_doc(w, counts, fi, di, &d, &stop_file);
      if (rc < 0) {
        corpus_reader_close(w->reader);
        return rc;
      }
      naccepted += (uint64_t)rc;
      break;
    case CORPUS_DOC_EMPTY:
      counts[DROP_EMPTY]++;
      break;
    case CORPUS_DOC_TOO_LONG:
      counts[DROP_TOO_LONG]++;
      break;
    case CORPUS_DOC_TOO_LARGE:
      snprintf(why, sizeof(why),
               "document larger than %zu bytes (memory_limit / 64)",
               j->c->max_doc);
      drop_doc(w, counts, fi, d.line, DROP_TOO_LARGE, why);
      break;
    case CORPUS_DOC_MALFORMED_JSON:
      stop_file = drop_doc(w, counts, fi, d.line, DROP_MALFORMED_JSON, d.why);
      break;
    case CORPUS_DOC_MISSING_FIELD:
      stop_file = drop_doc(w, counts, fi, d.line, DROP_MISSING_FIELD, d.why);
      break;
    }
    di++;
    if (stop_file) {
      corpus_reader_close(w->reader);
      return 0;
    }
  }
  uint64_t bytes = corpus_reader_bytes(w->reader);
  corpus_reader_close(w->reader);
  if (bytes == 0) {
    drop_doc(w, w->counts, fi, 0, DROP_EMPTY_FILE, "empty file");
    return 0;
  }
  for (int k = 0; k < NDROPS; k++)
    w->counts[k] += counts[k];
  w->read += nread;
  w->accepted += naccepted;
  w->text_bytes += bytes;
  return 0;
}

/* The reader's stop hook: an error elsewhere, a policy failure or a
 * cancel of the task. */
static int reader_should_stop(void *arg) {
  job *j = arg;
  if (atomic_load(&j->stop))
    return 1;
  if (j->host->cancelled(j->ctx)) {
    atomic_store(&j->stop, 1);
    return 1;
  }
  return 0;
}

static void *pass1_thread(void *arg) {
  worker *w = arg;
  job *j = w->job;
  for (;;) {
    if (atomic_load(&j->stop))
      break;
    size_t i = atomic_fetch_add(&j->next, 1);
    if (i >= j->files.n)
      break;
    if (j->host->cancelled(j->ctx)) {
      atomic_store(&j->stop, 1);
      break;
    }
    /* With on_bad_input: fail, files after the first bad one need not be
     * read; files before it must be, in case one of them is worse. */
    if (i > atomic_load(&j->fail_file))
      break;
    int rc = read_corpus_file(w, (uint32_t)i);
    if (rc == -ENOMEM)
      set_fatal(j, "out of memory while reading %s", j->files.v[i].path);
    else if (rc < 0 && rc != ERR_REPORTED)
      set_fatal(j, "cannot write the spool file in the attempt directory: %s",
                strerror(-rc));
    if (rc < 0)
      break;
    atomic_store(&w->file_offset, 0);
    atomic_fetch_add(&j->bytes_done, j->files.v[i].size);
    atomic_fetch_add(&j->done, 1);
    j->host->heartbeat(j->ctx);
  }
  int frc;
  if (!atomic_load(&j->stop) && (frc = spool_flush(&w->sp)) != 0)
    set_fatal(j, "cannot write the spool file in the attempt directory: %s",
              strerror(-frc));
  pthread_mutex_lock(&j->lock);
  j->running--;
  pthread_cond_signal(&j->cond);
  pthread_mutex_unlock(&j->lock);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* Pass 2: write shards                                                 */

static void shard_name(const job *j, unsigned d, char *buf, size_t n) {
  if (d < j->ntrain)
    snprintf(buf, n, "train-%05u.jsonl", d);
  else
    snprintf(buf, n, "val-%05u.jsonl", d - j->ntrain);
}

static int write_shard(job *j, unsigned d, char *buf) {
  char name[64], tmpname[80];
  shard_name(j, d, name, sizeof(name));
  snprintf(tmpname, sizeof(tmpname), ".tmp-%s", name);
  char *tmp = fileio_join(j->out_dir, tmpname);
  if (!tmp)
    return -ENOMEM;
  j->tmp_paths[d] = tmp;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  EVP_MD_CTX *sha = EVP_MD_CTX_new();
  int rc = sha && EVP_DigestInit_ex(sha, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;
  size_t used = 0;
  for (size_t i = j->shard_start[d]; rc == 0 && i < j->shard_start[d + 1];
       i++) {
    const shard_rec *r = &j->recs[i];
    uint64_t off = r->off, left = r->len;
    int spool_fd = j->workers[r->spool].sp.fd;
    while (rc == 0 && left > 0) {
      if (used == j->copy_buf) {
        rc = fileio_write_all(fd, buf, used);
        if (rc == 0 && EVP_DigestUpdate(sha, buf, used) != 1)
          rc = -EIO;
        used = 0;
        if (rc)
          break;
      }
      size_t k = j->copy_buf - used < left ? j->copy_buf - used : left;
      rc = fileio_pread_all(spool_fd, buf + used, k, off);
      used += k;
      off += k;
      left -= k;
    }
    if ((i & 1023) == 0 && j->host->cancelled(j->ctx))
      rc = -ECANCELED;
  }
  if (rc == 0 && used) {
    rc = fileio_write_all(fd, buf, used);
    if (rc == 0 && EVP_DigestUpdate(sha, buf, used) != 1)
      rc = -EIO;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned mdlen = 0;
  if (rc == 0 && EVP_DigestFinal_ex(sha, md, &mdlen) != 1)
    rc = -EIO;
  if (rc == 0 && fsync(fd) != 0)
    rc = -errno;
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  EVP_MD_CTX_free(sha);
  if (rc == 0)
    for (unsigned k = 0; k < mdlen && k < 32; k++)
      snprintf(j->shard_sha[d] + 2 * k, 3, "%02x", md[k]);
  return rc;
}

static void *pass2_thread(void *arg) {
  worker *w = arg;
  job *j = w->job;
  char *buf = malloc(j->copy_buf);
  if (!buf)
    set_fatal(j, "out of memory");
  while (buf && !atomic_load(&j->stop)) {
    size_t d = atomic_fetch_add(&j->next, 1);
    if (d >= j->nshards)
      break;
    int rc = write_shard(j, (unsigned)d, buf);
    if (rc == -ECANCELED) {
      atomic_store(&j->stop, 1);
      break;
    }
    if (rc != 0) {
      char name[64];
      shard_name(j, (unsigned)d, name, sizeof(name));
      set_fatal(j, "cannot write %s/%s: %s", j->out_dir, name, strerror(-rc));
      break;
    }
    atomic_fetch_add(&j->done, 1);
    j->host->heartbeat(j->ctx);
  }
  free(buf);
  pthread_mutex_lock(&j->lock);
  j->running--;
  pthread_cond_signal(&j->cond);
  pthread_mutex_unlock(&j->lock);
  return NULL;
}

/* Starts fn on n workers and waits, reporting progress and passing on a
 * cancel. Returns 0, or -1 when a thread could not start (fatal set). */
static int run_threads(job *j, unsigned n, void *(*fn)(void *), double base,
                       double span, size_t total, const char *what) {
  atomic_store(&j->next, 0);
  atomic_store(&j->done, 0);
  j->running = n;
  for (unsigned i = 0; i < n; i++) {
    int rc = pthread_create(&j->workers[i].thread, NULL, fn, &j->workers[i]);
    if (rc != 0) {
      set_fatal(j, "cannot start a thread: %s", strerror(rc));
      pthread_mutex_lock(&j->lock);
      j->running -= n - i;
      pthread_mutex_unlock(&j->lock);
      break;
    }
    j->workers[i].started = 1;
  }
  uint64_t total_bytes = 0;
  for (size_t i = 0; fn == pass1_thread && i < j->files.n; i++)
    total_bytes += j->files.v[i].size;
  pthread_mutex_lock(&j->lock);
  while (j->running > 0) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 500 * 1000 * 1000;
    if (t.tv_nsec >= 1000000000) {
      t.tv_sec++;
      t.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&j->cond, &j->lock, &t);
    pthread_mutex_unlock(&j->lock);
    double frac =
        total_bytes
            ? (double)atomic_load(&j->bytes_done) / (double)total_bytes
            : (total ? (double)atomic_load(&j->done) / (double)total : 1.0);
    char msg[96];
    snprintf(msg, sizeof(msg), "%s: %zu/%zu", what,
             (size_t)atomic_load(&j->done), total);
    j->host->progress(j->ctx, base + span * (frac > 1 ? 1 : frac), msg);
    if (j->host->cancelled(j->ctx))
      atomic_store(&j->stop, 1);
    pthread_mutex_lock(&j->lock);
  }
  pthread_mutex_unlock(&j->lock);
  for (unsigned i = 0; i < n; i++)
    if (j->workers[i].started) {
      pthread_join(j->workers[i].thread, NULL);
      j->workers[i].started = 0;
    }
  return j->fatal ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* Output directory                                                     */

static int is_shard_file(const char *name) {
  size_t n = strlen(name);
  return n > 6 && strcmp(name + n - 6, ".jsonl") == 0 &&
         (strncmp(name, "train-", 6) == 0 || strncmp(name, "val-", 4) == 0);
}

/* Removes what an earlier attempt left: temporary files always, shard
 * files not in this run's set (keep_from_train / keep_from_val and up)
 * when asked. */
static void clean_out_dir(const char *dir, int stale_shards, unsigned ntrain,
                          unsigned nval) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const char *n = e->d_name;
    size_t len = strlen(n);
    /* ".tmp-<shard>", "x.tmp" and "manifest.json.tmp.<pid>" (fileio's
     * temporary: one per attempt that died while writing it). */
    const char *tmp = strstr(n, ".tmp");
    int remove = strncmp(n, ".tmp-", 5) == 0 ||
                 (len > 4 && strcmp(n + len - 4, ".tmp") == 0) ||
                 (tmp && tmp[4] == '.' && tmp[5] &&
                  strspn(tmp + 5, "0123456789") == strlen(tmp + 5));
    if (!remove && stale_shards && is_shard_file(n)) {
      unsigned idx;
      char tail[8];
      if (sscanf(n, "train-%u%7s", &idx, tail) == 2)
        remove = idx >= ntrain || strcmp(tail, ".jsonl") != 0;
      else if (sscanf(n, "val-%u%7s", &idx, tail) == 2)
        remove = idx >= nval || strcmp(tail, ".jsonl") != 0;
      else
        remove = 1;
    }
    if (remove) {
      char *p = fileio_join(dir, n);
      if (p)
        unlink(p);
      free(p);
    }
  }
  closedir(d);
}

/* ------------------------------------------------------------------ */
/* Manifest                                                             */

static cJSON *params_json(const cfg *c, unsigned threads_used) {
  cJSON *p = cJSON_CreateObject();
  cJSON *in = cJSON_AddArrayToObject(p, "input");
  for (size_t i = 0; in && i < c->ninputs; i++)
    cJSON_AddItemToArray(in, cJSON_CreateString(c->inputs[i]));
  cJSON *ex = cJSON_AddArrayToObject(p, "exclude");
  for (size_t i = 0; ex && i < c->nexcludes; i++)
    cJSON_AddItemToArray(ex, cJSON_CreateString(c->excludes[i]));
  cJSON_AddStringToObject(p, "format", c->format_name);
  cJSON_AddStringToObject(p, "separator", c->separator);
  cJSON_AddStringToObject(p, "text_field", c->text_field);
  cJSON_AddNumberToObject(p, "shards", (double)c->shards);
  cJSON_AddNumberToObject(p, "val_fraction", c->val_fraction);
  cJSON_AddNumberToObject(p, "val_shards", (double)c->val_shards);
  cJSON_AddNumberToObject(p, "seed", (double)c->seed);
  cJSON_AddNumberToObject(p, "min_bytes", (double)c->min_bytes);
  cJSON_AddNumberToObject(p, "max_bytes", (double)c->max_bytes);
  cJSON_AddNumberToObject(p, "min_alpha_ratio", c->min_alpha);
  cJSON_AddNumberToObject(p, "max_repeated_line_ratio", c->max_repeat);
  cJSON_AddStringToObject(p, "on_bad_input", c->policy);
  cJSON_AddNumberToObject(p, "threads", (double)threads_used);
  cJSON_AddNumberToObject(p, "memory_limit", (double)c->memory_limit);
  cJSON_AddNumberToObject(p, "max_document_bytes", (double)c->max_doc);
  return p;
}

typedef struct totals {
  uint64_t counts[NDROPS];
  uint64_t read, kept, train, val, in_bytes, text_bytes;
} totals;

static char *manifest_text(const job *j, const totals *t, unsigned threads,
                           uint64_t rss) {
  const cfg *c = j->c;
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "format", "dagrun-shards");
  cJSON_AddNumberToObject(m, "version", 1);
  cJSON_AddNumberToObject(m, "seed", (double)c->seed);
  cJSON_AddItemToObject(m, "params", params_json(c, threads));
  cJSON *in = cJSON_AddObjectToObject(m, "inputs");
  cJSON_AddNumberToObject(in, "files", (double)j->files.n);
  cJSON_AddNumberToObject(in, "bytes", (double)t->in_bytes);
  cJSON_AddNumberToObject(in, "text_bytes", (double)t->text_bytes);
  cJSON *docs = cJSON_AddObjectToObject(m, "documents");
  cJSON_AddNumberToObject(docs, "read", (double)t->read);
  cJSON_AddNumberToObject(docs, "kept", (double)t->kept);
  cJSON_AddNumberToObject(docs, "train", (double)t->train);
  cJSON_AddNumberToObject(docs, "val", (double)t->val);
  cJSON *dr = cJSON_AddObjectToObject(m, "dropped");
  for (int k = 0; k < NDROPS; k++)
    cJSON_AddNumberToObject(dr, drop_names[k], (double)t->counts[k]);
  cJSON *pr = cJSON_AddArrayToObject(m, "problems");
  for (size_t i = 0; i < j->nproblems; i++) {
    const problem *p = &j->problems[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", j->files.v[p->file].path);
    cJSON_AddNumberToObject(o, "line", (double)p->line);
    cJSON_AddStringToObject(o, "kind", drop_names[p->kind]);
    cJSON_AddStringToObject(o, "reason", p->reason);
    cJSON_AddItemToArray(pr, o);
  }
  cJSON_AddNumberToObject(m, "problems_total", (double)j->nproblems_total);
  cJSON *sh = cJSON_AddArrayToObject(m, "shards");
  for (unsigned d = 0; d < j->nshards; d++) {
    char name[64];
    shard_name(j, d, name, sizeof(name));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "split", d < j->ntrain ? "train" : "val");
    cJSON_AddStringToObject(o, "path", name);
    cJSON_AddNumberToObject(o, "documents", (double)j->shard_docs[d]);
    cJSON_AddNumberToObject(o, "bytes", (double)j->shard_bytes[d]);
    cJSON_AddStringToObject(o, "sha256", j->shard_sha[d]);
    cJSON_AddItemToArray(sh, o);
  }
  cJSON_AddNumberToObject(m, "peak_rss_bytes", (double)rss);
  char *s = cJSON_Print(m);
  cJSON_Delete(m);
  return s;
}

/* manifest.json, written atomically, with a final newline. */
static int write_manifest(const char *dir, const char *text, char *err,
                          size_t errlen) {
  size_t n = strlen(text);
  char *path = fileio_join(dir, "manifest.json"), *buf = malloc(n + 1);
  int rc = -ENOMEM;
  if (path && buf) {
    memcpy(buf, text, n);
    buf[n] = '\n';
    rc = fileio_write_atomic(path, buf, n + 1, err, errlen);
  } else {
    snprintf(err, errlen, "out of memory writing manifest.json");
  }
  free(path);
  free(buf);
  return rc;
}

/* ------------------------------------------------------------------ */
/* The stage                                                            */

static void job_free(job *j) {
  for (unsigned i = 0; i < j->nworkers; i++) {
    worker *w = &j->workers[i];
    corpus_reader_destroy(w->reader);
    docfilter_destroy(w->filter);
    spool_close(&w->sp);
    shard_recs_free(&w->recs);
  }
  free(j->workers);
  if (j->tmp_paths) {
    for (unsigned d = 0; d < j->nshards; d++) {
      if (j->tmp_paths[d])
        unlink(j->tmp_paths[d]); /* no-op after a successful rename */
      free(j->tmp_paths[d]);
    }
    free(j->tmp_paths);
  }
  shardplan_free_array(j->recs, j->nrecs_kept);
  free(j->shard_start);
  free(j->shard_bytes);
  free(j->shard_docs);
  free(j->shard_sha);
  corpus_files_free(&j->files);
  pthread_mutex_destroy(&j->lock);
  pthread_cond_destroy(&j->cond);
}

/* "dropped: empty 3, invalid_utf8 1" for the messages. */
static void drop_summary(const uint64_t *counts, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (int k = 0; k < NDROPS && used < n; k++)
    if (counts[k]) {
      int w = snprintf(buf + used, n - used, "%s%s %llu", used ? ", " : "",
                       drop_names[k], (unsigned long long)counts[k]);
      if (w < 0)
        break;
      used += (size_t)w;
    }
  if (!used)
    snprintf(buf, n, "none");
}

/* ------------------------------------------------------------------ */
/* The run: one helper a step, on the state below                       */

/* What a run carries from one step to the next, beside the job. Each
 * step returns 0, or the exit status once it has failed the task. */
typedef struct run_state {
  dagrun_ctx *ctx;
  const dagrun_host *h;
  cfg *c;
  job *j;
  totals t;
  uint64_t accepted;   /* documents the readers accepted (before dedup) */
  unsigned nvalshards; /* 0 when no document is for validation */
  double t0, t_read, t_write;
} run_state;

/* The input files, expanded from the input and exclude patterns. */
static int expand_inputs(run_state *s) {
  char err[1024];
  job *j = s->j;
  int rc = corpus_expand(s->c->inputs, s->c->ninputs,
                         s->h->dir(s->ctx, DAGRUN_DIR_DAG), s->c->excludes,
                         s->c->nexcludes, &j->files, err, sizeof(err));
  if (rc != 0) {
    s->h->fail(s->ctx, "%s", err);
    return rc == CORPUS_ENOMATCH || rc == CORPUS_EINVAL ? SHARD_BAD_PARAMS
                                                        : SHARD_FAILED;
  }
  if (j->files.n > UINT32_MAX) {
    s->h->fail(s->ctx, "more than 4294967295 input files");
    return SHARD_FAILED;
  }
  for (size_t i = 0; i < j->files.n; i++)
    s->t.in_bytes += j->files.v[i].size;
  return 0;
}

/* Pass 1's threads: as many as asked, files to read and memory allow
 * (half of memory_limit goes to the readers, the other half to the
 * records). */
static unsigned read_thread_count(run_state *s) {
  const cfg *c = s->c;
  uint64_t by_mem = (c->memory_limit / 2) / thread_cost(c);
  unsigned n1 = c->nthreads;
  if (n1 > s->j->files.n)
    n1 = (unsigned)s->j->files.n;
  if (n1 > by_mem)
    n1 = by_mem ? (unsigned)by_mem : 1;
  return n1 < 1 ? 1 : n1;
}

/* The workers: pass 2 may use more threads than pass 1, so there are as
 * many as the larger; the first read_threads get a reader, a filter and
 * a spool in the attempt directory. */
static int make_workers(run_state *s) {
  char err[1024];
  const cfg *c = s->c;
  job *j = s->j;
  unsigned n1 = c->read_threads;
  j->nworkers = n1 > c->nthreads ? n1 : c->nthreads;
  j->workers = calloc(j->nworkers, sizeof(worker));
  if (!j->workers) {
    s->h->fail(s->ctx, "out of memory");
    return SHARD_FAILED;
  }
  corpus_opts ro = {c->format,          c->sep,     c->separator,
                    c->text_field,      c->max_doc, (size_t)c->max_bytes,
                    reader_should_stop, j};
  docfilter_opts fo = {(uint64_t)c->min_bytes, (uint64_t)c->max_bytes,
                       c->min_alpha, c->max_repeat};
  for (unsigned i = 0; i < j->nworkers; i++) {
    worker *w = &j->workers[i];
    w->job = j;
    w->id = i;
    w->sp.fd = -1;
    if (i >= n1)
      continue;
    w->reader = corpus_reader_create(&ro);
    w->filter = docfilter_create(&fo);
    if (!w->reader || !w->filter) {
      s->h->fail(s->ctx, "out of memory");
      return SHARD_FAILED;
    }
    if (spool_open(&w->sp, s->h->dir(s->ctx, DAGRUN_DIR_ATTEMPT), i, err,
                   sizeof(err)) != 0) {
      s->h->fail(s->ctx, "%s", err);
      return SHARD_FAILED;
    }
  }
  return 0;
}

/* Pass 1: the readers, then whether the run may go on. */
static int pass1(run_state *s) {
  cfg *c = s->c;
  job *j = s->j;
  c->read_threads = read_thread_count(s);
  j->rec_budget = c->memory_limit / 2;
  s->h->log(s->ctx, DAGRUN_LOG_INFO,
            "shard: %zu input files (%.1f MiB), %u reading threads, "
            "memory_limit %s, documents up to %zu bytes",
            j->files.n, (double)s->t.in_bytes / 1048576.0, c->read_threads,
            c->memory_name, c->max_doc);
  int rc = make_workers(s);
  if (rc != 0)
    return rc;
  /* Leftovers of a killed attempt (temporary names only: the shards of
   * the last good run stay until this one has its own). */
  clean_out_dir(j->out_dir, 0, 0, 0);
  double t1 = clock_monotonic();
  run_threads(j, c->read_threads, pass1_thread, 0.0, 0.8, j->files.n,
              "reading");
  if (j->fatal) {
    s->h->fail(s->ctx, "%s", j->fatal_msg);
    return SHARD_FAILED;
  }
  if (atomic_load(&j->fail_file) != SIZE_MAX) {
    s->h->fail(s->ctx, "%s (on_bad_input: fail)", j->fail_msg);
    return SHARD_FAILED;
  }
  if (atomic_load(&j->stop) || s->h->cancelled(s->ctx)) {
    s->h->log(s->ctx, DAGRUN_LOG_WARN,
              "shard: cancelled while reading; nothing "
              "written to out/");
    s->h->fail(s->ctx, "cancelled");
    return SHARD_FAILED;
  }
  s->t_read = clock_monotonic() - t1;
  return 0;
}

/* The readers' counts summed into s->t, their buffers freed, and the
 * first problems logged. */
static void collect_pass1(run_state *s) {
  job *j = s->j;
  for (unsigned i = 0; i < s->c->read_threads; i++) {
    worker *w = &j->workers[i];
    for (int k = 0; k < NDROPS; k++)
      s->t.counts[k] += w->counts[k];
    s->t.read += w->read;
    s->accepted += w->accepted;
    s->t.text_bytes += w->text_bytes;
    /* Readers go before the plan's array is made: their buffers are the
     * memory the array may now use. */
    corpus_reader_destroy(w->reader);
    w->reader = NULL;
    docfilter_destroy(w->filter);
    w->filter = NULL;
    free(w->sp.buf);
    w->sp.buf = NULL;
  }
  for (size_t i = 0; i < j->nproblems && i < LOGGED_PROBLEMS; i++) {
    const problem *p = &j->problems[i];
    s->h->log(s->ctx, DAGRUN_LOG_WARN, "%s:%llu: %s: %s",
              j->files.v[p->file].path, (unsigned long long)p->line,
              drop_names[p->kind], p->reason);
  }
  if (j->nproblems_total > LOGGED_PROBLEMS)
    s->h->log(s->ctx, DAGRUN_LOG_WARN,
              "... %llu problems in all (manifest.json "
              "lists the first %d)",
              (unsigned long long)j->nproblems_total, MAX_PROBLEMS);
}

/* The workers' records gathered into j->recs in canonical order and
 * deduplicated; s->t.kept of them stay. */
static int gather_records(run_state *s) {
  job *j = s->j;
  unsigned n1 = s->c->read_threads;
  shard_recs *lists = calloc(n1, sizeof(*lists));
  if (!lists) {
    s->h->fail(s->ctx, "out of memory");
    return SHARD_FAILED;
  }
  for (unsigned i = 0; i < n1; i++) {
    lists[i] = j->workers[i].recs;
    memset(&j->workers[i].recs, 0, sizeof(j->workers[i].recs));
  }
  size_t n = 0;
  int rc = shardplan_gather(lists, n1, &j->recs, &n);
  free(lists);
  j->nrecs_kept = n;
  if (rc != 0) {
    s->h->fail(s->ctx, "out of memory gathering %llu document records",
               (unsigned long long)s->accepted);
    return SHARD_FAILED;
  }
  size_t kept = shardplan_dedup(j->recs, n);
  s->t.counts[DROP_DUPLICATE] = n - kept;
  s->t.kept = kept;
  if (kept == 0) {
    char why[512];
    drop_summary(s->t.counts, why, sizeof(why));
    s->h->fail(s->ctx,
               "no document survived: %llu read in %zu files; dropped: %s",
               (unsigned long long)s->t.read, j->files.n, why);
    return SHARD_FAILED;
  }
  return 0;
}

/* The plan: the kept records shuffled, split into validation and
 * training, dealt to the shards and grouped by shard (j->shard_start). */
static int make_plan(run_state *s) {
  const cfg *c = s->c;
  job *j = s->j;
  size_t kept = (size_t)s->t.kept;
  shardplan_shuffle(j->recs, kept, (uint64_t)c->seed);
  size_t nval = shardplan_val_count(kept, c->val_fraction);
  j->ntrain = (unsigned)c->shards;
  s->nvalshards = nval ? (unsigned)c->val_shards : 0;
  j->nshards = j->ntrain + s->nvalshards;
  j->shard_bytes = calloc(j->nshards, sizeof(uint64_t));
  j->shard_docs = calloc(j->nshards, sizeof(uint64_t));
  j->shard_start = calloc(j->nshards + 1, sizeof(size_t));
  j->shard_sha = calloc(j->nshards, sizeof(*j->shard_sha));
  j->tmp_paths = calloc(j->nshards, sizeof(char *));
  if (!j->shard_bytes || !j->shard_docs || !j->shard_start || !j->shard_sha ||
      !j->tmp_paths ||
      shardplan_assign(j->recs, kept, nval, j->ntrain, s->nvalshards,
                       j->shard_bytes, j->shard_docs) != 0) {
    s->h->fail(s->ctx, "out of memory");
    return SHARD_FAILED;
  }
  s->t.val = nval;
  s->t.train = kept - nval;
  if (c->val_fraction > 0 && nval == 0)
    s->h->log(s->ctx, DAGRUN_LOG_WARN,
              "val_fraction is %g but %zu document%s cannot be split: no "
              "validation shard",
              c->val_fraction, kept, kept == 1 ? "" : "s");
  shardplan_group(j->recs, kept);
  for (size_t i = 0, d = 0; d <= j->nshards; d++) {
    while (i < kept && j->recs[i].dest < d)
      i++;
    j->shard_start[d] = i;
  }
  j->shard_start[j->nshards] = kept;
  if (s->t.train < j->ntrain)
    s->h->log(s->ctx, DAGRUN_LOG_WARN,
              "only %llu training documents for %u shards: some shards are "
              "empty",
              (unsigned long long)s->t.train, j->ntrain);
  return 0;
}

/* Pass 2: the writers, under temporary names. Threads and copy buffer
 * within a quarter of memory_limit (the buffer 64 KiB to 4 MiB). */
static int pass2(run_state *s) {
  const cfg *c = s->c;
  job *j = s->j;
  unsigned n2 = c->nthreads < j->nshards ? c->nthreads : j->nshards;
  uint64_t cb = c->memory_limit / 32;
  if (cb > (4u << 20))
    cb = 4u << 20;
  if (cb < 64 * 1024)
    cb = 64 * 1024;
  j->copy_buf = (size_t)cb;
  uint64_t by_mem2 = (c->memory_limit / 4) / cb;
  if (n2 > by_mem2)
    n2 = (unsigned)by_mem2;
  if (n2 < 1)
    n2 = 1;
  atomic_store(&j->stop, 0);
  double t2 = clock_monotonic();
  run_threads(j, n2, pass2_thread, 0.8, 0.2, j->nshards, "writing");
  if (j->fatal) {
    s->h->fail(s->ctx, "%s", j->fatal_msg);
    return SHARD_FAILED;
  }
  if (atomic_load(&j->stop) || s->h->cancelled(s->ctx)) {
    s->h->log(s->ctx, DAGRUN_LOG_WARN,
              "shard: cancelled while writing shards; "
              "out/ keeps the last complete set");
    s->h->fail(s->ctx, "cancelled");
    return SHARD_FAILED;
  }
  s->t_write = clock_monotonic() - t2;
  return 0;
}

/* Commit: shards under their names, stale ones out, manifest last, the
 * directory synced, then the outputs. *rss gets the peak RSS that the
 * manifest records. */
static int commit(run_state *s, uint64_t *rss) {
  char err[1024];
  job *j = s->j;
  const char *out_dir = j->out_dir;
  for (unsigned d = 0; d < j->nshards; d++) {
    char name[64];
    shard_name(j, d, name, sizeof(name));
    char *dst = fileio_join(out_dir, name);
    if (!dst || rename(j->tmp_paths[d], dst) != 0) {
      s->h->fail(s->ctx, "cannot rename %s to %s: %s", j->tmp_paths[d],
                 dst ? dst : name, strerror(errno));
      free(dst);
      return SHARD_FAILED;
    }
    free(dst);
  }
  clean_out_dir(out_dir, 1, j->ntrain, s->nvalshards);
  *rss = stagekit_peak_rss();
  char *mf = manifest_text(j, &s->t, s->c->read_threads, *rss);
  if (!mf) {
    s->h->fail(s->ctx, "out of memory");
    return SHARD_FAILED;
  }
  int rc = write_manifest(out_dir, mf, err, sizeof(err));
  free(mf);
  if (rc != 0) {
    s->h->fail(s->ctx, "%s", err);
    return SHARD_FAILED;
  }
  if ((rc = fileio_fsync_dir(out_dir)) != 0) {
    s->h->fail(s->ctx, "cannot sync %s: %s", out_dir, strerror(-rc));
    return SHARD_FAILED;
  }
  char num[32], *mpath = fileio_join(out_dir, "manifest.json");
  s->h->output(s->ctx, "dir", out_dir);
  if (mpath)
    s->h->output(s->ctx, "manifest", mpath);
  free(mpath);
  snprintf(num, sizeof(num), "%u", j->ntrain);
  s->h->output(s->ctx, "train_shards", num);
  snprintf(num, sizeof(num), "%u", s->nvalshards);
  s->h->output(s->ctx, "val_shards", num);
  return 0;
}

/* The last line of the log and the run's metrics. */
static void report(run_state *s, uint64_t rss) {
  const job *j = s->j;
  const totals *t = &s->t;
  uint64_t out_bytes = 0;
  for (unsigned d = 0; d < j->nshards; d++)
    out_bytes += j->shard_bytes[d];
  double total_s = clock_monotonic() - s->t0;
  double mbps = total_s > 0 ? (double)t->text_bytes / 1e6 / total_s : 0;
  char why[512];
  drop_summary(t->counts, why, sizeof(why));
  s->h->log(s->ctx, DAGRUN_LOG_INFO,
            "shard: kept %llu of %llu documents (train %llu, val %llu) in "
            "%u+%u shards, %.1f MiB; dropped: %s; %.2f s (read %.2f s, "
            "write %.2f s), %.1f MB/s; peak RSS %.1f MiB",
            (unsigned long long)t->kept, (unsigned long long)t->read,
            (unsigned long long)t->train, (unsigned long long)t->val,
            j->ntrain, s->nvalshards, (double)out_bytes / 1048576.0, why,
            total_s, s->t_read, s->t_write, mbps, (double)rss / 1048576.0);
  s->h->metric(s->ctx, "documents_kept", (double)t->kept, 0);
  s->h->metric(s->ctx, "documents_dropped", (double)(t->read - t->kept), 0);
  s->h->metric(s->ctx, "output_bytes", (double)out_bytes, 0);
  s->h->metric(s->ctx, "throughput_mb_s", mbps, 0);
  s->h->metric(s->ctx, "peak_rss_bytes", (double)rss, 0);
  s->h->progress(s->ctx, 1.0, "done");
}

static int run_stage(dagrun_ctx *ctx, const dagrun_host *h, cfg *c, job *j) {
  run_state s = {.ctx = ctx, .h = h, .c = c, .j = j};
  s.t0 = clock_monotonic();
  j->out_dir = h->dir(ctx, DAGRUN_DIR_OUT);
  if (!j->out_dir || !h->dir(ctx, DAGRUN_DIR_ATTEMPT)) {
    h->fail(ctx, "the host gave no output or attempt directory");
    return SHARD_FAILED;
  }
  uint64_t rss = 0;
  int rc = expand_inputs(&s);
  if (rc == 0)
    rc = pass1(&s);
  if (rc != 0)
    return rc;
  collect_pass1(&s);
  if ((rc = gather_records(&s)) != 0 || (rc = make_plan(&s)) != 0 ||
      (rc = pass2(&s)) != 0 || (rc = commit(&s, &rss)) != 0)
    return rc;
  report(&s, rss);
  return 0;
}

static int run(dagrun_ctx *ctx, const dagrun_host *host) {
  cfg c;
  if (read_params(ctx, host, &c) != 0) {
    free(c.inputs);
    free(c.excludes);
    return SHARD_BAD_PARAMS;
  }
  job j;
  memset(&j, 0, sizeof(j));
  j.ctx = ctx;
  j.host = host;
  j.c = &c;
  atomic_init(&j.fail_file, SIZE_MAX);
  pthread_mutex_init(&j.lock, NULL);
  pthread_cond_init(&j.cond, NULL);
  int status = run_stage(ctx, host, &c, &j);
  job_free(&j);
  free(c.inputs);
  free(c.excludes);
  return status;
}

static const dagrun_stage stage = {
    DAGRUN_STAGE_HEADER,
    "shard",
    "1.0.0",
    "Raw text or JSONL corpus -> deduplicated, shuffled JSONL shards "
    "balanced by bytes, with a manifest.",
    params,
    run,
    choices,
    NULL, /* ABI 1.2: no check */
};

DAGRUN_EXPORT const dagrun_stage *DAGRUN_STAGE_ENTRY(void) { return &stage; }
