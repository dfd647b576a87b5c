#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "module_gradcheck.h"
#include "weft/memory/model.h"
#include "weft/nn/gpt.h"
#include "weft/nn/init.h"
#include "weft/ops/loss.h"

namespace weft {
namespace {

Tensor token_ids(int64_t batch, int64_t length, int64_t vocab, int64_t offset = 0) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * length));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919 + 13 + offset) % vocab);
  return Tensor::from_vector(ids, {batch, length});
}

TEST(GPT, CountsParametersAsThePlannerDoes) {
  for (const nn::GPTConfig c : {nn::GPTConfig{}, nn::GPTConfig{.layers = 2, .heads = 2, .dim = 32, .context = 16, .vocab = 97}}) {
    nn::GPT model(c);
    EXPECT_EQ(model.num_parameters(), memory::gpt_parameters(c)) << model.extra_repr();
  }
}

TEST(GPT, NamesItsParametersAsGpt2Does) {
  nn::GPT model({.layers = 2, .heads = 2, .dim = 16, .context = 8, .vocab = 11});
  nn::StateDict state = model.state_dict();
  for (const char* name : {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias",
                           "h.0.attn.c_proj.weight", "h.1.mlp.c_fc.weight", "h.1.mlp.c_proj.bias", "ln_f.bias"})
    EXPECT_TRUE(state.contains(name)) << name;
  EXPECT_EQ(state.at("h.1.mlp.c_fc.weight").shape(), (Shape{64, 16}));
  EXPECT_FALSE(state.contains("lm_head.weight")) << "the output projection is tied to wte";
}

TEST(GPT, BlockParametersAreWhatABlockRegisters) {
  const nn::GPTConfig c{.layers = 1, .heads = 2, .dim = 16, .context = 8, .vocab = 11};
  const std::vector<nn::GPTBlockParameter> listed = c.block_parameters();
  const auto registered = (*nn::GPT(c).h)[0]->named_parameters();
  ASSERT_EQ(listed.size(), registered.size());
  for (size_t i = 0; i < listed.size(); ++i) {
    EXPECT_EQ(listed[i].name, registered[i].first);
    EXPECT_EQ(listed[i].shape, registered[i].second.shape()) << listed[i].name;
  }
}

// 10 blocks over 4 stages: 3, 3, 2, 2.
TEST(GPT, PartitionGivesTheRemainderToTheFirstStages) {
  const nn::GPTPartition partition{.layers = 10, .stages = 4};
  std::vector<int64_t> firsts;
  for (int64_t s = 0; s <= 4; ++s) firsts.push_back(partition.first_block(s));
  EXPECT_EQ(firsts, (std::vector<int64_t>{0, 3, 6, 8, 10}));
  EXPECT_EQ(partition.stage_of("wte.weight"), 0);
  EXPECT_EQ(partition.stage_of("wpe.weight"), 0);
  EXPECT_EQ(partition.stage_of("h.2.mlp.c_fc.bias"), 0);
  EXPECT_EQ(partition.stage_of("h.3.ln_1.weight"), 1);
  EXPECT_EQ(partition.stage_of("h.9.attn.c_proj.weight"), 3);
  EXPECT_EQ(partition.stage_of("ln_f.bias"), 3);
  EXPECT_TRUE(partition.holds_embeddings(0) && !partition.holds_embeddings(1));
  EXPECT_TRUE(partition.holds_head(3) && !partition.holds_head(2));
}

TEST(GPT, InitialisesAsGpt2) {
  manual_seed(3);
  const nn::GPTConfig c{.layers = 8, .heads = 4, .dim = 128, .context = 64, .vocab = 512};
  nn::GPT model(c);
  auto std_of = [](const Tensor& t) {
    double sum = 0, squares = 0;
    for (double x : t.to_vector<double>()) sum += x, squares += x * x;
    const double n = static_cast<double>(t.numel()), mean = sum / n;
    return std::sqrt(squares / n - mean * mean);
  };
  nn::StateDict state = model.state_dict();
  EXPECT_NEAR(std_of(state.at("wte.weight")), 0.02, 0.001);
  EXPECT_NEAR(std_of(state.at("h.3.mlp.c_fc.weight")), 0.02, 0.001);
  EXPECT_NEAR(std_of(state.at("h.3.mlp.c_proj.weight")), 0.02 / std::sqrt(16.0), 0.0005) << "scaled by 1/sqrt(2 layers)";
  EXPECT_NEAR(std_of(state.at("h.3.attn.c_proj.weight")), 0.02 / std::sqrt(16.0), 0.0005);
  EXPECT_EQ(std_of(state.at("h.3.attn.c_attn.bias")), 0);
  for (double x : state.at("h.0.ln_1.weight").to_vector<double>()) ASSERT_EQ(x, 1);
}

TEST(GPT, StartsNearTheUniformLoss) {
  manual_seed(0);
  const nn::GPTConfig c{.layers = 2, .heads = 4, .dim = 64, .context = 32, .vocab = 256};
  nn::GPT model(c);
  Tensor logits = model(token_ids(4, 32, c.vocab));
  ASSERT_EQ(logits.shape(), (Shape{4, 32, 256}));
  // Not the inputs themselves as targets: with the output tied to wte, each position's own token
  // already scores higher than the rest at initialisation.
  Tensor targets = token_ids(4, 32, c.vocab, /*offset=*/1).view({4 * 32});
  const double loss = cross_entropy(logits.view({4 * 32, 256}), targets).item();
  EXPECT_NEAR(loss, std::log(256.0), 0.1) << "small initial weights give near-uniform predictions";
}

TEST(GPT, IsCausal) {
  manual_seed(1);
  nn::GPT model({.layers = 2, .heads = 2, .dim = 16, .context = 12, .vocab = 31});
  Tensor tokens = token_ids(1, 12, 31);
  Tensor before = model(tokens);
  tokens.data<int64_t>()[7] = (tokens.data<int64_t>()[7] + 5) % 31;
  Tensor after = model(tokens);
  for (int64_t t = 0; t < 12; ++t) {
    bool same = true;
    for (int64_t v = 0; v < 31; ++v) same = same && before.at({0, t, v}) == after.at({0, t, v});
    EXPECT_EQ(same, t < 7) << "position " << t;
  }
}

TEST(GPT, ShorterSequencesUseTheFirstPositions) {
  manual_seed(2);
  nn::GPT model({.layers = 1, .heads = 2, .dim = 16, .context = 12, .vocab = 31});
  Tensor full = model(token_ids(1, 12, 31));
  Tensor prefix = model(token_ids(1, 12, 31).narrow(1, 0, 5).contiguous());
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t v = 0; v < 31; ++v) EXPECT_NEAR(prefix.at({0, t, v}), full.at({0, t, v}), 1e-5);
}

TEST(GPT, Gradcheck) {
  manual_seed(4);
  nn::GPT model({.layers = 2, .heads = 2, .dim = 8, .context = 5, .vocab = 7});
  model.to(DType::f64);
  Tensor tokens = token_ids(2, 5, 7);
  // Weights of this size (std 0.02) make every gradient tiny; larger ones test more.
  for (auto& [name, p] : model.named_parameters()) nn::init::normal_(p, 0, 0.5);
  testing::expect_leaves_gradcheck([&] { return model(tokens); }, model.named_parameters());
}

TEST(GPT, CheckpointedActivationsGiveTheSameGradients) {
  const nn::GPTConfig c{.layers = 3, .heads = 2, .dim = 16, .context = 8, .vocab = 29};
  Tensor tokens = token_ids(2, 8, 29), targets = token_ids(2, 8, 29).view({16});
  std::vector<std::vector<float>> grads[2];
  for (bool checkpointed : {false, true}) {
    manual_seed(5);
    nn::GPT model(c);
    model.set_checkpoint_activations(checkpointed);
    cross_entropy(model(tokens).view({16, 29}), targets).backward();
    for (const Tensor& p : model.parameters()) grads[checkpointed].push_back(p.grad().to_vector<float>());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(GPT, RejectsBadInputsClearly) {
  nn::GPT model({.layers = 1, .heads = 2, .dim = 8, .context = 4, .vocab = 10});
  EXPECT_TRUE(testing::contains(testing::message_of<ShapeError>([&] { model(token_ids(1, 5, 10)); }), "5 tokens do not fit the context of 4"));
  EXPECT_TRUE(testing::contains(testing::message_of<IndexError>([&] { model(Tensor::from_vector(std::vector<int64_t>{1, 10}, {1, 2})); }), "index 10"));
  EXPECT_TRUE(testing::contains(testing::message_of<ShapeError>([&] { model(token_ids(1, 4, 10).view({4})); }), "expected tokens [B, T]"));
  EXPECT_TRUE(testing::contains(testing::message_of<ValueError>([] { nn::GPT({.heads = 3, .dim = 16}); }), "--dim: must be a multiple of --heads (3), got '16'"));
}

}  // namespace
}  // namespace weft
