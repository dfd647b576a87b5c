#include "weft/nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "weft/core/flag_value.h"
#include "weft/nn/init.h"
#include "weft/nn/transformer.h"
#include "weft/ops/arith.h"
#include "weft/ops/linear.h"

namespace weft::nn {

void GPTConfig::check() const {
  check_flag("--layers", layers, {.min = 1, .max = kMaxGptLayers});
  check_flag("--heads", heads, {.min = 1});
  check_flag("--dim", dim, {.min = 1});
  WEFT_CHECK(dim % heads == 0, ValueError, "--dim: must be a multiple of --heads (", heads, "), got '", dim, "'");
  check_flag("--context", context, {.min = 1});
  check_flag("--vocab", vocab, {.min = 1});
  check_flag("--dropout", dropout, {.min = 0, .max = 1, .max_open = true});
}

std::vector<GPTBlockParameter> GPTConfig::block_parameters() const {
  const int64_t d = dim;
  return {{"ln_1.weight", {d}, false},          {"ln_1.bias", {d}, false},
          {"attn.c_attn.weight", {3 * d, d}, true}, {"attn.c_attn.bias", {3 * d}, true},
          {"attn.c_proj.weight", {d, d}, true},     {"attn.c_proj.bias", {d}, false},
          {"ln_2.weight", {d}, false},          {"ln_2.bias", {d}, false},
          {"mlp.c_fc.weight", {4 * d, d}, true},    {"mlp.c_fc.bias", {4 * d}, true},
          {"mlp.c_proj.weight", {d, 4 * d}, true},  {"mlp.c_proj.bias", {d}, false}};
}

int64_t GPTConfig::num_parameters() const {
  // In 128 bits, which sizes below 2^31 cannot overflow.
  __int128 per_block = 0;
  for (const GPTBlockParameter& p : block_parameters()) {
    __int128 numel = 1;
    for (int64_t size : p.shape) numel *= size;
    per_block += numel;
  }
  const __int128 d = dim, total = per_block * layers + (__int128{vocab} + context) * d + 2 * d;
  return total > INT64_MAX ? INT64_MAX : static_cast<int64_t>(total);
}

int64_t GPTPartition::first_block(int64_t stage) const {
  return stage * (layers / stages) + std::min(stage, layers % stages);
}

int64_t GPTPartition::stage_of(const std::string& name) const {
  if (name.starts_with("ln_f.")) return stages - 1;
  if (!name.starts_with("h.")) return 0;
  const int64_t block = std::stoll(name.substr(2, name.find('.', 2) - 2));
  int64_t stage = 0;
  while (stage + 1 < stages && first_block(stage + 1) <= block) ++stage;
  return stage;
}

GPT::GPT(const GPTConfig& c) : Module("GPT"), config((c.check(), c)) {
  register_module("wte", wte, std::make_shared<Embedding>(c.vocab, c.dim));
  register_module("wpe", wpe, std::make_shared<Embedding>(c.context, c.dim));
  register_module("drop", drop, std::make_shared<Dropout>(c.dropout));
  register_module("h", h, std::make_shared<Sequential>());
  for (int64_t i = 0; i < c.layers; ++i)
    h->push_back(std::make_shared<TransformerBlock>(c.dim, c.heads, /*mlp_ratio=*/4, c.dropout));
  register_module("ln_f", ln_f, std::make_shared<LayerNorm>(c.dim));

  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.layers));
  for (auto& [name, p] : named_parameters()) {
    const bool is_bias = name.ends_with(".bias"), is_norm = name.find("ln_") != std::string::npos;
    if (is_norm) continue;  // LayerNorm's ones and zeros
    if (is_bias) init::zeros_(p);
    else init::normal_(p, 0, name.ends_with("c_proj.weight") ? residual_std : 0.02);
  }
}

Tensor GPT::forward(const Tensor& tokens) {
  WEFT_CHECK(tokens.defined() && tokens.dim() == 2, ShapeError, "GPT: expected tokens [B, T], got ",
             tokens.defined() ? shape_str(tokens.shape()) : "undefined");
  const int64_t T = tokens.size(1);
  WEFT_CHECK(T >= 1 && T <= config.context, ShapeError, "GPT: ", T, " tokens do not fit the context of ",
             config.context);
  Tensor positions = Tensor::arange(T, DType::i64);
  Tensor x = (*drop)(embed(tokens, positions));
  x = (*ln_f)((*h)(x));
  return wte->attend(x);
}

Tensor GPT::embed(const Tensor& tokens, const Tensor& positions) {
  // Two statements, so wte runs before wpe (argument order is unspecified) and hooks see the
  // modules in their registration order; the token embeddings die with this frame, not the forward's.
  Tensor token_embeddings = (*wte)(tokens);
  return add(token_embeddings, (*wpe)(positions));
}

Tensor GPT::forward(const Tensor& tokens, KVCache& cache) {
  WEFT_CHECK(tokens.defined() && tokens.dim() == 2, ShapeError, "GPT: expected tokens [B, T], got ",
             tokens.defined() ? shape_str(tokens.shape()) : "undefined");
  const int64_t B = tokens.size(0), T = tokens.size(1), start = cache.length();
  WEFT_CHECK(cache.layers() == config.layers && cache.batch() == B, ShapeError, "GPT: a KV cache of ", cache.layers(),
             " layers for batch ", cache.batch(), " cannot serve ", config.layers, " layers at batch ", B,
             " (make it with make_kv_cache)");
  WEFT_CHECK(T >= 1 && start + T <= config.context, ShapeError, "GPT: ", start, " cached and ", T,
             " new tokens do not fit the context of ", config.context);
  std::vector<int64_t> positions(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) positions[static_cast<size_t>(t)] = start + t;
  Tensor x = (*drop)(embed(tokens, Tensor::from_vector(positions, {T})));
  x = cached_blocks(x, [&](TransformerBlock& block, const Tensor& y, int64_t i) { return block(y, cache, i); });
  cache.advance(T);
  return wte->attend((*ln_f)(x));
}

Tensor GPT::forward(const Tensor& tokens, const KVCaches& caches) {
  WEFT_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.size(1) == 1 &&
                 tokens.size(0) == static_cast<int64_t>(caches.size()),
             ShapeError, "GPT: expected one token per cache, [", caches.size(), ", 1], got ",
             tokens.defined() ? shape_str(tokens.shape()) : "undefined");
  std::vector<int64_t> positions;
  for (const KVCache* cache : caches) {
    WEFT_CHECK(cache != nullptr && cache->layers() == config.layers && cache->batch() == 1, ShapeError,
               "GPT: each sequence's cache must be make_kv_cache(1)'s");
    WEFT_CHECK(cache->length() < config.context, ShapeError, "GPT: a sequence of ", cache->length(),
               " tokens has no room left in the context of ", config.context);
    positions.push_back(cache->length());
  }
  const int64_t B = tokens.size(0);
  Tensor x = (*drop)(embed(tokens, Tensor::from_vector(positions, {B, 1})));
  x = cached_blocks(x, [&](TransformerBlock& block, const Tensor& y, int64_t i) { return block(y, caches, i); });
  for (KVCache* cache : caches) cache->advance(1);
  return wte->attend((*ln_f)(x));
}

Tensor GPT::cached_blocks(const Tensor& x,
                          const std::function<Tensor(TransformerBlock&, const Tensor&, int64_t)>& block) {
  return h->call_with_hooks(x, [&](const Tensor& input) {
    Tensor y = input;
    for (int64_t i = 0; i < config.layers; ++i) {
      auto* b = dynamic_cast<TransformerBlock*>((*h)[static_cast<size_t>(i)].get());
      WEFT_CHECK(b != nullptr, ValueError, "GPT: the cached forward needs a TransformerBlock at h.", i, ", found a ",
                 (*h)[static_cast<size_t>(i)]->name());
      y = block(*b, y, i);
    }
    return y;
  });
}

Tensor GPT::operator()(const Tensor& tokens, KVCache& cache) {
  return call_with_hooks(tokens, [&](const Tensor& input) { return forward(input, cache); });
}

Tensor GPT::operator()(const Tensor& tokens, const KVCaches& caches) {
  return call_with_hooks(tokens, [&](const Tensor& input) { return forward(input, caches); });
}

KVCache GPT::make_kv_cache(int64_t batch) const {
  // Keys and values in the dtype the model computes in (a bf16 checkpoint's), as attention reads them.
  return KVCache(config.layers, batch, config.heads, config.context, config.dim / config.heads,
                 parameters().front().dtype());
}

void GPT::set_checkpoint_activations(bool on) { h->set_checkpoint_segments(on ? config.layers : 0); }

std::string GPT::extra_repr() const {
  return str("layers=", config.layers, ", heads=", config.heads, ", dim=", config.dim, ", context=", config.context,
             ", vocab=", config.vocab);
}

}  // namespace weft::nn
