// The memory of serving a language model (`weft plan --inference`): the weights in their storage
// format, the KV cache, and the activations of a forward, per device, against a device's capacity.
//
//   weights      the Linear weights (the blocks' attention c_attn / c_proj and MLP c_fc / c_proj,
//                and the token embedding, which is the tied output projection) in the weight
//                format; the rest (position embedding, norms, biases: about 1% of GPT-2 small)
//                in fp32 under int8 / int4, in the weight format otherwise
//   KV cache     2 (k and v) x layers x KV heads x head size x context x batch x bytes per element
//   activations  the larger of a prompt's prefill at the whole context (one sequence: weft's server
//                prefills each request alone) and one decode step of the batch, replayed by
//                ActivationTape::forward_peak with nothing kept for a backward
//
// Weight formats, in bytes per weight of an [out, in] Linear weight:
//   fp32 4; fp16, bf16 2;
//   int8 1 + an f32 scale per output row (per-channel, symmetric): out x (in + 4) bytes;
//   int4 groups of 32 along a row with an f32 scale each: 20 bytes per 32 weights, 5 bits a weight,
//        as weft's Int4Linear stores them (GGUF's q4_0 keeps the scale in fp16: 18 bytes, 4.5 bits).
// The KV cache's precision is the one the model computes in: fp32 for fp32 weights, bf16 for bf16,
// fp16 for fp16 and for the weight-only int8 / int4 formats (they compute in 16 bits on a GPU);
// `kv` overrides it. `kv_heads` below the heads is grouped-query attention (Llama 2 70B keeps 8 KV
// heads for 64 query heads): the cache shrinks by heads / kv_heads. weft's own GPT has as many as
// heads; the other parts of the plan are unchanged by it.
//
// As in the training plan, every tensor counts the caching allocator's block for it
// (fresh_block_bytes): weft's server allocates each layer's k and v as one [batch, heads, context,
// head size] tensor (nn::KVCache), which is what kv_cache_bytes counts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "weft/amp/precision.h"
#include "weft/memory/devices.h"
#include "weft/memory/model.h"

namespace weft::memory {

enum class WeightFormat { fp32, fp16, bf16, int8, int4 };
WeightFormat parse_weight_format(std::string_view name);  // ValueError listing the formats
const char* weight_format_name(WeightFormat format);
// The bytes an [out, in] Linear weight takes in `format`, scales included.
int64_t linear_weight_bytes(WeightFormat format, int64_t out, int64_t in);

struct InferenceRequest {
  int64_t batch = 1;  // sequences decoded together, each with the whole context in the cache
  WeightFormat weights = WeightFormat::fp32;
  std::optional<amp::Precision> kv;  // fp32, fp16 or bf16; unset: the model's compute precision
  int64_t kv_heads = 0;              // 0: the model's heads
  std::string device = "H100";
};

struct InferencePlan {
  InferenceRequest request;
  amp::Precision kv = amp::Precision::fp32;
  int64_t kv_heads = 0, head_size = 0;  // 0 when only a parameter count is known
  int64_t quantized_parameters = 0, other_parameters = 0;  // the Linear weights (wte too), the rest
  int64_t weights_bytes = 0;
  bool kv_known = false;         // the architecture is known: the cache and the activations are
  int64_t kv_bytes_per_sequence = 0, kv_cache_bytes = 0;
  int64_t prefill_bytes = 0, decode_bytes = 0, activations_bytes = 0;
  int64_t total_bytes = 0;
  DeviceSpec device;
  bool fits = false;
  int64_t max_batch = 0;         // the most sequences that fit at this context (0: not even one)
};

// Throws ValueError for a batch below 1, kv_heads not dividing the heads, a KV precision other
// than fp32, fp16 and bf16, and an unknown device.
InferencePlan make_inference_plan(const ModelDescription& model, InferenceRequest request);

}  // namespace weft::memory
