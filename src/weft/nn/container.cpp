#include "weft/nn/container.h"

#include "weft/autograd/checkpoint.h"
#include "weft/nn/activation.h"
#include "weft/nn/conv.h"

namespace weft::nn {

void Sequential::push_back(std::shared_ptr<Module> module) { register_module(std::to_string(size()), std::move(module)); }

void Sequential::set_checkpoint_segments(int64_t segments) {
  WEFT_CHECK(segments >= 0 && segments <= static_cast<int64_t>(size()), ValueError, "Sequential: ", segments,
             " checkpoint segments for ", size(), " modules; use 0 (off) to ", size());
  checkpoint_segments_ = segments;
}

// A Conv2d followed directly by a ReLU, neither with hooks (a hook on either must see the tensor
// between them), runs as one conv2d_relu: the ReLU is applied as the convolution writes its output
// instead of in a pass of its own (on the CNN's first layer, a pass over 11 MB that oneDNN has
// just streamed out of the cache).
static Conv2d* fusable_conv_relu(const std::shared_ptr<Module>& first, const std::shared_ptr<Module>& second) {
  auto* conv = dynamic_cast<Conv2d*>(first.get());
  if (!conv || !dynamic_cast<ReLU*>(second.get())) return nullptr;
  return conv->has_forward_hooks() || second->has_forward_hooks() ? nullptr : conv;
}

Tensor Sequential::forward(const Tensor& x) {
  const auto& children = named_children();
  const int64_t n = static_cast<int64_t>(children.size());
  // Checkpointed runs are called again in backward, after forward has returned: they copy `run`,
  // which refers to this module's own children. The recompute calls each child through its
  // hooks again, so whatever a hook does around a child (ZeRO-3 gathering its parameters) is
  // done for the recompute too.
  auto run = [&children](int64_t begin, int64_t end, const Tensor& input) {
    Tensor y = input;
    for (int64_t i = begin; i < end; ++i) {
      Conv2d* conv = i + 1 < end ? fusable_conv_relu(children[i].second, children[i + 1].second) : nullptr;
      y = conv ? conv->forward_relu(y) : (*children[i].second)(y);
      i += conv != nullptr;
    }
    return y;
  };
  if (checkpoint_segments_ <= 1) return run(0, n, x);
  const int64_t per_segment = n / checkpoint_segments_;
  Tensor y = x;
  int64_t begin = 0;
  for (int64_t s = 0; s + 1 < checkpoint_segments_; ++s, begin += per_segment) {
    std::vector<Tensor> params;
    for (int64_t i = begin; i < begin + per_segment; ++i)
      for (const Tensor& p : children[i].second->parameters()) params.push_back(p);
    y = autograd::checkpoint([run, begin, per_segment](const Tensor& in) { return run(begin, begin + per_segment, in); },
                             y, params);
  }
  return run(begin, n, y);
}

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim, end_dim); }

std::string Flatten::extra_repr() const { return str("start_dim=", start_dim, ", end_dim=", end_dim); }

}  // namespace weft::nn
