#include "tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

/* ---- CRC-32C ---- */

/* Slicing-by-8 tables for the reflected Castagnoli polynomial. */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      crc_table[t][i] =
          (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

uint32_t tfevents_crc32c(uint32_t crc, const void *data, size_t n) {
  pthread_once(&crc_once, crc_init);
  const uint8_t *p = data;
  uint32_t c = ~crc;
  while (n >= 8) {
    /* Byte by byte into the words, so that the result does not depend on
     * the machine's byte order or on p's alignment. */
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
                       (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
        crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
        crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
        crc_table[0][p[7]];
    p += 8;
    n -= 8;
  }
  while (n--)
    c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
  return ~c;
}

uint32_t tfevents_mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---- Protobuf encoding ---- */

/* An output buffer that counts what it would need past its end. */
typedef struct pbuf {
  uint8_t *p;
  size_t cap, n;
} pbuf;

static void put_byte(pbuf *b, uint8_t v) {
  if (b->n < b->cap)
    b->p[b->n] = v;
  b->n++;
}

static void put_bytes(pbuf *b, const void *v, size_t n) {
  const uint8_t *s = v;
  for (size_t i = 0; i < n; i++)
    put_byte(b, s[i]);
}

static void put_varint(pbuf *b, uint64_t v) {
  while (v >= 0x80) {
    put_byte(b, (uint8_t)(v | 0x80));
    v >>= 7;
  }
  put_byte(b, (uint8_t)v);
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

/* Wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit. */
static void put_key(pbuf *b, unsigned field, unsigned wire) {
  put_varint(b, (uint64_t)(field << 3 | wire));
}

static void put_le(pbuf *b, uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; i++)
    put_byte(b, (uint8_t)(v >> (8 * i)));
}

static void put_double(pbuf *b, unsigned field, double v) {
  uint64_t u;
  memcpy(&u, &v, sizeof u);
  put_key(b, field, 1);
  put_le(b, u, 8);
}

/* Event.wall_time and Event.step, proto3-style: a zero is left out. An
 * int64 is a varint of its two's complement (10 bytes when negative). */
static void put_event_head(pbuf *b, double wall_time, int64_t step) {
  if (wall_time != 0)
    put_double(b, 1, wall_time);
  if (step != 0) {
    put_key(b, 2, 0);
    put_varint(b, (uint64_t)step);
  }
}

size_t tfevents_encode_scalar(uint8_t *buf, size_t cap, double wall_time,
                              int64_t step, const char *tag, float value) {
  pbuf b = {buf, cap, 0};
  size_t ntag = strlen(tag);
  uint32_t fv;
  memcpy(&fv, &value, sizeof fv);
  /* Value { tag = 1; simple_value = 2 } */
  size_t nvalue = (ntag ? 1 + varint_len(ntag) + ntag : 0) + 5;
  /* Summary { value = 1 } */
  size_t nsummary = 1 + varint_len(nvalue) + nvalue;
  put_event_head(&b, wall_time, step);
  put_key(&b, 5, 2);
  put_varint(&b, nsummary);
  put_key(&b, 1, 2);
  put_varint(&b, nvalue);
  if (ntag) {
    put_key(&b, 1, 2);
    put_varint(&b, ntag);
    put_bytes(&b, tag, ntag);
  }
  /* simple_value is a member of summary.proto's `oneof value`: a oneof
   * member is written whenever it is set, +0.0 included (readers that ask
   * which member is set would drop a scalar of 0.0 otherwise). */
  put_key(&b, 2, 5);
  put_le(&b, fv, 4);
  return b.n;
}

#define FILE_VERSION "brain.Event:2"

size_t tfevents_encode_version(uint8_t *buf, size_t cap, double wall_time) {
  pbuf b = {buf, cap, 0};
  put_event_head(&b, wall_time, 0);
  put_key(&b, 3, 2);
  put_varint(&b, sizeof FILE_VERSION - 1);
  put_bytes(&b, FILE_VERSION, sizeof FILE_VERSION - 1);
  return b.n;
}

void tfevents_frame(const uint8_t *data, size_t n, uint8_t hdr[12],
                    uint8_t ftr[4]) {
  uint64_t len = n;
  for (int i = 0; i < 8; i++)
    hdr[i] = (uint8_t)(len >> (8 * i));
  uint32_t c = tfevents_mask(tfevents_crc32c(0, hdr, 8));
  for (int i = 0; i < 4; i++)
    hdr[8 + i] = (uint8_t)(c >> (8 * i));
  c = tfevents_mask(tfevents_crc32c(0, data, n));
  for (int i = 0; i < 4; i++)
    ftr[i] = (uint8_t)(c >> (8 * i));
}

/* ---- The writer ---- */

struct tfevents {
  int fd;     /* -1 once broken */
  off_t good; /* end of the last whole record */
  char *path;
  uint8_t *rec; /* record buffer, grown as tags need */
  size_t cap;
};

/* Frames the n-byte event at w->rec + 12 and writes it in one write(2). */
static int write_record(tfevents *w, size_t n) {
  if (w->fd < 0)
    return DR_EIO;
  uint8_t *data = w->rec + 12;
  tfevents_frame(data, n, w->rec, data + n);
  size_t total = 12 + n + 4;
  ssize_t k;
  do
    k = write(w->fd, w->rec, total);
  while (k < 0 && errno == EINTR);
  if (k == (ssize_t)total) {
    w->good += (off_t)total;
    return 0;
  }
  /* A short or failed write: cut the torn record off, so that readers see
   * every whole record and nothing after, and stop. */
  if (k > 0 && ftruncate(w->fd, w->good) != 0) {
    /* The reader stops at the torn record's bad CRC instead. */
  }
  close(w->fd);
  w->fd = -1;
  return DR_EIO;
}

/* Makes room for an event of n bytes plus its framing. */
static void reserve(tfevents *w, size_t n) {
  if (12 + n + 4 > w->cap) {
    w->cap = 12 + n + 4;
    w->rec = xrealloc(w->rec, w->cap);
  }
}

int tfevents_create(const char *dir, double wall_time, tfevents **out,
                    char *err, size_t errlen) {
  *out = NULL;
  char host[256];
  if (gethostname(host, sizeof host) != 0)
    snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  /* A host name never has '/', but a file name must not either. */
  for (char *p = host; *p; p++)
    if (*p == '/')
      *p = '_';
  char *base = xasprintf("%s/events.out.tfevents.%lld.%s.%lld", dir,
                         (long long)wall_time, host, (long long)getpid());
  char *path = NULL;
  int fd = -1;
  for (int k = 0; k < 100; k++) {
    path = k ? xasprintf("%s.%d", base, k) : xstrdup(base);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST)
      break;
    free(path);
    path = NULL;
  }
  if (fd < 0) {
    snprintf(err, errlen, "%s: %s", path ? path : base, strerror(errno));
    free(path);
    free(base);
    return DR_EIO;
  }
  free(base);
  tfevents *w = xcalloc(1, sizeof *w);
  w->fd = fd;
  w->path = path;
  size_t n = tfevents_encode_version(NULL, 0, wall_time);
  reserve(w, n);
  tfevents_encode_version(w->rec + 12, n, wall_time);
  if (write_record(w, n) != 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    tfevents_destroy(w);
    return DR_EIO;
  }
  *out = w;
  return 0;
}

int tfevents_scalar(tfevents *w, double wall_time, int64_t step,
                    const char *tag, float value) {
  if (w->fd < 0)
    return DR_EIO;
  size_t n = tfevents_encode_scalar(NULL, 0, wall_time, step, tag, value);
  reserve(w, n);
  tfevents_encode_scalar(w->rec + 12, n, wall_time, step, tag, value);
  return write_record(w, n);
}

const char *tfevents_path(const tfevents *w) { return w->path; }

void tfevents_destroy(tfevents *w) {
  if (!w)
    return;
  if (w->fd >= 0)
    close(w->fd);
  free(w->path);
  free(w->rec);
  free(w);
}
