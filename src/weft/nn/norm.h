// Normalisation layers: BatchNorm2d (batch statistics in training, running ones in eval) and
// LayerNorm. Affine weight starts at 1, bias at 0.
#pragma once
#include "weft/nn/module.h"

namespace weft::nn {

// x [N, C, H, W]. Buffers: running_mean (0), running_var (1), num_batches_tracked (i64 0-d), all
// updated by each training forward; the running variance is the unbiased one, as PyTorch's.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  void reset_parameters();  // weight 1, bias 0, running statistics reset
  std::string extra_repr() const override;

  const int64_t num_features;
  const double eps, momentum;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};

// Normalises over the trailing dims `normalized_shape`.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5);
  explicit LayerNorm(int64_t dim) : LayerNorm(Shape{dim}) {}  // LayerNorm({dim}, eps) to set eps
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const Shape normalized_shape;
  const double eps;
  Tensor weight, bias;
};

}  // namespace weft::nn
