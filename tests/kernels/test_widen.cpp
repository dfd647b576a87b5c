// widen16 / narrow16 (kernels/cpu/widen.h): the same values as convert, element by element.
#include <gtest/gtest.h>

#include <bit>
#include <vector>

#include "weft/core/random.h"
#include "weft/kernels/cpu/widen.h"

namespace weft::cpu {
namespace {

TEST(Widen, EveryBf16BitPatternWidensAsConvert) {
  std::vector<BFloat16> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b].bits = static_cast<uint16_t>(b);
  for (size_t i = 0; i < all.size(); i += kWidenLanes) {
    float w[kWidenLanes];
    widen16(&all[i], w);
    for (int64_t j = 0; j < kWidenLanes; ++j)
      ASSERT_EQ(std::bit_cast<uint32_t>(w[j]), std::bit_cast<uint32_t>(convert<float>(all[i + j])))
          << "bits " << std::hex << all[i + j].bits;
  }
}

// Ties both ways, the largest finite values (rounding to inf), subnormals, signed zeros, infinities,
// quiet and signalling NaNs with payloads, then random bit patterns.
TEST(Widen, NarrowRoundsAsConvert) {
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f7f8000u,
                                0x00000001u, 0x80008000u, 0x00018000u, 0x00000000u, 0x80000000u, 0x7f800000u,
                                0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa12345u, 0x7fbfffffu};
  Generator gen(3);
  for (int i = 0; i < 4096; ++i) bits.push_back(static_cast<uint32_t>(gen.next_u64()));
  while (bits.size() % kWidenLanes) bits.push_back(0x3f800000u);
  for (size_t i = 0; i < bits.size(); i += kWidenLanes) {
    float w[kWidenLanes];
    BFloat16 narrowed[kWidenLanes];
    for (int64_t j = 0; j < kWidenLanes; ++j) w[j] = std::bit_cast<float>(bits[i + j]);
    narrow16(w, narrowed);
    for (int64_t j = 0; j < kWidenLanes; ++j)
      ASSERT_EQ(narrowed[j].bits, convert<BFloat16>(w[j]).bits) << "f32 bits " << std::hex << bits[i + j];
  }
}

}  // namespace
}  // namespace weft::cpu
