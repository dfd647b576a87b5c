#include <gtest/gtest.h>

#include <memory>

#include "expect_error.h"
#include "weft/autograd/autocast_mode.h"
#include "weft/autograd/checkpoint.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/nn/layers.h"
#include "weft/ops/arith.h"
#include "weft/ops/reduce.h"

namespace weft::nn {
namespace {

using testing::contains;
using testing::message_of;

// Linear / ReLU / Dropout layers; the same seed gives the same weights.
std::shared_ptr<Sequential> make_net(uint64_t seed, int64_t width, int hidden_layers, double dropout) {
  manual_seed(seed);
  auto net = std::make_shared<Sequential>(std::make_shared<Linear>(16, width), std::make_shared<ReLU>());
  for (int i = 0; i < hidden_layers; ++i) {
    if (dropout > 0) net->push_back(std::make_shared<Dropout>(dropout));
    net->push_back(std::make_shared<Linear>(width, width));
    net->push_back(std::make_shared<ReLU>());
  }
  net->push_back(std::make_shared<Linear>(width, 4));
  return net;
}

// Forward with a fixed dropout stream, then backward of a weighted sum of the outputs.
void forward_backward(Sequential& net, const Tensor& x) {
  manual_seed(123);
  Tensor y = net(x);
  Generator gen(7);
  sum(mul(y, Tensor::randn(y.shape(), gen))).backward();
}

TEST(Checkpoint, GradientsEqualThePlainRunIncludingDropout) {
  auto plain = make_net(1, 32, 3, 0.3), checkpointed = make_net(1, 32, 3, 0.3);
  checkpointed->set_checkpoint_segments(3);
  Generator gen(2);
  Tensor x = Tensor::randn({8, 16}, gen), x2 = x.clone();
  x.requires_grad_();
  x2.requires_grad_();
  forward_backward(*plain, x);
  forward_backward(*checkpointed, x2);
  auto a = plain->named_parameters(), b = checkpointed->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(b[i].second.grad().defined()) << b[i].first;
    EXPECT_EQ(a[i].second.grad().to_vector<float>(), b[i].second.grad().to_vector<float>()) << a[i].first;
  }
  EXPECT_EQ(x.grad().to_vector<float>(), x2.grad().to_vector<float>());
}

// Backward runs after the autocast scope has closed; the recomputation must still run in bf16.
TEST(Checkpoint, RecomputesUnderTheForwardsAutocastState) {
  auto plain = make_net(11, 32, 2, 0), checkpointed = make_net(11, 32, 2, 0);
  checkpointed->set_checkpoint_segments(3);
  Generator gen(12);
  Tensor x = Tensor::randn({8, 16}, gen);
  for (Sequential* net : {plain.get(), checkpointed.get()}) {
    Tensor y;
    {
      AutocastGuard bf16(DType::bf16);
      y = (*net)(x);
    }
    ASSERT_EQ(y.dtype(), DType::bf16);
    sum(y).backward();
  }
  auto a = plain->named_parameters(), b = checkpointed->named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.grad().to_vector<float>(), b[i].second.grad().to_vector<float>()) << a[i].first;
}

TEST(Checkpoint, ParametersGetGradientsWhenTheInputNeedsNone) {
  auto net = make_net(3, 8, 1, 0);
  net->set_checkpoint_segments(2);
  Generator gen(4);
  forward_backward(*net, Tensor::randn({2, 16}, gen));
  for (const auto& [name, p] : net->named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
}

TEST(Checkpoint, KeepsFewerActivationsAlive) {
  auto peak_of = [](int64_t segments) {
    auto net = make_net(5, 512, 8, 0);
    net->set_checkpoint_segments(segments);
    Generator gen(6);
    Tensor x = Tensor::randn({1024, 16}, gen);
    CachingAllocator::cpu().reset_peak_stats();
    const int64_t before = CachingAllocator::cpu().stats().allocated_bytes;
    forward_backward(*net, x);
    return CachingAllocator::cpu().stats().peak_allocated_bytes - before;
  };
  const int64_t plain = peak_of(0), checkpointed = peak_of(4);
  // 8 hidden layers keep a 2 MiB input and a 2 MiB ReLU output each without checkpointing.
  EXPECT_LT(checkpointed, plain * 6 / 10) << "plain " << plain << " B, checkpointed " << checkpointed << " B";
}

TEST(Checkpoint, RunsPlainlyWithoutGradMode) {
  auto net = make_net(8, 8, 1, 0);
  net->set_checkpoint_segments(2);
  NoGradGuard no_grad;
  Generator gen(9);
  Tensor y = (*net)(Tensor::randn({2, 16}, gen));
  EXPECT_FALSE(y.requires_grad());
}

TEST(Checkpoint, RejectsMoreSegmentsThanModules) {
  auto net = make_net(10, 8, 0, 0);  // Linear, ReLU, Linear
  EXPECT_TRUE(contains(message_of<ValueError>([&] { net->set_checkpoint_segments(4); }), "4 checkpoint segments for 3"));
}

}  // namespace
}  // namespace weft::nn
