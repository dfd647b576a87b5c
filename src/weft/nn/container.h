// Sequential (children "0", "1", ... applied in order) and Flatten, its usual glue.
//
// Sequential can checkpoint its activations (torch.utils.checkpoint.checkpoint_sequential): with
// k segments, its children are cut into k runs of nearly equal length and every run but the last
// goes through autograd::checkpoint, so training keeps only the runs' inputs and recomputes each
// run's activations during backward. The last run is not checkpointed because backward needs its
// activations at once.
//
// Image blocks within one run are called as one fused op when none of their modules has forward
// hooks: Conv2d, ReLU, MaxPool2d as conv2d_relu_max_pool2d, a Conv2d, ReLU pair as conv2d_relu
// (ops/conv.h). With a hook on any of them they run apart, so the hook sees the tensors between
// them. Values and gradients are the same either way.
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
  // 0 or 1: off. More segments than children → ValueError.
  void set_checkpoint_segments(int64_t segments);
  int64_t checkpoint_segments() const { return checkpoint_segments_; }
  const std::shared_ptr<Module>& operator[](size_t i) const { return named_children().at(i).second; }

 private:
  int64_t checkpoint_segments_ = 0;
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
