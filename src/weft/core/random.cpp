#include "weft/core/random.h"

#include <cmath>
#include <numbers>

namespace weft {

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void Generator::manual_seed(uint64_t seed) {
  for (auto& word : s_) {  // splitmix64, as the xoshiro authors recommend for seeding
    seed += 0x9e3779b97f4a7c15ull;
    uint64_t z = seed;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    word = z ^ (z >> 31);
  }
}

uint64_t Generator::next_u64() {
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Generator::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1p-53; }

double Generator::normal() {
  double u1 = 1.0 - uniform();  // (0, 1]: log stays finite
  double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace weft
