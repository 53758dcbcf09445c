/* sha256: see sha256.h. */
#include "sha256.h"

#include "fileio.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

char *sha256_hex(const void *data, size_t n) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n_md = 0;
  if (!EVP_Digest(data, n, md, &n_md, EVP_sha256(), NULL))
    return NULL;
  char *hex = malloc(2 * n_md + 1);
  if (hex)
    fileio_hex(md, n_md, hex);
  return hex;
}

int sha256_file(const char *path, char hex[65]) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -errno;
  EVP_MD_CTX *sha = EVP_MD_CTX_new();
  int rc = sha && EVP_DigestInit_ex(sha, EVP_sha256(), NULL) == 1 ? 0 : -ENOMEM;
  static const size_t bufsize = 1 << 20;
  char *buf = rc == 0 ? malloc(bufsize) : NULL;
  if (rc == 0 && !buf)
    rc = -ENOMEM;
  while (rc == 0) {
    ssize_t k = read(fd, buf, bufsize);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      rc = -errno;
    else if (k == 0)
      break;
    else if (EVP_DigestUpdate(sha, buf, (size_t)k) != 1)
      rc = -EIO;
  }
  uint8_t d[32];
  unsigned dl = 0;
  if (rc == 0 && (EVP_DigestFinal_ex(sha, d, &dl) != 1 || dl != 32))
    rc = -EIO;
  if (rc == 0)
    fileio_hex(d, 32, hex);
  free(buf);
  EVP_MD_CTX_free(sha);
  close(fd);
  return rc;
}
