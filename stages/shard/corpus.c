/*
 * corpus: input expansion, document reading, JSON escaping. See corpus.h.
 */
#include "corpus.h"

#include "lib/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <glob.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <zlib.h>

const char *corpus_strerror(int code) {
  switch (code) {
#define X(name, c, text)                                                       \
  case c:                                                                      \
    return text;
    CORPUS_ERRORS(X)
#undef X
  case 0:
    return "success";
  default:
    return "unknown error";
  }
}

/* ------------------------------------------------------------------ */
/* Input expansion                                                      */

void corpus_files_free(corpus_files *files) {
  if (!files)
    return;
  for (size_t i = 0; i < files->n; i++)
    free(files->v[i].path);
  free(files->v);
  memset(files, 0, sizeof(*files));
}

/* Takes ownership of path. */
static int add_file(corpus_files *out, char *path, uint64_t size, int err,
                    const char *not_regular) {
  if (out->n == out->cap) {
    size_t cap = out->cap ? 2 * out->cap : 64;
    corpus_file *v = realloc(out->v, cap * sizeof(*v));
    if (!v) {
      free(path);
      return CORPUS_ENOMEM;
    }
    out->v = v;
    out->cap = cap;
  }
  out->v[out->n++] = (corpus_file){path, size, err, not_regular};
  return 0;
}

static char *join_path(const char *dir, const char *name) {
  size_t ld = strlen(dir), ln = strlen(name);
  int slash = ld > 0 && dir[ld - 1] != '/';
  char *p = malloc(ld + slash + ln + 1);
  if (!p)
    return NULL;
  memcpy(p, dir, ld);
  if (slash)
    p[ld] = '/';
  memcpy(p + ld + slash, name, ln + 1);
  return p;
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static int excluded(const char *path, const char *const *excludes,
                    size_t nexcludes) {
  const char *b = base_name(path);
  for (size_t i = 0; i < nexcludes; i++)
    if (fnmatch(excludes[i], b, 0) == 0)
      return 1;
  return 0;
}

/* The directories from the walk's root to the current one, so that a
 * symlink back to an ancestor is not walked forever. */
typedef struct walk_chain {
  dev_t dev;
  ino_t ino;
  const struct walk_chain *up;
} walk_chain;

typedef struct walk_ctx {
  const char *const *excludes;
  size_t nexcludes;
  corpus_files *out;
  char *err;
  size_t errlen;
} walk_ctx;

/* What a stat'ed entry that is neither a file nor a directory is. */
static const char *what_is(mode_t mode) {
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  return "a device";
}

static int walk_entries(walk_ctx *w, const char *dir, const struct stat *dst,
                        const walk_chain *up);

/* Takes ownership of dir. A loop through a symlink (dir is already being
 * walked) is listed, not walked again: walking it would never end, and
 * leaving it out unsaid would hide a corpus that is not what was meant. */
static int walk_dir(walk_ctx *w, char *dir, const struct stat *dst,
                    const walk_chain *up) {
  for (const walk_chain *c = up; c; c = c->up)
    if (c->dev == dst->st_dev && c->ino == dst->st_ino)
      return add_file(w->out, dir, 0, 0, "a symlink loop");
  int rc = walk_entries(w, dir, dst, up);
  free(dir);
  return rc;
}

static int walk_entries(walk_ctx *w, const char *dir, const struct stat *dst,
                        const walk_chain *up) {
  walk_chain me = {dst->st_dev, dst->st_ino, up};
  DIR *d = opendir(dir);
  if (!d) {
    /* Kept as an entry so the caller reports it with the other
     * unreadable inputs instead of it vanishing. */
    char *p = strdup(dir);
    return p ? add_file(w->out, p, 0, errno ? errno : EIO, NULL)
             : CORPUS_ENOMEM;
  }
  int rc = 0;
  struct dirent *e;
  while (rc == 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue; /* ".", "..", and hidden files (.git, editor backups) */
    char *p = join_path(dir, e->d_name);
    if (!p) {
      rc = CORPUS_ENOMEM;
      break;
    }
    if (excluded(p, w->excludes, w->nexcludes)) {
      free(p);
      continue;
    }
    struct stat st;
    if (stat(p, &st) != 0) {
      rc = add_file(w->out, p, 0, errno, NULL); /* e.g. a dangling symlink */
    } else if (S_ISDIR(st.st_mode)) {
      rc = walk_dir(w, p, &st, &me);
    } else if (S_ISREG(st.st_mode)) {
      rc = add_file(w->out, p, (uint64_t)st.st_size, 0, NULL);
    } else {
      rc = add_file(w->out, p, 0, 0, what_is(st.st_mode));
    }
  }
  closedir(d);
  return rc;
}

/* Adds one path found by a glob (found = 1) or named outright. */
static int add_path(walk_ctx *w, const char *path, int found) {
  if (found && excluded(path, w->excludes, w->nexcludes))
    return 0;
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    struct stat lst;
    if (!found && lstat(path, &lst) != 0) {
      fileio_seterr(w->err, w->errlen, "input %s matched no files (%s)", path,
                    strerror(e));
      return CORPUS_ENOMATCH;
    }
    char *p = strdup(path);
    return p ? add_file(w->out, p, 0, e, NULL) : CORPUS_ENOMEM;
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode) && found)
    return 0;
  char *p = strdup(path);
  if (!p)
    return CORPUS_ENOMEM;
  if (S_ISDIR(st.st_mode))
    return walk_dir(w, p, &st, NULL);
  /* A FIFO or device named outright is reported as bad input rather
   * than read: it could block forever. */
  if (!S_ISREG(st.st_mode))
    return add_file(w->out, p, 0, 0, what_is(st.st_mode));
  return add_file(w->out, p, (uint64_t)st.st_size, 0, NULL);
}

static int by_path(const void *a, const void *b) {
  return strcmp(((const corpus_file *)a)->path, ((const corpus_file *)b)->path);
}

int corpus_expand(const char *const *inputs, size_t ninputs,
                  const char *base_dir, const char *const *excludes,
                  size_t nexcludes, corpus_files *out, char *err,
                  size_t errlen) {
  memset(out, 0, sizeof(*out));
  walk_ctx w = {excludes, nexcludes, out, err, errlen};
  if (ninputs == 0) {
    fileio_seterr(err, errlen,
                  "input is empty: give files, directories or globs");
    return CORPUS_EINVAL;
  }
  int rc = 0;
  for (size_t i = 0; i < ninputs && rc == 0; i++) {
    const char *in = inputs[i];
    if (!in || !*in) {
      fileio_seterr(err, errlen, "input item %zu is an empty string", i);
      rc = CORPUS_EINVAL;
      break;
    }
    char *path = (in[0] != '/' && base_dir && *base_dir)
                     ? join_path(base_dir, in)
                     : strdup(in);
    if (!path) {
      rc = CORPUS_ENOMEM;
      break;
    }
    size_t before = out->n;
    if (strpbrk(in, "*?[")) {
      glob_t g;
      int grc = glob(path, GLOB_BRACE, NULL, &g);
      if (grc == 0) {
        for (size_t k = 0; k < g.gl_pathc && rc == 0; k++)
          rc = add_path(&w, g.gl_pathv[k], 1);
        globfree(&g);
      } else if (grc == GLOB_NOSPACE) {
        rc = CORPUS_ENOMEM;
      } else if (grc != GLOB_NOMATCH) {
        fileio_seterr(err, errlen, "input %s: cannot expand the glob", path);
        rc = CORPUS_EREAD;
      }
    } else {
      rc = add_path(&w, path, 0);
    }
    if (rc == 0 && out->n == before) {
      fileio_seterr(err, errlen, "input %s matched no files", path);
      rc = CORPUS_ENOMATCH;
    }
    free(path);
  }
  if (rc != 0) {
    if (rc == CORPUS_ENOMEM)
      fileio_seterr(err, errlen, "out of memory while listing the inputs");
    corpus_files_free(out);
    return rc;
  }
  qsort(out->v, out->n, sizeof(*out->v), by_path);
  /* The same file named twice (two inputs, a glob and its directory)
   * is read once. */
  size_t k = 0;
  for (size_t i = 0; i < out->n; i++) {
    if (k > 0 && strcmp(out->v[k - 1].path, out->v[i].path) == 0)
      free(out->v[i].path);
    else
      out->v[k++] = out->v[i];
  }
  out->n = k;
  return 0;
}

/* ------------------------------------------------------------------ */
/* Document reading                                                     */

#define CHUNK (64 * 1024)
#define SEP_MAX 256 /* longest separator line (checked by the stage) */

struct corpus_reader {
  corpus_opts o;
  size_t sep_len;
  size_t limit; /* bytes a document (text) or line (JSONL) may buffer */
  int limit_is_max_bytes; /* the limit comes from max_bytes, not max_doc */
  gzFile gz;
  unsigned char *chunk;
  size_t cpos, cend;
  int eof;
  uint64_t bytes; /* uncompressed bytes read from this file */
  uint64_t line;  /* lines fully read so far */
  char *doc;      /* current document or line */
  size_t dlen, dcap;
  int overflow; /* the current document went past limit */
  cJSON *tree;  /* parse of the current JSONL line */
};

corpus_reader *corpus_reader_create(const corpus_opts *opts) {
  corpus_reader *r = calloc(1, sizeof(*r));
  if (!r)
    return NULL;
  r->o = *opts;
  r->sep_len = opts->sep_line ? strlen(opts->sep_line) : 0;
  if (r->sep_len > SEP_MAX)
    r->sep_len = SEP_MAX;
  r->limit = opts->max_doc;
  if (opts->format == CORPUS_TEXT && opts->max_bytes &&
      opts->max_bytes < opts->max_doc) {
    r->limit = opts->max_bytes;
    r->limit_is_max_bytes = 1;
  }
  /* Room for the line ending a document's last line may still carry. */
  r->limit += 2;
  r->chunk = malloc(CHUNK);
  if (!r->chunk) {
    free(r);
    return NULL;
  }
  return r;
}

void corpus_reader_close(corpus_reader *r) {
  if (!r)
    return;
  if (r->gz)
    gzclose(r->gz);
  r->gz = NULL;
  cJSON_Delete(r->tree);
  r->tree = NULL;
}

void corpus_reader_destroy(corpus_reader *r) {
  if (!r)
    return;
  corpus_reader_close(r);
  free(r->chunk);
  free(r->doc);
  free(r);
}

int corpus_reader_open(corpus_reader *r, const char *path, char *err,
                       size_t errlen) {
  corpus_reader_close(r);
  r->cpos = r->cend = 0;
  r->eof = 0;
  r->bytes = 0;
  r->line = 0;
  r->dlen = 0;
  r->overflow = 0;
  /* Non-blocking, so that a FIFO put in the file's place since the
   * listing cannot block the open; fstat then refuses it. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    fileio_seterr(err, errlen, "%s", strerror(errno));
    if (fd >= 0)
      close(fd);
    return CORPUS_EREAD;
  }
  if (!S_ISREG(st.st_mode)) {
    fileio_seterr(err, errlen, "%s is %s, not a regular file", path,
                  S_ISDIR(st.st_mode) ? "a directory" : what_is(st.st_mode));
    close(fd);
    return CORPUS_EREAD;
  }
  (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  errno = 0;
  /* gzread reads a file without the gzip magic as is. */
  r->gz = gzdopen(fd, "rb");
  if (!r->gz) {
    fileio_seterr(err, errlen, "%s", errno ? strerror(errno) : "out of memory");
    close(fd);
    return CORPUS_EREAD;
  }
  gzbuffer(r->gz, CHUNK);
  return 0;
}

uint64_t corpus_reader_bytes(const corpus_reader *r) { return r->bytes; }

uint64_t corpus_reader_offset(const corpus_reader *r) {
  if (!r->gz)
    return 0;
  z_off_t off = gzoffset(r->gz);
  return off > 0 ? (uint64_t)off : 0;
}

/* Makes unread bytes available in chunk: 1, 0 at the end, or an error. */
static int fill(corpus_reader *r, char *err, size_t errlen) {
  if (r->cpos < r->cend)
    return 1;
  if (r->eof)
    return 0;
  if (r->o.should_stop && r->o.should_stop(r->o.stop_arg)) {
    fileio_seterr(err, errlen, "stopped");
    return CORPUS_ECANCELED;
  }
  int got = gzread(r->gz, r->chunk, CHUNK);
  if (got < 0) {
    int e;
    const char *msg = gzerror(r->gz, &e);
    if (e == Z_ERRNO)
      msg = strerror(errno);
    fileio_seterr(err, errlen, "%s%s",
                  e == Z_DATA_ERROR ? "corrupt gzip data: " : "", msg);
    return CORPUS_EREAD;
  }
  if (got == 0) {
    int e;
    (void)gzerror(r->gz, &e);
    if (e == Z_BUF_ERROR) { /* the input ended inside a gzip stream */
      fileio_seterr(err, errlen,
                    "truncated gzip data (unexpected end of file)");
      return CORPUS_EREAD;
    }
    r->eof = 1;
    return 0;
  }
  const unsigned char *nul = memchr(r->chunk, 0, (size_t)got);
  if (nul) {
    fileio_seterr(err, errlen, "binary data: a NUL byte at byte %llu",
                  (unsigned long long)(r->bytes + (uint64_t)(nul - r->chunk)));
    return CORPUS_EBINARY;
  }
  r->cpos = 0;
  r->cend = (size_t)got;
  if (r->bytes == 0 && got >= 3 && memcmp(r->chunk, "\xEF\xBB\xBF", 3) == 0)
    r->cpos = 3; /* byte order mark */
  r->bytes += (uint64_t)got;
  return 1;
}

/* Appends to the document buffer, or marks it overflowed past limit. */
static int append(corpus_reader *r, const unsigned char *p, size_t n) {
  if (r->overflow)
    return 0;
  if (n > r->limit - r->dlen) {
    r->overflow = 1;
    return 0;
  }
  if (r->dlen + n + 1 > r->dcap) {
    size_t cap = r->dcap ? r->dcap : 4096;
    while (cap < r->dlen + n + 1)
      cap *= 2;
    if (cap > r->limit + 1)
      cap = r->limit + 1;
    char *d = realloc(r->doc, cap);
    if (!d)
      return CORPUS_ENOMEM;
    r->doc = d;
    r->dcap = cap;
  }
  memcpy(r->doc + r->dlen, p, n);
  r->dlen += n;
  return 0;
}

typedef struct line_info {
  size_t start;                    /* dlen before the line */
  int overflow_before;             /* overflow before the line */
  size_t len;                      /* bytes without the '\n' */
  int blank;                       /* only spaces, tabs, '\r' */
  unsigned char head[SEP_MAX + 2]; /* the line's first bytes */
} line_info;

/* Reads one line (through '\n' or to the end of the file) into the
 * document buffer. Returns 1, 0 at the end of the file, or an error. */
static int read_line(corpus_reader *r, line_info *li, char *err,
                     size_t errlen) {
  li->start = r->dlen;
  li->overflow_before = r->overflow;
  li->len = 0;
  li->blank = 1;
  int any = 0;
  for (;;) {
    int rc = fill(r, err, errlen);
    if (rc < 0)
      return rc;
    if (rc == 0)
      return any;
    any = 1;
    const unsigned char *p = r->chunk + r->cpos;
    size_t avail = r->cend - r->cpos;
    const unsigned char *nl = memchr(p, '\n', avail);
    size_t seg = nl ? (size_t)(nl - p) : avail;
    if (li->len < sizeof(li->head)) {
      size_t k = sizeof(li->head) - li->len;
      memcpy(li->head + li->len, p, k < seg ? k : seg);
    }
    for (size_t i = 0; li->blank && i < seg; i++)
      li->blank = p[i] == ' ' || p[i] == '\t' || p[i] == '\r';
    li->len += seg;
    size_t take = seg + (nl ? 1 : 0);
    if ((rc = append(r, p, take)) < 0)
      return rc;
    r->cpos += take;
    if (nl)
      return 1;
  }
}

static int is_sep_line(const corpus_reader *r, const line_info *li) {
  size_t n = r->sep_len;
  if (li->len == n + 1 && li->head[n] == '\r')
    return memcmp(li->head, r->o.sep_line, n) == 0;
  return li->len == n && memcmp(li->head, r->o.sep_line, n) == 0;
}

/* The document in the buffer, without its last line ending. */
static void emit_text(corpus_reader *r, corpus_doc *doc) {
  size_t len = r->dlen;
  doc->text = r->doc;
  doc->len = 0;
  doc->why[0] = '\0';
  if (!r->overflow) {
    if (len > 0 && r->doc[len - 1] == '\n')
      len--;
    if (len > 0 && r->doc[len - 1] == '\r')
      len--;
  }
  if (r->overflow || len > r->limit - 2)
    doc->status =
        r->limit_is_max_bytes ? CORPUS_DOC_TOO_LONG : CORPUS_DOC_TOO_LARGE;
  else if (len == 0)
    doc->status = CORPUS_DOC_EMPTY;
  else {
    doc->status = CORPUS_DOC_OK;
    doc->len = len;
  }
}

static int next_text(corpus_reader *r, corpus_doc *doc, char *err,
                     size_t errlen) {
  r->dlen = 0;
  r->overflow = 0;
  int content = 0; /* the document has a non-separator line */
  for (;;) {
    line_info li;
    int rc = read_line(r, &li, err, errlen);
    if (rc < 0)
      return rc;
    if (rc == 0) {
      if (!content)
        return 0; /* nothing after the last separator */
      break;
    }
    r->line++;
    int sep = r->o.sep == CORPUS_SEP_BLANK  ? li.blank
              : r->o.sep == CORPUS_SEP_LINE ? is_sep_line(r, &li)
                                            : 0;
    if (!sep) {
      if (!content) {
        content = 1;
        doc->line = r->line;
      }
      continue;
    }
    /* A separator line belongs to no document. */
    r->dlen = li.start;
    r->overflow = li.overflow_before;
    if (content)
      break;
    if (r->o.sep == CORPUS_SEP_LINE) {
      doc->line = r->line; /* an empty document: point at its end */
      break;
    }
    /* BLANK: a run of blank lines is one separator. */
  }
  emit_text(r, doc);
  return 1;
}

/* Whether the JSON text s has a \u0000 escape (not an escaped backslash
 * followed by "u0000"): cJSON's strings end at a NUL, so the text would
 * come back cut short. */
static int has_nul_escape(const char *s, size_t n) {
  const char *p = s, *end = s + n;
  while ((p = memmem(p, (size_t)(end - p), "u0000", 5)) != NULL) {
    size_t slashes = 0;
    while (p - slashes > s && p[-1 - (ptrdiff_t)slashes] == '\\')
      slashes++;
    if (slashes % 2 == 1)
      return 1;
    p += 5;
  }
  return 0;
}

static int next_jsonl(corpus_reader *r, corpus_doc *doc, char *err,
                      size_t errlen) {
  cJSON_Delete(r->tree);
  r->tree = NULL;
  doc->why[0] = '\0';
  doc->text = NULL;
  doc->len = 0;
  for (;;) {
    r->dlen = 0;
    r->overflow = 0;
    line_info li;
    int rc = read_line(r, &li, err, errlen);
    if (rc <= 0)
      return rc;
    r->line++;
    if (li.blank)
      continue;
    doc->line = r->line;
    if (r->overflow) {
      doc->status = CORPUS_DOC_TOO_LARGE;
      return 1;
    }
    size_t len = r->dlen;
    if (len > 0 && r->doc[len - 1] == '\n')
      len--;
    if (len > 0 && r->doc[len - 1] == '\r')
      len--;
    r->doc[len] = '\0';
    const char *end = NULL;
    /* Length with the NUL, so that require_null_terminated rejects
     * anything but whitespace after the value. */
    r->tree = cJSON_ParseWithLengthOpts(r->doc, len + 1, &end, 1);
    if (!r->tree) {
      doc->status = CORPUS_DOC_MALFORMED_JSON;
      size_t col = end && end >= r->doc ? (size_t)(end - r->doc) + 1 : 0;
      if (col > len)
        snprintf(doc->why, sizeof(doc->why),
                 "malformed JSON: unexpected end of line");
      else
        snprintf(doc->why, sizeof(doc->why), "malformed JSON at column %zu",
                 col);
      return 1;
    }
    if (!cJSON_IsObject(r->tree)) {
      doc->status = CORPUS_DOC_MISSING_FIELD;
      snprintf(doc->why, sizeof(doc->why), "line is not a JSON object");
      return 1;
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(r->tree, r->o.text_field);
    if (!cJSON_IsString(f) || !f->valuestring) {
      doc->status = CORPUS_DOC_MISSING_FIELD;
      snprintf(doc->why, sizeof(doc->why), "%s \"%.100s\"",
               f ? "not a string: field" : "no field", r->o.text_field);
      return 1;
    }
    if (has_nul_escape(r->doc, len)) {
      doc->status = CORPUS_DOC_MALFORMED_JSON;
      snprintf(doc->why, sizeof(doc->why),
               "\\u0000 (NUL) in the line: not supported, the text would "
               "be cut short");
      return 1;
    }
    doc->text = f->valuestring;
    doc->len = strlen(f->valuestring);
    doc->status = doc->len ? CORPUS_DOC_OK : CORPUS_DOC_EMPTY;
    return 1;
  }
}

int corpus_reader_next(corpus_reader *r, corpus_doc *doc, char *err,
                       size_t errlen) {
  if (!r->gz) {
    fileio_seterr(err, errlen, "no file open");
    return CORPUS_EINVAL;
  }
  if (r->o.format == CORPUS_JSONL)
    return next_jsonl(r, doc, err, errlen);
  return next_text(r, doc, err, errlen);
}

/* ------------------------------------------------------------------ */
/* Serialization                                                        */

size_t corpus_json_escape(const char *s, size_t n, char *out, size_t outcap,
                          size_t *consumed) {
  static const char hex[] = "0123456789abcdef";
  size_t i = 0, o = 0;
  while (i < n && o < outcap) {
    /* A run of bytes that need no escape, copied at once. The scan stops
     * where out is full: scanning on to the end of s would make a caller
     * streaming one long line through a small buffer quadratic (a 16 MB
     * line took 3 s where 16 MB in short lines took 0.1 s). */
    size_t end = n - i < outcap - o ? n : i + (outcap - o);
    size_t j = i;
    while (j < end && (unsigned char)s[j] >= 0x20 && s[j] != '"' &&
           s[j] != '\\')
      j++;
    if (j > i) {
      memcpy(out + o, s + i, j - i);
      o += j - i;
      i = j;
      if (o == outcap)
        break; /* out is full */
      continue;
    }
    unsigned char c = (unsigned char)s[i];
    char e[6] = {'\\', 0, 0, 0, 0, 0};
    size_t el = 2;
    switch (c) {
    case '"':
      e[1] = '"';
      break;
    case '\\':
      e[1] = '\\';
      break;
    case '\n':
      e[1] = 'n';
      break;
    case '\r':
      e[1] = 'r';
      break;
    case '\t':
      e[1] = 't';
      break;
    case '\b':
      e[1] = 'b';
      break;
    case '\f':
      e[1] = 'f';
      break;
    default:
      memcpy(e, "\\u00", 4);
      e[4] = hex[c >> 4];
      e[5] = hex[c & 15];
      el = 6;
    }
    if (el > outcap - o)
      break;
    memcpy(out + o, e, el);
    o += el;
    i++;
  }
  *consumed = i;
  return o;
}
