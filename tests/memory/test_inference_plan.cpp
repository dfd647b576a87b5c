// `weft plan --inference` against what weft allocates when it serves a GPT: the weights of the
// model built, the KV cache the server's continuous batcher allocates at its start, and the
// caching allocator's peak over a prompt's prefill and a decode step. And the arithmetic of the
// formats the plan prices (int8 per row, int4 in groups of 32, grouped-query attention's cache).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "expect_error.h"
#include "weft/autograd/grad_mode.h"
#include "weft/core/allocator.h"
#include "weft/core/random.h"
#include "weft/memory/inference.h"
#include "weft/nn/gpt.h"
#include "weft/serve/continuous.h"

namespace weft::memory {
namespace {

// What is allocated now, with the allocator's cache emptied first: the plan counts fresh blocks
// (fresh_block_bytes), and a block served from a cache that earlier tests in this process filled
// can be smaller (a split segment) or larger.
int64_t allocated_now() {
  CachingAllocator::cpu().empty_cache();
  return CachingAllocator::cpu().stats().allocated_bytes;
}

void expect_within(const char* what, int64_t predicted, int64_t measured, double tolerance) {
  const double error = static_cast<double>(predicted - measured) / static_cast<double>(measured);
  std::printf("%s: planned %ld bytes (%s), allocated %ld bytes (%s), error %+.2f%%\n", what, long(predicted),
              format_bytes(predicted).c_str(), long(measured), format_bytes(measured).c_str(), 100 * error);
  EXPECT_LE(std::abs(error), tolerance) << what << ": planned " << predicted << ", allocated " << measured;
}

const nn::GPTConfig kConfig{.layers = 3, .heads = 4, .dim = 96, .context = 192, .vocab = 500};

InferenceRequest fp32_on_cpu(int64_t batch) {
  return {.batch = batch, .weights = WeightFormat::fp32, .kv = std::nullopt, .kv_heads = 0, .device = "cpu"};
}

InferenceRequest on_h100(int64_t batch, WeightFormat weights, int64_t kv_heads = 0) {
  return {.batch = batch, .weights = weights, .kv = std::nullopt, .kv_heads = kv_heads, .device = "H100"};
}

// The server's KV cache is planned within 5% (the bound); it comes out exact, because the plan
// counts the allocator's block for each layer's k and v as nn::KVCache allocates them.
TEST(InferencePlanTest, KvCacheIsWhatTheServersBatcherAllocates) {
  manual_seed(0);
  nn::GPT model(kConfig);
  for (int64_t max_batch : {1, 5, 16}) {
    const int64_t before = allocated_now();
    serve::ContinuousBatcher batcher(model, serve::BatchOptions{.max_batch = max_batch});
    const int64_t measured = allocated_now() - before;
    const InferencePlan plan = make_inference_plan(ModelDescription::gpt(kConfig), fp32_on_cpu(max_batch));
    expect_within(str("KV cache of --max-batch ", max_batch).c_str(), plan.kv_cache_bytes, measured, 0.05);
    EXPECT_EQ(plan.kv_bytes_per_sequence, 2 * kConfig.layers * kConfig.context * kConfig.dim * 4);
  }
}

TEST(InferencePlanTest, Fp32WeightsAreTheModelsParameters) {
  const int64_t before = allocated_now();
  nn::GPT model(kConfig);
  const InferencePlan plan = make_inference_plan(ModelDescription::gpt(kConfig), fp32_on_cpu(1));
  expect_within("fp32 weights", plan.weights_bytes, allocated_now() - before, 0.05);
  EXPECT_EQ(plan.quantized_parameters + plan.other_parameters, model.num_parameters());
}

// The activations: the allocator's peak above the weights and cache while a whole-context prompt
// is prefilled, and while a decode step runs for a batch, under NoGradGuard as generation runs.
TEST(InferencePlanTest, ActivationsMatchTheAllocatorsPeakInPrefillAndDecode) {
  manual_seed(0);
  nn::GPT model(kConfig);
  const int64_t batch = 6;
  const InferencePlan plan = make_inference_plan(ModelDescription::gpt(kConfig), fp32_on_cpu(batch));
  NoGradGuard no_grad;
  {
    nn::KVCache cache = model.make_kv_cache(1);
    std::vector<int64_t> ids(static_cast<size_t>(kConfig.context));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 31) % kConfig.vocab);
    Tensor prompt = Tensor::from_vector(ids, {1, kConfig.context});
    const int64_t before = allocated_now();
    CachingAllocator::cpu().reset_peak_stats();
    Tensor logits = model(prompt, cache);
    expect_within("prefill of a whole-context prompt", plan.prefill_bytes,
                  CachingAllocator::cpu().stats().peak_allocated_bytes - before, 0.10);
  }
  {
    nn::KVCache shared = model.make_kv_cache(batch);
    std::vector<nn::KVCache> slots;
    for (int64_t row = 0; row < batch; ++row) slots.push_back(shared.slot(row));
    nn::KVCaches caches;
    for (nn::KVCache& slot : slots) caches.push_back(&slot);
    Tensor tokens = Tensor::zeros({batch, 1}, DType::i64);
    const int64_t before = allocated_now();
    CachingAllocator::cpu().reset_peak_stats();
    Tensor logits = model(tokens, caches);
    expect_within("a decode step of 6 sequences", plan.decode_bytes,
                  CachingAllocator::cpu().stats().peak_allocated_bytes - before, 0.10);
  }
}

TEST(InferencePlanTest, FormatsCostTheirBytesPerWeight) {
  EXPECT_EQ(linear_weight_bytes(WeightFormat::fp32, 10, 64), 10 * 64 * 4);
  EXPECT_EQ(linear_weight_bytes(WeightFormat::bf16, 10, 64), 10 * 64 * 2);
  EXPECT_EQ(linear_weight_bytes(WeightFormat::int8, 10, 64), 10 * (64 + 4));  // a byte each, an f32 scale a row
  EXPECT_EQ(linear_weight_bytes(WeightFormat::int4, 10, 64), 10 * 2 * 20);    // two groups of 32 a row, an f32 scale each
  EXPECT_EQ(linear_weight_bytes(WeightFormat::int4, 10, 65), 10 * 3 * 20);    // a partial group is a whole one
  // The Linear weights shrink, the tied token embedding among them; the position embedding, norms
  // and biases stay fp32 beside them. Each
  // tensor is an allocation of its own, rounded up by the allocator (2 MiB segments for the large).
  const ModelDescription gpt2 = ModelDescription::gpt(kGpt2Small);
  const InferencePlan fp32 = make_inference_plan(gpt2, on_h100(1, WeightFormat::fp32));
  const InferencePlan int8 = make_inference_plan(gpt2, on_h100(1, WeightFormat::int8));
  const InferencePlan int4 = make_inference_plan(gpt2, on_h100(1, WeightFormat::int4));
  const int64_t linear = 12 * 12 * 768 * 768 + 50257 * 768, rows = 12 * (3 * 768 + 768 + 4 * 768 + 768) + 50257;
  EXPECT_EQ(int8.quantized_parameters, linear);
  EXPECT_EQ(int8.quantized_parameters + int8.other_parameters, gpt2.num_parameters());
  const int64_t other = 4 * int8.other_parameters, rounding = (16 * 12 + 4) * (int64_t{2} << 20);
  for (const auto& [plan, exact] : {std::pair{fp32, 4 * gpt2.num_parameters()},
                                    std::pair{int8, other + linear + 4 * rows}, std::pair{int4, other + (linear / 768) * 24 * 20}}) {
    EXPECT_GE(plan.weights_bytes, exact) << weight_format_name(plan.request.weights);
    EXPECT_LE(plan.weights_bytes, exact + rounding) << weight_format_name(plan.request.weights);
  }
  EXPECT_LT(int4.weights_bytes, int8.weights_bytes);
  EXPECT_LT(2 * int8.weights_bytes, fp32.weights_bytes + other);
  // The weights do not change the cache, but its precision does: fp16 beside the 16-bit compute.
  EXPECT_EQ(int4.kv, amp::Precision::fp16);
  EXPECT_EQ(fp32.kv, amp::Precision::fp32);
  EXPECT_EQ(2 * int4.kv_bytes_per_sequence, fp32.kv_bytes_per_sequence);
}

// "Does a 4-bit 70B model serve batch 8 at context 4096 on one 80 GB card": with Llama 2 70B's
// grouped-query attention (8 KV heads), yes; with a KV head per head, the cache alone is 86 GB.
TEST(InferencePlanTest, GroupedQueryAttentionDividesTheCache) {
  const nn::GPTConfig llama_like{.layers = 80, .heads = 64, .dim = 8192, .context = 4096, .vocab = 32000};
  const ModelDescription model = ModelDescription::gpt(llama_like);
  InferenceRequest request{.batch = 8, .weights = WeightFormat::int4, .kv = std::nullopt, .kv_heads = 8, .device = "H100"};
  const InferencePlan gqa = make_inference_plan(model, request);
  EXPECT_EQ(gqa.kv_cache_bytes, int64_t{2} * 80 * 8 * 128 * 4096 * 8 * 2);
  EXPECT_TRUE(gqa.fits);
  request.kv_heads = 0;
  const InferencePlan mha = make_inference_plan(model, request);
  EXPECT_EQ(mha.kv_cache_bytes, 8 * gqa.kv_cache_bytes);
  EXPECT_FALSE(mha.fits);
  EXPECT_GE(mha.max_batch, 1);
  EXPECT_LT(mha.max_batch, 8);
  // The largest batch is the edge: one more sequence does not fit.
  request.batch = mha.max_batch;
  EXPECT_TRUE(make_inference_plan(model, request).fits);
  request.batch = mha.max_batch + 1;
  EXPECT_FALSE(make_inference_plan(model, request).fits);
}

TEST(InferencePlanTest, ImpossibleRequestsAreRefused) {
  const ModelDescription gpt = ModelDescription::gpt(kConfig);
  auto refusal = [](const ModelDescription& model, const InferenceRequest& request) {
    return testing::message_of<ValueError>([&] { make_inference_plan(model, request); });
  };
  EXPECT_PRED2(testing::contains, refusal(gpt, on_h100(1, WeightFormat::fp32, 3)), "--kv-heads: must divide the 4 heads");
  EXPECT_PRED2(testing::contains, refusal(gpt, on_h100(0, WeightFormat::fp32)), "--batch-size");
  EXPECT_PRED2(testing::contains, refusal(ModelDescription::builtin("mlp"), on_h100(1, WeightFormat::fp32)),
               "not a language model");
  EXPECT_PRED2(testing::contains, refusal(ModelDescription::parameters_only(1000), on_h100(1, WeightFormat::int8, 2)),
               "--kv-heads: the KV cache needs the architecture");
  EXPECT_PRED2(testing::contains, testing::message_of<ValueError>([] { parse_weight_format("int3"); }),
               "fp32, fp16, bf16, int8, int4");
}

}  // namespace
}  // namespace weft::memory
