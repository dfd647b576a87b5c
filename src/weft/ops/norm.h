// Normalisation layers' functional forms.
#pragma once
#include "weft/core/tensor.h"

namespace weft {

// x [N, C, ...]. In training, normalises with the batch statistics over all dims but C and
// updates running_mean / running_var in place (unbiased variance, as PyTorch) when defined;
// in eval, uses the running statistics. weight / bias [C] may be undefined.
Tensor batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
// Normalises over the trailing dims given by normalized_shape; weight / bias of that shape or undefined.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps = 1e-5);

}  // namespace weft
