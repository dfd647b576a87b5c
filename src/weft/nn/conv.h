// Image layers over NCHW tensors: Conv2d and MaxPool2d.
#pragma once
#include "weft/core/random.h"
#include "weft/nn/module.h"
#include "weft/ops/conv.h"

namespace weft::nn {

// A 2-d size given as one number for both dims or as {h, w}, as PyTorch's int-or-tuple arguments.
struct Size2 {
  Size2(int64_t s) : h(s), w(s) {}  // implicit, so Conv2d(1, 32, 3) reads as in PyTorch
  Size2(int64_t h, int64_t w) : h(h), w(w) {}
  int64_t h, w;
};

// weight [out, in / groups, kh, kw] ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = in / groups * kh * kw (kaiming_uniform_, a = sqrt(5)); bias likewise.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, int64_t groups = 1, bool bias = true);
  Tensor forward(const Tensor& x) override;
  Conv2dOptions options() const;  // what forward passes to conv2d
  void reset_parameters(Generator& gen = default_generator());
  std::string extra_repr() const override;

  const int64_t in_channels, out_channels;
  const Size2 kernel_size, stride, padding, dilation;
  const int64_t groups;
  Tensor weight, bias;  // bias undefined when disabled
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, Size2 stride = 0, Size2 padding = 0);  // stride 0: = kernel_size
  Tensor forward(const Tensor& x) override;
  Pool2dOptions options() const;  // what forward passes to max_pool2d
  std::string extra_repr() const override;

  const Size2 kernel_size, stride, padding;
};

}  // namespace weft::nn
