#include "weft/nn/activation.h"

namespace weft::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }

std::string GELU::extra_repr() const {
  return approximate == GeluApproximation::tanh ? "approximate='tanh'" : "approximate='none'";
}

Dropout::Dropout(double p) : Module("Dropout"), p(p) {
  WEFT_CHECK(p >= 0 && p <= 1, ValueError, "Dropout: probability p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

std::string Dropout::extra_repr() const { return str("p=", p); }

}  // namespace weft::nn
