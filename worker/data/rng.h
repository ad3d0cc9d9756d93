/* worker/data/rng.h - the deterministic random numbers of the worker.
 *
 * Owns: xoshiro256** seeded through splitmix64, and stream derivation, so that
 * every random choice (init, shuffle, augmentation) is a pure function of the
 * seed and a position: a resumed or re-sliced run draws the same numbers.
 * Must not: read the clock or any global state.
 */
#ifndef VITJOB_RNG_H
#define VITJOB_RNG_H

#include <stdint.h>

typedef struct { uint64_t s[4]; } rng_state;

/* Seeds a stream from a seed and up to two stream coordinates (e.g. epoch and
 * sample index); different coordinates give independent streams. */
void rng_seed(rng_state *r, uint64_t seed, uint64_t a, uint64_t b);
uint64_t rng_u64(rng_state *r);
/* Uniform in [0, n), unbiased. n > 0. */
uint64_t rng_below(rng_state *r, uint64_t n);
/* Uniform float in [0, 1). */
float rng_uniform(rng_state *r);
/* Standard normal (Box-Muller). */
float rng_normal(rng_state *r);

#endif
