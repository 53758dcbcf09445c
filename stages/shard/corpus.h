/*
 * corpus: what the shard stage reads. Three parts:
 *
 * - Input expansion: files, directories (walked recursively) and globs
 *   become one sorted list of files, the corpus's canonical order.
 * - Document reading: a reader splits a file (plain or gzip-compressed,
 *   told apart by content) into documents: plain text split on a
 *   separator, or JSON Lines with a text field.
 * - Serialization: the JSON string escaping of the output lines.
 *
 * Functions return 0 (or a count) on success and a negative CORPUS_E*
 * code on error, with a message in the caller's buffer.
 */
#ifndef DAGRUN_CORPUS_H
#define DAGRUN_CORPUS_H

#include <stddef.h>
#include <stdint.h>

#define CORPUS_ERRORS(X)                                                       \
  X(ENOMEM, -12, "out of memory")                                              \
  X(EINVAL, -22, "invalid argument")                                           \
  X(ENOMATCH, -2, "input matched no files")                                    \
  X(EREAD, -5, "file cannot be read")                                          \
  X(EBINARY, -74, "binary data (a NUL byte)")                                  \
  X(ECANCELED, -125, "stopped")

typedef enum corpus_error {
#define X(name, code, text) CORPUS_##name = code,
  CORPUS_ERRORS(X)
#undef X
} corpus_error;

/* A short description of a CORPUS_E* code; static storage. */
const char *corpus_strerror(int code);

/* ------------------------------------------------------------------ */
/* Input expansion                                                      */

typedef struct corpus_file {
  char *path;    /* as found: base_dir-joined when the input was relative */
  uint64_t size; /* bytes on disk; 0 when it cannot be stat'ed */
  /* 0, or the errno that stat gave (a dangling symlink: ENOENT). Such a
   * file stays in the list so the caller reports it as unreadable. */
  int stat_errno;
  /* NULL, or what the entry is instead of a regular file or directory:
   * "a FIFO", "a socket", "a device", or "a symlink loop" (a directory
   * symlink back to a directory the walk is inside). Static storage. Such
   * an entry stays in the list, with stat_errno 0, so the caller reports
   * it as bad input rather than it vanishing from the corpus unsaid. */
  const char *not_regular;
} corpus_file;

typedef struct corpus_files {
  corpus_file *v;
  size_t n, cap;
} corpus_files;

/*
 * Expands inputs into out, sorted by path (bytewise) without duplicates.
 * Each input is
 * - a glob (it has one of * ? [ ): its matches, each a file or directory;
 * - a directory: every regular file under it, recursively. Symlinks are
 *   followed, but a symlink loop is walked once and listed with
 *   not_regular set; names starting with '.' are skipped (.git, editor
 *   files); sockets, FIFOs and devices are listed with not_regular set;
 * - anything else: that file. A path that does not exist is an error.
 *   A FIFO, socket or device named outright is listed with not_regular
 *   set; a glob's such matches are left out (a glob names files).
 * A relative input is taken relative to base_dir (NULL or "": the current
 * directory). A file or directory found in a walk or by a glob is left
 * out when its base name matches one of the fnmatch(3) patterns in
 * excludes; an input named outright is never excluded.
 * An input that yields no files is an error (CORPUS_ENOMATCH), with a
 * message naming it. out must be zeroed or freed; on error it is freed.
 * Any thread; the strings in out are owned by out.
 */
int corpus_expand(const char *const *inputs, size_t ninputs,
                  const char *base_dir, const char *const *excludes,
                  size_t nexcludes, corpus_files *out, char *err,
                  size_t errlen);

/* Frees the list and zeroes it; a zeroed list is a no-op. */
void corpus_files_free(corpus_files *files);

/* ------------------------------------------------------------------ */
/* Document reading                                                     */

typedef enum corpus_format { CORPUS_TEXT = 0, CORPUS_JSONL = 1 } corpus_format;

typedef enum corpus_sep {
  CORPUS_SEP_NONE = 0,  /* the whole file is one document */
  CORPUS_SEP_BLANK = 1, /* runs of blank lines (spaces/tabs only) */
  CORPUS_SEP_LINE = 2   /* a line that is exactly sep_line (e.g. "%") */
} corpus_sep;

typedef struct corpus_opts {
  corpus_format format;
  corpus_sep sep;         /* text only */
  const char *sep_line;   /* CORPUS_SEP_LINE: the separator line, no '\n' */
  const char *text_field; /* JSONL: name of the top-level string field */
  /* Longest document kept in memory, in bytes; a longer one is consumed
   * and reported CORPUS_DOC_TOO_LARGE without being buffered. For JSONL
   * the limit applies to the line, escapes included. */
  size_t max_doc;
  /* 0, or a lower cap than max_doc: a longer document is reported
   * CORPUS_DOC_TOO_LONG without being buffered (the max_bytes filter,
   * applied early so it also bounds memory). */
  size_t max_bytes;
  /* Optional: asked before each 64 KiB read; non-zero stops the reader
   * with CORPUS_ECANCELED, so a cancel needs no document boundary (one
   * huge document, a gzip bomb). Called on the reader's thread. */
  int (*should_stop)(void *arg);
  void *stop_arg;
} corpus_opts;

typedef enum corpus_doc_status {
  CORPUS_DOC_OK = 0,
  CORPUS_DOC_EMPTY,          /* no bytes after splitting */
  CORPUS_DOC_TOO_LARGE,      /* above max_doc */
  CORPUS_DOC_TOO_LONG,       /* above max_bytes */
  CORPUS_DOC_MALFORMED_JSON, /* JSONL line that does not parse */
  CORPUS_DOC_MISSING_FIELD   /* no string text_field in the object */
} corpus_doc_status;

typedef struct corpus_doc {
  /* The document's bytes (not NUL-terminated, may hold NULs) when status
   * is OK; owned by the reader, valid until the next call on it. */
  const char *text;
  size_t len;
  uint64_t line; /* 1-based line of the file where the document starts */
  corpus_doc_status status;
  char why[160]; /* detail for MALFORMED_JSON and MISSING_FIELD */
} corpus_doc;

/*
 * Text documents: separator lines are not part of any document, and a
 * document does not keep the line ending ("\n" or "\r\n") of its last
 * line, so "a\n%\n" and "a" (no trailing newline) give the same "a".
 * Other line endings inside a document are kept as they are. Separator
 * lines are recognized with or without a trailing '\r'.
 * - NONE: one document per file.
 * - LINE: an empty document between two separator lines (or before the
 *   first one) is reported CORPUS_DOC_EMPTY; a separator at the end of the
 *   file does not open a new document.
 * - BLANK: blank lines never make empty documents.
 * JSONL: one JSON object per line; blank lines are skipped. A line with
 * a \u0000 escape is reported MALFORMED_JSON: the parser's strings end at
 * NUL, so its text could not be kept exactly.
 * A UTF-8 byte order mark at the start of a file is dropped.
 * A NUL byte anywhere in the (decompressed) file makes corpus_reader_next
 * fail with CORPUS_EBINARY: text corpora hold none, while binaries,
 * images and UTF-16 text do (git's binary test is the same), and NUL is
 * valid UTF-8, so the UTF-8 check alone lets such a file through.
 */
typedef struct corpus_reader corpus_reader;

/* A reader with these options (copied; the strings are borrowed and must
 * outlive the reader). Returns NULL when out of memory. One thread at a
 * time; it may read many files in turn. destroy(NULL) is a no-op. */
corpus_reader *corpus_reader_create(const corpus_opts *opts);
void corpus_reader_destroy(corpus_reader *r);

/* Opens path (gzip or plain). Returns 0, or CORPUS_EREAD with the reason
 * in err: "PATH is a FIFO, not a regular file" when path is not a regular
 * file (it is opened non-blocking first, so a FIFO never blocks the
 * open). Closes any file the reader had open. */
int corpus_reader_open(corpus_reader *r, const char *path, char *err,
                       size_t errlen);

/* The next document of the open file: returns 1 with *doc filled, 0 at
 * the end of the file, or CORPUS_EREAD (corrupt or truncated gzip data,
 * an I/O error) with the reason in err, CORPUS_ECANCELED (should_stop
 * said so), CORPUS_EBINARY (the file holds a NUL byte: binary data, not
 * text; err says at which byte) or CORPUS_ENOMEM. */
int corpus_reader_next(corpus_reader *r, corpus_doc *doc, char *err,
                       size_t errlen);

/* Uncompressed bytes read from the open file so far (0 at the end of the
 * file means the file is empty). */
uint64_t corpus_reader_bytes(const corpus_reader *r);

/* Bytes of the open file on disk (compressed, for gzip) consumed so far,
 * read-ahead included: how far through the file the reader is. */
uint64_t corpus_reader_offset(const corpus_reader *r);

/* Closes the open file, if any. */
void corpus_reader_close(corpus_reader *r);

/* ------------------------------------------------------------------ */
/* Serialization                                                        */

/*
 * Escapes s[0..n) as the inside of a JSON string into out (no quotes):
 * '"', '\\' and the control characters U+0000..U+001F are escaped, every
 * other byte is copied, so valid UTF-8 stays valid UTF-8 and parsing the
 * result gives back exactly s. Writes as much as fits in outcap without
 * splitting an escape, sets *consumed to the input bytes done and returns
 * the bytes written. Call again with the rest to stream a long string.
 * One input byte needs at most 6 output bytes. Any thread.
 */
size_t corpus_json_escape(const char *s, size_t n, char *out, size_t outcap,
                          size_t *consumed);

#endif
