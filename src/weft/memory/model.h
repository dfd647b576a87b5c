// ModelDescription: what the memory planner knows about a model. Always its parameter count;
// when the architecture is known (weft's mlp and cnn, any nn::Sequential of the layers below, the
// GPT-2 family) also the ActivationTape of one training step at a given per-device batch, built
// from the layers' shapes and from what each of weft's ops keeps for its backward
// (src/weft/ops/*.cpp), and the largest group of parameters that ZeRO-3 gathers at once.
//
// Invariant: num_parameters equals what the model built by weft's nn layers would have, exactly
// (GPT-2: token and position embeddings, pre-LN blocks with biases, a final LayerNorm, the output
// projection tied to the token embedding).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "weft/core/shape.h"
#include "weft/memory/activation_tape.h"
#include "weft/nn/container.h"
#include "weft/nn/gpt.h"

namespace weft::memory {

// A batch or its micro-batches, and a GPT's sizes other than its layers (nn::kMaxGptLayers): weft
// train's bound (train::kMaxCount), so that the plan's products of them are checked, not absurd.
inline constexpr int64_t kMaxPlanCount = int64_t{1} << 30;

// Bytes per activation element: `element` for what runs in the training precision, `fp32_ops` for
// the ops that mixed precision keeps in f32 (softmax and the loss, as autocast
// does).
struct ActivationFormat {
  int64_t element = 4;
  int64_t fp32_ops = 4;
};

// GPT-2 small (124,439,808 parameters): `weft plan --model gpt2`.
inline constexpr nn::GPTConfig kGpt2Small{.layers = 12, .heads = 12, .dim = 768, .context = 1024, .vocab = 50257};

// The parameters nn::GPT(config) has, and those of one of its blocks (12 dim^2 + 13 dim). The
// planner reads config.context as the sequence length trained on and plans without dropout.
int64_t gpt_parameters(const nn::GPTConfig& config);
int64_t gpt_block_parameters(const nn::GPTConfig& config);

// The shape of a stack of transformer blocks' input: [batch, seq, hidden], `heads` heads; split over
// `tp` tensor-parallel ranks.
struct BlockShape {
  int64_t batch, seq, hidden, heads;
  int64_t tp = 1;
};

// Records one nn::TransformerBlock (pre-LN, causal attention through scaled_dot_product_attention,
// GELU-tanh MLP of width 4 * hidden, no dropout) reading x [batch, seq, hidden]; returns its output.
// With tp > 1, one rank's share of it as dist::parallelize_gpt splits it: its heads' q, k, v and
// 4 hidden / tp of the MLP, the norms and residuals whole, and the copy-to / reduce-from regions
// around the column- and row-parallel layers (the reduce's private copy, the row-parallel bias
// added after it, the copy's gradient summed into a fresh tensor).
ActivationTape::Value record_transformer_block(ActivationTape& tape, ActivationTape::Value x, const BlockShape& shape,
                                              const ActivationFormat& format, const std::string& name);

// One rank's share of a GPT under weft train --parallel tp / pp: the layers split over `tp`
// tensor-parallel ranks (nn::GPTBlockParameter::tp_split) of pipeline stage `stage` of `pp`
// (nn::GPTPartition, the cut dist::GPTStage makes).
struct GptShare {
  int64_t tp = 1, pp = 1, stage = 0;
};

// The names ModelDescription::builtin takes, as an error lists them: "mlp, cnn, gpt or gpt2".
const char* builtin_model_names();

class ModelDescription {
 public:
  // Only a parameter count: no activations, no ZeRO-3 gather size.
  static ModelDescription parameters_only(int64_t count);
  // What `weft train --model NAME` builds with its defaults: "mlp" or "cnn" (image classifiers on
  // [1, 28, 28] images) or "gpt" (nn::GPTConfig{}); or "gpt2", GPT-2 small.
  static ModelDescription builtin(const std::string& name);
  // Throws ValueError unless every size is positive, heads divides dim and the sizes can be counted;
  // with a share, also unless tp divides the heads and the vocabulary and there are at least pp blocks.
  // A share's parameters are the rank's (the last stage's copy of wte counted: it is held).
  static ModelDescription gpt(const nn::GPTConfig& config, GptShare share = {});
  // A classifier trained with cross-entropy on samples of `sample_shape` (no batch dim). Throws
  // ValueError naming a layer the planner does not know.
  static ModelDescription classifier(std::string name, std::shared_ptr<nn::Sequential> model, Shape sample_shape);

  const std::string& name() const { return name_; }
  int64_t num_parameters() const { return num_parameters_; }
  // Element counts of the parameter tensors as weft's layers allocate them; empty when only a count is known.
  const std::vector<int64_t>& parameter_tensors() const { return parameter_tensors_; }
  // The most parameters ZeRO-3 holds unsharded at once: the largest layer with parameters (a
  // transformer block, an embedding); 0 when unknown.
  int64_t largest_unit_parameters() const { return largest_unit_; }
  const std::optional<nn::GPTConfig>& gpt_config() const { return gpt_; }
  bool knows_activations() const { return gpt_.has_value() || classifier_ != nullptr; }
  // The default per-device batch: weft train's 128 images for classifiers, 8 sequences for GPT,
  // 1 for a bare parameter count (whose plan has no activations).
  int64_t default_batch() const { return gpt_ ? 8 : classifier_ ? 128 : 1; }

  // One training step at `batch` samples per device; with `checkpointed` the blocks (GPT) or the
  // layers with parameters and the parameter-free layers after them (classifiers) are segments.
  // A pipeline stage's step is one micro-batch's forward and backward on it: a later stage starts
  // from the activation received, a stage before the last ends by sending its output on (a copy)
  // and its backward starts from the gradient received for it.
  // Throws ValueError when the architecture is unknown (knows_activations() is false).
  ActivationTape step_tape(int64_t batch, const ActivationFormat& format, bool checkpointed) const;
  // A GPT's forward over `seq` new tokens of `batch` sequences, as generation runs it (a prompt's
  // prefill, or a decode step at seq 1): no loss, the logits [batch, seq, vocab] held by the caller.
  // The keys and values go into the KV cache, which is not an activation (the inference plan counts
  // it). Replay it with forward_peak(). Throws ValueError unless the model is a whole GPT.
  ActivationTape inference_tape(int64_t batch, int64_t seq, const ActivationFormat& format) const;

 private:
  std::string name_;
  int64_t num_parameters_ = 0;
  std::vector<int64_t> parameter_tensors_;
  int64_t largest_unit_ = 0;
  std::optional<nn::GPTConfig> gpt_;
  GptShare share_;
  std::shared_ptr<nn::Sequential> classifier_;
  Shape sample_shape_;
};

}  // namespace weft::memory
