// Master weights (Optimizer::keep_masters_of, weft train --master-weights) against weft's f32
// layout: the bytes each keeps for a model's states, read off the allocator after a training step,
// are the ZeRO paper's 16 per parameter (2 + 2 + 12) and weft's own 16 (4 + 4 + 8), and 18 for
// autocast with the optimizer's bf16 copies; and training still learns.
#include <gtest/gtest.h>

#include <cmath>

#include "weft/autograd/grad_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/nn/gpt.h"
#include "weft/ops/autocast.h"
#include "weft/ops/loss.h"
#include "weft/optim/adam.h"

namespace weft {
namespace {

enum class Layout { f32, autocast_copies, master_weights };

struct StepOutcome {
  int64_t state_bytes;  // allocated after the step, less what was allocated before the model
  int64_t params;
  double first_loss, last_loss;
};

// A GPT of 1.9M parameters (the large tensors whole multiples of the allocator's rounding, so that
// the bytes are the parameters') trained for `steps` AdamW steps on one fixed batch, which it
// learns.
StepOutcome train_gpt(Layout layout, int steps) {
  const int64_t before = CachingAllocator::cpu().stats().allocated_bytes;
  StepOutcome out{};
  {
    manual_seed(3);
    auto model = std::make_shared<nn::GPT>(nn::GPTConfig{.layers = 2, .heads = 4, .dim = 256, .context = 32, .vocab = 1024});
    std::vector<Tensor> masters;
    if (layout == Layout::master_weights) {
      NoGradGuard no_grad;
      for (const Tensor& p : model->parameters()) masters.push_back(Tensor::empty(p.shape()).copy_(p));
      model->to(DType::bf16);
    }
    optim::AdamW optimizer(layout == Layout::master_weights ? masters : model->parameters(), {.lr = 1e-3});
    if (layout == Layout::master_weights) optimizer.keep_masters_of(model->parameters());
    if (layout == Layout::autocast_copies) optimizer.keep_low_precision_copies(DType::bf16);
    for (const Tensor& p : model->parameters()) out.params += p.numel();
    std::vector<int64_t> ids(4 * 33);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919 + 13) % 1024);
    const Tensor batch = Tensor::from_vector(ids, {4, 33});
    const Tensor x = batch.narrow(1, 0, 32).contiguous(), y = batch.narrow(1, 1, 32).contiguous().reshape({-1});
    const int64_t inputs = batch.nbytes() + x.nbytes() + y.nbytes();
    for (int s = 0; s < steps; ++s) {
      optimizer.zero_grad();
      double loss_value;
      {
        AutocastGuard autocast(layout == Layout::f32 ? std::nullopt : std::optional<DType>(DType::bf16));
        AutocastCopies copies(optimizer.params(), optimizer.low_precision_copies());
        Tensor loss = cross_entropy((*model)(x).reshape({-1, 1024}), y);
        loss.backward();
        loss_value = loss.item();
      }
      optimizer.step();
      if (s == 0) out.first_loss = loss_value;
      out.last_loss = loss_value;
    }
    // Parameters, gradients (kept until the next zero_grad), the optimizer's state and copies.
    out.state_bytes = CachingAllocator::cpu().stats().allocated_bytes - before - inputs;
  }
  return out;
}

TEST(MasterWeights, ModelStatesTakeTheBytesPerParameterOfTheirLayout) {
  const std::pair<Layout, double> layouts[] = {
      {Layout::f32, 16}, {Layout::autocast_copies, 18}, {Layout::master_weights, 16}};
  for (const auto& [layout, per_parameter] : layouts) {
    const StepOutcome o = train_gpt(layout, 1);
    const double measured = static_cast<double>(o.state_bytes) / static_cast<double>(o.params);
    EXPECT_NEAR(measured, per_parameter, 0.1 * per_parameter) << "layout " << static_cast<int>(layout);
  }
}

TEST(MasterWeights, TheModelLearnsAsWithF32Parameters) {
  const StepOutcome f32 = train_gpt(Layout::f32, 30), master = train_gpt(Layout::master_weights, 30);
  EXPECT_LT(master.last_loss, 0.5 * master.first_loss);
  EXPECT_NEAR(master.last_loss, f32.last_loss, 0.05 + 0.2 * f32.last_loss);
}

}  // namespace
}  // namespace weft
