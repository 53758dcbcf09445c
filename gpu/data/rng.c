/*
 * rng: seeded random numbers for the engine and the stages; rng.h states
 * the contract. Both generators are published ones, kept as their
 * authors give them (splitmix64, xoshiro256**), so that a seed's stream
 * can be checked against the reference code and never changes between
 * dagrun versions: checkpoints store the state, and a resumed run must
 * draw what the uninterrupted one would have.
 */
#include "rng.h"

uint64_t rng_splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void rng_seed(uint64_t s[4], uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++)
    s[i] = rng_splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(uint64_t s[4]) {
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t rng_below(uint64_t s[4], uint64_t n) {
  unsigned __int128 m = (unsigned __int128)rng_next(s) * n;
  uint64_t low = (uint64_t)m;
  if (low < n) {
    /* Draws whose low half falls below 2^64 mod n would favour some
     * results: draw again. */
    uint64_t threshold = -n % n;
    while (low < threshold) {
      m = (unsigned __int128)rng_next(s) * n;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}
