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

// Each rank says only where its own parts lie; the layout every rank gets lists all of them, a
// rank's run in its rank's slot, and a rank with no part of a tensor adds no run of it.
TEST(ShardedState, EveryRanksPartsMakeOneLayout) {
  const int rank = group().rank(), ranks = group().size();
  CheckpointShard shard;
  // "w" [ranks, 3]: one row each, the last rank's being two blocks of one element (a column).
  shard.parts["w"] = {.whole = {ranks, 3}, .dtype = DType::f32,
                      .run = rank + 1 < ranks ? Slice{rank * 3, 3, 1, 3} : Slice{2, 1, ranks, 3}, .local = {3}};
  if (rank == 0) shard.parts["b"] = whole_part({5}, DType::bf16);
  gather_shard_layout(shard, group());
  EXPECT_EQ(shard.layout["b"], nlohmann::json::parse(R"({"shape":[5],"dtype":"bf16","runs":[[0,0,5]]})"));
  ASSERT_EQ(shard.layout["w"]["runs"].size(), static_cast<size_t>(ranks));
  for (int r = 0; r + 1 < ranks; ++r) EXPECT_EQ(shard.layout["w"]["runs"][r], nlohmann::json::array({r, r * 3, 3}));
  EXPECT_EQ(shard.layout["w"]["runs"][ranks - 1], nlohmann::json::array({ranks - 1, 2, 1, ranks, 3}));
  EXPECT_EQ(shard.layout["w"]["shape"], nlohmann::json::array({ranks, 3}));
}

// A resume's parts are the tensor-parallel slices slice_state_dict cuts, for a parameter and its
// optimizer state alike; 0-d values whole, and names the rank does not hold left out.
TEST(ShardedState, TakePartsCutsWhatTheRankHolds) {
  manual_seed(3);
  const Tensor w = Tensor::randn({6, 4}), v = Tensor::randn({6, 4});
  const Split columns{.dim = 1};
  const TensorPart part{.whole = {6, 4}, .dtype = DType::f32, .run = columns.slice({6, 4}, 1, 2), .local = {6, 2}};
  const std::map<std::string, Tensor> parts =
      take_parts({{"w", w}, {"w.exp_avg", v}, {"w.step", Tensor::scalar(3, DType::i64)}, {"other", w}}, {{"w", part}});
  const TensorParallelLayout layout = {{"w", {.whole = {6, 4}, .split = columns}}};
  const std::map<std::string, Tensor> expected = slice_state_dict({{"w", w}, {"w.exp_avg", v}}, layout, 1, 2);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts.at("w").shape(), (Shape{6, 2}));
  EXPECT_EQ(parts.at("w").to_vector<float>(), expected.at("w").to_vector<float>());
  EXPECT_EQ(parts.at("w.exp_avg").to_vector<float>(), expected.at("w.exp_avg").to_vector<float>());
  EXPECT_EQ(parts.at("w.step").item(), 3);
  EXPECT_THROW(take_parts({{"w", Tensor::zeros({4, 6})}}, {{"w", part}}), ShapeError);
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
