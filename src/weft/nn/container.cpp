#include "weft/nn/container.h"

namespace weft::nn {

void Sequential::push_back(std::shared_ptr<Module> module) { register_module(std::to_string(size()), std::move(module)); }

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, child] : named_children()) y = child->forward(y);
  return y;
}

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim, end_dim); }

std::string Flatten::extra_repr() const { return str("start_dim=", start_dim, ", end_dim=", end_dim); }

}  // namespace weft::nn
