#include <gtest/gtest.h>

#include "thread_count.h"

#include <cmath>

#include "weft/core/random.h"
#include "weft/core/threads.h"
#include "weft/kernels/cpu/attention.h"

namespace weft {
namespace {

Tensor randn(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, DType::f32).to(dtype);
}

// Every element within atol + rtol * |expected|; NaN only where expected is NaN.
void expect_close(const Tensor& actual, const Tensor& expected, double rtol, double atol, const char* what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(e[i])) {
      ASSERT_TRUE(std::isnan(a[i])) << what << " element " << i << " should be NaN, is " << a[i];
      continue;
    }
    ASSERT_NEAR(a[i], e[i], atol + rtol * std::abs(e[i])) << what << " element " << i << " of "
                                                          << shape_str(actual.shape());
  }
}

struct Case {
  int64_t B, H, Tq, Tk, D, Dv;
};

// Fused forward and backward against the f64 reference on the very same (already rounded) inputs.
void expect_matches_reference(const Case& c, DType dtype, bool causal, double rtol, double atol, uint64_t seed) {
  Tensor q = randn({c.B, c.H, c.Tq, c.D}, seed, dtype), k = randn({c.B, c.H, c.Tk, c.D}, seed + 1, dtype),
         v = randn({c.B, c.H, c.Tk, c.Dv}, seed + 2, dtype), g = randn({c.B, c.H, c.Tq, c.Dv}, seed + 3, dtype);
  const double scale = 1 / std::sqrt(static_cast<double>(c.D));
  cpu::AttentionForward fused = cpu::attention_forward(q, k, v, causal, scale);
  cpu::AttentionForward ref = cpu::reference::attention_forward(q, k, v, causal, scale);
  EXPECT_EQ(fused.out.dtype(), dtype);
  EXPECT_EQ(fused.lse.dtype(), dtype == DType::f64 ? DType::f64 : DType::f32);
  expect_close(fused.out, ref.out, rtol, atol, "out");
  expect_close(fused.lse, ref.lse, 1e-5, 1e-5, "lse");
  cpu::AttentionGrads grads = cpu::attention_backward(g, q, k, v, fused.out, fused.lse, causal, scale);
  cpu::AttentionGrads ref_grads = cpu::reference::attention_backward(g, q, k, v, causal, scale);
  EXPECT_EQ(grads.dq.dtype(), dtype);
  expect_close(grads.dq, ref_grads.dq, rtol, atol, "dq");
  expect_close(grads.dk, ref_grads.dk, rtol, atol, "dk");
  expect_close(grads.dv, ref_grads.dv, rtol, atol, "dv");
}

// Sizes around the 64-row blocks: one row, under a block, a block and a bit, Tq < Tk, odd D, Dv != D;
// the GPT shapes (one block at D = 64, several at D = 32); widths of 1 to 4 AVX-512 vectors (D 40 ->
// 48, Dv 20 -> 32) with Tq < Tk, so causal row and key groups start inside a block.
const Case kCases[] = {
    {1, 1, 1, 1, 1, 1},          {2, 3, 5, 5, 4, 4},       {2, 2, 67, 67, 64, 64},   {1, 2, 100, 130, 7, 5},
    {1, 1, 128, 128, 64, 64},    {1, 1, 3, 150, 33, 64},   {2, 2, 64, 64, 64, 64},   {1, 2, 200, 200, 32, 32},
    {1, 2, 90, 161, 40, 20},     {1, 1, 70, 70, 80, 72},
};

TEST(AttentionKernel, F32MatchesReference) {
  uint64_t seed = 10;
  for (const Case& c : kCases)
    for (bool causal : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "Tq " << c.Tq << " Tk " << c.Tk << " D " << c.D << " causal " << causal);
      expect_matches_reference(c, DType::f32, causal, 1e-4, 1e-5, seed += 4);
    }
}

TEST(AttentionKernel, F64MatchesReference) {
  for (bool causal : {false, true}) expect_matches_reference({2, 2, 70, 90, 9, 6}, DType::f64, causal, 1e-12, 1e-12, 3);
}

// bf16 / f16 inputs compute in f32 and round once: the error is the output format's rounding.
TEST(AttentionKernel, HalfInputsMatchReference) {
  for (bool causal : {false, true}) {
    expect_matches_reference({2, 2, 67, 67, 64, 64}, DType::bf16, causal, 2e-2, 2e-2, 40);
    expect_matches_reference({1, 2, 100, 130, 7, 5}, DType::bf16, causal, 2e-2, 2e-2, 44);
    expect_matches_reference({1, 2, 70, 70, 16, 16}, DType::f16, causal, 4e-3, 4e-3, 48);
  }
}

TEST(AttentionKernel, ReadsStridedInputsInPlace) {
  // [B, T, H, D] storage seen as [B, H, T, D], as MultiheadAttention hands it over.
  const int64_t B = 2, T = 70, H = 3, D = 8;
  auto heads = [&](uint64_t seed) { return randn({B, T, H, D}, seed, DType::f32).permute({0, 2, 1, 3}); };
  Tensor q = heads(1), k = heads(2), v = heads(3), g = heads(4);
  ASSERT_FALSE(q.is_contiguous());
  for (bool causal : {false, true}) {
    cpu::AttentionForward f = cpu::attention_forward(q, k, v, causal, 0.3);
    expect_close(f.out, cpu::reference::attention_forward(q, k, v, causal, 0.3).out, 1e-4, 1e-5, "out");
    cpu::AttentionGrads grads = cpu::attention_backward(g, q, k, v, f.out, f.lse, causal, 0.3);
    cpu::AttentionGrads ref = cpu::reference::attention_backward(g, q, k, v, causal, 0.3);
    expect_close(grads.dq, ref.dq, 1e-4, 1e-5, "dq");
    expect_close(grads.dk, ref.dk, 1e-4, 1e-5, "dk");
    expect_close(grads.dv, ref.dv, 1e-4, 1e-5, "dv");
  }
}

// Causal with more queries than keys: the first Tq - Tk rows see no key and are NaN, as the
// reference (and PyTorch's math attention) make them; the other rows are unaffected.
TEST(AttentionKernel, RowsThatSeeNoKeyAreNaN) {
  expect_matches_reference({1, 2, 10, 4, 3, 3}, DType::f32, true, 1e-4, 1e-5, 60);
  Tensor q = randn({1, 1, 3, 2}, 1, DType::f32), k = randn({1, 1, 2, 2}, 2, DType::f32);
  std::vector<float> out = cpu::attention_forward(q, k, k, true, 1).out.to_vector<float>();
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1]));
  EXPECT_FALSE(std::isnan(out[2]) || std::isnan(out[5]));
}

using testing::ThreadCount;

TEST(AttentionKernel, SameBitsOnAnyThreadCount) {
  Tensor q = randn({2, 3, 150, 32}, 1, DType::f32), k = randn({2, 3, 150, 32}, 2, DType::f32),
         v = randn({2, 3, 150, 32}, 3, DType::f32), g = randn({2, 3, 150, 32}, 4, DType::f32);
  auto run = [&](int threads) {
    ThreadCount guard(threads);
    cpu::AttentionForward f = cpu::attention_forward(q, k, v, true, 0.2);
    cpu::AttentionGrads grads = cpu::attention_backward(g, q, k, v, f.out, f.lse, true, 0.2);
    std::vector<float> all = f.out.to_vector<float>();
    for (const Tensor& t : {grads.dq, grads.dk, grads.dv}) {
      std::vector<float> part = t.to_vector<float>();
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  };
  EXPECT_EQ(run(1), run(3));
}

// A decode step against the f64 reference, one sequence and head at a time over the positions its
// slot held plus the new one: head sizes of one vector, a vector and a masked part, and four and a
// bit; sequences at no, a few and nearly a whole cache's positions, in slots out of order.
TEST(AttentionKernel, DecodeStepMatchesReferencePerSequence) {
  for (const int64_t D : {16, 20, 70}) {
    const int64_t B = 3, H = 2, S = 4, capacity = 16;
    const std::vector<int64_t> slots = {1, 3, 0}, lengths = {0, 5, 15};
    Tensor q = randn({B, H, 1, D}, 1, DType::f32), k_new = randn({B, H, 1, D}, 2, DType::f32),
           v_new = randn({B, H, 1, D}, 3, DType::f32);
    Tensor k_cache = randn({S, H, capacity, D}, 4, DType::f32), v_cache = randn({S, H, capacity, D}, 5, DType::f32);
    const double scale = 1 / std::sqrt(static_cast<double>(D));
    const Tensor out = cpu::decode_attention(q, k_new, v_new, k_cache, v_cache, slots, lengths, scale);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = lengths[static_cast<size_t>(b)] + 1;
      const Tensor keys = k_cache.select(0, slots[static_cast<size_t>(b)]).narrow(1, 0, n).unsqueeze(0);
      const Tensor values = v_cache.select(0, slots[static_cast<size_t>(b)]).narrow(1, 0, n).unsqueeze(0);
      expect_close(keys.narrow(2, n - 1, 1), k_new.narrow(0, b, 1), 0, 0, "the new key in its slot");
      expect_close(values.narrow(2, n - 1, 1), v_new.narrow(0, b, 1), 0, 0, "the new value in its slot");
      const Tensor expected = cpu::reference::attention_forward(q.narrow(0, b, 1), keys, values, false, scale).out;
      expect_close(out.narrow(0, b, 1), expected, 1e-5, 1e-6, "decode step");
    }
  }
}

TEST(AttentionKernel, RejectsBadInputs) {
  Tensor q = randn({1, 2, 3, 4}, 1, DType::f32);
  EXPECT_THROW(cpu::attention_forward(q, randn({1, 3, 3, 4}, 2, DType::f32), q, false, 1), ShapeError);
  EXPECT_THROW(cpu::attention_forward(q, randn({1, 2, 3, 5}, 2, DType::f32), q, false, 1), ShapeError);
  EXPECT_THROW(cpu::attention_forward(q, q.to(DType::bf16), q, false, 1), DTypeError);
  Tensor i = Tensor::zeros({1, 2, 3, 4}, DType::i32);
  EXPECT_THROW(cpu::attention_forward(i, i, i, false, 1), DTypeError);
  cpu::AttentionForward f = cpu::attention_forward(q, q, q, false, 1);
  EXPECT_THROW(cpu::attention_backward(f.out.to(DType::f64), q, q, q, f.out, f.lse, false, 1), DTypeError);
  EXPECT_THROW(cpu::attention_backward(q.narrow(2, 0, 2), q, q, q, f.out, f.lse, false, 1), ShapeError);
}

}  // namespace
}  // namespace weft
