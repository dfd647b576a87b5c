#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/kernels/cpu/int4.h"
#include "weft/quant/weights.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

TEST(WeightQuantization, Int8PerChannelMapsEachRowsLargestMagnitudeTo127) {
  Tensor w = Tensor::from_vector<float>({0.3f, -1.0f, 0.2f, 0, 0, 0, 3, 1.2f, -0.6f}, {3, 3});
  quant::Int8Weight q = quant::quantize_weight_int8(w);
  EXPECT_EQ(q.values.dtype(), DType::i8);
  EXPECT_EQ(q.scales.to_vector<float>(), (std::vector<float>{1.0f / 127, 1.0f, 3.0f / 127}));
  EXPECT_EQ(q.values.to_vector<int>(), (std::vector<int>{38, -127, 25, 0, 0, 0, 127, 51, -25}));
}

TEST(WeightQuantization, Int8ErrorIsAtMostHalfAStepPerChannel) {
  Generator gen(1);
  Tensor w = Tensor::randn({32, 4, 3, 3}, gen);  // a conv weight: channels are dim 0
  quant::Int8Weight q = quant::quantize_weight_int8(w);
  ASSERT_EQ(q.values.shape(), w.shape());
  std::vector<float> original = w.to_vector<float>(), back = quant::dequantize_weight_int8(q).to_vector<float>();
  std::vector<float> scales = q.scales.to_vector<float>();
  for (size_t i = 0; i < original.size(); ++i)
    ASSERT_LE(std::abs(original[i] - back[i]), scales[i / 36] / 2 * 1.0001f) << i;
}

TEST(WeightQuantization, Int4GroupsOf32WithARaggedLastGroup) {
  Generator gen(2);
  Tensor w = Tensor::randn({5, 50}, gen);  // groups [0, 32) and [32, 50)
  quant::Int4Weight q = quant::quantize_weight_int4(w, 32);
  EXPECT_EQ(q.packed.shape(), (Shape{5, 25}));
  EXPECT_EQ(q.scales.shape(), (Shape{5, 2}));
  std::vector<float> original = w.to_vector<float>(), scales = q.scales.to_vector<float>();
  std::vector<float> back = cpu::dequantize_int4(q.packed, q.scales, 50, 32).to_vector<float>();
  for (int64_t n = 0; n < 5; ++n)
    for (int64_t g = 0; g < 2; ++g) {
      float amax = 0;
      for (int64_t k = g * 32; k < std::min<int64_t>(50, (g + 1) * 32); ++k) amax = std::max(amax, std::abs(original[n * 50 + k]));
      EXPECT_FLOAT_EQ(scales[n * 2 + g], amax / 7);
      for (int64_t k = g * 32; k < std::min<int64_t>(50, (g + 1) * 32); ++k)
        ASSERT_LE(std::abs(original[n * 50 + k] - back[n * 50 + k]), amax / 14 * 1.0001f);
    }
}

TEST(WeightQuantization, BadWeightsAreErrors) {
  Tensor w = Tensor::ones({2, 2});
  w.data<float>()[3] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(contains(message_of<ValueError>([&] { quant::quantize_weight_int8(w); }), "finite"));
  EXPECT_TRUE(contains(message_of<DTypeError>([] { quant::quantize_weight_int8(Tensor::ones({4})); }), "rank"));
  EXPECT_TRUE(contains(message_of<ShapeError>([] { quant::quantize_weight_int4(Tensor::ones({2, 2, 2})); }), "[out, in]"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { quant::quantize_weight_int4(Tensor::ones({2, 2}), 0); }), "group"));
}

}  // namespace
}  // namespace weft
