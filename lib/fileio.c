/* Durable file operations; see fileio.h. */
#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

void fileio_seterr(char *err, size_t errlen, const char *fmt, ...) {
  if (!err || !errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
}

char *fileio_xprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = NULL;
  if (vasprintf(&s, fmt, ap) < 0)
    s = NULL;
  va_end(ap);
  return s;
}

char *fileio_join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p)
    snprintf(p, n, "%s/%s", dir, name);
  return p;
}

int fileio_write_all(int fd, const void *p, size_t n) {
  const char *s = p;
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0)
      return -errno;
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

int fileio_pread_all(int fd, void *p, size_t n, uint64_t off) {
  char *s = p;
  while (n > 0) {
    ssize_t r = pread(fd, s, n, (off_t)off);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return -errno;
    if (r == 0)
      return -EIO;
    s += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

int fileio_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  int rc = fsync(fd) == 0 ? 0 : -errno;
  close(fd);
  return rc;
}

int fileio_fsync_parent(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return fileio_fsync_dir(".");
  if (slash == path)
    return fileio_fsync_dir("/");
  char *dir = strndup(path, (size_t)(slash - path));
  if (!dir)
    return -ENOMEM;
  int rc = fileio_fsync_dir(dir);
  free(dir);
  return rc;
}

int fileio_write_durable(const char *path, const void *data, size_t n) {
  int rc = 0;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  rc = fileio_write_all(fd, data, n);
  if (rc == 0 && fsync(fd) != 0)
    rc = -errno;
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  return rc;
}

int fileio_write_atomic(const char *path, const void *data, size_t n,
                        char *err, size_t errlen) {
  char *tmp = fileio_xprintf("%s.tmp.%ld", path, (long)getpid());
  if (!tmp) {
    fileio_seterr(err, errlen, "%s: out of memory", path);
    return -ENOMEM;
  }
  int rc = fileio_write_durable(tmp, data, n);
  if (rc == 0 && rename(tmp, path) != 0)
    rc = -errno;
  if (rc == 0)
    rc = fileio_fsync_parent(path);
  if (rc != 0) {
    fileio_seterr(err, errlen, "cannot write %s: %s", path, strerror(-rc));
    unlink(tmp);
  }
  free(tmp);
  return rc;
}

int fileio_read_file(const char *path, char **data, size_t *n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  /* stat's size is a first guess: the loop reads on to the real end. */
  struct stat st;
  size_t cap = fstat(fd, &st) == 0 && st.st_size > 0 ? (size_t)st.st_size : 0;
  cap += 4096;
  size_t len = 0;
  char *buf = malloc(cap + 1);
  int rc = buf ? 0 : -ENOMEM;
  while (rc == 0) {
    if (len == cap) {
      char *grown = realloc(buf, 2 * cap + 1);
      if (!grown) {
        rc = -ENOMEM;
        break;
      }
      buf = grown;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + len, cap - len);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      rc = -errno;
    else if (r == 0)
      break;
    else
      len += (size_t)r;
  }
  close(fd);
  if (rc != 0) {
    free(buf);
    return rc;
  }
  buf[len] = '\0';
  if (n)
    *n = len;
  *data = buf;
  return 0;
}

char *fileio_read_all(const char *path, size_t *n, char *err, size_t errlen) {
  char *buf = NULL;
  int rc = fileio_read_file(path, &buf, n);
  if (rc != 0) {
    fileio_seterr(err, errlen, "%s: %s", path, strerror(-rc));
    return NULL;
  }
  return buf;
}

int fileio_write_file(const char *path, const void *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return -errno;
  int rc = fileio_write_all(fd, data, n);
  if (close(fd) != 0 && rc == 0)
    rc = -errno;
  return rc;
}

void fileio_hex(const uint8_t *bytes, size_t n, char *hex) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = digits[bytes[i] >> 4];
    hex[2 * i + 1] = digits[bytes[i] & 15];
  }
  hex[2 * n] = '\0';
}

/* The block a copy moves at a time: large enough that the system calls
 * cost nothing next to the disk, small enough to sit on any stack of
 * threads (it is malloc'd anyway). */
#define COPY_BLOCK ((size_t)1 << 20)

int fileio_copy_durable(const char *src, const char *dst, char *err,
                        size_t errlen) {
  int in = open(src, O_RDONLY | O_CLOEXEC);
  if (in < 0) {
    snprintf(err, errlen, "copy %s -> %s: cannot open %s: %s", src, dst, src,
             strerror(errno));
    return -1;
  }
  int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    snprintf(err, errlen, "copy %s -> %s: cannot create %s: %s", src, dst, dst,
             strerror(errno));
    close(in);
    return -1;
  }
  char *buf = malloc(COPY_BLOCK);
  int rc = buf ? 0 : -1;
  if (!buf)
    snprintf(err, errlen, "copy %s -> %s: out of memory", src, dst);
  while (rc == 0) {
    ssize_t k = read(in, buf, COPY_BLOCK);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      snprintf(err, errlen, "copy %s -> %s: cannot read %s: %s", src, dst, src,
               strerror(errno));
      rc = -1;
    } else if (k == 0) {
      break;
    } else {
      int e = fileio_write_all(out, buf, (size_t)k);
      if (e != 0) {
        snprintf(err, errlen, "copy %s -> %s: %s", src, dst, strerror(-e));
        rc = -1;
      }
    }
  }
  free(buf);
  if (rc == 0 && fsync(out) != 0) {
    snprintf(err, errlen, "copy %s -> %s: fsync: %s", src, dst,
             strerror(errno));
    rc = -1;
  }
  /* close() can report a write the file system deferred (NFS). */
  if (close(out) != 0 && rc == 0) {
    snprintf(err, errlen, "copy %s -> %s: %s", src, dst, strerror(errno));
    rc = -1;
  }
  close(in);
  return rc;
}

/* nftw's callback has no argument: it returns the errno of a failed
 * removal (positive), which nftw hands back, apart from its own -1. */
static int remove_one(const char *path, const struct stat *st, int flag,
                      struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path) == 0 || errno == ENOENT ? 0 : errno;
}

int fileio_remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0)
    return errno == ENOENT ? 0 : -errno;
  /* FTW_DEPTH: a directory after its contents; FTW_PHYS: a symlink is
   * removed, never followed out of the tree. */
  int rc = nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
  if (rc == -1)
    return errno ? -errno : -EIO;
  return rc > 0 ? -rc : 0;
}

int fileio_mkdir_p(const char *path, unsigned mode) {
  /* The common case is a parent that exists: one syscall. Otherwise the
   * missing parents are made from the nearest existing one down, so a
   * run's task directory costs three mkdir(2), not one per component of
   * its path: that was a tenth of dagrun's own time per task. */
  if (mkdir(path, mode) == 0)
    return 0;
  if (errno == ENOENT) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
      n--; /* "a/b/" is "a/b" */
    while (n > 0 && path[n - 1] != '/')
      n--;
    while (n > 1 && path[n - 1] == '/')
      n--; /* "a//b": the parent is "a" */
    if (n == 0 || (n == 1 && path[0] == '/'))
      return -ENOENT; /* no parent left to make */
    char *parent = strndup(path, n);
    if (!parent)
      return -ENOMEM;
    int rc = fileio_mkdir_p(parent, mode);
    free(parent);
    if (rc != 0)
      return rc;
    if (mkdir(path, mode) == 0)
      return 0;
  }
  if (errno != EEXIST)
    return -errno;
  struct stat st;
  if (stat(path, &st) != 0)
    return -errno;
  return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int fileio_reserve(const char *path, uint64_t bytes) {
  struct rlimit fl;
  if (getrlimit(RLIMIT_FSIZE, &fl) == 0 && fl.rlim_cur != RLIM_INFINITY &&
      fl.rlim_cur < bytes)
    return -EFBIG;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  /* posix_fallocate takes the blocks now; where the file system cannot
   * (EOPNOTSUPP), written zeros do. */
  int rc = posix_fallocate(fd, 0, (off_t)bytes);
  if (rc == EOPNOTSUPP || rc == EINVAL) {
    static const char zeros[16384];
    rc = 0;
    for (uint64_t at = 0; at < bytes && !rc; at += sizeof zeros)
      if (write(fd, zeros, sizeof zeros) != (ssize_t)sizeof zeros)
        rc = errno ? errno : ENOSPC;
  }
  close(fd);
  if (rc)
    unlink(path); /* no part of one: it would hold space */
  return -rc;
}
