/*
 * tokfile: token shard files, the one format between the tokenize stage,
 * which writes them, and the engine's data loader, which reads them.
 * tokfile.h states the format and the contract; this file keeps it.
 *
 * Writing streams the ids through a 1 MiB buffer into "<path>.tmp",
 * hashing each block as it goes out, behind a zero header. The real
 * header is written last, at offset 0, because it is the only part that
 * depends on the whole file (the counts and the SHA-256); then fsync,
 * rename and an fsync of the directory, so a crash never leaves a
 * half-written file under the final name.
 *
 * Reading maps the file read-only instead of copying it: opening costs
 * the same for any size of shard, and only the windows a loader takes are
 * read from disk. The checksum is checked only on request
 * (tokfile_verify), since that reads every byte.
 */
#include "tokfile.h"

#include "lib/fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tokens are stored in the host's order and mapped straight into memory;
 * every machine we build for is little-endian, and the format says so. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "token files are little-endian");

/* Ids are buffered and written in blocks of this many bytes. */
#define WRITE_BUFFER_BYTES (1u << 20)

static void put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}
static uint64_t get_u64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static void encode_header(const tokfile_info *h, uint8_t out[TOKFILE_HEADER_SIZE]) {
  memset(out, 0, TOKFILE_HEADER_SIZE);
  memcpy(out, TOKFILE_MAGIC, 8);
  put_u32(out + 8, h->version);
  put_u32(out + 12, h->header_size);
  put_u32(out + 16, h->token_bytes);
  put_u32(out + 20, h->vocab_size);
  put_u64(out + 24, h->n_tokens);
  put_u64(out + 32, h->n_docs);
  memcpy(out + 40, h->sha256, 32);
  put_u32(out + 72, h->eot_id);
}

/* ---- Writing ---- */

struct tokfile_writer {
  char *path, *tmp;
  int fd;
  tokfile_info info;
  EVP_MD_CTX *sha;
  uint8_t *buf;
  size_t nbuf;
};

static int flush_buffer(tokfile_writer *w, char *err, size_t errlen) {
  if (w->nbuf == 0)
    return 0;
  if (EVP_DigestUpdate(w->sha, w->buf, w->nbuf) != 1) {
    fileio_seterr(err, errlen, "%s: SHA-256 update failed", w->tmp);
    return -1;
  }
  int rc = fileio_write_all(w->fd, w->buf, w->nbuf);
  if (rc != 0) {
    fileio_seterr(err, errlen, "%s: write: %s", w->tmp, strerror(-rc));
    return -1;
  }
  w->nbuf = 0;
  return 0;
}

void tokfile_writer_abort(tokfile_writer *w) {
  if (!w)
    return;
  if (w->fd >= 0) {
    close(w->fd);
    unlink(w->tmp);
  }
  EVP_MD_CTX_free(w->sha);
  free(w->buf);
  free(w->path);
  free(w->tmp);
  free(w);
}

int tokfile_writer_create(const char *path, uint32_t vocab_size,
                          uint32_t eot_id, tokfile_writer **out, char *err,
                          size_t errlen) {
  *out = NULL;
  if (vocab_size == 0) {
    fileio_seterr(err, errlen, "%s: vocabulary size 0", path);
    return -1;
  }
  if (eot_id != TOKFILE_NO_EOT && eot_id >= vocab_size) {
    fileio_seterr(err, errlen,
                  "%s: end-of-text id %u outside the vocabulary (%u)", path,
                  eot_id, vocab_size);
    return -1;
  }
  tokfile_writer *w = calloc(1, sizeof *w);
  if (!w) {
    fileio_seterr(err, errlen, "out of memory");
    return -1;
  }
  w->fd = -1;
  w->path = strdup(path);
  w->tmp = malloc(strlen(path) + 5);
  w->buf = malloc(WRITE_BUFFER_BYTES);
  w->sha = EVP_MD_CTX_new();
  if (!w->path || !w->tmp || !w->buf || !w->sha ||
      EVP_DigestInit_ex(w->sha, EVP_sha256(), NULL) != 1) {
    tokfile_writer_abort(w);
    fileio_seterr(err, errlen, "out of memory");
    return -1;
  }
  sprintf(w->tmp, "%s.tmp", path);
  w->info = (tokfile_info){
      .version = TOKFILE_VERSION,
      .header_size = TOKFILE_HEADER_SIZE,
      .token_bytes = vocab_size <= 65536 ? 2 : 4,
      .vocab_size = vocab_size,
      .eot_id = eot_id,
  };
  w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd < 0) {
    fileio_seterr(err, errlen, "%s: %s", w->tmp, strerror(errno));
    tokfile_writer_abort(w);
    return -1;
  }
  /* A zero header until the counts and checksum are known. */
  uint8_t zero[TOKFILE_HEADER_SIZE] = {0};
  int rc = fileio_write_all(w->fd, zero, sizeof zero);
  if (rc != 0) {
    fileio_seterr(err, errlen, "%s: write: %s", w->tmp, strerror(-rc));
    tokfile_writer_abort(w);
    return -1;
  }
  *out = w;
  return 0;
}

static int put_token(tokfile_writer *w, uint32_t id, char *err,
                     size_t errlen) {
  if (id >= w->info.vocab_size) {
    fileio_seterr(err, errlen, "%s: token id %u outside the vocabulary (%u)",
                  w->path, id, w->info.vocab_size);
    return -1;
  }
  if (w->nbuf + 4 > WRITE_BUFFER_BYTES && flush_buffer(w, err, errlen) != 0)
    return -1;
  if (w->info.token_bytes == 2) {
    uint16_t v = (uint16_t)id;
    memcpy(w->buf + w->nbuf, &v, 2);
  } else {
    memcpy(w->buf + w->nbuf, &id, 4);
  }
  w->nbuf += w->info.token_bytes;
  w->info.n_tokens++;
  return 0;
}

int tokfile_writer_add_doc(tokfile_writer *w, const uint32_t *ids, size_t n,
                           char *err, size_t errlen) {
  if (w->info.eot_id != TOKFILE_NO_EOT &&
      put_token(w, w->info.eot_id, err, errlen) != 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (put_token(w, ids[i], err, errlen) != 0)
      return -1;
  w->info.n_docs++;
  return 0;
}

int tokfile_writer_finish(tokfile_writer *w, tokfile_info *info, char *err,
                          size_t errlen) {
  unsigned int dlen = 0;
  int rc;
  if (flush_buffer(w, err, errlen) != 0)
    goto fail;
  if (EVP_DigestFinal_ex(w->sha, w->info.sha256, &dlen) != 1 || dlen != 32) {
    fileio_seterr(err, errlen, "%s: SHA-256 failed", w->tmp);
    goto fail;
  }
  uint8_t header[TOKFILE_HEADER_SIZE];
  encode_header(&w->info, header);
  if (pwrite(w->fd, header, sizeof header, 0) != (ssize_t)sizeof header ||
      fsync(w->fd) != 0) {
    fileio_seterr(err, errlen, "%s: %s", w->tmp, strerror(errno));
    goto fail;
  }
  if (close(w->fd) != 0) {
    w->fd = -1;
    unlink(w->tmp);
    fileio_seterr(err, errlen, "%s: close: %s", w->tmp, strerror(errno));
    goto fail;
  }
  w->fd = -1;
  if (rename(w->tmp, w->path) != 0) {
    fileio_seterr(err, errlen, "rename %s: %s", w->tmp, strerror(errno));
    unlink(w->tmp);
    goto fail;
  }
  if ((rc = fileio_fsync_parent(w->path)) != 0) {
    fileio_seterr(err, errlen, "%s: fsync of the directory: %s", w->path,
                  strerror(-rc));
    goto fail;
  }
  if (info)
    *info = w->info;
  tokfile_writer_abort(w);
  return 0;
fail:
  tokfile_writer_abort(w);
  return -1;
}

/* ---- Reading ---- */

struct tokfile {
  char *path;
  void *map;
  size_t size;
  tokfile_info info;
};

void tokfile_close(tokfile *f) {
  if (!f)
    return;
  if (f->map && f->map != MAP_FAILED)
    munmap(f->map, f->size);
  free(f->path);
  free(f);
}

int tokfile_open(const char *path, tokfile **out, char *err, size_t errlen) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    fileio_seterr(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    fileio_seterr(err, errlen, "%s: %s", path, strerror(errno));
    close(fd);
    return -1;
  }
  if ((uint64_t)st.st_size < TOKFILE_HEADER_SIZE) {
    fileio_seterr(
        err, errlen,
        "%s: not a token file: %lld bytes, shorter than the %u-byte header",
        path, (long long)st.st_size, TOKFILE_HEADER_SIZE);
    close(fd);
    return -1;
  }
  tokfile *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    close(fd);
    fileio_seterr(err, errlen, "out of memory");
    return -1;
  }
  f->size = (size_t)st.st_size;
  f->map = mmap(NULL, f->size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (f->map == MAP_FAILED) {
    fileio_seterr(err, errlen, "%s: mmap: %s", path, strerror(errno));
    tokfile_close(f);
    return -1;
  }
  const uint8_t *h = f->map;
  if (memcmp(h, TOKFILE_MAGIC, 8) != 0) {
    fileio_seterr(err, errlen, "%s: not a token file (bad magic)", path);
    tokfile_close(f);
    return -1;
  }
  tokfile_info *in = &f->info;
  in->version = get_u32(h + 8);
  in->header_size = get_u32(h + 12);
  in->token_bytes = get_u32(h + 16);
  in->vocab_size = get_u32(h + 20);
  in->n_tokens = get_u64(h + 24);
  in->n_docs = get_u64(h + 32);
  memcpy(in->sha256, h + 40, 32);
  in->eot_id = get_u32(h + 72);
  if (in->version != TOKFILE_VERSION) {
    fileio_seterr(err, errlen,
                  "%s: token file version %u; this dagrun reads %u", path,
                  in->version, TOKFILE_VERSION);
    tokfile_close(f);
    return -1;
  }
  if (in->header_size != TOKFILE_HEADER_SIZE ||
      (in->token_bytes != 2 && in->token_bytes != 4)) {
    fileio_seterr(err, errlen,
                  "%s: bad header (header size %u, token width %u)", path,
                  in->header_size, in->token_bytes);
    tokfile_close(f);
    return -1;
  }
  uint64_t want = (uint64_t)in->header_size;
  if (in->n_tokens > (UINT64_MAX - want) / in->token_bytes ||
      want + in->n_tokens * in->token_bytes != (uint64_t)f->size) {
    fileio_seterr(
        err, errlen,
        "%s: truncated or corrupt: header says %llu tokens of %u bytes, "
        "file has %zu bytes",
        path, (unsigned long long)in->n_tokens, in->token_bytes, f->size);
    tokfile_close(f);
    return -1;
  }
  *out = f;
  return 0;
}

int tokfile_verify(const tokfile *f, char *err, size_t errlen) {
  uint8_t digest[32];
  unsigned int dlen = 0;
  const uint8_t *p = (const uint8_t *)f->map + f->info.header_size;
  size_t n = f->size - f->info.header_size;
  if (EVP_Digest(p, n, digest, &dlen, EVP_sha256(), NULL) != 1 || dlen != 32) {
    fileio_seterr(err, errlen, "%s: SHA-256 failed", f->path);
    return -1;
  }
  if (memcmp(digest, f->info.sha256, 32) != 0) {
    char want[65], got[65];
    fileio_hex(f->info.sha256, 32, want);
    fileio_hex(digest, 32, got);
    fileio_seterr(
        err, errlen,
        "%s: checksum mismatch: header says sha256 %s, tokens hash to %s",
        f->path, want, got);
    return -1;
  }
  const uint8_t *t = p;
  for (uint64_t i = 0; i < f->info.n_tokens; i++) {
    uint32_t id = tokfile_get(t, f->info.token_bytes, i);
    if (id >= f->info.vocab_size) {
      fileio_seterr(err, errlen,
                    "%s: token %llu has id %u, outside the vocabulary "
                    "(%u)",
                    f->path, (unsigned long long)i, id, f->info.vocab_size);
      return -1;
    }
  }
  return 0;
}

const tokfile_info *tokfile_header(const tokfile *f) { return &f->info; }

const void *tokfile_tokens(const tokfile *f) {
  return (const uint8_t *)f->map + f->info.header_size;
}
