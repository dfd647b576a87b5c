#include <gmock/gmock.h>

#include "gradcheck.h"
#include "weft/autograd/node.h"
#include "weft/kernels/cpu/conv.h"
#include "weft/kernels/cpu/layout.h"
#include "weft/ops/activation.h"
#include "weft/ops/pool.h"
#include "weft/ops/conv.h"

namespace weft {
namespace {

using cpu::Conv2dParams;
using testing::expect_gradcheck;
using testing::randn64;

Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f32) {
  Generator gen(seed);
  return Tensor::randn(shape, gen, dtype);
}

Tensor cast(const Tensor& t, DType dtype) { return t.defined() ? Tensor::empty(t.shape(), dtype).copy_(t) : t; }

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

struct Case {
  Shape x, w;
  Conv2dParams p;
  bool bias;
};

// Default, strided + padded, asymmetric, dilated, grouped, depthwise, 1x1, and the CNN's first layer.
std::vector<Case> cases() {
  return {
      {{2, 3, 7, 7}, {4, 3, 3, 3}, {}, true},
      {{2, 3, 8, 8}, {4, 3, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 1}, false},
      {{1, 4, 9, 6}, {6, 4, 2, 3}, {{2, 1}, {0, 1}, {1, 1}, 1}, true},
      {{2, 2, 9, 9}, {3, 2, 3, 3}, {{1, 1}, {2, 2}, {2, 2}, 1}, true},
      {{2, 4, 6, 6}, {6, 2, 3, 3}, {{1, 1}, {1, 1}, {1, 1}, 2}, true},
      {{1, 4, 5, 5}, {4, 1, 3, 3}, {{2, 2}, {1, 1}, {1, 1}, 4}, false},
      {{2, 5, 4, 4}, {3, 5, 1, 1}, {}, true},
      {{2, 1, 28, 28}, {8, 1, 3, 3}, {}, true},
  };
}

std::string describe(const Case& c) {
  return str("x ", shape_str(c.x), " w ", shape_str(c.w), " stride ", c.p.stride[0], ",", c.p.stride[1], " pad ",
             c.p.padding[0], ",", c.p.padding[1], " dilation ", c.p.dilation[0], ",", c.p.dilation[1], " groups ",
             c.p.groups, c.bias ? " bias" : "");
}

Tensor channels_last(const Tensor& t) { return cpu::empty_channels_last(t.shape(), t.dtype()).copy_(t); }

// Forward, grad input and grad weight (+ bias) of the oneDNN path against the f64 reference loops
// run on the same (dtype-rounded) values, with x and grad_out plain NCHW and then channels-last.
// Whatever the inputs' layout, the activations it returns (out, grad input) are channels-last.
void expect_onednn_matches_reference(DType dtype, double atol, double rtol) {
  uint64_t seed = 10;
  for (bool cl : {false, true})
    for (const Case& c : cases()) {
      SCOPED_TRACE(describe(c) + (cl ? " channels-last" : " nchw"));
      Tensor x = cast(randn(c.x, seed++), dtype), w = cast(randn(c.w, seed++), dtype);
      if (cl) x = channels_last(x);
      Tensor b = c.bias ? cast(randn({c.w[0]}, seed++), dtype) : Tensor();
      Tensor out = cpu::conv2d(x, w, b, c.p);
      EXPECT_EQ(out.dtype(), dtype);
      EXPECT_TRUE(cpu::is_channels_last(out)) << shape_str(out.strides());
      Tensor x64 = cast(x, DType::f64), w64 = cast(w, DType::f64), b64 = cast(b, DType::f64);
      expect_close(out, cpu::reference::conv2d(x64, w64, b64, c.p), atol, rtol, "forward");
      Tensor fused = cpu::conv2d(x, w, b, c.p, true);
      EXPECT_TRUE(cpu::is_channels_last(fused));
      expect_close(fused, cpu::reference::conv2d(x64, w64, b64, c.p, true), atol, rtol, "forward with relu");

      Tensor go = cast(randn(out.shape(), seed++), dtype), go64 = cast(go, DType::f64);
      if (cl) go = channels_last(go);
      Tensor grad_x = cpu::conv2d_backward_input(go, w, c.x, c.p);
      EXPECT_TRUE(cpu::is_channels_last(grad_x)) << shape_str(grad_x.strides());
      expect_close(grad_x, cpu::reference::conv2d_backward_input(go64, w64, c.x, c.p), atol, rtol, "grad input");
      cpu::Conv2dWeightGrads grads = cpu::conv2d_backward_weight(go, x, c.w, c.bias, c.p);
      cpu::Conv2dWeightGrads expected = cpu::reference::conv2d_backward_weight(go64, x64, c.w, c.bias, c.p);
      EXPECT_TRUE(grads.weight.is_contiguous());
      expect_close(grads.weight, expected.weight, atol, rtol, "grad weight");
      EXPECT_EQ(grads.bias.defined(), c.bias);
      if (c.bias) expect_close(grads.bias, expected.bias, atol, rtol, "grad bias");
    }
}

TEST(Conv2d, OneDnnF32MatchesReference) { expect_onednn_matches_reference(DType::f32, 1e-4, 1e-4); }

// bf16 products are exact in f32 and oneDNN accumulates in f32, so the error is the final rounding
// to bf16 (2^-9 relative) plus f32 accumulation over up to a few thousand terms (grad weight).
TEST(Conv2d, OneDnnBf16MatchesReference) { expect_onednn_matches_reference(DType::bf16, 2e-2, 8e-3); }

TEST(Conv2d, F16ComputesInF32) {
  Tensor x = cast(randn({2, 3, 6, 6}, 1), DType::f16), w = cast(randn({4, 3, 3, 3}, 2), DType::f16);
  Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  Tensor out = cpu::conv2d(x, w, Tensor(), p);
  EXPECT_EQ(out.dtype(), DType::f16);
  EXPECT_TRUE(cpu::is_channels_last(out));
  expect_close(out, cpu::reference::conv2d(cast(x, DType::f64), cast(w, DType::f64), Tensor(), p), 1e-2, 2e-3,
               "f16 forward");
}

TEST(Conv2d, NonContiguousInputsAreMadeContiguous) {
  Tensor x = randn({2, 6, 6, 3}, 3).permute({0, 3, 1, 2});  // NHWC memory seen as NCHW
  Tensor w = randn({3, 4, 3, 3}, 4).transpose(0, 1);        // [4, 3, 3, 3], not contiguous
  Tensor b = randn({8}, 5).slice(0, 0, 8, 2);               // [4], stride 2
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(w.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  expect_close(conv2d(x, w, b, {{1, 1}, {1, 1}, {1, 1}, 1}),
               cpu::reference::conv2d(cast(x, DType::f64), cast(w, DType::f64), cast(b, DType::f64), p), 1e-4,
               1e-4, "strided inputs");
}

TEST(Conv2dGrad, InputWeightBias) {
  Tensor x = randn64({2, 3, 5, 5}, 1), w = randn64({4, 3, 3, 3}, 2), b = randn64({4}, 3);
  expect_gradcheck([](auto& t) { return conv2d(t[0], t[1], t[2]); }, {x, w, b});
}

TEST(Conv2dGrad, StridePaddingDilation) {
  Tensor x = randn64({2, 2, 7, 6}, 4), w = randn64({3, 2, 3, 2}, 5), b = randn64({3}, 6);
  expect_gradcheck([](auto& t) { return conv2d(t[0], t[1], t[2], {{2, 1}, {1, 2}, {1, 1}, 1}); }, {x, w, b});
  expect_gradcheck([](auto& t) { return conv2d(t[0], t[1], t[2], {{1, 1}, {2, 1}, {2, 2}, 1}); }, {x, w, b});
}

TEST(Conv2dGrad, ConvRelu) {
  Tensor x = randn64({2, 3, 5, 5}, 40), w = randn64({4, 3, 3, 3}, 41), b = randn64({4}, 42);
  expect_gradcheck([](auto& t) { return conv2d_relu(t[0], t[1], t[2]); }, {x, w, b});
  expect_gradcheck([](auto& t) { return conv2d_relu(t[0], t[1], {}, {{2, 1}, {1, 1}, {1, 1}, 1}); }, {x, w});
}

// The fused op in f32 (oneDNN's post-op) against relu(conv2d(...)), values and gradients.
TEST(Conv2dGrad, ConvReluEqualsReluOfConv) {
  std::vector<Tensor> a{randn({4, 8, 9, 9}, 43), randn({16, 8, 3, 3}, 44), randn({16}, 45)}, b;
  for (Tensor& t : a) {
    b.push_back(t.clone().requires_grad_());
    t.requires_grad_();
  }
  Tensor fused = conv2d_relu(a[0], a[1], a[2]), apart = relu(conv2d(b[0], b[1], b[2]));
  EXPECT_EQ(fused.grad_fn()->name(), "conv2d_relu");
  expect_close(fused, apart, 1e-5, 1e-5, "forward");
  Tensor go = randn(fused.shape(), 46);
  fused.backward(go);
  apart.backward(go);
  for (size_t i = 0; i < a.size(); ++i) expect_close(a[i].grad(), b[i].grad(), 1e-4, 1e-4, str("grad ", i));
}

TEST(Conv2dGrad, ConvReluMaxPool) {
  Tensor x = randn64({2, 3, 6, 6}, 47), w = randn64({4, 3, 3, 3}, 48), b = randn64({4}, 49);
  expect_gradcheck([](auto& t) { return conv2d_relu_max_pool2d(t[0], t[1], t[2], {}, {}); }, {x, w, b});
  expect_gradcheck(
      [](auto& t) { return conv2d_relu_max_pool2d(t[0], t[1], {}, {{1, 1}, {1, 1}, {1, 1}, 1}, {{3, 3}, {2, 2}, {1, 1}}); },
      {x, w});
}

// The fused block in f32 and bf16 (oneDNN, channels-last) against max_pool2d(relu(conv2d(...))):
// the same values and the same gradients, its ReLU mask applied to the pooled gradient instead.
TEST(Conv2dGrad, ConvReluMaxPoolEqualsTheThreeOps) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<Tensor> a{cast(randn({4, 8, 10, 10}, 50), dtype), cast(randn({16, 8, 3, 3}, 51), dtype),
                          cast(randn({16}, 52), dtype)}, b;
    for (Tensor& t : a) {
      b.push_back(t.clone().requires_grad_());
      t.requires_grad_();
    }
    Pool2dOptions pool{{2, 2}, {0, 0}, {0, 0}};
    Tensor fused = conv2d_relu_max_pool2d(a[0], a[1], a[2], {}, pool);
    Tensor apart = max_pool2d(relu(conv2d(b[0], b[1], b[2])), pool);
    EXPECT_EQ(fused.grad_fn()->name(), "conv2d_relu_max_pool2d");
    EXPECT_TRUE(cpu::is_channels_last(fused));
    expect_close(fused, apart, 1e-5, 1e-5, "forward");
    Tensor go = cast(randn(fused.shape(), 53), dtype);
    fused.backward(go);
    apart.backward(go);
    for (size_t i = 0; i < a.size(); ++i) expect_close(a[i].grad(), b[i].grad(), 1e-4, 1e-4, str("grad ", i));
  }
}

TEST(Conv2dGrad, Groups) {
  Tensor x = randn64({2, 4, 5, 5}, 7), w = randn64({4, 2, 3, 3}, 8), b = randn64({4}, 9);
  expect_gradcheck([](auto& t) { return conv2d(t[0], t[1], t[2], {{2, 2}, {1, 1}, {1, 1}, 2}); }, {x, w, b});
  Tensor wd = randn64({4, 1, 3, 3}, 10);
  expect_gradcheck([](auto& t) { return conv2d(t[0], t[1], {}, {{1, 1}, {1, 1}, {1, 1}, 4}); }, {x, wd});
}

// The f32 oneDNN backward, reached through autograd, against the f64 reference backward.
TEST(Conv2dGrad, F32BackwardMatchesF64Reference) {
  Conv2dOptions o{{2, 1}, {1, 1}, {1, 2}, 2};
  Conv2dParams p{o.stride, o.padding, o.dilation, o.groups};
  Tensor x = randn({2, 4, 9, 8}, 11).requires_grad_(), w = randn({6, 2, 3, 3}, 12).requires_grad_();
  Tensor b = randn({6}, 13).requires_grad_();
  Tensor out = conv2d(x, w, b, o);
  Tensor go = randn(out.shape(), 14);
  out.backward(go);
  Tensor x64 = cast(x.detach(), DType::f64), w64 = cast(w.detach(), DType::f64), go64 = cast(go, DType::f64);
  expect_close(x.grad(), cpu::reference::conv2d_backward_input(go64, w64, x.shape(), p), 1e-4, 1e-4, "grad x");
  cpu::Conv2dWeightGrads expected = cpu::reference::conv2d_backward_weight(go64, x64, w.shape(), true, p);
  expect_close(w.grad(), expected.weight, 1e-4, 1e-4, "grad weight");
  expect_close(b.grad(), expected.bias, 1e-4, 1e-4, "grad bias");
}

TEST(Conv2dGrad, OnlyRequestedGradients) {
  Tensor x = randn({2, 3, 6, 6}, 15), w = randn({4, 3, 3, 3}, 16), b = randn({4}, 17).requires_grad_();
  Tensor out = conv2d(x, w, b);
  Tensor go = randn(out.shape(), 18);
  out.backward(go);
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  expect_close(b.grad(),
               cpu::reference::conv2d_backward_weight(cast(go, DType::f64), cast(x, DType::f64), w.shape(), true, {})
                   .bias,
               1e-4, 1e-4, "bias-only grad");
}

// The CNN's first block and the next convolution, in f32 through autograd: the activations stay
// channels-last from the first convolution on (conv, relu and pool keep the layout), and the loss's
// gradients match the same chain in f64, which runs the plain-NCHW reference loops.
TEST(Conv2dGrad, ChannelsLastChainMatchesF64) {
  auto chain = [](const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2) {
    Tensor h = relu(conv2d(x, w1, b1));
    Tensor p = max_pool2d(h, {{2, 2}, {0, 0}, {0, 0}});
    return std::array<Tensor, 3>{h, p, relu(conv2d(p, w2, b2))};
  };
  std::vector<Tensor> f32{randn({4, 1, 12, 12}, 30), randn({16, 1, 3, 3}, 31), randn({16}, 32),
                          randn({32, 16, 3, 3}, 33), randn({32}, 34)};
  std::vector<Tensor> f64;
  for (Tensor& t : f32) {
    f64.push_back(cast(t, DType::f64).requires_grad_());
    t.requires_grad_();
  }
  auto [h, p, y] = chain(f32[0], f32[1], f32[2], f32[3], f32[4]);
  EXPECT_TRUE(cpu::is_channels_last(h));
  EXPECT_TRUE(cpu::is_channels_last(p));
  EXPECT_TRUE(cpu::is_channels_last(y));
  Tensor go = randn(y.shape(), 35);
  y.backward(go);
  std::get<2>(chain(f64[0], f64[1], f64[2], f64[3], f64[4])).backward(cast(go, DType::f64));
  expect_close(y, std::get<2>(chain(f64[0], f64[1], f64[2], f64[3], f64[4])), 1e-4, 1e-4, "forward");
  const char* names[] = {"grad x", "grad w1", "grad b1", "grad w2", "grad b2"};
  for (size_t i = 0; i < f32.size(); ++i) expect_close(f32[i].grad(), f64[i].grad(), 1e-3, 1e-3, names[i]);
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

TEST(Conv2dErrors, BadInputsNameTheOpAndShapes) {
  Tensor x = randn({2, 4, 5, 5}, 19), w = randn({6, 2, 3, 3}, 20);
  expect_error<ShapeError>([&] { conv2d(randn({4, 5, 5}, 21), w); }, {"conv2d", "rank 4", "[4, 5, 5]"});
  expect_error<ShapeError>([&] { conv2d(x, randn({6, 2, 3}, 22)); }, {"conv2d", "weight", "[6, 2, 3]"});
  expect_error<ShapeError>([&] { conv2d(x, w, {}, {{1, 1}, {0, 0}, {1, 1}, 1}); },
                           {"conv2d", "[2, 4, 5, 5]", "[6, 2, 3, 3]", "groups=1"});
  expect_error<ShapeError>([&] { conv2d(x, randn({5, 1, 3, 3}, 23), {}, {{1, 1}, {0, 0}, {1, 1}, 4}); },
                           {"conv2d", "[5, 1, 3, 3]", "groups=4"});
  expect_error<ShapeError>([&] { conv2d(x, randn({6, 4, 7, 7}, 24), {}, {{1, 1}, {0, 0}, {1, 1}, 1}); },
                           {"conv2d", "[2, 4, 5, 5]", "[6, 4, 7, 7]", "padded input"});
  expect_error<ShapeError>([&] { conv2d(x, randn({6, 4, 3, 3}, 25), {}, {{1, 1}, {0, 0}, {3, 3}, 1}); },
                           {"conv2d", "dilation [3, 3]", "padded input"});
  expect_error<ValueError>([&] { conv2d(x, w, {}, {{0, 1}, {0, 0}, {1, 1}, 2}); }, {"conv2d", "stride", "[0, 1]"});
  expect_error<ValueError>([&] { conv2d(x, w, {}, {{1, -2}, {0, 0}, {1, 1}, 2}); }, {"conv2d", "stride", "[1, -2]"});
  expect_error<ValueError>([&] { conv2d(x, w, {}, {{1, 1}, {-1, 0}, {1, 1}, 2}); }, {"conv2d", "padding"});
  expect_error<ValueError>([&] { conv2d(x, w, {}, {{1, 1}, {0, 0}, {1, 1}, 0}); }, {"conv2d", "groups"});
  expect_error<ShapeError>([&] { conv2d(x, w, randn({5}, 26), {{1, 1}, {0, 0}, {1, 1}, 2}); },
                           {"conv2d", "bias", "[5]"});
  expect_error<DTypeError>([&] { conv2d(x, cast(w, DType::bf16), {}, {{1, 1}, {0, 0}, {1, 1}, 2}); },
                           {"conv2d", "f32", "bf16"});
  expect_error<DTypeError>([&] { conv2d(cast(x, DType::i32), cast(w, DType::i32), {}, {{1, 1}, {0, 0}, {1, 1}, 2}); },
                           {"conv2d", "i32"});
}

}  // namespace
}  // namespace weft
