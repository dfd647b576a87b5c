#include <gtest/gtest.h>

#include <cmath>

#include "gradcheck.h"
#include "weft/autograd/autocast_mode.h"
#include "weft/core/allocator.h"
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

// Odd D, Dv != D, Tq < Tk, and 70 rows: across the kernel's 64-row blocks.
TEST(Attention, GradcheckAcrossBlocksAndShapes) {
  Tensor q = randn64({1, 1, 70, 3}, 10), k = randn64({1, 1, 70, 3}, 11), v = randn64({1, 1, 70, 2}, 12);
  expect_gradcheck([](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], true); }, {q, k, v});
  Tensor q2 = randn64({2, 1, 3, 5}, 13), k2 = randn64({2, 1, 6, 5}, 14), v2 = randn64({2, 1, 6, 4}, 15);
  for (bool causal : {false, true})
    expect_gradcheck([causal](auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], causal, 0.7); },
                     {q2, k2, v2});
}

// The fused op and the composed one agree through autograd in f32, outputs and gradients.
TEST(Attention, FusedMatchesComposedThroughAutograd) {
  Generator gen(20);
  for (auto [Tq, Tk] : {std::pair<int64_t, int64_t>{67, 67}, {30, 100}})
    for (bool causal : {false, true}) {
      Tensor w = Tensor::randn({2, 3, Tq, 16}, gen);
      std::vector<std::vector<double>> results[2];
      for (int fused = 0; fused < 2; ++fused) {
        Generator same(21);
        Tensor q = Tensor::randn({2, 3, Tq, 16}, same).requires_grad_(), k = Tensor::randn({2, 3, Tk, 16}, same).requires_grad_(),
               v = Tensor::randn({2, 3, Tk, 16}, same).requires_grad_();
        Tensor out = fused ? scaled_dot_product_attention(q, k, v, causal)
                           : scaled_dot_product_attention_composed(q, k, v, causal);
        out.backward(w);
        results[fused] = {out.to_vector<double>(), q.grad().to_vector<double>(), k.grad().to_vector<double>(),
                          v.grad().to_vector<double>()};
      }
      for (int i = 0; i < 4; ++i) expect_near(results[1][i], results[0][i], 1e-4);
    }
}

// Between forward and backward the op keeps its output and one f32 per query row beyond its
// inputs: at T = 256, D = 16 that is 1/15 of the [T, T] probabilities per head the composed op
// keeps.
TEST(Attention, KeepsLinearMemoryForBackward) {
  const int64_t B = 2, H = 2, T = 256, D = 16;
  Generator gen(30);
  Tensor q = Tensor::randn({B, H, T, D}, gen).requires_grad_(), k = Tensor::randn({B, H, T, D}, gen).requires_grad_(),
         v = Tensor::randn({B, H, T, D}, gen).requires_grad_();
  CachingAllocator& allocator = CachingAllocator::cpu();
  const int64_t before = allocator.stats().allocated_bytes;
  allocator.reset_peak_stats();
  Tensor out = scaled_dot_product_attention(q, k, v, true);
  const int64_t kept = allocator.stats().allocated_bytes - before;
  const int64_t peak = allocator.stats().peak_allocated_bytes - before;
  const int64_t out_bytes = B * H * T * D * 4, lse_bytes = B * H * T * 4;
  EXPECT_GE(kept, out_bytes + lse_bytes);
  EXPECT_LE(kept, out_bytes + lse_bytes + 1024);  // the allocator rounds each block to 512 bytes
  EXPECT_LE(peak, kept);  // no transient [T, T] buffer either
  out.backward(Tensor::ones(out.shape()));
  EXPECT_EQ(q.grad().shape(), q.shape());
}

// Under bf16 autocast, f32 q / k / v are cast on entry and the output is bf16; the gradients
// reach the f32 leaves in f32.
TEST(Attention, AutocastRunsInTheLowTypeAndReturnsIt) {
  Generator gen(40);
  Tensor q = Tensor::randn({1, 2, 70, 8}, gen).requires_grad_(), k = Tensor::randn({1, 2, 70, 8}, gen).requires_grad_(),
         v = Tensor::randn({1, 2, 70, 8}, gen).requires_grad_();
  Tensor out;
  {
    AutocastGuard guard(DType::bf16);
    out = scaled_dot_product_attention(q, k, v, true);
  }
  EXPECT_EQ(out.dtype(), DType::bf16);
  expect_near(out.to_vector<double>(), reference_attention(q.to(DType::bf16), k.to(DType::bf16), v.to(DType::bf16), true, 0),
              2e-2);
  out.backward(Tensor::ones(out.shape(), DType::bf16));
  EXPECT_EQ(q.grad().dtype(), DType::f32);
  EXPECT_EQ(v.grad().dtype(), DType::f32);
}

TEST(Attention, RejectsMismatchedShapes) {
  Tensor q = randn64({1, 1, 3, 4}), k = randn64({1, 1, 3, 5}), v = randn64({1, 1, 2, 4});
  EXPECT_THROW(scaled_dot_product_attention(q, k, q, false), ShapeError);
  EXPECT_THROW(scaled_dot_product_attention(q, q, v, false), ShapeError);
  // The fused op needs one set of leading dims (the composed one broadcasts them, as matmul does).
  EXPECT_THROW(scaled_dot_product_attention(q, randn64({2, 1, 3, 4}), randn64({2, 1, 3, 4}), false), ShapeError);
}

TEST(Attention, MultiheadAttentionMatchesPerHeadReference) {
  manual_seed(12);
  nn::MultiheadAttention attn(6, 2);
  attn.to(DType::f64);
  const int64_t B = 2, T = 4, C = 6, H = 2, D = 3;
  Tensor x = randn64({B, T, C}, 13);
  // Project with the fused weights, then attend head by head over the [B, H, T, D] slices.
  auto project = [](const Tensor& in, nn::Module& layer, int64_t row0, int64_t rows) {
    const Tensor weight = layer.get_parameter("weight"), bias = layer.get_parameter("bias");
    std::vector<double> out;
    for (int64_t b = 0; b < in.size(0); ++b)
      for (int64_t t = 0; t < in.size(1); ++t)
        for (int64_t r = row0; r < row0 + rows; ++r) {
          double acc = bias.at({r});
          for (int64_t c = 0; c < in.size(2); ++c) acc += weight.at({r, c}) * in.at({b, t, c});
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
