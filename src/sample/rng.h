// Rng: a small seeded pseudo-random generator with identical output on every
// platform and compiler (xoshiro256**, state seeded by splitmix64).
//
// Only integer arithmetic on fixed-width types, so a seed always produces the
// same stream. Not thread-safe: one Rng per sampler / thread. Not cryptographic.
#pragma once

#include <cstdint>

namespace sluice {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { seed_with(seed); }
  // A generator with this raw xoshiro256** state (not all zero), for checking
  // against published test vectors.
  static Rng from_state(uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3);

  // Restarts the stream: the same seed always yields the same sequence.
  void seed_with(uint64_t seed);
  // Next 64 uniformly distributed bits.
  uint64_t next();
  // Uniform float in [0, 1): the top 24 bits of next() times 2^-24 (exact, never 1).
  float uniform();
  // Uniform double in [0, 1): the top 53 bits of next() times 2^-53.
  double uniform_double();

 private:
  uint64_t state_[4];  // xoshiro256** state, never all zero
};

// One step of splitmix64 on *state (advances it, returns the mixed output).
uint64_t splitmix64(uint64_t* state);

}  // namespace sluice
