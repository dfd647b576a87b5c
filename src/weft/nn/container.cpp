#include "weft/nn/container.h"

#include <algorithm>
#include <typeinfo>

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

// The image blocks Sequential runs as one fused op when none of their modules has hooks (a hook
// must see the tensors between them): Conv2d, ReLU, MaxPool2d as conv2d_relu_max_pool2d, and a
// Conv2d, ReLU pair as conv2d_relu. The ReLU is applied as the convolution writes its output
// instead of in a pass of its own (on the CNN's first layer, a pass over 11 MB that oneDNN has
// just streamed out of the cache), and with the pooling its backward runs on the pooled gradient.
// Only these exact classes fuse (a subclass may override forward). Returns how many children it
// ran (0: none, run the next one alone).
template <typename M>
static M* exactly(Module* m) {
  return m && typeid(*m) == typeid(M) ? static_cast<M*>(m) : nullptr;
}

static int64_t run_fused(const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children, int64_t i,
                         int64_t end, Tensor& y) {
  auto at = [&](int64_t k) -> Module* {
    return k < end && !children[k].second->has_forward_hooks() ? children[k].second.get() : nullptr;
  };
  auto* conv = exactly<Conv2d>(at(i));
  if (!conv || !exactly<ReLU>(at(i + 1))) return 0;
  if (auto* pool = exactly<MaxPool2d>(at(i + 2))) {
    y = conv2d_relu_max_pool2d(y, conv->weight, conv->bias, conv->options(), pool->options());
    return 3;
  }
  y = conv2d_relu(y, conv->weight, conv->bias, conv->options());
  return 2;
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
    for (int64_t i = begin; i < end;) {
      const int64_t fused = run_fused(children, i, end, y);
      if (fused == 0) y = (*children[i].second)(y);
      i += std::max<int64_t>(fused, 1);
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
