/*
 * tokfile: token shard files, written by the tokenize stage and read by
 * the training engine's data loader. The format is documented for users
 * in docs/token-shards.md; this header is the authority.
 *
 *   offset size  field (all integers little-endian)
 *   0      8     magic "DRTOKENS"
 *   8      4     version (1)
 *   12     4     header_size in bytes (128); tokens start here
 *   16     4     token_bytes: 2 (uint16) when vocab_size <= 65536, else 4
 *   20     4     vocab_size
 *   24     8     n_tokens
 *   32     8     n_docs
 *   40     32    SHA-256 of the token bytes (everything after the header)
 *   72     4     eot_id: the <|endoftext|> id that precedes every
 *                document, or 0xFFFFFFFF when documents are not marked
 *   76     52    zero
 *
 * A reader checks magic, version and header size, that the file's size is
 * header_size + n_tokens * token_bytes, and (on request) the checksum.
 */
#ifndef DAGRUN_TOKFILE_H
#define DAGRUN_TOKFILE_H

#include <stddef.h>
#include <stdint.h>

#define TOKFILE_MAGIC "DRTOKENS"
#define TOKFILE_VERSION 1u
#define TOKFILE_HEADER_SIZE 128u
#define TOKFILE_NO_EOT 0xFFFFFFFFu

/* Header fields as read from or written to a file. */
typedef struct tokfile_info {
  uint32_t version;
  uint32_t header_size;
  uint32_t token_bytes; /* 2 or 4 */
  uint32_t vocab_size;
  uint64_t n_tokens;
  uint64_t n_docs;
  uint8_t sha256[32];
  uint32_t eot_id;
} tokfile_info;

/* ---- Writing ----
 * A writer writes to "<path>.tmp"; tokfile_writer_finish fills in the
 * header, fsyncs, renames it to <path> and fsyncs the directory, so a
 * crash never leaves a half-written file under the final name. One
 * writer belongs to one thread. */
typedef struct tokfile_writer tokfile_writer;

/* Starts a file for ids below vocab_size. eot_id (TOKFILE_NO_EOT for
 * none) is written before each document. Returns 0 and *out, or -1 with a
 * message in err. */
int tokfile_writer_create(const char *path, uint32_t vocab_size,
                          uint32_t eot_id, tokfile_writer **out, char *err,
                          size_t errlen);
/* Appends one document: the eot id (if any), then ids[0..n). Every id
 * must be below vocab_size. Returns 0 or -1 with err. */
int tokfile_writer_add_doc(tokfile_writer *w, const uint32_t *ids, size_t n,
                           char *err, size_t errlen);
/* Completes the file as described above and frees w. On failure the
 * temporary file is removed. *info (may be NULL) receives the header. */
int tokfile_writer_finish(tokfile_writer *w, tokfile_info *info, char *err,
                          size_t errlen);
/* Abandons the file: removes the temporary and frees w. NULL is a no-op. */
void tokfile_writer_abort(tokfile_writer *w);

/* ---- Reading ----
 * The file is memory-mapped read-only; any number of threads may read
 * through one tokfile at once. */
typedef struct tokfile tokfile;

/* Opens and checks the header and size (not the checksum). Returns 0 and
 * *out, or -1 with a message that names the file and the problem. */
int tokfile_open(const char *path, tokfile **out, char *err, size_t errlen);
/* Recomputes the SHA-256 of the tokens and compares it with the header's.
 * Returns 0, or -1 with err. */
int tokfile_verify(const tokfile *f, char *err, size_t errlen);
/* Unmaps and frees; NULL is a no-op. */
void tokfile_close(tokfile *f);

/* The header. Valid while f is open. */
const tokfile_info *tokfile_header(const tokfile *f);
/* Token i (i < n_tokens), whatever the on-disk width. */
static inline uint32_t tokfile_get(const void *tokens, uint32_t token_bytes,
                                   uint64_t i) {
  if (token_bytes == 2)
    return ((const uint16_t *)tokens)[i];
  return ((const uint32_t *)tokens)[i];
}
/* Pointer to the first token (aligned to its width). */
const void *tokfile_tokens(const tokfile *f);

#endif /* DAGRUN_TOKFILE_H */
