#include <cmath>

#include "gradcheck.h"
#include "weft/kernels/cpu/softmax.h"
#include "weft/ops/activation.h"

namespace weft {
namespace {

using testing::expect_gradcheck;
using testing::randn64;

void expect_close(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  ASSERT_EQ(actual.shape(), expected.shape());
  ASSERT_EQ(actual.dtype(), expected.dtype());
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], atol + rtol * std::abs(e[i])) << "element " << i;
}

Tensor randn(const Shape& shape, DType dtype, uint64_t seed, double scale = 1) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype) * scale;
}

// Fast kernels against the f64 reference, forward and backward, along `dim`.
void expect_matches_reference(const Tensor& x, int64_t dim, double atol, double rtol) {
  Tensor g = randn(x.shape(), x.dtype(), 99);
  Tensor y = cpu::softmax(x, dim), ly = cpu::log_softmax(x, dim);
  expect_close(y, cpu::reference::softmax(x, dim), atol, rtol);
  expect_close(ly, cpu::reference::log_softmax(x, dim), atol, rtol);
  expect_close(cpu::softmax_backward(g, y, dim), cpu::reference::softmax_backward(g, y, dim), atol, rtol);
  expect_close(cpu::log_softmax_backward(g, ly, dim), cpu::reference::log_softmax_backward(g, ly, dim), atol, rtol);
}

TEST(SoftmaxKernel, RowsMatchReference) {
  // 33 x 1000 is above kParallelGrain, so the OpenMP path runs; the bf16 case checks rounding.
  expect_matches_reference(randn({33, 1000}, DType::f32, 1, 3.0), -1, 1e-6, 1e-5);
  expect_matches_reference(randn({8, 500}, DType::bf16, 2, 3.0), 1, 1e-6, 1e-2);
  expect_matches_reference(randn({7, 5}, DType::f64, 3), 1, 1e-14, 1e-12);
}

TEST(SoftmaxKernel, InnerDimsMatchReference) {
  // inner = 70: one full block of columns and a partial one; 3 x 160 x 70 is above kParallelGrain.
  expect_matches_reference(randn({3, 160, 70}, DType::f32, 4), 1, 1e-6, 1e-5);
  expect_matches_reference(randn({2, 50, 70}, DType::bf16, 5), 1, 1e-6, 1e-2);
  expect_matches_reference(randn({6, 4, 5}, DType::f32, 6), 0, 1e-6, 1e-5);
  Tensor strided = randn({5, 8}, DType::f32, 7).transpose(0, 1);  // not contiguous
  expect_matches_reference(strided, 0, 1e-6, 1e-5);
  expect_matches_reference(strided, 1, 1e-6, 1e-5);
}

TEST(Softmax, ValuesAndStability) {
  Tensor x = Tensor::from_vector<float>({0, 1, 2}, {1, 3});
  double z = 1 + std::exp(1.0) + std::exp(2.0);
  std::vector<float> y = softmax(x, 1).to_vector<float>();
  EXPECT_NEAR(y[0], 1 / z, 1e-7);
  EXPECT_NEAR(y[2], std::exp(2.0) / z, 1e-7);
  // Shifting by 1000 would overflow exp without subtracting the max; the result must not change.
  Tensor big = Tensor::from_vector<float>({1000, 1001, 1002}, {1, 3});
  expect_close(softmax(big, -1), softmax(x, -1), 1e-7, 0);
  expect_close(log_softmax(big, -1), log_softmax(x, -1), 1e-4, 0);  // f32 spacing at 1000 is 6e-5
  EXPECT_NEAR(log_softmax(x, 1).at({0, 0}), -std::log(z), 1e-6);
  EXPECT_NEAR(softmax(Tensor::scalar(3.0), 0).item(), 1.0, 0);  // 0-d: one element
}

TEST(Softmax, BadInputs) {
  Tensor x = Tensor::zeros({2, 3});
  EXPECT_THROW(softmax(x, 2), IndexError);
  EXPECT_THROW(log_softmax(x, -3), IndexError);
  EXPECT_THROW(softmax(Tensor::zeros({2}, DType::i64), 0), DTypeError);
}

TEST(SoftmaxGrad, AnyDim) {
  Tensor a = randn64({3, 4, 5}, 11);
  for (int64_t dim : {0, 1, 2, -1}) {
    expect_gradcheck([dim](auto& x) { return softmax(x[0], dim); }, {a});
    expect_gradcheck([dim](auto& x) { return log_softmax(x[0], dim); }, {a});
  }
  expect_gradcheck([](auto& x) { return softmax(x[0].transpose(0, 2), 1); }, {a});
}

TEST(Dropout, IdentityZerosAndBadP) {
  Tensor x = randn({4, 5}, DType::f32, 12);
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
  EXPECT_TRUE(dropout(x, 0.7, false).is_same(x));
  for (float v : dropout(x, 1.0, true).to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(dropout(x, -0.1, true), ValueError);
  EXPECT_THROW(dropout(x, 1.5, true), ValueError);
  EXPECT_THROW(dropout(Tensor::zeros({3}, DType::i64), 0.5, true), DTypeError);
}

TEST(Dropout, Statistics) {
  const double p = 0.3;
  Generator gen(5);
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = Tensor::ones({100000}, dtype);
    std::vector<double> y = dropout(x, p, true, &gen).to_vector<double>();
    int64_t zeros = 0;
    // bf16 rounds 1 / 0.7 to 8 significant bits.
    const double kept = dtype == DType::f32 ? static_cast<double>(1.0f / 0.7f) : Tensor::scalar(1 / 0.7, dtype).item();
    for (double v : y) {
      if (v == 0) ++zeros;
      else ASSERT_NEAR(v, kept, 1e-6);
    }
    // sd of the fraction is sqrt(p (1 - p) / n) ~ 0.0014; 0.01 is seven of them.
    EXPECT_NEAR(static_cast<double>(zeros) / 100000, p, 0.01) << dtype_name(dtype);
  }
}

TEST(Dropout, SeedReproducesMaskAndBackwardUsesIt) {
  manual_seed(42);
  Tensor a = dropout(Tensor::ones({1000}), 0.5, true);
  manual_seed(42);
  Tensor b = dropout(Tensor::ones({1000}), 0.5, true);
  expect_close(a, b, 0, 0);

  Generator gen(3);
  Tensor x = randn({50, 40}, DType::f32, 13);
  x.requires_grad_(true);
  Tensor y = dropout(x, 0.25, true, &gen);
  sum(y).backward();
  std::vector<float> grad = x.grad().to_vector<float>(), out = y.to_vector<float>();
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_EQ(grad[i], out[i] == 0 ? 0.0f : 1.0f / 0.75f) << i;
}

TEST(DropoutGrad, FixedMask) {
  Generator gen;
  // Re-seeding inside f makes every evaluation draw the same mask.
  expect_gradcheck([&gen](auto& x) {
    gen.manual_seed(7);
    return dropout(x[0], 0.4, true, &gen);
  }, {randn64({6, 7}, 14)});
}

}  // namespace
}  // namespace weft
