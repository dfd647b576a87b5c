// Weight-only int8 linear layers against their f64 reference, at decoding's few rows (the weight
// read in its bytes) and at more (expanded to f32 for the GEMM); and the fused path itself at row
// counts the dispatch would not give it.
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "weft/core/random.h"
#include "weft/kernels/cpu/weight_only.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

Tensor random_int8(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v(numel(shape));
  for (double& x : v) x = -127 + std::floor(gen.uniform() * 255);
  return Tensor::from_vector(v, shape, DType::i8);
}

void expect_close(const Tensor& fast, const Tensor& ref) {
  ASSERT_EQ(fast.shape(), ref.shape());
  std::vector<double> f = fast.to_vector<double>(), r = ref.to_vector<double>();
  double scale = 0;
  for (double v : r) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < f.size(); ++i) ASSERT_NEAR(f[i], r[i], 1e-5 * (1 + scale)) << i;
}

TEST(WeightOnlyKernel, Int8LinearMatchesReferenceAtEveryRowCount) {
  Generator gen(4);
  for (auto [M, K, N] : {std::tuple{1, 768, 40}, {2, 17, 9}, {8, 64, 33}, {9, 64, 33}, {40, 100, 7}, {1, 1, 1},
                         {3, 15, 2}}) {
    SCOPED_TRACE(str("M ", M, ", K ", K, ", N ", N));
    Tensor q = random_int8({N, K}, 10 + K), scales = Tensor::rand({N}, gen);
    Tensor x = Tensor::randn({M, K}, gen), bias = Tensor::randn({N}, gen);
    expect_close(cpu::int8_weight_only_linear(x, q, scales, bias), cpu::reference::int8_weight_only_linear(x, q, scales, bias));
    expect_close(cpu::int8_weight_only_linear(x, q, scales, {}), cpu::reference::int8_weight_only_linear(x, q, scales, {}));
  }
}

TEST(WeightOnlyKernel, FusedPathTakesAnyRowCountInChunksOfEight) {
  Generator gen(5);
  const int64_t M = 19, K = 37, N = 6;
  Tensor q = random_int8({N, K}, 3), scales = Tensor::rand({N}, gen), x = Tensor::randn({M, K}, gen);
  std::vector<float> qs = q.to_vector<float>(), ss = scales.to_vector<float>();
  std::vector<float> w(qs.size());
  for (size_t i = 0; i < w.size(); ++i) w[i] = ss[i / K] * qs[i];
  Tensor fused = cpu::fused_weight_only_linear(x, N, Tensor(), [&](int64_t n, const float* xs, int64_t rows, float* out) {
    cpu::dot_rows(w.data() + n * K, xs, K, rows, out);
  });
  expect_close(fused, cpu::reference::int8_weight_only_linear(x, q, scales, {}));
}

TEST(WeightOnlyKernel, BadInputsAreErrorsNamingTheShapes) {
  Tensor q = random_int8({4, 8}, 1), scales = Tensor::ones({4});
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::int8_weight_only_linear(Tensor::ones({2, 7}), q, scales, {}); }),
                       "expected an i8 weight [N, 7], got i8 [4, 8]"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::int8_weight_only_linear(Tensor::ones({2, 8}), q, Tensor::ones({3}), {}); }),
                       "expected f32 scales [4] (one per output row)"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { cpu::int8_weight_only_linear(Tensor::ones({2, 8}), q, scales, Tensor::ones({5})); }),
                       "expected an f32 bias [4]"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { cpu::int8_weight_only_linear(Tensor::ones({8}), q, scales, {}); }),
                       "expected an f32 input [M, K]"));
}

}  // namespace
}  // namespace weft
