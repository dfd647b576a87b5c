#include "weft/memory/inference.h"

#include <algorithm>

#include "weft/core/allocator.h"
#include "weft/core/error.h"

namespace weft::memory {

namespace {

constexpr int64_t kInt4Group = 32, kInt4GroupBytes = kInt4Group / 2 + 4;  // 16 bytes of nibbles, an f32 scale

int64_t checked_product(std::initializer_list<int64_t> factors) {
  int64_t result = 1;
  for (int64_t f : factors)
    WEFT_CHECK(!__builtin_mul_overflow(result, f, &result), ValueError,
               "plan --inference: the sizes given make more than 2^63 bytes; check --batch-size, --context and the "
               "model's sizes");
  return result;
}

int64_t element_bytes(amp::Precision p) { return p == amp::Precision::fp32 ? 4 : 2; }

amp::Precision compute_precision(WeightFormat format) {
  switch (format) {
    case WeightFormat::fp32: return amp::Precision::fp32;
    case WeightFormat::bf16: return amp::Precision::bf16;
    default: return amp::Precision::fp16;
  }
}

// The bytes of a tensor of `elements` kept unquantized beside quantized weights, or in `format`.
int64_t plain_bytes(WeightFormat format, int64_t elements) {
  const bool quantized = format == WeightFormat::int8 || format == WeightFormat::int4;
  return checked_product({elements, quantized ? 4 : element_bytes(compute_precision(format))});
}

}  // namespace

WeightFormat parse_weight_format(std::string_view name) {
  for (WeightFormat f : {WeightFormat::fp32, WeightFormat::fp16, WeightFormat::bf16, WeightFormat::int8, WeightFormat::int4})
    if (name == weight_format_name(f)) return f;
  throw ValueError(str("--precision: under --inference one of fp32, fp16, bf16, int8, int4, got '", name, "'"));
}

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::fp32: return "fp32";
    case WeightFormat::fp16: return "fp16";
    case WeightFormat::bf16: return "bf16";
    case WeightFormat::int8: return "int8";
    case WeightFormat::int4: return "int4";
  }
  return "?";
}

int64_t linear_weight_bytes(WeightFormat format, int64_t out, int64_t in) {
  switch (format) {
    case WeightFormat::int8: return checked_product({out, in + 4});
    case WeightFormat::int4: return checked_product({out, (in + kInt4Group - 1) / kInt4Group, kInt4GroupBytes});
    default: return plain_bytes(format, checked_product({out, in}));
  }
}

InferencePlan make_inference_plan(const ModelDescription& model, InferenceRequest request) {
  WEFT_CHECK(request.batch >= 1 && request.batch <= kMaxPlanCount, ValueError,
             "--batch-size: under --inference the sequences served together, 1 to ", kMaxPlanCount, ", got '",
             request.batch, "'");
  InferencePlan p;
  p.request = request;
  p.device = find_device(request.device);
  p.kv = request.kv.value_or(compute_precision(request.weights));
  WEFT_CHECK(p.kv != amp::Precision::bf16_pure, ValueError, "--kv-precision: fp32, fp16 or bf16, got 'bf16-pure'");
  const std::optional<nn::GPTConfig>& gpt = model.gpt_config();
  if (!gpt) {
    WEFT_CHECK(!model.knows_activations(), ValueError, "plan --inference: ", model.name(),
               " is not a language model; describe a GPT (--model gpt or gpt2, or --layers --dim --heads --vocab "
               "--context) or give --params");
    WEFT_CHECK(request.kv_heads == 0, ValueError,
               "--kv-heads: the KV cache needs the architecture; give --layers --dim --heads --vocab --context");
    // Only a count: every weight in the format, as one row (its scales are unknown without the shapes).
    p.quantized_parameters = model.num_parameters();
    p.weights_bytes = p.total_bytes = linear_weight_bytes(request.weights, 1, model.num_parameters());
  } else {
    const nn::GPTConfig& c = *gpt;
    p.kv_known = true;
    p.kv_heads = request.kv_heads == 0 ? c.heads : request.kv_heads;
    WEFT_CHECK(p.kv_heads >= 1 && c.heads % p.kv_heads == 0, ValueError, "--kv-heads: must divide the ", c.heads,
               " heads (grouped-query attention shares each KV head among heads / kv-heads of them), got '",
               p.kv_heads, "'");
    p.head_size = c.dim / c.heads;
    // Each tensor is its own allocation; a block's Linear weights are its 2-d ones.
    int64_t block_bytes = 0, block_quantized = 0;
    for (const nn::GPTBlockParameter& t : c.block_parameters()) {
      const bool linear = t.shape.size() == 2;
      const int64_t elements = numel(t.shape);
      block_bytes += fresh_block_bytes(linear ? linear_weight_bytes(request.weights, t.shape[0], t.shape[1])
                                              : plain_bytes(request.weights, elements));
      if (linear) block_quantized += elements;
    }
    // The token embedding is the tied output projection, a [vocab, dim] Linear weight: quantized too.
    const int64_t wte = checked_product({c.vocab, c.dim}), wpe = checked_product({c.context, c.dim});
    p.quantized_parameters = checked_product({c.layers, block_quantized}) + wte;
    p.other_parameters = model.num_parameters() - p.quantized_parameters;
    p.weights_bytes = checked_product({c.layers, block_bytes}) +
                      fresh_block_bytes(linear_weight_bytes(request.weights, c.vocab, c.dim)) +
                      fresh_block_bytes(plain_bytes(request.weights, wpe)) +
                      2 * fresh_block_bytes(plain_bytes(request.weights, c.dim));  // ln_f
    const int64_t kv_element = element_bytes(p.kv);
    p.kv_bytes_per_sequence = checked_product({2, c.layers, p.kv_heads, p.head_size, c.context, kv_element});
    auto kv_cache = [&](int64_t batch) {
      return checked_product(
          {2, c.layers, fresh_block_bytes(checked_product({batch, p.kv_heads, c.context, p.head_size, kv_element}))});
    };
    const ActivationFormat format{kv_element, kv_element};
    p.prefill_bytes = model.inference_tape(1, c.context, format).forward_peak().bytes;
    auto decode = [&](int64_t batch) { return model.inference_tape(batch, 1, format).forward_peak().bytes; };
    auto total = [&](int64_t batch) {
      return p.weights_bytes + kv_cache(batch) + std::max(p.prefill_bytes, decode(batch));
    };
    p.decode_bytes = decode(request.batch);
    p.kv_cache_bytes = kv_cache(request.batch);
    p.activations_bytes = std::max(p.prefill_bytes, p.decode_bytes);
    p.total_bytes = total(request.batch);
    // The total grows with the batch: the largest batch within the device, by bisection.
    int64_t low = 0, high = std::min<int64_t>(kMaxPlanCount, p.device.memory_bytes / p.kv_bytes_per_sequence + 1);
    while (low < high) {
      const int64_t mid = low + (high - low + 1) / 2;
      if (total(mid) <= p.device.memory_bytes) low = mid;
      else high = mid - 1;
    }
    p.max_batch = low;
  }
  p.fits = p.total_bytes <= p.device.memory_bytes;
  return p;
}

}  // namespace weft::memory
