// Fake quantization and quantization-aware training. The expected values and gradients are
// what PyTorch 1.13's fake_quantize_per_tensor_affine / _per_channel_affine return for the
// same inputs (checked with /usr/bin/python3).
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/nn/layers.h"
#include "weft/nn/models.h"
#include "weft/ops/loss.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/quant/fake_quant.h"
#include "weft/quant/linear.h"
#include "weft/quant/qat.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

void expect_near(const std::vector<double>& actual, const std::vector<double>& expected, double tol = 1e-12) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tol) << "element " << i;
}

TEST(FakeQuantize, PerTensorValuesAndStraightThroughMaskMatchTorch) {
  const double s = static_cast<double>(0.1f);  // the scale is an f32, as in torch
  for (DType dtype : {DType::f64, DType::f32}) {
    Tensor x = Tensor::from_vector({-1.0, 0.1, 0.26, 2.0, 10.0}, {5}, dtype).requires_grad_();
    Tensor y = quant::fake_quantize(x, {0.1f, 5}, 0, 20);  // q = [0 (clipped), 6, 8, 20 (clipped), 20 (clipped)]
    expect_near(y.to_vector<double>(), {-5 * s, 1 * s, 3 * s, 15 * s, 15 * s}, dtype == DType::f64 ? 1e-15 : 1e-7);
    y.backward(Tensor::from_vector({1.0, 2.0, 3.0, 4.0, 5.0}, {5}, dtype));
    // The gradient passes where round(x / s) + z lies in [qmin, qmax], and is zero where it was clipped.
    expect_near(x.grad().to_vector<double>(), {0, 2, 3, 0, 0});
  }
}

TEST(FakeQuantize, TheRangeEndsThemselvesPassTheGradient) {
  Tensor x = Tensor::from_vector({0.0, 2.0, 2.1, -0.1}, {4}, DType::f64).requires_grad_();
  quant::fake_quantize(x, {0.5f, 0}, 0, 4).backward(Tensor::ones({4}, DType::f64));
  expect_near(x.grad().to_vector<double>(), {1, 1, 1, 1});  // round(4.2) = 4 and round(-0.2) = 0 are inside
}

TEST(FakeQuantize, PerChannelValuesAndMaskMatchTorch) {
  Tensor w = Tensor::from_vector<float>({1.0f, -0.3f, 0.26f, 200, -300, 2}, {2, 3}).requires_grad_();
  Tensor y = quant::fake_quantize_per_channel(w, Tensor::from_vector<float>({0.5f, 2.0f}, {2}), -127, 127);
  expect_near(y.to_vector<double>(), {1.0, -0.5, 0.5, 200, -254, 2});
  sum(y).backward();
  expect_near(w.grad().to_vector<double>(), {1, 1, 1, 1, 0, 1});
}

TEST(FakeQuantize, BadArgumentsAreErrors) {
  Tensor x = Tensor::ones({3});
  EXPECT_TRUE(contains(message_of<ValueError>([&] { quant::fake_quantize(x, {0.0f, 0}, 0, 255); }), "positive"));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { quant::fake_quantize(x, {1.0f, 300}, 0, 255); }), "zero point"));
  EXPECT_TRUE(contains(message_of<DTypeError>([&] { quant::fake_quantize(Tensor::ones({3}, DType::i32), {1, 0}, 0, 255); }),
                       "i32"));
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { quant::fake_quantize_per_channel(x, Tensor::ones({2}), -127, 127); }),
                       "[3]"));
}

TEST(Qat, FineTunesAndConvertsToTheInt8ModelItSimulated) {
  manual_seed(1);
  auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>(),
                                                std::make_shared<nn::Linear>(32, 4));
  auto qat = quant::prepare_qat(*model);
  EXPECT_TRUE(qat->parameters()[0].is_same(model->parameters()[0]));  // shared: training one trains the other
  EXPECT_EQ(qat->state_dict().size(), model->state_dict().size());

  Generator gen(2);
  Tensor x = Tensor::randn({256, 16}, gen);
  std::vector<double> labels(256);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = x.at({static_cast<int64_t>(i), 0}) > 0 ? 1 : (x.at({static_cast<int64_t>(i), 1}) > 0 ? 2 : 0);
  Tensor y = Tensor::from_vector(labels, {256}, DType::i64);
  optim::AdamW optimizer(qat->parameters(), {.lr = 1e-2});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor loss = cross_entropy((*qat)(x), y);
    if (step == 0) first = loss.item();
    last = loss.item();
    optimizer.zero_grad();
    loss.backward();
    ASSERT_TRUE(model->parameters()[0].grad().defined()) << "the gradient reaches the weights through fake quantization";
    optimizer.step();
  }
  EXPECT_LT(last, 0.5 * first);

  auto int8 = quant::convert_qat(*qat);
  ASSERT_TRUE(dynamic_cast<quant::QuantizedLinear*>((*int8)[0].get()));
  NoGradGuard no_grad;
  qat->eval();
  std::vector<double> simulated = (*qat)(x).to_vector<double>(), actual = (*int8)(x).to_vector<double>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    err = std::max(err, std::abs(simulated[i] - actual[i]));
    scale = std::max(scale, std::abs(simulated[i]));
  }
  EXPECT_LT(err, 1e-3 * scale);
}

TEST(Qat, ConvolutionsGetGradientsAndUnsupportedLayersAreRefused) {
  manual_seed(3);
  auto cnn = nn::make_cnn();
  auto qat = quant::prepare_qat(*cnn);
  Generator gen(4);
  sum((*qat)(Tensor::randn({2, 1, 28, 28}, gen))).backward();
  EXPECT_TRUE(cnn->parameters()[0].grad().defined());
  nn::Sequential bad(std::make_shared<nn::BatchNorm2d>(2));
  EXPECT_TRUE(contains(message_of<ValueError>([&] { quant::prepare_qat(bad); }), "BatchNorm2d"));
  auto fresh = quant::prepare_qat(*nn::make_mlp());
  EXPECT_TRUE(contains(message_of<ValueError>([&] { quant::convert_qat(*fresh); }), "no data observed"));
}

}  // namespace
}  // namespace weft
