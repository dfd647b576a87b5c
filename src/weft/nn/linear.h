// Dense layers: Linear (an affine map) and Embedding (a table lookup), with PyTorch's default
// initialisation. reset_parameters redraws them from `gen`.
#pragma once
#include <memory>
#include "weft/core/random.h"
#include "weft/nn/module.h"

namespace weft::nn {

// y = x W^T + b; W [out, in] ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with a = sqrt(5)), b likewise.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  void reset_parameters(Generator& gen = default_generator());
  std::string extra_repr() const override;

  const int64_t in_features, out_features;
  Tensor weight, bias;  // bias undefined when disabled
};

// indices (i64, any shape) -> indices.shape + [dim]; weight [num_embeddings, dim] ~ N(0, 1).
// attend(x) = x W^T: x [..., dim] scored against every row, [..., num_embeddings] (Flax's name), a
// language model's output projection tied to its token embedding. Tensor parallelism overrides
// both with the vocabulary-parallel versions (dist/tensor_parallel.h).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) override;
  virtual Tensor attend(const Tensor& x);
  // The same module over its own copy of the table: a pipeline's last stage projects with one, kept
  // equal to the first stage's by summing their gradients (dist/pipeline.h).
  virtual std::shared_ptr<Embedding> with_copied_table() const;
  void reset_parameters(Generator& gen = default_generator());
  std::string extra_repr() const override;

  // A module named `name` holding `weight` [num_embeddings, dim] as it is, drawing nothing (the
  // slices and copies that tensor and pipeline parallelism cut from a whole model's table).
  Embedding(const char* name, Tensor weight);

  const int64_t num_embeddings, embedding_dim;
  Tensor weight;
};

}  // namespace weft::nn
