/*
 * fileio: the file operations that data must survive a crash with,
 * shared by the engine's files (token files, checkpoints) and the stages.
 * Every function is safe from any thread. Errors are -errno.
 */
#ifndef DAGRUN_FILEIO_H
#define DAGRUN_FILEIO_H

#include <stddef.h>
#include <stdint.h>

/* Error reporting lives here because every module of the engine and the
 * stages links dagrun_data and reports errors into caller buffers. */

/* printf into err[errlen], truncating; a no-op when err is NULL or errlen
 * is 0. */
void fileio_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* printf into a malloc'd string (caller frees); NULL when out of memory. */
char *fileio_xprintf(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* "dir/name", malloc'd (caller frees); NULL when out of memory. */
char *fileio_join(const char *dir, const char *name);

/* Writes all n bytes, retrying short writes and EINTR. 0 or -errno. */
int fileio_write_all(int fd, const void *p, size_t n);

/* Reads exactly n bytes at off. 0, -errno, or -EIO when the file ends
 * first. */
int fileio_pread_all(int fd, void *p, size_t n, uint64_t off);

/* fsync of a directory, which makes a rename in it durable. */
int fileio_fsync_dir(const char *dir);
/* fsync of the directory that holds path. */
int fileio_fsync_parent(const char *path);

/* Creates (or truncates) path with data and fsyncs it: on disk when it
 * returns 0. -errno otherwise (a partial file may be left). */
int fileio_write_durable(const char *path, const void *data, size_t n);

/* Writes data to path so that a crash leaves either the old file or the
 * whole new one: a temporary name beside it (path.tmp.<pid>, so that two
 * processes writing one file never share it), fsync, rename, fsync of the
 * directory. Returns 0, or -errno with a message naming path in err (err
 * may be NULL). */
int fileio_write_atomic(const char *path, const void *data, size_t n,
                        char *err, size_t errlen);

/* The whole file into *data, malloc'd with a NUL after its *n bytes
 * (caller frees; n may be NULL). Reads to the end, so pipes and /proc
 * files whose size stat does not know work too. 0, or -errno (-ENOENT
 * when there is no such file) with *data untouched. The one file reader
 * of every tree. */
int fileio_read_file(const char *path, char **data, size_t *n);
/* fileio_read_file with the reason in err: the whole file (caller frees),
 * *n set (may be NULL). NULL with "path: reason" in err on failure. */
char *fileio_read_all(const char *path, size_t *n, char *err, size_t errlen);
/* Creates (or truncates) path with data, mode 0644, without fsync: for
 * files that matter only while the process that reads them runs (a
 * worker's attempt.json). 0 or -errno. */
int fileio_write_file(const char *path, const void *data, size_t n);

/* n bytes as 2n lower-case hex digits plus NUL into hex. */
void fileio_hex(const uint8_t *bytes, size_t n, char *hex);

/* Copies src to dst (created or truncated, mode 0644), streaming in
 * blocks, and fsyncs dst: on disk when it returns 0. -1 with a message
 * naming the file and the reason in err otherwise (a partial dst may be
 * left; callers copy under temporary names). */
int fileio_copy_durable(const char *src, const char *dst, char *err,
                        size_t errlen);
/* mkdir -p: path and any missing parents, created with mode (before the
 * umask). 0 (also when it exists as a directory), -ENOTDIR when it exists
 * as something else, or -errno. */
int fileio_mkdir_p(const char *path, unsigned mode);
/* Removes path and, if it is a directory, everything under it (symlinks
 * are removed, not followed). 0 (also when path does not exist) or
 * -errno. */
int fileio_remove_tree(const char *path);
/* Holds bytes of disk in a new file at path (created or truncated), for
 * records that must be written once the disk fills: 0, or a negative
 * errno (the disk full already, or -EFBIG under a file size limit below
 * bytes, where writing it would raise SIGXFSZ). A failed reserve leaves
 * no file. The caller unlinks it to free the space. */
int fileio_reserve(const char *path, uint64_t bytes);

#endif /* DAGRUN_FILEIO_H */
