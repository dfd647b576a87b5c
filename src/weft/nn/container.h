// Sequential (children "0", "1", ... applied in order) and Flatten, its usual glue.
#pragma once
#include <memory>

#include "weft/nn/module.h"

namespace weft::nn {

class Sequential : public Module {
 public:
  // Sequential(std::make_shared<Linear>(784, 512), std::make_shared<ReLU>(), ...)
  template <typename... M>
  explicit Sequential(std::shared_ptr<M>... modules) : Module("Sequential") {
    (push_back(std::move(modules)), ...);
  }
  Tensor forward(const Tensor& x) override;
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return named_children().at(i).second; }
};

// Flattens dims start_dim..end_dim into one (by default all but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t start_dim, end_dim;
};

}  // namespace weft::nn
