// Random numbers: xoshiro256** seeded through splitmix64. Small explicit state (4 words) so a
// training checkpoint can save and restore it and a run with the same seed is bit-identical.
#pragma once
#include <array>
#include <cstdint>

namespace weft {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { manual_seed(seed); }
  void manual_seed(uint64_t seed);
  uint64_t next_u64();
  double uniform();  // [0, 1), 53 random bits
  double normal();   // standard normal (Box-Muller; one draw per call keeps the state simple)
  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_{};
};

Generator& default_generator();
void manual_seed(uint64_t seed);  // seeds default_generator()

}  // namespace weft
