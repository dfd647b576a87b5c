// Differentiable activations. Each backward is one fused kernel (cpu::Binary::*_backward).
#pragma once
#include "weft/core/tensor.h"

namespace weft {

enum class GeluApproximation { none, tanh };  // none = exact, with erf (PyTorch's default)

Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, GeluApproximation approximation = GeluApproximation::none);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);

}  // namespace weft
