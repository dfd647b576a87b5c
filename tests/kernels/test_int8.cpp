#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/int8.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

// Integers uniform in [lo, hi] as a `dtype` tensor.
Tensor random_ints(const Shape& shape, int lo, int hi, DType dtype, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v(numel(shape));
  for (double& x : v) x = lo + std::floor(gen.uniform() * (hi - lo + 1));
  return Tensor::from_vector(v, shape, dtype);
}

// Power-of-two scales 2^-3 .. 2^-9, so every product below is exact in f32.
Tensor power_of_two_scales(int64_t n, uint64_t seed) {
  Tensor e = random_ints({n}, 3, 9, DType::f64, seed);
  std::vector<double> s = e.to_vector<double>();
  for (double& x : s) x = std::ldexp(1.0, -static_cast<int>(x));
  return Tensor::from_vector(s, {n}, DType::f32);
}

// A bias on each channel's output grid (an integer times x_scale * w_scale[n]).
Tensor bias_on_grid(const Tensor& weight_scale, float x_scale, uint64_t seed) {
  std::vector<double> k = random_ints(weight_scale.shape(), -5000, 5000, DType::f64, seed).to_vector<double>();
  std::vector<double> s = weight_scale.to_vector<double>();
  for (size_t i = 0; i < k.size(); ++i) k[i] *= s[i] * x_scale;
  return Tensor::from_vector(k, weight_scale.shape(), DType::f32);
}

void expect_equal(const Tensor& actual, const Tensor& expected) {
  ASSERT_EQ(actual.shape(), expected.shape());
  EXPECT_EQ(actual.to_vector<float>(), expected.to_vector<float>());
}

void expect_close(const Tensor& actual, const Tensor& expected, double rtol) {
  ASSERT_EQ(actual.shape(), expected.shape());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  double scale = 0;
  for (double v : e) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], rtol * scale) << "element " << i;
}

TEST(Int8LinearKernel, ExactOnTheIntegerGrid) {
  const int64_t K = 70, N = 19;
  Tensor w = random_ints({N, K}, -127, 127, DType::i8, 1);
  Tensor ws = power_of_two_scales(N, 2);
  const cpu::QuantParams xp{0.03125f, 13};
  Tensor bias = bias_on_grid(ws, xp.scale, 3);
  cpu::Int8Linear kernel(w, ws, bias);
  cpu::Int8Linear no_bias(w, ws);
  for (int64_t M : {1, 37, 128, 37}) {  // 37 twice: the cached primitive
    Tensor x = random_ints({M, K}, 0, 255, DType::u8, 10 + M);
    expect_equal(kernel.forward(x, xp), cpu::reference::int8_linear(x, xp, w, ws, bias));
    expect_equal(no_bias.forward(x, xp), cpu::reference::int8_linear(x, xp, w, ws, {}));
  }
}

TEST(Int8LinearKernel, ArbitraryScalesWithinF32Rounding) {
  const int64_t M = 64, K = 300, N = 96;
  Tensor w = random_ints({N, K}, -127, 127, DType::i8, 4);
  Generator gen(5);
  Tensor ws = Tensor::rand({N}, gen);
  Tensor bias = Tensor::randn({N}, gen);
  cpu::Int8Linear kernel(w, ws, bias);
  Tensor x = random_ints({M, K}, 0, 255, DType::u8, 6);
  for (cpu::QuantParams xp : {cpu::QuantParams{0.0173f, 0}, cpu::QuantParams{0.011f, 200}})  // one primitive, run-time xs, xz
    expect_close(kernel.forward(x, xp), cpu::reference::int8_linear(x, xp, w, ws, bias), 1e-6);
}

TEST(Int8LinearKernel, SameResultOnOneAndTwoThreads) {
  Tensor w = random_ints({33, 65}, -127, 127, DType::i8, 7);
  Tensor ws = power_of_two_scales(33, 8);
  Tensor x = random_ints({50, 65}, 0, 255, DType::u8, 9);
  cpu::Int8Linear kernel(w, ws);
  const int threads = get_num_threads();
  set_num_threads(1);
  Tensor one = kernel.forward(x, {0.25f, 3});
  set_num_threads(2);
  Tensor two = kernel.forward(x, {0.25f, 3});
  set_num_threads(threads);
  expect_equal(one, two);
}

TEST(Int8LinearKernel, BadInputsAreErrors) {
  Tensor w = random_ints({4, 8}, -127, 127, DType::i8, 11);
  Tensor ws = Tensor::ones({4});
  cpu::Int8Linear kernel(w, ws);
  Tensor x = random_ints({2, 8}, 0, 255, DType::u8, 12);
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { kernel.forward(x.to(DType::f32), {1, 0}); }), "u8"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { kernel.forward(random_ints({2, 7}, 0, 9, DType::u8, 1), {1, 0}); }),
                       "[2, 7]"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { kernel.forward(x, {-1, 0}); }), "positive"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { kernel.forward(x, {1, 256}); }), "zero point"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { cpu::Int8Linear(w.to(DType::f32), ws); }), "i8"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::Int8Linear(w, Tensor::ones({3})); }), "weight scale"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { cpu::Int8Linear(w, Tensor::zeros({4})); }), "positive"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::Int8Linear(w, ws, Tensor::ones({5})); }), "bias"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { cpu::Int8Linear(Tensor::zeros({1, 65794}, DType::i8), Tensor::ones({1})); }),
                       "overflow"));
  EXPECT_EQ(kernel.forward(Tensor::empty({0, 8}, DType::u8), {1, 0}).shape(), (Shape{0, 4}));
}

struct ConvCase {
  Shape x, w;
  cpu::Conv2dParams p;
};

TEST(Int8Conv2dKernel, ExactOnTheIntegerGrid) {
  const std::vector<ConvCase> cases = {
      {{4, 1, 28, 28}, {32, 1, 3, 3}, {}},                      // the CNN's first layer
      {{3, 32, 13, 13}, {64, 32, 3, 3}, {}},                    // and its second
      {{2, 6, 9, 11}, {8, 3, 3, 2}, {{2, 1}, {1, 2}, {1, 2}, 2}},  // stride, padding, dilation, groups
      {{1, 4, 5, 5}, {4, 4, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 1}},   // padding: taps there add nothing
  };
  uint64_t seed = 20;
  for (const ConvCase& c : cases) {
    Tensor w = random_ints(c.w, -127, 127, DType::i8, ++seed);
    Tensor ws = power_of_two_scales(c.w[0], ++seed);
    const cpu::QuantParams xp{0.0625f, 77};
    Tensor bias = bias_on_grid(ws, xp.scale, ++seed);
    Tensor x = random_ints(c.x, 0, 255, DType::u8, ++seed);
    cpu::Int8Conv2d kernel(w, ws, bias, c.p);
    SCOPED_TRACE(shape_str(c.x) + " * " + shape_str(c.w));
    expect_equal(kernel.forward(x, xp), cpu::reference::int8_conv2d(x, xp, w, ws, bias, c.p));
    expect_equal(kernel.forward(x, xp), cpu::reference::int8_conv2d(x, xp, w, ws, bias, c.p));
    cpu::Int8Conv2d no_bias(w, ws, {}, c.p);
    expect_equal(no_bias.forward(x, xp), cpu::reference::int8_conv2d(x, xp, w, ws, {}, c.p));
  }
}

TEST(Int8Conv2dKernel, BadInputsAreErrors) {
  Tensor w = random_ints({4, 2, 3, 3}, -127, 127, DType::i8, 30);
  cpu::Int8Conv2d kernel(w, Tensor::ones({4}), {}, {});
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { kernel.forward(random_ints({1, 3, 5, 5}, 0, 9, DType::u8, 1), {1, 0}); }),
                       "channels"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { kernel.forward(Tensor::zeros({1, 2, 5, 5}), {1, 0}); }), "u8"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { cpu::Int8Conv2d(w, Tensor::ones({4}), {}, {{0, 1}, {0, 0}, {1, 1}, 1}); }),
                       "stride"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::Int8Conv2d(w, Tensor::ones({4}), {}, {{1, 1}, {0, 0}, {1, 1}, 3}); }),
                       "groups"));
}

}  // namespace
}  // namespace weft
