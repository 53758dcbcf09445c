/* tfevents: CRC-32C against published vectors and a bit-by-bit reference,
 * Events against bytes encoded independently (by hand, with Python's
 * struct), the writer's files record by record, and a write that fails
 * half way (a file size limit) cutting the file back to whole records. */
#include "run/tfevents.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testlib.h"

/* CRC-32C one bit at a time: the definition, for the table-driven one. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  while (n--) {
    c ^= *p++;
    for (int k = 0; k < 8; k++)
      c = (c >> 1) ^ ((c & 1) ? 0x82F63B78u : 0);
  }
  return ~c;
}

static void test_crc(void) {
  CHECK_INT(tfevents_crc32c(0, "123456789", 9), 0xE3069283u);
  CHECK_INT(tfevents_crc32c(0, "", 0), 0);
  /* RFC 3720 (iSCSI), B.4. */
  uint8_t b[32];
  memset(b, 0, 32);
  CHECK_INT(tfevents_crc32c(0, b, 32), 0x8A9136AAu);
  memset(b, 0xFF, 32);
  CHECK_INT(tfevents_crc32c(0, b, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++)
    b[i] = (uint8_t)i;
  CHECK_INT(tfevents_crc32c(0, b, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; i++)
    b[i] = (uint8_t)(31 - i);
  CHECK_INT(tfevents_crc32c(0, b, 32), 0x113FDB5Cu);
  /* Continuing a CRC is the CRC of the whole. */
  CHECK_INT(tfevents_crc32c(tfevents_crc32c(0, "1234", 4), "56789", 5),
            0xE3069283u);
  /* Every length and alignment around the 8-byte steps. */
  uint8_t r[300];
  uint32_t x = 12345;
  for (size_t i = 0; i < sizeof r; i++) {
    x = x * 1103515245u + 12345u;
    r[i] = (uint8_t)(x >> 16);
  }
  int bad = 0;
  for (size_t off = 0; off < 9; off++)
    for (size_t n = 0; n + off <= sizeof r; n += 7)
      bad += tfevents_crc32c(0, r + off, n) != crc_bitwise(r + off, n);
  CHECK_INT(bad, 0);
  /* The mask: ((c >> 15) | (c << 17)) + 0xa282ead8, by Python. */
  CHECK_INT(tfevents_mask(0xE3069283u), 0xC78AB0E5u);
  CHECK_INT(tfevents_mask(0), 0xA282EAD8u);
}

/* clang-format off */
/* Reference bytes, made without this code:
 *
 *   import struct
 *   def varint(v):
 *       v &= (1 << 64) - 1; out = b''
 *       while v >= 0x80: out += bytes([v & 0x7f | 0x80]); v >>= 7
 *       return out + bytes([v])
 *   def ev(wall, step, tag, val):
 *       value = (b'\x0a' + varint(len(tag)) + tag +
 *                b'\x15' + struct.pack('<f', val))
 *       summ = b'\x0a' + varint(len(value)) + value
 *       e = b'\x09' + struct.pack('<d', wall)
 *       if step: e += b'\x10' + varint(step)
 *       return e + b'\x2a' + varint(len(summ)) + summ
 *   ev(1700000000.5, 42, b'loss', 2.5)
 *   ev(1.0, -1, b'time_data_s', 0.125)
 *   b'\x09' + struct.pack('<d', 1700000000.5) + b'\x1a\x0d' + b'brain.Event:2'
 */
static const uint8_t ev_loss[] = {
    0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0x2a, 0x2a,
    0x0d, 0x0a, 0x0b, 0x0a, 0x04, 0x6c, 0x6f, 0x73, 0x73, 0x15, 0x00, 0x00,
    0x20, 0x40};
static const uint8_t ev_negative[] = {
    0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x3f, 0x10, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x2a, 0x14,
    0x0a, 0x12, 0x0a, 0x0b, 0x74, 0x69, 0x6d, 0x65, 0x5f, 0x64, 0x61,
    0x74, 0x61, 0x5f, 0x73, 0x15, 0x00, 0x00, 0x00, 0x3e};
static const uint8_t ev_version[] = {
    0x09, 0x00, 0x00, 0x20, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x1a, 0x0d, 0x62,
    0x72, 0x61, 0x69, 0x6e, 0x2e, 0x45, 0x76, 0x65, 0x6e, 0x74, 0x3a, 0x32};
/* The framing of ev_loss: struct.pack('<Q', 26) + masked CRC, and the
 * masked CRC of the data, both from the bitwise CRC in Python. */
static const uint8_t frame_loss_hdr[] = {0x1a, 0x00, 0x00, 0x00, 0x00, 0x00,
                                         0x00, 0x00, 0x12, 0x9b, 0xd8, 0x2d};
static const uint8_t frame_loss_ftr[] = {0xd7, 0x06, 0x78, 0x53};
/* clang-format on */

static void test_encoding(void) {
  uint8_t buf[128];
  size_t n =
      tfevents_encode_scalar(buf, sizeof buf, 1700000000.5, 42, "loss", 2.5f);
  CHECK_INT(n, sizeof ev_loss);
  CHECK(n == sizeof ev_loss && memcmp(buf, ev_loss, n) == 0);
  n = tfevents_encode_scalar(buf, sizeof buf, 1.0, -1, "time_data_s", 0.125f);
  CHECK_INT(n, sizeof ev_negative);
  CHECK(n == sizeof ev_negative && memcmp(buf, ev_negative, n) == 0);
  n = tfevents_encode_version(buf, sizeof buf, 1700000000.5);
  CHECK_INT(n, sizeof ev_version);
  CHECK(n == sizeof ev_version && memcmp(buf, ev_version, n) == 0);

  /* Too small a buffer: the length needed, nothing past cap touched. */
  memset(buf, 0xAB, sizeof buf);
  CHECK_INT(tfevents_encode_scalar(buf, 10, 1700000000.5, 42, "loss", 2.5f),
            sizeof ev_loss);
  CHECK(memcmp(buf, ev_loss, 10) == 0);
  CHECK_INT(buf[10], 0xAB);
  CHECK_INT(tfevents_encode_scalar(NULL, 0, 1.0, -1, "time_data_s", 0.125f),
            sizeof ev_negative);

  /* Step 0 is a proto3 default: left out. A value of +0.0 is written:
   * simple_value is a member of `oneof value`, written whenever set. */
  n = tfevents_encode_scalar(buf, sizeof buf, 2.0, 0, "x", 0.0f);
  static const uint8_t zero[] = {0x09, 0,    0,    0,    0,    0,    0,
                                 0,    0x40, 0x2a, 0x0a, 0x0a, 0x08, 0x0a,
                                 0x01, 'x',  0x15, 0,    0,    0,    0};
  CHECK_INT(n, sizeof zero);
  CHECK(n == sizeof zero && memcmp(buf, zero, n) == 0);

  /* A tag of 200 bytes needs two-byte lengths. */
  char tag[201];
  memset(tag, 'a', 200);
  tag[200] = '\0';
  uint8_t big[300];
  n = tfevents_encode_scalar(big, sizeof big, 0.0, 1, tag, 1.0f);
  /* step (2) + summary key (1) + len (2) + value key (1) + len (2) +
   * tag key (1) + len (2) + 200 + float (5) */
  CHECK_INT(n, 216);
  CHECK_INT(big[3], 0xd3); /* summary length 211 = 0xd3 0x01 */
  CHECK_INT(big[4], 0x01);

  uint8_t hdr[12], ftr[4];
  tfevents_frame(ev_loss, sizeof ev_loss, hdr, ftr);
  CHECK(memcmp(hdr, frame_loss_hdr, 12) == 0);
  CHECK(memcmp(ftr, frame_loss_ftr, 4) == 0);
}

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

/* The records of a file, each checked against both CRCs (bitwise). Returns
 * how many, -1 when one is bad; *bytes is the file's size. */
static int count_records(const char *path, long *bytes) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return -1;
  static uint8_t data[1 << 16];
  size_t n = fread(data, 1, sizeof data, f);
  fclose(f);
  *bytes = (long)n;
  size_t at = 0;
  int k = 0;
  while (at < n) {
    if (n - at < 12)
      return -1;
    uint64_t len = le64(data + at);
    if (tfevents_mask(crc_bitwise(data + at, 8)) != le32(data + at + 8) ||
        len > n - at - 16)
      return -1;
    if (tfevents_mask(crc_bitwise(data + at + 12, len)) !=
        le32(data + at + 12 + len))
      return -1;
    at += 16 + len;
    k++;
  }
  return k;
}

/* The one file under dir named events.out.tfevents.*, into path. */
static int find_events(const char *dir, char *path, size_t n) {
  DIR *d = opendir(dir);
  struct dirent *e;
  int found = 0;
  while (d && (e = readdir(d)))
    if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
      snprintf(path, n, "%s/%s", dir, e->d_name);
      found++;
    }
  if (d)
    closedir(d);
  return found;
}

static void test_writer(void) {
  char err[512];
  tfevents *w = NULL;
  CHECK_INT(tfevents_create(test_tmpdir(), 1700000000.75, &w, err, sizeof err),
            0);
  if (!w)
    return;
  char want[512], host[256] = "";
  gethostname(host, sizeof host);
  snprintf(want, sizeof want, "%s/events.out.tfevents.1700000000.%s.%d",
           test_tmpdir(), host, (int)getpid());
  CHECK_STR(tfevents_path(w), want);
  for (int i = 1; i <= 10; i++)
    CHECK_INT(tfevents_scalar(w, 1700000001.0 + i, i, "loss", 1.0f / i), 0);
  /* A second writer in the same second: its own file, with a suffix. */
  tfevents *w2 = NULL;
  CHECK_INT(tfevents_create(test_tmpdir(), 1700000000.25, &w2, err, sizeof err),
            0);
  char want2[600];
  snprintf(want2, sizeof want2, "%s.1", want);
  if (w2)
    CHECK_STR(tfevents_path(w2), want2);
  tfevents_destroy(w2);
  /* Every record is on disk before destroy: a killed writer keeps them. */
  long bytes;
  CHECK_INT(count_records(want, &bytes), 11);
  tfevents_destroy(w);
  tfevents_destroy(NULL);
  CHECK_INT(count_records(want, &bytes), 11);
  /* The first record is the header, byte for byte. */
  FILE *f = fopen(want, "rb");
  uint8_t head[12 + sizeof ev_version];
  CHECK(f && fread(head, 1, sizeof head, f) == sizeof head);
  if (f)
    fclose(f);
  uint8_t v[64];
  size_t nv = tfevents_encode_version(v, sizeof v, 1700000000.75);
  CHECK_INT(nv, sizeof ev_version);
  CHECK(memcmp(head + 12, v, nv) == 0);
  unlink(want);
  unlink(want2);

  /* A directory that is not there: an error naming the file. */
  w = NULL;
  CHECK_INT(tfevents_create(test_path("missing"), 1.0, &w, err, sizeof err),
            DR_EIO);
  CHECK(w == NULL);
  CHECK(strstr(err, "missing/events.out.tfevents.1.") != NULL);
  CHECK(strstr(err, "No such file") != NULL);
}

/* The disk fills half way through a record (a file size limit stands in
 * for it): the file is cut back to its last whole record, later scalars
 * are refused at once, and what is there reads back whole. */
static void test_full_disk(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s", test_path("full"));
  CHECK_INT(mkdir(dir, 0755), 0);
  struct rlimit old, lim;
  CHECK_INT(getrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_IGN);
  lim = old;
  lim.rlim_cur = 500;
  CHECK_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
  char err[512];
  tfevents *w = NULL;
  CHECK_INT(tfevents_create(dir, 5.0, &w, err, sizeof err), 0);
  int ok = 0, rc = 0;
  for (int i = 1; w && i <= 100 && rc == 0; i++) {
    rc = tfevents_scalar(w, 5.0 + i, i, "grad_norm", 0.5f);
    ok += rc == 0;
  }
  CHECK_INT(rc, DR_EIO);
  if (w)
    CHECK_INT(tfevents_scalar(w, 200.0, 200, "grad_norm", 0.5f), DR_EIO);
  tfevents_destroy(w);
  CHECK_INT(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, SIG_DFL);
  char path[1024];
  CHECK_INT(find_events(dir, path, sizeof path), 1);
  long bytes = 0;
  /* 40 bytes of header record, then 47 bytes a scalar: 9 fit in 500. */
  CHECK_INT(ok, 9);
  CHECK_INT(count_records(path, &bytes), 1 + ok);
  CHECK(bytes <= 500);
}

int main(void) {
  if (test_tmpdir_make("tfevents") != 0)
    return 1;
  test_crc();
  test_encoding();
  test_writer();
  test_full_disk();
  test_tmpdir_remove();
  TEST_DONE();
}
