#include <gmock/gmock.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "gradcheck.h"
#include "weft/kernels/cpu/layout.h"
#include "weft/kernels/cpu/pool.h"
#include "weft/ops/pool.h"

namespace weft {
namespace {

using cpu::Pool2dParams;
using testing::expect_gradcheck;
using testing::randn64;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

Tensor cast(const Tensor& t, DType dtype) { return Tensor::empty(t.shape(), dtype).copy_(t); }

// Distinct small integers (exact in every float dtype), so no window has a tied maximum and the
// oneDNN and reference argmaxes must agree.
Tensor distinct(const Shape& shape, uint64_t seed, DType dtype) {
  std::vector<double> values(numel(shape));
  std::iota(values.begin(), values.end(), -static_cast<double>(values.size() / 2));
  std::shuffle(values.begin(), values.end(), std::mt19937_64(seed));
  return Tensor::from_vector(values, shape, dtype);
}

void expect_close(const Tensor& actual, const Tensor& expected, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  std::vector<double> a = actual.to_vector<double>(), e = expected.to_vector<double>();
  int failures = 0;
  for (size_t i = 0; i < a.size() && failures < 5; ++i)
    if (!(std::abs(a[i] - e[i]) <= atol + rtol * std::abs(e[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i];
      ++failures;
    }
}

// Non-overlapping, overlapping + padded, asymmetric.
std::vector<Pool2dParams> cases() {
  return {{{2, 2}, {2, 2}, {0, 0}}, {{3, 3}, {2, 2}, {1, 1}}, {{3, 3}, {1, 1}, {1, 1}}, {{2, 3}, {1, 2}, {1, 0}}};
}

std::string describe(const Pool2dParams& p) {
  return str("kernel ", p.kernel[0], ",", p.kernel[1], " stride ", p.stride[0], ",", p.stride[1], " pad ",
             p.padding[0], ",", p.padding[1]);
}

// A channels-last input is pooled in that layout: its output and gradients are channels-last too
// (a plain NCHW grad_out is reordered first), with the same values.
Tensor in_layout(const Tensor& t, bool channels_last) {
  return channels_last ? cpu::empty_channels_last(t.shape(), t.dtype()).copy_(t) : t;
}

void expect_layout(const Tensor& t, bool channels_last, const std::string& what) {
  EXPECT_EQ(cpu::is_channels_last(t), channels_last) << what << " strides " << shape_str(t.strides());
  if (!channels_last) {
    EXPECT_TRUE(t.is_contiguous()) << what;
  }
}

void expect_pools_match_reference(DType dtype, double atol, double rtol) {
  uint64_t seed = 1;
  Shape shape{2, 3, 7, 8};  // 336 distinct integers in [-168, 168): exact even in bf16 (up to 256)
  for (bool channels_last : {false, true})
    for (const Pool2dParams& p : cases()) {
      SCOPED_TRACE(describe(p) + (channels_last ? " channels-last" : " nchw"));
      Tensor x = in_layout(distinct(shape, seed++, dtype), channels_last), x64 = cast(x, DType::f64);
      cpu::MaxPool2dResult max = cpu::max_pool2d(x, p, true);
      cpu::MaxPool2dResult max_ref = cpu::reference::max_pool2d(x64, p);
      expect_close(max.out, max_ref.out, 0, 0, "max forward");
      expect_layout(max.out, channels_last, "max forward");
      for (bool grad_channels_last : {false, true}) {
        Tensor go = in_layout(cast(randn(max.out.shape(), seed++), dtype), grad_channels_last);
        Tensor go64 = cast(go, DType::f64);
        Tensor grad = cpu::max_pool2d_backward(go, max.workspace, shape, p, channels_last);
        expect_close(grad, cpu::reference::max_pool2d_backward(go64, max_ref.workspace, shape, p), atol, rtol,
                     "max backward");
        expect_layout(grad, channels_last, "max backward");

        Tensor avg = cpu::avg_pool2d(x, p);
        expect_close(avg, cpu::reference::avg_pool2d(x64, p), atol, rtol, "avg forward");
        expect_layout(avg, channels_last, "avg forward");
        grad = cpu::avg_pool2d_backward(go, shape, p, channels_last);
        expect_close(grad, cpu::reference::avg_pool2d_backward(go64, shape, p), atol, rtol, "avg backward");
        expect_layout(grad, channels_last, "avg backward");
      }
    }
}

TEST(Pool2d, OneDnnF32MatchesReference) { expect_pools_match_reference(DType::f32, 1e-5, 1e-5); }
TEST(Pool2d, OneDnnBf16MatchesReference) { expect_pools_match_reference(DType::bf16, 1e-2, 8e-3); }
TEST(Pool2d, F16ComputesInF32) { expect_pools_match_reference(DType::f16, 1e-2, 1e-3); }

TEST(Pool2d, StrideDefaultsToKernel) {
  Tensor x = randn({1, 2, 6, 6}, 2);
  Tensor out = max_pool2d(x, {{3, 3}, {0, 0}, {0, 0}});
  EXPECT_EQ(out.shape(), (Shape{1, 2, 2, 2}));
  expect_close(out, cpu::reference::max_pool2d(x, {{3, 3}, {3, 3}, {0, 0}}).out, 0, 0, "default stride");
}

TEST(Pool2d, AdaptiveAvgBins) {
  // 5 -> 3 bins: [0, 2), [1, 4), [3, 5), overlapping as in PyTorch.
  Tensor x = Tensor::from_vector(std::vector<float>{0, 1, 2, 3, 4}, {1, 1, 1, 5});
  expect_close(adaptive_avg_pool2d(x, {1, 3}), Tensor::from_vector(std::vector<float>{0.5f, 2, 3.5f}, {1, 1, 1, 3}),
               1e-6, 0, "5 -> 3");
  // Dividing sizes make it an ordinary average pool; size 1 is the global average.
  Tensor y = randn({2, 3, 8, 6}, 3);
  expect_close(adaptive_avg_pool2d(y, {4, 2}), cpu::reference::avg_pool2d(y, {{2, 3}, {2, 3}, {0, 0}}), 1e-5, 1e-5,
               "8x6 -> 4x2");
  expect_close(adaptive_avg_pool2d(cast(y, DType::bf16), {1, 1}), cpu::reference::avg_pool2d(y, {{8, 6}, {8, 6}, {0, 0}}),
               1e-2, 8e-3, "global bf16");
}

TEST(PoolGrad, MaxPool) {
  Tensor x = randn64({2, 2, 6, 7}, 4);
  expect_gradcheck([](auto& t) { return max_pool2d(t[0], {{2, 2}, {0, 0}, {0, 0}}); }, {x});
  expect_gradcheck([](auto& t) { return max_pool2d(t[0], {{3, 3}, {2, 2}, {1, 1}}); }, {x});
  expect_gradcheck([](auto& t) { return max_pool2d(t[0], {{2, 3}, {1, 2}, {1, 0}}); }, {x});
}

TEST(PoolGrad, AvgPool) {
  Tensor x = randn64({2, 2, 6, 7}, 5);
  expect_gradcheck([](auto& t) { return avg_pool2d(t[0], {{2, 2}, {0, 0}, {0, 0}}); }, {x});
  expect_gradcheck([](auto& t) { return avg_pool2d(t[0], {{3, 3}, {2, 2}, {1, 1}}); }, {x});
  expect_gradcheck([](auto& t) { return avg_pool2d(t[0], {{2, 3}, {1, 2}, {1, 0}}); }, {x});
}

TEST(PoolGrad, AdaptiveAvgPool) {
  Tensor x = randn64({2, 3, 7, 5}, 6);
  expect_gradcheck([](auto& t) { return adaptive_avg_pool2d(t[0], {3, 2}); }, {x});
  expect_gradcheck([](auto& t) { return adaptive_avg_pool2d(t[0], {1, 1}); }, {x});
  expect_gradcheck([](auto& t) { return adaptive_avg_pool2d(t[0], {9, 5}); }, {x});  // more bins than rows
}

// The f32 oneDNN backward, reached through autograd, against the f64 reference backward.
TEST(PoolGrad, F32BackwardMatchesF64Reference) {
  Pool2dParams p{{3, 3}, {2, 2}, {1, 1}};
  Tensor x = randn({2, 3, 9, 8}, 7).requires_grad_();
  Tensor x64 = cast(x.detach(), DType::f64);
  Tensor out = max_pool2d(x, {p.kernel, p.stride, p.padding});
  Tensor go = randn(out.shape(), 8), go64 = cast(go, DType::f64);
  out.backward(go);
  Tensor argmax = cpu::reference::max_pool2d(x64, p).workspace;
  expect_close(x.grad(), cpu::reference::max_pool2d_backward(go64, argmax, x.shape(), p), 1e-6, 1e-6, "max");

  Tensor y = randn({2, 3, 9, 8}, 9).requires_grad_();
  avg_pool2d(y, {p.kernel, p.stride, p.padding}).backward(go);
  expect_close(y.grad(), cpu::reference::avg_pool2d_backward(go64, y.shape(), p), 1e-6, 1e-6, "avg");
}

// Through autograd, the backward of a channels-last pooling (the op remembers the layout its
// workspace was made for) takes a grad_out in plain NCHW.
TEST(PoolGrad, ChannelsLastThroughAutograd) {
  Pool2dParams p{{2, 2}, {2, 2}, {0, 0}};
  Tensor x = in_layout(randn({2, 16, 6, 8}, 10), true).requires_grad_();
  Tensor out = max_pool2d(x, {p.kernel, p.stride, p.padding});
  expect_layout(out, true, "forward");
  Tensor go = randn(out.shape(), 11);  // NCHW
  out.backward(go);
  Tensor x64 = cast(x.detach(), DType::f64);
  Tensor argmax = cpu::reference::max_pool2d(x64, p).workspace;
  expect_close(x.grad(), cpu::reference::max_pool2d_backward(cast(go, DType::f64), argmax, x.shape(), p), 1e-6, 1e-6,
               "max");
}

template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const std::string& part : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(part));
  }
}

TEST(Pool2dErrors, BadInputsNameTheOpAndShapes) {
  Tensor x = randn({2, 3, 5, 5}, 10);
  expect_error<ShapeError>([&] { max_pool2d(randn({3, 5, 5}, 11), {}); }, {"max_pool2d", "rank 4", "[3, 5, 5]"});
  expect_error<ShapeError>([&] { avg_pool2d(x, {{7, 7}, {1, 1}, {0, 0}}); },
                           {"avg_pool2d", "[7, 7]", "[2, 3, 5, 5]", "padded input"});
  expect_error<ValueError>([&] { max_pool2d(x, {{2, 2}, {-1, 1}, {0, 0}}); }, {"max_pool2d", "stride", "[-1, 1]"});
  expect_error<ValueError>([&] { max_pool2d(x, {{0, 2}, {1, 1}, {0, 0}}); }, {"max_pool2d", "kernel", "[0, 2]"});
  expect_error<ValueError>([&] { avg_pool2d(x, {{2, 2}, {1, 1}, {2, 0}}); }, {"avg_pool2d", "padding", "[2, 0]"});
  expect_error<DTypeError>([&] { max_pool2d(cast(x, DType::i64), {}); }, {"max_pool2d", "i64"});
  expect_error<ShapeError>([&] { adaptive_avg_pool2d(randn({5, 5}, 12), {2, 2}); },
                           {"adaptive_avg_pool2d", "[5, 5]"});
  expect_error<ValueError>([&] { adaptive_avg_pool2d(x, {0, 2}); }, {"adaptive_avg_pool2d", "[0, 2]"});
  expect_error<ValueError>([&] { cpu::max_pool2d_backward(randn({2, 3, 2, 2}, 13), Tensor(), x.shape(), {}); },
                           {"max_pool2d_backward", "workspace"});
}

}  // namespace
}  // namespace weft
