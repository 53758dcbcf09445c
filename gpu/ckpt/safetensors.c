/*
 * safetensors: reading and writing Hugging Face's safetensors format,
 * the weights file of checkpoints, exports and the Hub's GPT-2.
 * safetensors.h describes the format and states the contract.
 *
 * Writing streams the tensors to a temporary name beside the file, then
 * fsync, rename and fsync of the directory (lib/fileio.h's helpers), so a
 * crash leaves the old file or the new
 * one. Reading maps the file and hands out pointers into the map: the
 * tensors are not copied, so a large checkpoint costs no second copy in
 * memory while it is loaded.
 *
 * The reader is as strict as Hugging Face's own (safetensors/src/
 * tensor.rs, validate()): the tensors' byte ranges, in offset order,
 * must tile the data section from 0 to its end with no gap or overlap,
 * so a file we accept is one every other reader accepts too.
 */
#include "safetensors.h"

#include "lib/fileio.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(float) == 4, "F32 is a 4-byte float");
/* Tensors are written from and mapped into memory as they are; the format
 * is little-endian, and so is every machine we build for. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors files are little-endian");

static const char *dtype_name(st_dtype d) {
  return d == ST_BF16 ? "BF16" : d == ST_F16 ? "F16" : "F32";
}

static size_t dtype_size(st_dtype d) { return d == ST_F32 ? 4 : 2; }

float st_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0x1f) { /* infinity, NaN (its payload kept) */
    u = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) { /* normal: rebias 15 -> 127 */
    u = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) { /* zero */
    u = sign;
  } else { /* subnormal: man x 2^-24, normal in float32 */
    int e = -1;
    do {
      man <<= 1;
      e++;
    } while (!(man & 0x400));
    u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f32 -> bf16, round to nearest, ties to even; a NaN stays a (quiet)
 * NaN with its sign instead of rounding up into infinity. */
static uint16_t f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* Elements of a shape; -1 when a dimension is negative or it overflows. */
static int64_t numel_of(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0)
      return -1;
    if (shape[d] != 0 && n > INT64_MAX / 8 / shape[d])
      return -1;
    n *= shape[d];
  }
  return n;
}

/* ---- Writing ---- */

/* The header: {"__metadata__": {...}, "name": {"dtype", "shape",
 * "data_offsets"}, ...} unformatted, padded with spaces to a multiple of
 * 8. Numbers are integers below 2^53, which cJSON prints exactly. */
static char *make_header(const st_tensor *tensors, size_t n,
                         const char *const *meta_keys,
                         const char *const *meta_values, size_t n_meta,
                         size_t *len, uint64_t *data_bytes, char *err,
                         size_t errlen) {
  cJSON *root = cJSON_CreateObject();
  char *text = NULL;
  if (!root)
    goto oom;
  if (n_meta > 0) {
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    if (!meta)
      goto oom;
    for (size_t i = 0; i < n_meta; i++) {
      if (!meta_keys[i] || !meta_values[i]) {
        fileio_seterr(err, errlen, "metadata entry %zu has no key or value", i);
        goto fail;
      }
      if (cJSON_GetObjectItemCaseSensitive(meta, meta_keys[i])) {
        fileio_seterr(err, errlen, "metadata key \"%s\" given twice",
                      meta_keys[i]);
        goto fail;
      }
      if (!cJSON_AddStringToObject(meta, meta_keys[i], meta_values[i]))
        goto oom;
    }
  }
  uint64_t off = 0;
  for (size_t i = 0; i < n; i++) {
    const st_tensor *t = &tensors[i];
    if (!t->name || !*t->name || strcmp(t->name, "__metadata__") == 0) {
      fileio_seterr(err, errlen, "tensor %zu: name \"%s\" is not allowed", i,
                    t->name ? t->name : "(null)");
      goto fail;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, t->name)) {
      fileio_seterr(err, errlen, "tensor \"%s\" given twice", t->name);
      goto fail;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16) {
      fileio_seterr(err, errlen,
                    "tensor \"%s\": dtype %d is not written "
                    "(F32 and BF16 are)",
                    t->name, (int)t->dtype);
      goto fail;
    }
    int64_t numel =
        t->ndim >= 0 && t->ndim <= 4 ? numel_of(t->ndim, t->shape) : -1;
    if (numel < 0 || (numel > 0 && !t->data)) {
      fileio_seterr(err, errlen, "tensor \"%s\": bad shape or no data",
                    t->name);
      goto fail;
    }
    uint64_t bytes = (uint64_t)numel * dtype_size(t->dtype);
    cJSON *o = cJSON_AddObjectToObject(root, t->name);
    cJSON *shape = cJSON_CreateArray();
    cJSON *offs = cJSON_CreateArray();
    if (!o || !shape || !offs) {
      cJSON_Delete(shape);
      cJSON_Delete(offs);
      goto oom;
    }
    cJSON_AddItemToObject(o, "dtype", cJSON_CreateString(dtype_name(t->dtype)));
    cJSON_AddItemToObject(o, "shape", shape);
    cJSON_AddItemToObject(o, "data_offsets", offs);
    for (int d = 0; d < t->ndim; d++)
      cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
    off += bytes;
    if (off >= (1ull << 53)) {
      fileio_seterr(err, errlen, "tensors too large for one file");
      goto fail;
    }
  }
  char *json = cJSON_PrintUnformatted(root);
  if (!json)
    goto oom;
  size_t jl = strlen(json), padded = (jl + 7) / 8 * 8;
  text = malloc(padded + 1);
  if (!text) {
    free(json);
    goto oom;
  }
  memcpy(text, json, jl);
  memset(text + jl, ' ', padded - jl);
  text[padded] = '\0';
  free(json);
  cJSON_Delete(root);
  *len = padded;
  *data_bytes = off;
  return text;

oom:
  fileio_seterr(err, errlen, "out of memory");
fail:
  cJSON_Delete(root);
  return NULL;
}

/* Writes one tensor's bytes, converting f32 -> bf16 in blocks. */
static int write_tensor(int fd, const st_tensor *t, int convert) {
  size_t numel = (size_t)numel_of(t->ndim, t->shape);
  if (numel == 0)
    return 0;
  if (t->dtype != ST_BF16 || !convert)
    return fileio_write_all(fd, t->data, numel * dtype_size(t->dtype));
  enum { BLOCK = 1 << 16 };
  uint16_t *buf = malloc(BLOCK * sizeof(uint16_t));
  if (!buf)
    return -ENOMEM;
  const float *src = t->data;
  int rc = 0;
  for (size_t at = 0; at < numel && rc == 0; at += BLOCK) {
    size_t k = numel - at < BLOCK ? numel - at : BLOCK;
    for (size_t i = 0; i < k; i++) {
      float f;
      memcpy(&f, src + at + i, 4); /* src may be unaligned */
      buf[i] = f32_to_bf16(f);
    }
    rc = fileio_write_all(fd, buf, k * sizeof(uint16_t));
  }
  free(buf);
  return rc;
}

int st_write(const char *path, const st_tensor *tensors, size_t n,
             int convert_from_f32, const char *const *meta_keys,
             const char *const *meta_values, size_t n_meta, char *err,
             size_t errlen) {
  char sub[512] = "";
  size_t hlen = 0;
  uint64_t data_bytes = 0;
  char *header = make_header(tensors, n, meta_keys, meta_values, n_meta, &hlen,
                             &data_bytes, sub, sizeof sub);
  if (!header) {
    fileio_seterr(err, errlen, "%s: %s", path, sub);
    return -1;
  }
  char *tmp = malloc(strlen(path) + 5);
  if (!tmp) {
    free(header);
    fileio_seterr(err, errlen, "%s: out of memory", path);
    return -1;
  }
  sprintf(tmp, "%s.tmp", path);
  int rc = 0;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    rc = -errno;
  uint8_t prefix[8];
  for (int i = 0; i < 8; i++)
    prefix[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
  if (rc == 0)
    rc = fileio_write_all(fd, prefix, 8);
  if (rc == 0)
    rc = fileio_write_all(fd, header, hlen);
  for (size_t i = 0; i < n && rc == 0; i++)
    rc = write_tensor(fd, &tensors[i], convert_from_f32);
  if (rc == 0 && fsync(fd) != 0)
    rc = -errno;
  if (fd >= 0 && close(fd) != 0 && rc == 0)
    rc = -errno;
  if (rc == 0 && rename(tmp, path) != 0)
    rc = -errno;
  if (rc == 0)
    rc = fileio_fsync_parent(path);
  if (rc != 0) {
    fileio_seterr(err, errlen, "cannot write %s: %s", path, strerror(-rc));
    unlink(tmp);
  }
  free(tmp);
  free(header);
  return rc == 0 ? 0 : -1;
}

/* ---- Reading ---- */

struct st_file {
  void *map;
  size_t size;
  st_tensor *tensors;
  size_t n;
  cJSON *header; /* names and metadata values point into it */
  cJSON *meta;   /* the "__metadata__" object, or NULL */
};

void st_close(st_file *f) {
  if (!f)
    return;
  if (f->map && f->map != MAP_FAILED)
    munmap(f->map, f->size);
  free(f->tensors);
  cJSON_Delete(f->header);
  free(f);
}

/* A JSON number that is a whole number in [0, 2^53). */
static int get_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j))
    return -1;
  double d = j->valuedouble;
  if (!(d >= 0 && d < 9007199254740992.0) || d != floor(d))
    return -1;
  *out = (uint64_t)d;
  return 0;
}

typedef struct range {
  uint64_t begin, end;
  size_t i;
} range;

static int cmp_range(const void *a, const void *b) {
  const range *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return 0;
}

/* Parses one tensor entry; the message names the tensor. */
static int parse_tensor(const cJSON *o, uint64_t data_size, st_tensor *t,
                        range *r, char *err, size_t errlen) {
  const char *name = o->string;
  t->name = name;
  if (!cJSON_IsObject(o)) {
    fileio_seterr(err, errlen, "tensor \"%s\": not an object", name);
    return -1;
  }
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(o, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(o, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs)) {
    fileio_seterr(err, errlen,
                  "tensor \"%s\": needs \"dtype\" (a string), \"shape\" and "
                  "\"data_offsets\" (arrays)",
                  name);
    return -1;
  }
  if (strcmp(dt->valuestring, "F32") == 0) {
    t->dtype = ST_F32;
  } else if (strcmp(dt->valuestring, "BF16") == 0) {
    t->dtype = ST_BF16;
  } else if (strcmp(dt->valuestring, "F16") == 0) {
    t->dtype = ST_F16;
  } else {
    fileio_seterr(err, errlen,
                  "tensor \"%s\": dtype \"%s\" is not supported "
                  "(F32, BF16 and F16 are)",
                  name, dt->valuestring);
    return -1;
  }
  int nd = cJSON_GetArraySize(shape);
  if (nd > 4) {
    fileio_seterr(err, errlen,
                  "tensor \"%s\": %d dimensions, at most 4 supported", name,
                  nd);
    return -1;
  }
  t->ndim = nd;
  for (int d = 0; d < nd; d++) {
    uint64_t v;
    if (get_uint(cJSON_GetArrayItem(shape, d), &v) != 0 ||
        v > (uint64_t)INT64_MAX) {
      fileio_seterr(err, errlen, "tensor \"%s\": shape[%d] is not a size", name,
                    d);
      return -1;
    }
    t->shape[d] = (int64_t)v;
  }
  int64_t numel = numel_of(nd, t->shape);
  uint64_t b, e;
  if (cJSON_GetArraySize(offs) != 2 ||
      get_uint(cJSON_GetArrayItem(offs, 0), &b) != 0 ||
      get_uint(cJSON_GetArrayItem(offs, 1), &e) != 0 || e < b) {
    fileio_seterr(err, errlen,
                  "tensor \"%s\": data_offsets must be [begin, end] with "
                  "begin <= end",
                  name);
    return -1;
  }
  if (e > data_size) {
    fileio_seterr(err, errlen,
                  "tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                  "] beyond the data section's %" PRIu64 " bytes",
                  name, b, e, data_size);
    return -1;
  }
  if (numel < 0 || e - b != (uint64_t)numel * dtype_size(t->dtype)) {
    fileio_seterr(err, errlen,
                  "tensor \"%s\": %" PRIu64
                  " bytes in data_offsets, but %s x %" PRId64
                  " elements is %" PRIu64,
                  name, e - b, dtype_name(t->dtype), numel,
                  numel < 0 ? 0 : (uint64_t)numel * dtype_size(t->dtype));
    return -1;
  }
  r->begin = b;
  r->end = e;
  return 0;
}

/* Maps path into f (f->map, f->size). The descriptor is closed at once:
 * the mapping stays valid without it. 0, or -1 with the reason in sub. */
static int map_file(st_file *f, const char *path, char *sub, size_t n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    fileio_seterr(sub, n, "%s", strerror(errno));
    if (fd >= 0)
      close(fd);
    return -1;
  }
  f->size = (size_t)st.st_size;
  if (f->size < 8) {
    fileio_seterr(sub, n, "%zu bytes, too short for a safetensors file",
                  f->size);
    close(fd);
    return -1;
  }
  f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (f->map == MAP_FAILED) {
    f->map = NULL;
    fileio_seterr(sub, n, "cannot map: %s", strerror(errno));
    close(fd);
    return -1;
  }
  close(fd);
  return 0;
}

/* The JSON header after the 8-byte length, into f->header; *hlen its
 * length. Only padding may follow the JSON. 0, or -1 with sub set. */
static int parse_header(st_file *f, uint64_t *hlen, char *sub, size_t n) {
  const uint8_t *p = f->map;
  *hlen = 0;
  for (int i = 0; i < 8; i++)
    *hlen |= (uint64_t)p[i] << (8 * i);
  if (*hlen > f->size - 8) {
    fileio_seterr(sub, n,
                  "header length %" PRIu64 " beyond the file's %zu bytes",
                  *hlen, f->size);
    return -1;
  }
  const char *end = NULL;
  f->header =
      cJSON_ParseWithLengthOpts((const char *)p + 8, (size_t)*hlen, &end, 0);
  if (!f->header || !cJSON_IsObject(f->header)) {
    fileio_seterr(sub, n, "header is not a JSON object");
    return -1;
  }
  for (const char *q = end; q < (const char *)p + 8 + *hlen; q++)
    if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r' && *q != '\0') {
      fileio_seterr(sub, n, "header is not a JSON object");
      return -1;
    }
  return 0;
}

/* The header's entries: __metadata__ (string values only) into f->meta,
 * each tensor into f->tensors with its byte range in ranges[] (both sized
 * by the caller for every entry). 0, or -1 with sub set. */
static int read_entries(st_file *f, uint64_t hlen, range *ranges, char *sub,
                        size_t n) {
  const uint8_t *p = f->map;
  uint64_t data_size = f->size - 8 - hlen;
  for (cJSON *o = f->header->child; o; o = o->next) {
    if (strcmp(o->string, "__metadata__") == 0) {
      if (!cJSON_IsObject(o)) {
        fileio_seterr(sub, n, "__metadata__ is not an object");
        return -1;
      }
      for (cJSON *m = o->child; m; m = m->next)
        if (!cJSON_IsString(m)) {
          fileio_seterr(sub, n, "__metadata__ \"%s\" is not a string",
                        m->string);
          return -1;
        }
      f->meta = o;
      continue;
    }
    for (size_t i = 0; i < f->n; i++)
      if (strcmp(f->tensors[i].name, o->string) == 0) {
        fileio_seterr(sub, n, "tensor \"%s\" listed twice", o->string);
        return -1;
      }
    st_tensor *t = &f->tensors[f->n];
    if (parse_tensor(o, data_size, t, &ranges[f->n], sub, n) != 0)
      return -1;
    ranges[f->n].i = f->n;
    t->data = p + 8 + hlen + ranges[f->n].begin;
    f->n++;
  }
  return 0;
}

/* The ranges tile the data section of data_size bytes: sorted, each
 * begins where the previous ended, the last ends at the end of the file.
 * Sorts ranges. 0, or -1 with sub naming the first tensor that does not
 * fit. */
static int check_tiling(const st_file *f, range *ranges, uint64_t data_size,
                        char *sub, size_t n) {
  qsort(ranges, f->n, sizeof(*ranges), cmp_range);
  uint64_t at = 0;
  for (size_t k = 0; k < f->n; k++) {
    const char *name = f->tensors[ranges[k].i].name;
    if (ranges[k].begin < at) {
      fileio_seterr(sub, n,
                    "tensor \"%s\": data_offsets overlap another "
                    "tensor's",
                    name);
      return -1;
    }
    if (ranges[k].begin > at) {
      fileio_seterr(sub, n,
                    "tensor \"%s\": data_offsets leave a gap of %" PRIu64
                    " bytes before it",
                    name, ranges[k].begin - at);
      return -1;
    }
    at = ranges[k].end;
  }
  if (at != data_size) {
    fileio_seterr(sub, n,
                  "%" PRIu64
                  " bytes of data after the last tensor (the data section "
                  "has %" PRIu64 ", the tensors cover %" PRIu64 ")",
                  data_size - at, data_size, at);
    return -1;
  }
  return 0;
}

int st_open(const char *path, st_file **out, char *err, size_t errlen) {
  *out = NULL;
  st_file *f = calloc(1, sizeof(*f));
  if (!f) {
    fileio_seterr(err, errlen, "%s: out of memory", path);
    return -1;
  }
  range *ranges = NULL;
  char sub[512] = "";
  uint64_t hlen = 0;
  if (map_file(f, path, sub, sizeof sub) != 0 ||
      parse_header(f, &hlen, sub, sizeof sub) != 0)
    goto fail;
  size_t count = 0;
  for (cJSON *o = f->header->child; o; o = o->next)
    count++;
  f->tensors = calloc(count ? count : 1, sizeof(*f->tensors));
  ranges = calloc(count ? count : 1, sizeof(*ranges));
  if (!f->tensors || !ranges) {
    fileio_seterr(sub, sizeof sub, "out of memory");
    goto fail;
  }
  if (read_entries(f, hlen, ranges, sub, sizeof sub) != 0 ||
      check_tiling(f, ranges, f->size - 8 - hlen, sub, sizeof sub) != 0)
    goto fail;
  free(ranges);
  *out = f;
  return 0;

fail:
  fileio_seterr(err, errlen, "%s: %s", path, sub);
  free(ranges);
  st_close(f);
  return -1;
}

size_t st_count(const st_file *f) { return f->n; }

const st_tensor *st_at(const st_file *f, size_t i) {
  return i < f->n ? &f->tensors[i] : NULL;
}

const st_tensor *st_find(const st_file *f, const char *name) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->tensors[i].name, name) == 0)
      return &f->tensors[i];
  return NULL;
}

const char *st_meta(const st_file *f, const char *key) {
  const cJSON *v =
      f->meta ? cJSON_GetObjectItemCaseSensitive(f->meta, key) : NULL;
  return cJSON_IsString(v) ? v->valuestring : NULL;
}
