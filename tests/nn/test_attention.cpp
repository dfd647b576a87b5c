#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "weft/nn/transformer.h"
#include "weft/ops/attention.h"

namespace weft {
namespace {

using testing::expect_gradcheck;
using testing::randn64;

// softmax(q k^T * scale + causal mask) v with plain loops in f64; q [B, H, Tq, D], k / v [B, H, Tk, D].
std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), Tk = k.size(2), D = q.size(3), Dv = v.size(3);
  if (scale == 0) scale = 1 / std::sqrt(static_cast<double>(D));
  std::vector<double> out;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const int64_t visible = causal ? i + Tk - Tq + 1 : Tk;  // keys 0..visible-1
        std::vector<double> w(visible);
        double top = -INFINITY, total = 0;
        for (int64_t j = 0; j < visible; ++j) {
          for (int64_t d = 0; d < D; ++d) w[j] += q.at({b, h, i, d}) * k.at({b, h, j, d}) * scale;
          top = std::max(top, w[j]);
        }
        for (double& x : w) total += x = std::exp(x - top);
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < visible; ++j) acc += w[j] / total * v.at({b, h, j, e});
          out.push_back(acc);
        }
      }
  return out;
}

void expect_near(const std::vector<double>& actual, const std::vector<double>& expected, double tol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

TEST(Attention, MatchesPlainLoopReference) {
  Tensor q = randn64({2, 3, 4, 5}, 1), k = randn64({2, 3, 4, 5}, 2), v = randn64({2, 3, 4, 6}, 3);
  for (bool causal : {false, true}) {
    expect_near(scaled_dot_product_attention(q, k, v, causal).to_vector<double>(),
                reference_attention(q, k, v, causal, 0), 1e-12);
    expect_near(scaled_dot_product_attention(q, k, v, causal, 0.3).to_vector<double>(),
                reference_attention(q, k, v, causal, 0.3), 1e-12);
  }
  // Fewer queries than keys (decoding with a cache): query i sees keys up to i + Tk - Tq.
  Tensor q2 = randn64({1, 2, 2, 5}, 4), k5 = randn64({1, 2, 5, 5}, 5), v5 = randn64({1, 2, 5, 3}, 6);
  expect_near(scaled_dot_product_attention(q2, k5, v5, true).to_vector<double>(),
              reference_attention(q2, k5, v5, true, 0), 1e-12);
  // f32 through oneDNN agrees to f32 precision.
  expect_near(scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32), true)
                  .to_vector<double>(),
              reference_attention(q, k, v, true, 0), 1e-5);
}

TEST(Attention, Gradcheck) {
  Tensor q = randn64({2, 2, 3, 4}, 7), k = randn64({2, 2, 4, 4}, 8), v = randn64({2, 2, 4, 3}, 9);
  for (bool causal : {false, true})
    expect_gradcheck([causal](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal); }, {q, k, v});
}

TEST(Attention, RejectsMismatchedShapes) {
  Tensor q = randn64({1, 1, 3, 4}), k = randn64({1, 1, 3, 5}), v = randn64({1, 1, 2, 4});
  EXPECT_THROW(scaled_dot_product_attention(q, k, q, false), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, q, v, false), ShapeError);
}

TEST(Attention, MultiheadAttentionMatchesPerHeadReference) {
  manual_seed(12);
  nn::MultiheadAttention attn(6, 2);
  attn.to(DType::f64);
  const int64_t B = 2, T = 4, C = 6, H = 2, D = 3;
  Tensor x = randn64({B, T, C}, 13);
  // Project with the fused weights, then attend head by head over the [B, H, T, D] slices.
  auto project = [](const Tensor& in, const nn::Linear& layer, int64_t row0, int64_t rows) {
    std::vector<double> out;
    for (int64_t b = 0; b < in.size(0); ++b)
      for (int64_t t = 0; t < in.size(1); ++t)
        for (int64_t r = row0; r < row0 + rows; ++r) {
          double acc = layer.bias.at({r});
          for (int64_t c = 0; c < in.size(2); ++c) acc += layer.weight.at({r, c}) * in.at({b, t, c});
          out.push_back(acc);
        }
    return Tensor::from_vector(out, {in.size(0), in.size(1), rows}, DType::f64);
  };
  auto heads = [&](const Tensor& t) { return t.view({B, T, H, D}).permute({0, 2, 1, 3}).contiguous(); };
  Tensor q = heads(project(x, *attn.c_attn, 0, C)), k = heads(project(x, *attn.c_attn, C, C)),
         v = heads(project(x, *attn.c_attn, 2 * C, C));
  Tensor y = Tensor::from_vector(reference_attention(q, k, v, true, 0), {B, H, T, D}, DType::f64);
  Tensor merged = y.permute({0, 2, 1, 3}).contiguous().view({B, T, C});
  expect_near(attn(x).to_vector<double>(), project(merged, *attn.c_proj, 0, C).to_vector<double>(), 1e-12);
}

TEST(Attention, MultiheadAttentionIsCausal) {
  manual_seed(14);
  nn::MultiheadAttention attn(8, 2);
  const int64_t T = 5, changed = 3;
  Tensor x = Tensor::randn({2, T, 8});
  Tensor y = attn(x);
  Tensor x2 = x.clone();
  x2.select(1, changed).copy_(Tensor::randn({2, 8}));
  Tensor y2 = attn(x2);
  for (int64_t t = 0; t < T; ++t) {
    bool same = y.select(1, t).to_vector<double>() == y2.select(1, t).to_vector<double>();
    EXPECT_EQ(same, t < changed) << "position " << t;
  }
}

}  // namespace
}  // namespace weft
