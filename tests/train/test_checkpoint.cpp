// Training checkpoints (train/checkpoint.h): optimizer state is saved under the model's parameter
// names, checkpoints keyed by position (written before) still resume to the same state, and a
// name the model does not have is an error that says which.
#include <gtest/gtest.h>

#include <set>

#include "../expect_error.h"
#include "../temp_dir.h"
#include "weft/io/checkpoint_dir.h"
#include "weft/io/safetensors.h"
#include "weft/nn/gpt.h"
#include "weft/ops/reduce.h"
#include "weft/optim/adam.h"
#include "weft/train/checkpoint.h"

namespace weft::train {
namespace {

using testing::contains;
using testing::message_of;

const nn::GPTConfig kConfig{.layers = 2, .heads = 2, .dim = 16, .context = 8, .vocab = 19};

// A tiny GPT (its output projection tied to wte) and an AdamW over its parameters, after two steps.
struct TrainedGpt {
  TrainedGpt() : model(kConfig), optimizer(model.parameters(), optim::AdamWOptions{.lr = 1e-2}) {
    for (int s = 0; s < 2; ++s) step();
  }
  void step() {
    optimizer.zero_grad();
    Tensor tokens = Tensor::from_vector(std::vector<int64_t>{1, 4, 2, 7, 3, 9}, {1, 6});
    sum(model(tokens)).backward();
    optimizer.step();
  }
  nn::GPT model;
  optim::AdamW optimizer;
};

TrainerState at_step(int64_t step) {
  TrainerState state;
  state.step = step;
  return state;
}

// The current checkpoint's optimizer.safetensors, replaced in place by the tests that rewrite it.
std::string optimizer_file(const testing::TempDir& dir) {
  return io::current_checkpoint(dir.path()) + "/optimizer.safetensors";
}

// Writes the checkpoint's optimizer.safetensors with `state` and the metadata checkpoints had before names.
void save_positional(const testing::TempDir& dir, const std::map<std::string, Tensor>& state, int64_t step) {
  io::save_safetensors(optimizer_file(dir), {state.begin(), state.end()},
                       {{"weft.optimizer", "AdamW"}, {"weft.step", std::to_string(step)}});
}

void expect_same_state(const optim::Optimizer& a, const optim::Optimizer& b) {
  ASSERT_EQ(a.params().size(), b.params().size());
  for (size_t i = 0; i < a.params().size(); ++i) {
    EXPECT_EQ(a.step_count(i), b.step_count(i)) << "parameter " << i;
    optim::NamedTensors sa = a.state(i), sb = b.state(i);
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t k = 0; k < sa.size(); ++k)
      EXPECT_EQ(sa[k].second.to_vector<float>(), sb[k].second.to_vector<float>()) << "parameter " << i << " " << sa[k].first;
  }
}

TEST(TrainCheckpoint, OptimizerStateIsKeyedByParameterName) {
  testing::TempDir dir;
  TrainedGpt run;
  save_checkpoint(dir.path(), run.model, "gpt", run.optimizer, at_step(2));

  io::SafetensorsFile file = io::load_safetensors(optimizer_file(dir));
  EXPECT_EQ(file.metadata.at("weft.optimizer_keys"), "parameter names");
  std::set<std::string> keys;
  for (const auto& [key, tensor] : file.tensors) keys.insert(key);
  std::set<std::string> expected;
  for (const auto& [name, tensor] : run.model.named_parameters())
    for (const char* field : {"step", "exp_avg", "exp_avg_sq"}) expected.insert(name + "." + field);
  EXPECT_EQ(keys, expected);
  EXPECT_TRUE(keys.count("wte.weight.exp_avg"));  // the tied output projection has no key of its own
  EXPECT_TRUE(keys.count("h.1.attn.c_attn.weight.exp_avg_sq"));

  TrainedGpt resumed;
  resumed.step();  // different state, which loading must replace
  load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer);
  expect_same_state(run.optimizer, resumed.optimizer);
}

TEST(TrainCheckpoint, PositionalOptimizerStateStillResumes) {
  testing::TempDir dir;
  TrainedGpt run;
  save_checkpoint(dir.path(), run.model, "gpt", run.optimizer, at_step(2));
  save_positional(dir, run.optimizer.state_dict(), 2);  // "0.exp_avg", "0.step", ... as weft wrote them before
  ASSERT_EQ(io::load_safetensors(optimizer_file(dir)).metadata.count("weft.optimizer_keys"), 0u);

  TrainedGpt resumed;
  resumed.step();
  load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer);
  expect_same_state(run.optimizer, resumed.optimizer);
  run.step();
  resumed.step();
  const auto a = run.model.named_parameters(), b = resumed.model.named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].second.to_vector<float>(), b[i].second.to_vector<float>()) << a[i].first;
}

TEST(TrainCheckpoint, UnknownOrIncompleteParameterStateNamesTheParameter) {
  testing::TempDir dir;
  TrainedGpt run;
  save_checkpoint(dir.path(), run.model, "gpt", run.optimizer, at_step(2));
  const io::SafetensorsFile saved = io::load_safetensors(optimizer_file(dir));
  auto rewrite = [&](const std::string& drop, const std::string& rename_to) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [key, tensor] : saved.tensors) {
      if (key != drop) tensors.emplace_back(key, tensor);
      else if (!rename_to.empty()) tensors.emplace_back(rename_to, tensor);
    }
    io::save_safetensors(optimizer_file(dir), tensors, saved.metadata);
  };

  TrainedGpt resumed;
  rewrite("ln_f.bias.step", "final_norm.bias.step");
  std::string renamed = message_of<ValueError>([&] { load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer); });
  EXPECT_TRUE(contains(renamed, "'final_norm.bias'")) << renamed;
  EXPECT_TRUE(contains(renamed, "no parameter of that name")) << renamed;

  rewrite("h.0.mlp.c_fc.weight.exp_avg", "");
  std::string missing = message_of<ValueError>([&] { load_checkpoint(dir.path(), resumed.model, "gpt", resumed.optimizer); });
  EXPECT_TRUE(contains(missing, "'h.0.mlp.c_fc.weight'")) << missing;
  EXPECT_TRUE(contains(missing, "exp_avg")) << missing;
}

TEST(TrainCheckpoint, OptimizerOverForeignTensorsCannotBeSaved) {
  testing::TempDir dir;
  TrainedGpt run;
  Tensor stranger = Tensor::zeros({3}).requires_grad_(true);
  optim::AdamW foreign({stranger});
  std::string message = message_of<ValueError>([&] { save_checkpoint(dir.path(), run.model, "gpt", foreign, {}); });
  EXPECT_TRUE(contains(message, "not one of the model's parameters")) << message;
}

}  // namespace
}  // namespace weft::train
