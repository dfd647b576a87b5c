#include "weft/nn/norm.h"

#include "weft/nn/init.h"
#include "weft/ops/norm.h"

namespace weft::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum)
    : Module("BatchNorm2d"), num_features(num_features), eps(eps), momentum(momentum) {
  WEFT_CHECK(num_features > 0, ValueError, "BatchNorm2d: num_features must be positive, got ", num_features);
  weight = register_parameter("weight", Tensor::empty({num_features}));
  bias = register_parameter("bias", Tensor::empty({num_features}));
  running_mean = register_buffer("running_mean", Tensor::empty({num_features}));
  running_var = register_buffer("running_var", Tensor::empty({num_features}));
  num_batches_tracked = register_buffer("num_batches_tracked", Tensor::empty({}, DType::i64));
  reset_parameters();
}

void BatchNorm2d::reset_parameters() {
  init::ones_(weight);
  init::zeros_(bias);
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  WEFT_CHECK(x.defined() && x.dim() == 4 && x.size(1) == num_features, ShapeError, "BatchNorm2d(", num_features,
             "): expected input [N, ", num_features, ", H, W], got ", x.defined() ? shape_str(x.shape()) : "undefined");
  if (is_training()) num_batches_tracked.fill_(num_batches_tracked.item() + 1);
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum, eps);
}

std::string BatchNorm2d::extra_repr() const { return str(num_features, ", eps=", eps, ", momentum=", momentum); }

LayerNorm::LayerNorm(Shape normalized_shape, double eps)
    : Module("LayerNorm"), normalized_shape(std::move(normalized_shape)), eps(eps) {
  weight = register_parameter("weight", Tensor::ones(this->normalized_shape));
  bias = register_parameter("bias", Tensor::zeros(this->normalized_shape));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

std::string LayerNorm::extra_repr() const {
  std::string dims;
  for (int64_t d : normalized_shape) dims += str(dims.empty() ? "" : ", ", d);
  return str("(", dims, normalized_shape.size() == 1 ? ",)" : ")", ", eps=", eps);
}

}  // namespace weft::nn
