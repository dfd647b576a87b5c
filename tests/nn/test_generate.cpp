// generate and sample_token (nn/generate.h): the cache changes nothing but the speed, seeds
// reproduce, and the sampling options do what they say.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "expect_error.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/random.h"
#include "weft/nn/generate.h"
#include "weft/ops/arith.h"

namespace weft {
namespace {

using testing::contains;
using testing::message_of;

const nn::GPTConfig kConfig{.layers = 2, .heads = 2, .dim = 32, .context = 40, .vocab = 53};
const std::vector<int64_t> kPrompt = {3, 17, 17, 40, 8, 1};

// Weights large enough that the model prefers some tokens strongly: greedy runs then depend on
// every position's logits, not on near-ties.
std::shared_ptr<nn::GPT> peaked_gpt() {
  manual_seed(11);
  auto model = std::make_shared<nn::GPT>(kConfig);
  NoGradGuard no_grad;
  for (Tensor& p : model->parameters()) p.copy_(mul(p, 10.0));
  model->eval();
  return model;
}

// Continuous batching's step: sequences at different lengths, each with its own cache, decoded in
// one forward, get the logits each gets alone; the caches advance by one each.
TEST(Generate, SequencesDecodedTogetherGetTheLogitsEachGetsAlone) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  NoGradGuard no_grad;
  const std::vector<std::vector<int64_t>> prompts = {{3, 17, 17}, {5}, {40, 8, 1, 9, 2, 2, 30}};
  const std::vector<int64_t> next = {4, 50, 0};
  std::vector<nn::KVCache> together, alone;
  std::vector<std::vector<float>> expected;
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (auto* caches : {&together, &alone}) {
      caches->push_back(model->make_kv_cache(1));
      (*model)(Tensor::from_vector(prompts[i], {1, static_cast<int64_t>(prompts[i].size())}), caches->back());
    }
    expected.push_back((*model)(Tensor::from_vector(std::vector<int64_t>{next[i]}, {1, 1}), alone[i]).to_vector<float>());
  }
  nn::KVCaches caches;
  for (nn::KVCache& c : together) caches.push_back(&c);
  const Tensor logits = (*model)(Tensor::from_vector(next, {3, 1}), caches);
  ASSERT_EQ(logits.shape(), (Shape{3, 1, kConfig.vocab}));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<float> got = logits.select(0, static_cast<int64_t>(i)).to_vector<float>();
    for (size_t v = 0; v < got.size(); ++v)
      EXPECT_NEAR(got[v], expected[i][v], 1e-4 * (1 + std::abs(expected[i][v]))) << "sequence " << i << ", token " << v;
    EXPECT_EQ(together[i].length(), static_cast<int64_t>(prompts[i].size()) + 1);
  }
  EXPECT_TRUE(contains(message_of<ShapeError>([&] { (*model)(Tensor::from_vector(next, {3, 1}), nn::KVCaches{caches[0]}); }),
                       "one token per cache"));
}

// The same step with the sequences in slots of one cache (continuous batching's layout): one
// decode_attention call per layer instead of attention per sequence, the same logits.
TEST(Generate, SequencesInSlotsOfOneCacheGetTheLogitsEachGetsAlone) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  NoGradGuard no_grad;
  const std::vector<std::vector<int64_t>> prompts = {{3, 17, 17}, {5}, {40, 8, 1, 9, 2, 2, 30}};
  const std::vector<int64_t> next = {4, 50, 0}, slot_of = {2, 0, 3};
  const nn::KVCache shared = model->make_kv_cache(4);
  std::vector<nn::KVCache> slots, alone;
  std::vector<std::vector<float>> expected;
  for (size_t i = 0; i < prompts.size(); ++i) {
    slots.push_back(shared.slot(slot_of[i]));
    alone.push_back(model->make_kv_cache(1));
    const Tensor prompt = Tensor::from_vector(prompts[i], {1, static_cast<int64_t>(prompts[i].size())});
    (*model)(prompt, slots.back());
    (*model)(prompt, alone.back());
    expected.push_back((*model)(Tensor::from_vector(std::vector<int64_t>{next[i]}, {1, 1}), alone[i]).to_vector<float>());
  }
  nn::KVCaches caches;
  for (nn::KVCache& c : slots) caches.push_back(&c);
  // Two steps: the second reads the keys the first wrote into the slots.
  for (int step = 0; step < 2; ++step) {
    const Tensor logits = (*model)(Tensor::from_vector(next, {3, 1}), caches);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<float> got = logits.select(0, static_cast<int64_t>(i)).to_vector<float>();
      for (size_t v = 0; v < got.size(); ++v)
        EXPECT_NEAR(got[v], expected[i][v], 1e-4 * (1 + std::abs(expected[i][v]))) << "step " << step << ", sequence " << i;
      if (step == 0)
        expected[i] = (*model)(Tensor::from_vector(std::vector<int64_t>{next[i]}, {1, 1}), alone[i]).to_vector<float>();
    }
  }
  EXPECT_EQ(slots[1].length(), 3);
  EXPECT_EQ(slots[2].slot_index(), 3);
  EXPECT_TRUE(contains(message_of<ValueError>([&] { shared.slot(0).slot(0); }), "no slots of its own"));
  nn::KVCache again = shared.slot(2);
  again.advance(3);
  caches[1] = &again;  // slot 2 twice
  EXPECT_TRUE(contains(message_of<ValueError>([&] { (*model)(Tensor::from_vector(next, {3, 1}), caches); }),
                       "taken twice"));
}

TEST(Generate, GreedyWithTheCacheEqualsRecomputingTheWholeSequence) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  const nn::GenerateOptions cached{.max_tokens = 30, .temperature = 0};
  nn::GenerateOptions recomputed = cached;
  recomputed.use_kv_cache = false;
  const std::vector<int64_t> tokens = nn::generate(*model, kPrompt, cached);
  ASSERT_EQ(tokens.size(), 30u);
  EXPECT_EQ(tokens, nn::generate(*model, kPrompt, recomputed));
  EXPECT_GT(std::set<int64_t>(tokens.begin(), tokens.end()).size(), 1u) << "a constant run would test little";
}

TEST(Generate, SampledWithTheCacheEqualsRecomputing) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  const nn::GenerateOptions cached{.max_tokens = 30, .temperature = 1.0, .top_k = 10, .seed = 4};
  nn::GenerateOptions recomputed = cached;
  recomputed.use_kv_cache = false;
  EXPECT_EQ(nn::generate(*model, kPrompt, cached), nn::generate(*model, kPrompt, recomputed));
}

TEST(Generate, TheSameSeedGivesTheSameTokensAndAnotherSeedOthers) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  const nn::GenerateOptions a{.max_tokens = 25, .temperature = 2.0, .seed = 1};
  nn::GenerateOptions b = a;
  b.seed = 2;
  EXPECT_EQ(nn::generate(*model, kPrompt, a), nn::generate(*model, kPrompt, a));
  EXPECT_NE(nn::generate(*model, kPrompt, a), nn::generate(*model, kPrompt, b));
}

TEST(Generate, TopKOneIsGreedy) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  EXPECT_EQ(nn::generate(*model, kPrompt, {.max_tokens = 20, .temperature = 3.0, .top_k = 1, .seed = 9}),
            nn::generate(*model, kPrompt, {.max_tokens = 20, .temperature = 0}));
}

TEST(Generate, FillsTheContextExactly) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  const int64_t room = kConfig.context - std::ssize(kPrompt);
  EXPECT_EQ(std::ssize(nn::generate(*model, kPrompt, {.max_tokens = room})), room);
  EXPECT_TRUE(nn::generate(*model, kPrompt, {.max_tokens = 0}).empty());
}

TEST(Generate, RunsWithoutGradientsWhateverTheCallersMode) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  ASSERT_TRUE(is_grad_enabled());
  EXPECT_EQ(nn::generate(*model, kPrompt, {.max_tokens = 3}).size(), 3u);  // the cache would refuse history
  EXPECT_TRUE(is_grad_enabled()) << "the caller's mode is restored";
}

TEST(Generate, RejectsWhatCannotBeGenerated) {
  std::shared_ptr<nn::GPT> model = peaked_gpt();
  auto error = [&](const std::vector<int64_t>& prompt, const nn::GenerateOptions& options) {
    return message_of<Error>([&] { nn::generate(*model, prompt, options); });
  };
  EXPECT_TRUE(contains(error({}, {}), "the prompt is empty"));
  EXPECT_TRUE(contains(error(std::vector<int64_t>(41, 1), {.max_tokens = 0}),
                       "the prompt is 41 tokens, longer than the model's context of 40 tokens"));
  EXPECT_TRUE(contains(error(kPrompt, {.max_tokens = 35}),
                       "the prompt's 6 tokens and 35 generated ones do not fit the model's context of 40 tokens: "
                       "ask for at most --max-tokens 34"));
  EXPECT_TRUE(contains(error({1, 53}, {.max_tokens = 1}), "token id 53, outside the model's vocabulary of 53"));
  EXPECT_TRUE(contains(error(kPrompt, {.temperature = -0.5}), "--temperature: must be a finite non-negative number, got '-0.5'"));
  EXPECT_TRUE(contains(error(kPrompt, {.temperature = NAN}), "--temperature: must be a finite non-negative number, got 'nan'"));
  EXPECT_TRUE(contains(error(kPrompt, {.top_k = -1}), "--top-k: must be a non-negative whole number, got '-1'"));
  EXPECT_TRUE(contains(error(kPrompt, {.max_tokens = -1}), "--max-tokens: must be a non-negative whole number, got '-1'"));
  model->train();
  EXPECT_TRUE(contains(error(kPrompt, {}), "training mode"));
}

TEST(SampleToken, GreedyTakesTheLowestIdAmongTheMostLikely) {
  Generator gen(0);
  EXPECT_EQ(nn::sample_token({0.5f, 2.0f, -1.0f, 2.0f}, {.temperature = 0}, gen), 1);
  EXPECT_EQ(nn::sample_token({0.5f, 2.0f, 9.0f}, {.temperature = 0, .vocab_limit = 2}, gen), 1)
      << "ids from vocab_limit up are never chosen";
}

TEST(SampleToken, DrawsInProportionToTheSoftmax) {
  Generator gen(3);
  const std::vector<float> logits = {std::log(0.7f), std::log(0.2f), std::log(0.1f)};
  std::map<int64_t, int> counts;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[nn::sample_token(logits, {.temperature = 1.0}, gen)];
  EXPECT_NEAR(counts[0] / double(draws), 0.7, 0.015);
  EXPECT_NEAR(counts[1] / double(draws), 0.2, 0.015);
  EXPECT_NEAR(counts[2] / double(draws), 0.1, 0.015);

  // Temperature 2 flattens: p ∝ sqrt(0.7), sqrt(0.2), sqrt(0.1).
  counts.clear();
  for (int i = 0; i < draws; ++i) ++counts[nn::sample_token(logits, {.temperature = 2.0}, gen)];
  const double total = std::sqrt(0.7) + std::sqrt(0.2) + std::sqrt(0.1);
  EXPECT_NEAR(counts[0] / double(draws), std::sqrt(0.7) / total, 0.015);
  EXPECT_NEAR(counts[2] / double(draws), std::sqrt(0.1) / total, 0.015);
}

TEST(SampleToken, TopKKeepsOnlyTheKMostLikely) {
  Generator gen(5);
  const std::vector<float> logits = {0.0f, 5.0f, 4.9f, 1.0f, 4.8f};
  std::map<int64_t, int> counts;
  for (int i = 0; i < 3000; ++i) ++counts[nn::sample_token(logits, {.temperature = 5.0, .top_k = 2}, gen)];
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_GT(counts[1], 1000);
  EXPECT_GT(counts[2], 1000);
}

}  // namespace
}  // namespace weft
