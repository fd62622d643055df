#include "sample/rng.h"

namespace sluice {
namespace {

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void Rng::seed_with(uint64_t seed) {
  uint64_t sm = seed;
  // splitmix64 outputs are never all four zero for any seed.
  for (uint64_t& s : state_) s = splitmix64(&sm);
}

Rng Rng::from_state(uint64_t s0, uint64_t s1, uint64_t s2, uint64_t s3) {
  Rng rng;
  rng.state_[0] = s0;
  rng.state_[1] = s1;
  rng.state_[2] = s2;
  rng.state_[3] = s3;
  return rng;
}

uint64_t Rng::next() {
  // xoshiro256**: output = rotl(s1 * 5, 7) * 9, then the linear state update.
  const uint64_t result = rotl(state_[1] * 5, 7) * 9;
  const uint64_t t = state_[1] << 17;
  state_[2] ^= state_[0];
  state_[3] ^= state_[1];
  state_[1] ^= state_[2];
  state_[0] ^= state_[3];
  state_[2] ^= t;
  state_[3] = rotl(state_[3], 45);
  return result;
}

float Rng::uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f; }

double Rng::uniform_double() { return static_cast<double>(next() >> 11) * 0x1p-53; }

}  // namespace sluice
