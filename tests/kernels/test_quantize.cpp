#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/kernels/cpu/quantize.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

Tensor randn(const Shape& shape, uint64_t seed, double stddev = 1) {
  Generator gen(seed);
  Tensor t = Tensor::randn(shape, gen);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] *= static_cast<float>(stddev);
  return t;
}

TEST(QuantizeKernel, RoundsHalfToEvenAndSaturates) {
  Tensor x = Tensor::from_vector<float>({-1, 0, 0.5f, 1.5f, 2.5f, -20, 1000}, {7});
  EXPECT_EQ(cpu::quantize(x, {1.0f, 10}, DType::u8).to_vector<int>(), (std::vector<int>{9, 10, 10, 12, 12, 0, 255}));
  EXPECT_EQ(cpu::quantize(x, {0.5f, 0}, DType::i8).to_vector<int>(), (std::vector<int>{-2, 0, 1, 3, 5, -40, 127}));
  EXPECT_EQ(cpu::quantize(x, {1.0f, 0}, DType::i8).to_vector<int>().back(), 127);
  EXPECT_EQ(cpu::quantize(Tensor::from_vector<float>({-1000}, {1}), {1.0f, 0}, DType::i8).item(), -128);
}

TEST(QuantizeKernel, FastMatchesReferenceExactly) {
  // Large enough for the parallel path; a spread that saturates at both ends; a transposed view.
  Tensor x = randn({300, 257}, 1, 3);
  for (auto [p, dtype] : {std::pair{cpu::QuantParams{0.02f, 128}, DType::u8}, {cpu::QuantParams{0.031f, 7}, DType::u8},
                          {cpu::QuantParams{0.05f, -3}, DType::i8}}) {
    EXPECT_EQ(cpu::quantize(x, p, dtype).to_vector<int>(), cpu::reference::quantize(x, p, dtype).to_vector<int>());
    Tensor xt = x.t();
    EXPECT_EQ(cpu::quantize(xt, p, dtype).to_vector<int>(), cpu::reference::quantize(xt, p, dtype).to_vector<int>());
  }
  Tensor nan = Tensor::from_vector<float>({std::nanf(""), 1}, {2});
  EXPECT_EQ(cpu::quantize(nan, {1.0f, 5}, DType::u8).to_vector<int>(),
            cpu::reference::quantize(nan, {1.0f, 5}, DType::u8).to_vector<int>());
}

TEST(QuantizeKernel, DequantizeInvertsWithinHalfAStep) {
  Tensor x = randn({100, 400}, 2);
  cpu::QuantParams p = cpu::choose_quant_params(-5, 5, DType::u8);
  Tensor q = cpu::quantize(x, p, DType::u8);
  Tensor back = cpu::dequantize(q, p);
  EXPECT_EQ(back.to_vector<float>(), cpu::reference::dequantize(q, p).to_vector<float>());
  std::vector<float> xs = x.to_vector<float>(), bs = back.to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_NEAR(bs[i], xs[i], p.scale / 2 * 1.0001) << i;
}

TEST(QuantizeKernel, AminmaxMatchesReference) {
  Tensor x = randn({70000}, 3);
  cpu::MinMax fast = cpu::aminmax(x), ref = cpu::reference::aminmax(x);
  EXPECT_EQ(fast.min, ref.min);
  EXPECT_EQ(fast.max, ref.max);
  Tensor with_nan = Tensor::from_vector<float>({std::nanf(""), -2, 3}, {3});
  EXPECT_EQ(cpu::aminmax(with_nan).min, -2);
  EXPECT_EQ(cpu::aminmax(with_nan).max, 3);
  EXPECT_EQ(cpu::aminmax(Tensor::empty({0})).max, 0);
}

TEST(QuantizeKernel, ChooseParamsCoversTheRangeAndZero) {
  cpu::QuantParams p = cpu::choose_quant_params(-1, 3, DType::u8);
  EXPECT_FLOAT_EQ(p.scale, 4.0f / 255);
  EXPECT_EQ(p.zero_point, 64);  // round(1 / (4 / 255)) = round(63.75)
  p = cpu::choose_quant_params(0, 6, DType::u8);  // a ReLU output: all 256 levels for [0, 6]
  EXPECT_EQ(p.zero_point, 0);
  EXPECT_FLOAT_EQ(p.scale, 6.0f / 255);
  p = cpu::choose_quant_params(2, 5, DType::u8);  // widened to contain 0
  EXPECT_EQ(p.zero_point, 0);
  EXPECT_FLOAT_EQ(p.scale, 5.0f / 255);
  p = cpu::choose_quant_params(-4, -1, DType::i8);
  EXPECT_EQ(p.zero_point, 127);
  p = cpu::choose_quant_params(0, 0, DType::u8);
  EXPECT_EQ(p.scale, 1.0f);
  EXPECT_EQ(cpu::quantize(Tensor::zeros({3}), p, DType::u8).to_vector<int>(), (std::vector<int>{0, 0, 0}));
}

TEST(QuantizeKernel, BadParamsAndDtypesAreErrors) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(contains(message_of<ValueError>([&] { cpu::choose_quant_params(0, inf, DType::u8); }), "finite"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { cpu::choose_quant_params(2, 1, DType::u8); }), "min <= max"));
  Tensor x = Tensor::ones({4});
  EXPECT_TRUE(contains(message_of<ValueError>([&] { cpu::quantize(x, {0.0f, 0}, DType::u8); }), "positive"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { cpu::quantize(x, {1.0f, 300}, DType::u8); }), "[0, 255]"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { cpu::quantize(x, {1.0f, 0}, DType::i32); }), "u8 or i8"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { cpu::quantize(x.to(DType::f64), {1.0f, 0}, DType::u8); }), "f64"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { cpu::dequantize(x, {1.0f, 0}); }), "u8 or i8"));
}

}  // namespace
}  // namespace weft
