/*
 * sha256: SHA-256 digests as lower-case hex, through libcrypto.
 *
 * A module of its own, apart from fileio, so that a program that never
 * hashes (the worker that every task starts) does
 * not load libcrypto: loading and relocating it was a third of a
 * worker's start-up.
 */
#ifndef DAGRUN_SHA256_H
#define DAGRUN_SHA256_H

#include <stddef.h>

/* SHA-256 of a whole file as 64 lower-case hex digits (what sha256sum
 * prints) into hex[65]. 0 or -errno. */
int sha256_file(const char *path, char hex[65]);

/* SHA-256 of n bytes as 64 lower-case hex digits, malloc'd (caller
 * frees); NULL when out of memory or libcrypto fails. */
char *sha256_hex(const void *data, size_t n);

#endif
