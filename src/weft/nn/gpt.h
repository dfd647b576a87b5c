// GPT: the GPT-2 language model (Radford et al. 2019), as nanoGPT and Hugging Face build it.
//
//   tokens [B, T] -> dropout(wte(tokens) + wpe(0..T-1)) -> h.0 .. h.{L-1} (pre-LN TransformerBlocks)
//                 -> ln_f -> x wte.weight^T -> logits [B, T, vocab]
//
// The output projection is tied to the token embedding: one [vocab, dim] parameter, listed once
// by parameters() (as "wte.weight"), used twice. Parameter names are GPT-2's without Hugging
// Face's "transformer." prefix: "wte.weight", "h.0.attn.c_attn.weight", "ln_f.bias"; Linear
// weights are stored [out, in] (Hugging Face's Conv1D stores them transposed).
//
// Initialisation is GPT-2's: every Linear and Embedding weight ~ N(0, 0.02), biases zero,
// LayerNorms one and zero, and the two projections that write into the residual stream
// (attn.c_proj and mlp.c_proj) ~ N(0, 0.02 / sqrt(2 layers)), so the residual's variance does
// not grow with depth.
//
// Generation (nn/generate.h) runs the cached forward: with a KVCache from make_kv_cache, tokens
// holds only the positions after the cache's length(), so a prompt is one forward and each new
// token one more of a single position. Positions continue from the cache's length, and the
// logits equal, up to f32 rounding, those of the uncached forward over the whole sequence at the
// same positions.
// Call it as model(tokens, cache): the hooks of GPT, h, each block and its children run as in the
// uncached call (see nn/module.h; they see the tokens and activations, not the cache).
//
// Tensor parallelism puts a vocabulary-parallel embedding in wte's place (replace_module): the
// tied output projection is wte's attend, so it follows.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/shape.h"
#include "weft/nn/activation.h"
#include "weft/nn/container.h"
#include "weft/nn/kv_cache.h"
#include "weft/nn/linear.h"
#include "weft/nn/norm.h"

namespace weft::nn {

// Each block is a dozen modules and tensors: a hundred thousand take minutes and gigabytes to
// build however narrow they are, so the depth is bounded (GPT-3 has 96).
inline constexpr int64_t kMaxGptLayers = 1024;

// One of a block's parameters, named within the block ("attn.c_attn.weight"). `tp_split`:
// tensor parallelism (dist/tensor_parallel.h, Megatron-LM's layout) gives each rank 1 / tp of it;
// the norms and the row-parallel layers' biases are whole on every rank.
struct GPTBlockParameter {
  std::string name;
  Shape shape;
  bool tp_split;
};

// The defaults are the model `weft train --model gpt` builds and `weft plan --model gpt` plans
// (its vocabulary is the byte tokenizer's).
struct GPTConfig {
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t dim = 128;
  int64_t context = 128;  // the longest sequence: wpe has this many rows
  int64_t vocab = 256;
  double dropout = 0;

  // A size that is not positive, more than kMaxGptLayers layers, or heads not dividing dim →
  // ValueError naming the flag.
  void check() const;
  // The parameters GPT(*this) holds, counted without building it, so that a config read from a
  // file can be checked against the file's tensors before anything is allocated (sizes below 2^31;
  // INT64_MAX when the count does not fit).
  int64_t num_parameters() const;
  // The parameters of each block of GPT(*this), in the order the block registers them.
  std::vector<GPTBlockParameter> block_parameters() const;
};

// A GPT cut by blocks into pipeline stages: dist::GPTStage cuts it so and the memory planner
// (memory/model.h) plans each stage's share by the same cut. Stage s holds blocks
// [first_block(s), first_block(s + 1)): L / P each, the remainder one more to the first stages
// (10 over 4: 3, 3, 2, 2); the first stage holds the embeddings (wte, wpe), the last the final
// norm and the output projection, tied to wte (with P > 1 its own copy of wte.weight).
struct GPTPartition {
  int64_t layers = 1, stages = 1;

  int64_t first_block(int64_t stage) const;  // first_block(stages) == layers
  bool holds_embeddings(int64_t stage) const { return stage == 0; }
  bool holds_head(int64_t stage) const { return stage == stages - 1; }
  // The stage holding the whole GPT's parameter `name`: the block's for "h.N...", the last for the
  // final norm, the first for the embeddings (the one whose copy the last stage holds).
  int64_t stage_of(const std::string& name) const;
};

class TransformerBlock;

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config);
  // tokens: i64 [B, T] with 1 <= T <= context and every id below vocab (IndexError otherwise).
  Tensor forward(const Tensor& tokens) override;
  // tokens: i64 [B, T], the positions cache.length() .. cache.length() + T - 1 -> their logits
  // [B, T, vocab]; appends their keys and values to the cache. Past the context → ShapeError.
  // Inference only (under NoGradGuard; see KVCache).
  Tensor forward(const Tensor& tokens, KVCache& cache);
  // Continuous batching's decode step: tokens i64 [B, 1], the next token of each of B sequences,
  // caches[b] row b's own (batch 1) at its own length, which is that token's position -> logits
  // [B, 1, vocab]; each cache advances by one. The layers' GEMMs take the B rows together,
  // attention runs per sequence over its cache; a sequence's logits are those of the one-cache
  // forward (to the rounding of the GEMMs' other row count). Inference only.
  Tensor forward(const Tensor& tokens, const KVCaches& caches);
  using Module::operator();
  // The cached forwards between the hooks.
  Tensor operator()(const Tensor& tokens, KVCache& cache);
  Tensor operator()(const Tensor& tokens, const KVCaches& caches);
  // An empty cache for `batch` sequences of up to `context` tokens, one layer per block.
  KVCache make_kv_cache(int64_t batch = 1) const;
  // Recompute each block's activations in backward instead of keeping them (all blocks but the
  // last; see Sequential::set_checkpoint_segments).
  void set_checkpoint_activations(bool on);
  std::string extra_repr() const override;

  const GPTConfig config;
  std::shared_ptr<Embedding> wte;  // Embedding(vocab, dim), also the output projection (attend)
  std::shared_ptr<Module> wpe;     // Embedding(context, dim)
  std::shared_ptr<Dropout> drop;  // on the embeddings' sum, training only
  std::shared_ptr<Sequential> h;  // the TransformerBlocks
  std::shared_ptr<LayerNorm> ln_f;

 private:
  // wte(tokens) + wpe(positions), wte called first.
  Tensor embed(const Tensor& tokens, const Tensor& positions);
  // The blocks in order, each called as `block(x, i)` between h's hooks.
  Tensor cached_blocks(const Tensor& x, const std::function<Tensor(TransformerBlock&, const Tensor&, int64_t)>& block);
};

}  // namespace weft::nn
