#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "weft/autograd/node.h"
#include "weft/core/random.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/autocast.h"
#include "weft/ops/conv.h"
#include "weft/ops/linear.h"
#include "weft/ops/loss.h"
#include "weft/ops/reduce.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

Tensor leaf(const Shape& shape, uint64_t seed) {
  Tensor t = randn(shape, seed);
  t.requires_grad_();
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

TEST(Autocast, LinearRunsInBf16AndGradientsReturnInF32) {
  Tensor x = leaf({16, 64}, 1), w = leaf({32, 64}, 2), b = leaf({32}, 3);
  Tensor reference = linear(x, w, b);
  Tensor y;
  {
    AutocastGuard guard(DType::bf16);
    y = linear(x, w, b);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  // bf16 keeps 8 significant bits: the products of 64 terms of size ~1 agree to about 2^-8 each.
  EXPECT_LT(max_abs_diff(y, reference), 0.3);
  EXPECT_GT(max_abs_diff(y, reference), 0);  // it really ran in bf16
  sum(y).backward();
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().shape(), w.shape());
}

// The weight's gradient leaves the GEMM in f32: it equals x_bf16^T g_bf16 summed in f64 to f32's
// precision, where a gradient rounded to bf16 on the way (and cast back) is off by ~2^-9. So does
// an f32 input's.
TEST(Autocast, LinearWeightGradientKeepsTheGemmsF32Accumulation) {
  Tensor x = leaf({64, 48}, 4), w = leaf({24, 48}, 5), g = randn({64, 24}, 6);
  {
    AutocastGuard guard(DType::bf16);
    sum(mul(linear(x, w, Tensor()), g.to(DType::bf16))).backward();
  }
  ASSERT_EQ(w.grad().dtype(), DType::f32);
  const std::vector<double> xs = x.to(DType::bf16).to_vector<double>(), gs = g.to(DType::bf16).to_vector<double>();
  const std::vector<double> ws = w.to(DType::bf16).to_vector<double>();
  // The worst |got[i][j] - exact| / sum_k |term(i, j, k)| over got [rows, 48], exact the f64 sum.
  auto worst_relative = [](const Tensor& got_tensor, int64_t rows, int64_t depth, auto term) {
    const std::vector<double> got = got_tensor.to_vector<double>();
    double worst = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < 48; ++j) {
        double exact = 0, magnitude = 0;
        for (int64_t k = 0; k < depth; ++k) {
          exact += term(i, j, k);
          magnitude += std::abs(term(i, j, k));
        }
        worst = std::max(worst, std::abs(got[i * 48 + j] - exact) / magnitude);
      }
    return worst;
  };
  EXPECT_LT(worst_relative(w.grad(), 24, 64, [&](int64_t o, int64_t i, int64_t r) { return gs[r * 24 + o] * xs[r * 48 + i]; }),
            1e-5);
  // The same for x's gradient, g_bf16 @ w_bf16, which leaves its GEMM in x's f32.
  ASSERT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_LT(worst_relative(x.grad(), 64, 24, [&](int64_t r, int64_t i, int64_t o) { return gs[r * 24 + o] * ws[o * 48 + i]; }),
            1e-5);
}

// Under AutocastCopies, linear reads the weight's copy instead of casting it, and the gradient
// still reaches the f32 weight. The copy here is deliberately not the weight's cast, to see it used.
TEST(Autocast, LinearReadsAKeptLowPrecisionCopyOfItsWeight) {
  Tensor x = leaf({8, 32}, 10), w = leaf({16, 32}, 11);
  Tensor other = randn({16, 32}, 12);
  Tensor copy = other.to(DType::bf16);
  Tensor with_copy, with_other;
  {
    AutocastGuard guard(DType::bf16);
    AutocastCopies copies({w}, {copy});
    with_copy = linear(x, w, Tensor());
    with_other = linear(x.detach(), other, Tensor());
  }
  EXPECT_EQ(with_copy.to_vector<float>(), with_other.to_vector<float>());
  sum(with_copy).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  {
    AutocastGuard guard(DType::bf16);  // without the copies: the weight itself, cast
    EXPECT_NE(linear(x, w, Tensor()).to_vector<float>(), with_copy.to_vector<float>());
  }
}

TEST(Autocast, ConvAndMatmulAreOnTheLowList) {
  AutocastGuard guard(DType::bf16);
  EXPECT_EQ(conv2d(randn({2, 3, 8, 8}, 4), randn({4, 3, 3, 3}, 5)).dtype(), DType::bf16);
  EXPECT_EQ(matmul(randn({4, 5}, 6), randn({5, 3}, 7)).dtype(), DType::bf16);
}

TEST(Autocast, F32ListOpsWidenSixteenBitInputs) {
  Tensor low = randn({4, 10}, 8, DType::bf16);
  Tensor targets = Tensor::from_vector<int64_t>({1, 2, 3, 4}, {4});
  AutocastGuard guard(DType::bf16);
  EXPECT_EQ(softmax(low, 1).dtype(), DType::f32);
  EXPECT_EQ(log_softmax(low, 1).dtype(), DType::f32);
  EXPECT_EQ(exp(low).dtype(), DType::f32);
  EXPECT_EQ(sum(low).dtype(), DType::f32);
  EXPECT_EQ(mean(low).dtype(), DType::f32);
  EXPECT_EQ(cross_entropy(low, targets).dtype(), DType::f32);
  EXPECT_EQ(relu(low).dtype(), DType::bf16);  // on neither list: runs in its input's type
}

// cross_entropy takes 16-bit logits uncast: the same loss as on their f32 widening, bit for bit,
// and their gradient in bf16, the f32 gradient rounded once.
TEST(Autocast, CrossEntropyWidensSixteenBitLogitsInsideItsKernel) {
  Tensor targets = Tensor::from_vector<int64_t>({1, 2, 3, 4, 0, 9}, {6});
  Tensor low = randn({6, 40}, 9, DType::bf16), wide = low.to(DType::f32);  // 40: 16-wide blocks and a tail
  low.requires_grad_();
  wide.requires_grad_();
  Tensor loss_low, loss_wide = cross_entropy(wide, targets);
  {
    AutocastGuard guard(DType::bf16);
    loss_low = cross_entropy(low, targets);
  }
  ASSERT_EQ(loss_low.dtype(), DType::f32);
  // No recorded cast in between: cross_entropy's node takes the bf16 logits' gradient itself.
  ASSERT_EQ(loss_low.grad_fn()->name(), "cross_entropy");
  EXPECT_EQ(loss_low.grad_fn()->next_edges[0].dtype, DType::bf16);
  EXPECT_EQ(loss_low.item(), loss_wide.item());
  loss_low.backward();
  loss_wide.backward();
  ASSERT_EQ(low.grad().dtype(), DType::bf16);
  EXPECT_EQ(low.grad().to_vector<float>(), wide.grad().to(DType::bf16).to_vector<float>());
}

TEST(Autocast, OffByDefaultAndRestoredAfterTheScope) {
  EXPECT_FALSE(autocast_dtype().has_value());
  {
    AutocastGuard outer(DType::f16);
    EXPECT_EQ(autocast_dtype(), DType::f16);
    {
      AutocastGuard off(std::nullopt);
      EXPECT_FALSE(autocast_dtype().has_value());
      EXPECT_EQ(linear(randn({2, 3}, 9), randn({4, 3}, 10)).dtype(), DType::f32);
    }
    EXPECT_EQ(autocast_dtype(), DType::f16);
  }
  EXPECT_FALSE(autocast_dtype().has_value());
}

TEST(Autocast, F64IsNeverCast) {
  AutocastGuard guard(DType::bf16);
  EXPECT_EQ(linear(randn({2, 3}, 11, DType::f64), randn({4, 3}, 12, DType::f64)).dtype(), DType::f64);
}

TEST(Autocast, RejectsNonSixteenBitTypes) {
  EXPECT_TRUE(contains(message_of<ValueError>([] { AutocastGuard g(DType::i8); }), "bf16 or f16"));
}

TEST(TypePromotion, MixedFloatingOperandsMeetInTheWiderTypeAndGradientsKeepTheirs) {
  Tensor a = leaf({3, 4}, 14);
  Tensor low = randn({3, 4}, 15, DType::bf16);
  low.requires_grad_();
  Tensor y = add(a, low);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_EQ(mul(low, Tensor::ones({3, 4}, DType::f16)).dtype(), DType::f32);  // bf16 and f16: f32
  sum(y).backward();
  EXPECT_EQ(a.grad().dtype(), DType::f32);
  EXPECT_EQ(low.grad().dtype(), DType::bf16);
  EXPECT_EQ(low.grad().to_vector<float>(), std::vector<float>(12, 1.0f));
}

}  // namespace
}  // namespace weft
