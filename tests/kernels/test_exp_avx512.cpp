#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "weft/kernels/cpu/exp_avx512.h"

namespace weft {
namespace {

#ifdef __AVX512F__
std::vector<float> exp16(const float* x) {
  std::vector<float> y(16);
  _mm512_storeu_ps(y.data(), cpu::exp_avx512(_mm512_loadu_ps(x)));
  return y;
}

// Distance in representable floats between two non-negative finite floats.
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - ib);
}

// Every softmax argument the attention kernel passes (s - max <= 0, down to where exp underflows)
// and the positive side up to overflow, on a grid fine enough to hit every polynomial interval.
TEST(ExpAvx512, WithinTwoUlpOfLibm) {
  for (float start = -103.0f; start < 88.7f; start += 16 * 0.0037f) {
    float x[16];
    for (int i = 0; i < 16; ++i) x[i] = start + i * 0.0037f;
    const std::vector<float> y = exp16(x);
    for (int i = 0; i < 16; ++i) {
      const float expected = std::exp(x[i]);
      if (expected < std::numeric_limits<float>::min()) {  // subnormal results: absolute error
        ASSERT_NEAR(y[i], expected, 2 * std::numeric_limits<float>::denorm_min()) << "exp(" << x[i] << ")";
        continue;
      }
      ASSERT_LE(ulps(y[i], expected), 2) << "exp(" << x[i] << ") = " << y[i] << ", libm " << expected;
    }
  }
}

TEST(ExpAvx512, EdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  float x[16] = {-inf, inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, -200.0f, 100.0f, 1.0f,
                 -1.0f, 88.0f, -87.0f, -104.0f, 0.5f, -0.5f, 10.0f, -10.0f};
  const std::vector<float> y = exp16(x);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], inf);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[4], 1.0f);
  EXPECT_EQ(y[5], 0.0f);
  EXPECT_EQ(y[6], inf);
  for (int i = 7; i < 16; ++i) EXPECT_LE(ulps(y[i], std::exp(x[i])), 2) << "exp(" << x[i] << ")";
}
#else
TEST(ExpAvx512, WithinTwoUlpOfLibm) { GTEST_SKIP() << "built without AVX-512"; }
#endif

}  // namespace
}  // namespace weft
