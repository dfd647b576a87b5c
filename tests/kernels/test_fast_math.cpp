// fast_exp and fast_tanh against libm over their whole useful range, and at the edges.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "weft/kernels/cpu/fast_math.h"

namespace weft::cpu {
namespace {

TEST(FastMath, ExpIsWithinTwoUlpOfLibm) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(fast_exp(x) - exact) / exact);
  }
  EXPECT_LT(worst, 2.5e-7) << "relative error (f32 ulp is 1.2e-7 at most)";
}

TEST(FastMath, ExpStaysFiniteAndNormalAtTheEdges) {
  for (float x : {-1000.0f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    EXPECT_TRUE(std::isnormal(fast_exp(x)) && fast_exp(x) < 1e-37f) << x;
  for (float x : {1000.0f, std::numeric_limits<float>::infinity()})
    EXPECT_TRUE(std::isfinite(fast_exp(x)) && fast_exp(x) > 1e38f) << x;
}

TEST(FastMath, TanhIsWithinAbsoluteTolerance) {
  double worst = 0;
  for (float x = -12.0f; x <= 12.0f; x += 0.00173f) worst = std::max(worst, std::abs(fast_tanh(x) - std::tanh(double(x))));
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(fast_tanh(0.0f), 0.0f);
  EXPECT_EQ(fast_tanh(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(fast_tanh(-std::numeric_limits<float>::infinity()), -1.0f);
}

}  // namespace
}  // namespace weft::cpu
