// GPT-2 style transformer pieces: causal self-attention with a fused q/k/v projection, the
// feed-forward MLP, and the pre-LN block. Parameter names follow GPT-2 (attn.c_attn,
// attn.c_proj, mlp.c_fc, mlp.c_proj, ln_1, ln_2) so GPT-2 checkpoints map by name (Hugging Face
// stores these Linear weights transposed, as Conv1D). `bias` switches the Linear layers' biases;
// dropout (training only) follows the attention and MLP outputs.
//
// The projections (c_attn, c_proj, c_fc) are held as plain Modules, built as Linear: tensor
// parallelism swaps them for its column- and row-parallel Linears with replace_module (see
// nn/module.h), and nothing here depends on their type. Every child is called through its hooks;
// the cached forwards too, through operator()(x, cache, layer).
#pragma once
#include <memory>

#include "weft/nn/activation.h"
#include "weft/nn/kv_cache.h"
#include "weft/nn/linear.h"
#include "weft/nn/norm.h"

namespace weft::nn {

// x [B, T, dim] -> [B, T, dim]; each position attends to itself and the positions before it.
// With a KVCache, x holds the T positions that follow the cache's length(): their keys and values
// are appended to the cache's `layer` and each attends to every cached position and the new ones
// up to itself (the causal alignment of scaled_dot_product_attention with Tq < Tk).
// With KVCaches (one per row, continuous batching), x [B, 1, dim] holds one new position per
// sequence: row b's key and value go to caches[b], and its query attends over that cache alone.
// Dropout (training only) is applied to the output projection; attention-weight dropout would
// need a dropout argument in scaled_dot_product_attention, which it does not have.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t dim, int64_t num_heads, double dropout = 0, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, KVCache& cache, int64_t layer);
  Tensor forward(const Tensor& x, const KVCaches& caches, int64_t layer);
  using Module::operator();
  // The cached forwards between this module's hooks (which see x and the output).
  Tensor operator()(const Tensor& x, KVCache& cache, int64_t layer);
  Tensor operator()(const Tensor& x, const KVCaches& caches, int64_t layer);
  std::string extra_repr() const override;

  const int64_t dim, num_heads;
  std::shared_ptr<Module> c_attn;  // dim -> 3 * dim: q, k, v side by side
  std::shared_ptr<Module> c_proj;  // dim -> dim
  std::shared_ptr<Dropout> resid_dropout;

 private:
  // No cache (nor caches): x is the whole sequence.
  Tensor attend(const Tensor& x, KVCache* cache, const KVCaches* caches, int64_t layer);
};

// Linear(dim, hidden) -> GELU(tanh) -> Linear(hidden, dim) -> Dropout.
class FeedForward : public Module {
 public:
  FeedForward(int64_t dim, int64_t hidden, double dropout = 0, bool bias = true);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Module> c_fc;
  std::shared_ptr<GELU> gelu;
  std::shared_ptr<Module> c_proj;
  std::shared_ptr<Dropout> dropout;
};

// Pre-LN: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)). The cached forwards pass the cache (or the
// caches) and this block's layer index to attn.
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t dim, int64_t num_heads, int64_t mlp_ratio = 4, double dropout = 0, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, KVCache& cache, int64_t layer);
  Tensor forward(const Tensor& x, const KVCaches& caches, int64_t layer);
  using Module::operator();
  // The cached forwards between the hooks.
  Tensor operator()(const Tensor& x, KVCache& cache, int64_t layer);
  Tensor operator()(const Tensor& x, const KVCaches& caches, int64_t layer);

  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<MultiheadAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<FeedForward> mlp;
};

}  // namespace weft::nn
