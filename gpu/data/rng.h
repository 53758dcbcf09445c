/*
 * rng: the seeded random numbers of the engine and the stages (data
 * order, document shuffle, weight init, sampling). Integer arithmetic
 * only, so a seed gives the same stream on every machine; the state is
 * plain data that checkpoints save. Not for cryptography.
 */
#ifndef DAGRUN_RNG_H
#define DAGRUN_RNG_H

#include <stdint.h>

/* splitmix64 (Steele, Lea, Flood): advances *state, returns 64 bits. */
uint64_t rng_splitmix64(uint64_t *state);

/* xoshiro256** (Blackman, Vigna), seeded through splitmix64. */
void rng_seed(uint64_t s[4], uint64_t seed);
uint64_t rng_next(uint64_t s[4]);
/* Uniform in [0, n), n > 0, without modulo bias (Lemire's method). */
uint64_t rng_below(uint64_t s[4], uint64_t n);

#endif /* DAGRUN_RNG_H */
