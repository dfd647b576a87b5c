// Differentiable activations. Each backward is one fused kernel (Binary::*_backward).
#pragma once
#include "weft/core/tensor.h"

namespace weft {

enum class GeluApproximation { none, tanh };  // none = exact, with erf (PyTorch's default)

Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::none);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

}  // namespace weft

namespace weft {

class Generator;

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when training;
// the identity otherwise. Masks come from `gen` (default_generator() when null).
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

}  // namespace weft
