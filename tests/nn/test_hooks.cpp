// Module hooks and swappable children (nn/module.h): every call of a child runs its forward pre-
// and post-hooks, named by named_modules(), in the order the model runs; handles remove them;
// the activation checkpoint's recompute runs them again; a hook can replace the input or the
// output; replace_module changes what forward runs and keeps the state-dict names.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/nn/gpt.h"
#include "weft/nn/layers.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/linear.h"
#include "weft/ops/reduce.h"

namespace weft::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

using Log = std::vector<std::string>;

// A pre- and a post-hook on every module, each logging "pre NAME" / "post NAME".
std::vector<RemovableHandle> log_calls(Module& model, Log& log) {
  std::vector<RemovableHandle> handles;
  for (auto& [name, module] : model.named_modules()) {
    handles.push_back(module->register_forward_pre_hook([&log, name](Module&, const Tensor&) {
      log.push_back("pre " + name);
      return std::nullopt;
    }));
    handles.push_back(module->register_forward_hook([&log, name](Module&, const Tensor&, const Tensor&) {
      log.push_back("post " + name);
      return std::nullopt;
    }));
  }
  return handles;
}

// What log_calls records for one GPT block, at "h.i".
void expect_block(Log& expected, const std::string& block) {
  auto leaf = [&](const std::string& name) {
    expected.push_back("pre " + block + "." + name);
    expected.push_back("post " + block + "." + name);
  };
  expected.push_back("pre " + block);
  leaf("ln_1");
  expected.push_back("pre " + block + ".attn");
  leaf("attn.c_attn");
  leaf("attn.c_proj");
  leaf("attn.resid_dropout");
  expected.push_back("post " + block + ".attn");
  leaf("ln_2");
  expected.push_back("pre " + block + ".mlp");
  leaf("mlp.c_fc");
  leaf("mlp.gelu");
  leaf("mlp.c_proj");
  leaf("mlp.dropout");
  expected.push_back("post " + block + ".mlp");
  expected.push_back("post " + block);
}

const GPTConfig kSmall{.layers = 2, .heads = 2, .dim = 8, .context = 8, .vocab = 11};

Tensor tokens(int64_t batch, int64_t length) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * length));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 5 + 3) % kSmall.vocab);
  return Tensor::from_vector(ids, {batch, length});
}

TEST(ModuleHooks, NamedModulesArePreOrderWithDottedNames) {
  GPT model(kSmall);
  std::vector<std::string> names;
  for (const auto& [name, module] : model.named_modules()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("", "wte", "wpe", "drop", "h", "h.0", "h.0.ln_1", "h.0.attn", "h.0.attn.c_attn",
                                 "h.0.attn.c_proj", "h.0.attn.resid_dropout", "h.0.ln_2", "h.0.mlp", "h.0.mlp.c_fc",
                                 "h.0.mlp.gelu", "h.0.mlp.c_proj", "h.0.mlp.dropout", "h.1", "h.1.ln_1", "h.1.attn",
                                 "h.1.attn.c_attn", "h.1.attn.c_proj", "h.1.attn.resid_dropout", "h.1.ln_2", "h.1.mlp",
                                 "h.1.mlp.c_fc", "h.1.mlp.gelu", "h.1.mlp.c_proj", "h.1.mlp.dropout", "ln_f"));
  EXPECT_EQ(model.named_modules()[0].second, &model);
  EXPECT_EQ(&model.get_submodule("h.1.mlp"), model.named_modules()[24].second);
  // A module reachable twice is listed once, under its first name, so it gets one hook.
  auto shared = std::make_shared<Linear>(2, 2);
  Sequential twice(shared, std::make_shared<ReLU>(), shared);
  std::vector<std::string> twice_names;
  for (const auto& [name, module] : twice.named_modules()) twice_names.push_back(name);
  EXPECT_THAT(twice_names, ElementsAre("", "0", "1"));
}

TEST(ModuleHooks, GPTRunsEveryModulesHooksInCallOrder) {
  manual_seed(1);
  GPT model(kSmall);
  Log log;
  std::vector<RemovableHandle> handles = log_calls(model, log);
  Log expected{"pre ", "pre wte", "post wte", "pre wpe", "post wpe", "pre drop", "post drop", "pre h"};
  expect_block(expected, "h.0");
  expect_block(expected, "h.1");
  for (const char* entry : {"post h", "pre ln_f", "post ln_f", "post "}) expected.push_back(entry);

  model(tokens(2, 5));
  EXPECT_THAT(log, ElementsAreArray(expected));

  // The cached forward runs the same hooks in the same order.
  model.eval();
  NoGradGuard no_grad;
  KVCache cache = model.make_kv_cache(2);
  log.clear();
  model(tokens(2, 3), cache);
  EXPECT_THAT(log, ElementsAreArray(expected));

  for (RemovableHandle& handle : handles) handle.remove();
  log.clear();
  model(tokens(2, 1), cache);
  model(tokens(2, 5));
  EXPECT_TRUE(log.empty());
}

TEST(ModuleHooks, NestedSequentialRunsHooksInCallOrder) {
  auto inner = std::make_shared<Sequential>(std::make_shared<Linear>(3, 2), std::make_shared<ReLU>());
  Sequential model(std::make_shared<Linear>(4, 3), inner, std::make_shared<Linear>(2, 1));
  Log log;
  std::vector<RemovableHandle> handles = log_calls(model, log);
  model(Tensor::randn({5, 4}));
  EXPECT_THAT(log, ElementsAre("pre ", "pre 0", "post 0", "pre 1", "pre 1.0", "post 1.0", "pre 1.1", "post 1.1",
                               "post 1", "pre 2", "post 2", "post "));
}

TEST(ModuleHooks, HooksGetTheModuleAndTheTensors) {
  Linear layer(3, 2);
  const Tensor x = Tensor::randn({4, 3});
  Module* pre_module = nullptr;
  Module* post_module = nullptr;
  Tensor pre_input, post_input, post_output;
  RemovableHandle pre = layer.register_forward_pre_hook([&](Module& m, const Tensor& input) {
    pre_module = &m;
    pre_input = input;
    return std::nullopt;
  });
  RemovableHandle post = layer.register_forward_hook([&](Module& m, const Tensor& input, const Tensor& output) {
    post_module = &m;
    post_input = input;
    post_output = output;
    return std::nullopt;
  });
  Tensor y = layer(x);
  EXPECT_EQ(pre_module, &layer);
  EXPECT_EQ(post_module, &layer);
  EXPECT_TRUE(pre_input.is_same(x));
  EXPECT_TRUE(post_input.is_same(x));
  EXPECT_TRUE(post_output.is_same(y));
}

TEST(ModuleHooks, RemovingAHandleStopsItsHookAndIsSafeTwiceAndAfterTheModuleDied) {
  auto layer = std::make_shared<ReLU>();
  int first = 0, second = 0;
  RemovableHandle a = layer->register_forward_pre_hook([&](Module&, const Tensor&) { ++first; return std::nullopt; });
  RemovableHandle b = layer->register_forward_hook([&](Module&, const Tensor&, const Tensor&) { ++second; return std::nullopt; });
  (*layer)(Tensor::ones({2}));
  a.remove();
  (*layer)(Tensor::ones({2}));
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 2);
  a.remove();
  RemovableHandle().remove();
  layer.reset();
  b.remove();
}

TEST(ModuleHooks, AHookMayRemoveHooksWhileTheyRun) {
  ReLU layer;
  Log log;
  RemovableHandle first, second, third;
  // `first` removes itself and `second`: this call still runs the three hooks it started with
  // (torch's behaviour), the next one runs only `third`.
  first = layer.register_forward_pre_hook([&](Module&, const Tensor&) {
    log.push_back("first");
    first.remove();
    second.remove();
    return std::nullopt;
  });
  second = layer.register_forward_pre_hook([&](Module&, const Tensor&) { log.push_back("second"); return std::nullopt; });
  third = layer.register_forward_pre_hook([&](Module&, const Tensor&) { log.push_back("third"); return std::nullopt; });
  layer(Tensor::ones({1}));
  EXPECT_THAT(log, ElementsAre("first", "second", "third"));
  log.clear();
  layer(Tensor::ones({1}));
  EXPECT_THAT(log, ElementsAre("third"));
}

TEST(ModuleHooks, HooksRunAgainWhenACheckpointRecomputes) {
  manual_seed(2);
  Sequential model(std::make_shared<Linear>(4, 4), std::make_shared<ReLU>(), std::make_shared<Linear>(4, 4),
                   std::make_shared<ReLU>());
  model.set_checkpoint_segments(2);  // children 0 and 1 checkpointed, 2 and 3 kept
  Log log;
  std::vector<RemovableHandle> handles = log_calls(model, log);
  Tensor y = model(Tensor::randn({3, 4}).requires_grad_());
  EXPECT_THAT(log, ElementsAre("pre ", "pre 0", "post 0", "pre 1", "post 1", "pre 2", "post 2", "pre 3", "post 3",
                               "post "));
  log.clear();
  sum(y).backward();
  EXPECT_THAT(log, ElementsAre("pre 0", "post 0", "pre 1", "post 1"));
}

TEST(ModuleHooks, APreHookReplacesTheInputAndAPostHookTheOutput) {
  Linear layer(3, 2);
  const Tensor x = Tensor::randn({4, 3});
  const std::vector<double> plain = layer(x).to_vector<double>();
  Tensor zeros = Tensor::zeros({4, 3});
  RemovableHandle pre = layer.register_forward_pre_hook([&](Module&, const Tensor&) -> std::optional<Tensor> { return zeros; });
  // Zero input: every row is the bias.
  std::vector<double> bias = layer.bias.to_vector<double>(), rows;
  for (int i = 0; i < 4; ++i) rows.insert(rows.end(), bias.begin(), bias.end());
  EXPECT_EQ(layer(x).to_vector<double>(), rows);
  // A second pre-hook sees the first one's replacement.
  Tensor seen;
  RemovableHandle look = layer.register_forward_pre_hook([&](Module&, const Tensor& input) {
    seen = input;
    return std::nullopt;
  });
  layer(x);
  EXPECT_TRUE(seen.is_same(zeros));
  pre.remove();

  RemovableHandle post = layer.register_forward_hook(
      [](Module&, const Tensor&, const Tensor& output) -> std::optional<Tensor> { return mul(output, 2.0); });
  std::vector<double> doubled = layer(x).to_vector<double>();
  ASSERT_EQ(doubled.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_DOUBLE_EQ(doubled[i], 2 * plain[i]);
}

TEST(ModuleHooks, ReplacingAChildChangesTheForwardAndKeepsTheNames) {
  manual_seed(3);
  FeedForward mlp(4, 8);
  std::vector<std::string> keys_before;
  for (const auto& [key, t] : mlp.state_dict()) keys_before.push_back(key);
  const Tensor x = Tensor::randn({2, 4});
  const std::vector<double> before = mlp(x).to_vector<double>();

  auto fc = std::make_shared<Linear>(4, 8);
  mlp.replace_module("c_fc", fc);
  EXPECT_EQ(mlp.c_fc, fc);
  EXPECT_EQ(mlp.named_children()[0].second, fc);
  std::vector<std::string> keys_after;
  for (const auto& [key, t] : mlp.state_dict()) keys_after.push_back(key);
  EXPECT_EQ(keys_after, keys_before);
  EXPECT_TRUE(mlp.get_parameter("c_fc.weight").is_same(fc->weight));
  // The forward runs the new c_fc: c_proj(gelu(new c_fc(x))).
  const Tensor expected = (*mlp.c_proj)(gelu(linear(x, fc->weight, fc->bias), GeluApproximation::tanh));
  EXPECT_EQ(mlp(x).to_vector<double>(), expected.to_vector<double>());
  EXPECT_NE(mlp(x).to_vector<double>(), before);
}

TEST(ModuleHooks, ReplacingGPTsEmbeddingChangesTheTiedOutputToo) {
  manual_seed(4);
  GPT model(kSmall);
  model.eval();
  const Tensor ids = tokens(1, 4);
  const std::vector<double> before = model(ids).to_vector<double>();
  auto wte = std::make_shared<Embedding>(kSmall.vocab, kSmall.dim);
  model.replace_module("wte", wte);
  EXPECT_TRUE(model.get_parameter("wte.weight").is_same(wte->weight));
  EXPECT_NE(model(ids).to_vector<double>(), before);
  // A GPT built with the new table in place from the start gives the same logits: the lookup
  // and the tied output projection both read the module now in wte's place.
  GPT reference(kSmall);
  reference.eval();
  reference.load_state_dict(model.state_dict());
  EXPECT_EQ(model(ids).to_vector<double>(), reference(ids).to_vector<double>());
}

TEST(ModuleHooks, ReplaceModuleChecksTheNameAndTheMembersType) {
  TransformerBlock block(8, 2);
  auto ln_1 = block.ln_1;
  EXPECT_THROW(block.replace_module("ln_3", std::make_shared<LayerNorm>(8)), ValueError);
  EXPECT_THROW(block.replace_module("ln_1", nullptr), ValueError);
  // ln_1 is held as a LayerNorm: a Linear cannot take its place, and nothing changes.
  EXPECT_THROW(block.replace_module("ln_1", std::make_shared<Linear>(8, 8)), ValueError);
  EXPECT_EQ(block.ln_1, ln_1);
  EXPECT_EQ(block.named_children()[0].second, ln_1);
  // Sequential's children are reached through the registry: any module fits.
  Sequential chain(std::make_shared<ReLU>(), std::make_shared<ReLU>());
  chain.replace_module("1", std::make_shared<Linear>(2, 3));
  EXPECT_EQ(chain(Tensor::ones({1, 2})).shape(), (Shape{1, 3}));
}

TEST(ModuleHooks, LookupsByDottedName) {
  GPT model(kSmall);
  EXPECT_EQ(&model.get_submodule(""), &model);
  EXPECT_EQ(model.get_submodule("h.1.attn").name(), "MultiheadAttention");
  EXPECT_EQ(model.get_parameter("h.0.mlp.c_fc.weight").shape(), (Shape{32, 8}));
  EXPECT_EQ(model.get_parameter("wte.weight").shape(), (Shape{kSmall.vocab, kSmall.dim}));
  EXPECT_THROW(model.get_submodule("h.2"), ValueError);
  EXPECT_THROW(model.get_parameter("h.0.mlp.c_fc.scale"), ValueError);
  EXPECT_THROW(model.get_parameter("weight"), ValueError);
}

}  // namespace
}  // namespace weft::nn
