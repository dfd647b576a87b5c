#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "expect_error.h"
#include "weft/amp/grad_scaler.h"
#include "weft/core/random.h"
#include "weft/ops/arith.h"
#include "weft/ops/autocast.h"
#include "weft/ops/linear.h"
#include "weft/ops/loss.h"
#include "weft/optim/sgd.h"

namespace weft::amp {
namespace {

using testing::contains;
using testing::message_of;

// A regression whose loss carries a tiny weight (a loss term a model weights down, or a very
// small mean over many elements): the gradient reaching the f16 linear output is ~1e-9, below
// f16's smallest subnormal (6e-8), so an f16 backward turns it into exact zeros.
struct TinyLossRegression {
  Tensor weight, x, target;
  static constexpr double kLossWeight = 1e-8;

  TinyLossRegression() {
    Generator gen(0);
    weight = Tensor::randn({4, 8}, gen);
    weight.requires_grad_();
    x = Tensor::randn({16, 8}, gen);
    target = Tensor::zeros({16, 4});
  }
  Tensor loss() {
    AutocastGuard autocast(DType::f16);
    return mul(mse_loss(linear(x, weight), target), kLossWeight);
  }
  double unweighted_loss() { return loss().item() / kLossWeight; }
};

TEST(GradScaler, F16GradientsUnderflowWithoutScalingAndTrainWithIt) {
  TinyLossRegression plain;
  optim::SGD plain_sgd({plain.weight}, 3e7);
  const double start = plain.unweighted_loss();
  for (int step = 0; step < 20; ++step) {
    plain_sgd.zero_grad();
    plain.loss().backward();
    plain_sgd.step();
  }
  EXPECT_EQ(plain.weight.grad().to_vector<float>(), std::vector<float>(32, 0.0f)) << "expected underflow to zero";
  EXPECT_EQ(plain.unweighted_loss(), start) << "no gradient, no progress";

  TinyLossRegression scaled;
  optim::SGD scaled_sgd({scaled.weight}, 3e7);  // an effective rate of 0.3 on the unweighted loss
  GradScaler scaler;
  for (int step = 0; step < 20; ++step) {
    scaled_sgd.zero_grad();
    scaler.scale(scaled.loss()).backward();
    EXPECT_TRUE(scaler.step(scaled_sgd));
    scaler.update();
  }
  EXPECT_LT(scaled.unweighted_loss(), 0.5 * start);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

// One parameter whose gradient the test sets directly, to drive the scaler's bookkeeping.
struct OneParam {
  Tensor p = Tensor::zeros({2});
  optim::SGD sgd{{p.requires_grad_()}, 1.0};
  void set_grad(float a, float b) { p.set_grad(Tensor::from_vector<float>({a, b}, {2})); }
};

TEST(GradScaler, OverflowSkipsTheStepAndBacksOff) {
  OneParam m;
  GradScaler scaler({.init_scale = 1024});
  m.set_grad(std::numeric_limits<float>::infinity(), 1);
  EXPECT_FALSE(scaler.step(m.sgd));
  scaler.update();
  EXPECT_EQ(m.p.to_vector<float>(), std::vector<float>({0, 0}));
  EXPECT_EQ(scaler.current_scale(), 512);
  EXPECT_EQ(scaler.skipped_steps(), 1);

  m.set_grad(std::nanf(""), 1);
  EXPECT_FALSE(scaler.step(m.sgd));
  scaler.update();
  EXPECT_EQ(scaler.current_scale(), 256);
}

TEST(GradScaler, UnscalesBeforeTheUpdateAndGrowsAfterCleanSteps) {
  OneParam m;
  GradScaler scaler({.init_scale = 8, .growth_interval = 3});
  for (int step = 0; step < 3; ++step) {
    m.set_grad(8, 16);  // scaled gradients: the true ones are 1 and 2
    EXPECT_TRUE(scaler.step(m.sgd));
    scaler.update();
  }
  EXPECT_EQ(m.p.to_vector<float>(), std::vector<float>({-3, -6}));
  EXPECT_EQ(scaler.current_scale(), 16);
  EXPECT_EQ(scaler.state().growth_tracker, 0);
}

TEST(GradScaler, SaysWhenTheScaleIsStuckAtItsMinimum) {
  OneParam m;
  GradScaler scaler({.init_scale = 4, .min_scale = 1});
  for (int step = 0; step < 4; ++step) {
    EXPECT_FALSE(scaler.stuck_at_minimum());
    m.set_grad(std::numeric_limits<float>::infinity(), 0);
    scaler.step(m.sgd);
    scaler.update();
  }
  EXPECT_EQ(scaler.current_scale(), 1);  // 4, 2, 1, 1
  EXPECT_FALSE(scaler.stuck_at_minimum());
  m.set_grad(std::numeric_limits<float>::infinity(), 0);
  scaler.step(m.sgd);
  scaler.update();
  EXPECT_TRUE(scaler.stuck_at_minimum());  // three overflows in a row at the minimum
  m.set_grad(1, 1);
  scaler.step(m.sgd);
  scaler.update();
  EXPECT_FALSE(scaler.stuck_at_minimum());
}

TEST(GradScaler, UnscalingTwiceInAStepIsAnError) {
  OneParam m;
  GradScaler scaler;
  m.set_grad(1, 1);
  scaler.unscale_(m.sgd);
  EXPECT_TRUE(contains(message_of<ValueError>([&] { scaler.unscale_(m.sgd); }), "already called"));
}

TEST(GradScaler, StateRoundTripsAndBadValuesAreRejected) {
  GradScaler scaler;
  scaler.load_state({.scale = 128, .growth_tracker = 5, .skipped_steps = 2, .overflows_at_minimum = 0});
  EXPECT_EQ(scaler.current_scale(), 128);
  EXPECT_EQ(scaler.state().growth_tracker, 5);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_TRUE(contains(message_of<ValueError>([&] { scaler.load_state({.scale = 0}); }), "positive"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { GradScaler({.backoff_factor = 1}); }), "backoff_factor"));
  EXPECT_TRUE(contains(message_of<ValueError>([] { GradScaler({.growth_factor = 1}); }), "growth_factor"));
}

}  // namespace
}  // namespace weft::amp
