// The parallel plan's data-parallel mode is the first entry of its table that applies to the
// options, and each mode does its own part: checked through what the plan says and does.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/random.h"
#include "weft/dist/parallel_plan.h"
#include "weft/nn/gpt.h"
#include "weft/nn/models.h"

#include "expect_error.h"

namespace weft::dist {
namespace {

using testing::contains;

ProcessGroup& group() { return ProcessGroup::world(); }

// The line the trainer prints of a plan over an MLP with these options, once the mode started.
std::string describe_mlp(const ParallelOptions& options) {
  ParallelPlan plan(group(), options);
  manual_seed(0);
  std::shared_ptr<nn::Module> model = plan.split(nn::make_mlp());
  plan.distribute(*model);
  plan.start(*model);
  return plan.describe(8, 8, false);
}

TEST(ParallelPlan, TakesTheFirstDataParallelModeThatApplies) {
  const std::string ranks = str(" on ", group().size(), " ranks");
  EXPECT_TRUE(contains(describe_mlp({}), "; data parallel" + ranks)) << describe_mlp({});
  EXPECT_TRUE(contains(describe_mlp({.zero_stage = 1}), "; ZeRO-1" + ranks));
  EXPECT_TRUE(contains(describe_mlp({.zero_stage = 3}), "; ZeRO-3" + ranks));
  EXPECT_TRUE(contains(describe_mlp({.sync_every = 2}), "; local SGD" + ranks));
}

// Under pp 2 on 4 ranks each stage has 2 replicas, which average their gradients after the
// pipeline's flush (DDP's buckets, reduced after backward): replica r's gradients of r become 0.5
// on both.
TEST(ParallelPlan, APipelinesReplicasAverageTheirGradients) {
  if (group().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ParallelPlan plan(group(), {.pp = 2, .micro_batches = 2});
  manual_seed(0);
  std::shared_ptr<nn::Module> model =
      plan.split(std::make_shared<nn::GPT>(nn::GPTConfig{.layers = 2, .heads = 2, .dim = 16, .context = 8, .vocab = 32}));
  plan.distribute(*model);
  plan.start(*model);
  EXPECT_EQ(plan.replicas(), 2);
  const std::string described = plan.describe(8, 4, false);
  EXPECT_TRUE(contains(described, "; a pipeline of 2 stages (gpipe, 2 micro-batches of 4); data parallel on 2 "
                                  "data-parallel replicas")) << described;
  EXPECT_TRUE(contains(described, " after backward")) << described;
  for (const Tensor& p : model->parameters())
    p.set_grad(Tensor::full(p.shape(), static_cast<double>(plan.replica()), p.dtype()));
  plan.mode().after_pipeline_step();
  for (const Tensor& p : model->parameters()) {
    const std::vector<float> grad = p.grad().to_vector<float>();
    EXPECT_EQ(*std::min_element(grad.begin(), grad.end()), 0.5f);
    EXPECT_EQ(*std::max_element(grad.begin(), grad.end()), 0.5f);
  }
}

}  // namespace
}  // namespace weft::dist
