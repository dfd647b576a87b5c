#include "weft/nn/conv.h"

#include <cmath>

#include "weft/nn/init.h"
#include "weft/ops/conv.h"
#include "weft/ops/pool.h"

namespace weft::nn {

static std::array<int64_t, 2> pair(Size2 s) { return {s.h, s.w}; }
static std::string pair_str(Size2 s) { return str("(", s.h, ", ", s.w, ")"); }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride, Size2 padding,
               Size2 dilation, int64_t groups, bool bias)
    : Module("Conv2d"), in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size),
      stride(stride), padding(padding), dilation(dilation), groups(groups) {
  WEFT_CHECK(in_channels > 0 && out_channels > 0 && kernel_size.h > 0 && kernel_size.w > 0, ValueError,
             "Conv2d: channels and kernel size must be positive, got in=", in_channels, " out=", out_channels,
             " kernel=", pair_str(kernel_size));
  WEFT_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0, ValueError, "Conv2d: groups=",
             groups, " must divide in_channels=", in_channels, " and out_channels=", out_channels);
  weight = register_parameter("weight", Tensor::empty({out_channels, in_channels / groups, kernel_size.h, kernel_size.w}));
  if (bias) this->bias = register_parameter("bias", Tensor::empty({out_channels}));
  reset_parameters();
}

void Conv2d::reset_parameters(Generator& gen) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
  double bound = 1 / std::sqrt(static_cast<double>(init::fan_in(weight)));
  if (bias.defined()) init::uniform_(bias, -bound, bound, gen);
}

Conv2dOptions Conv2d::options() const { return {pair(stride), pair(padding), pair(dilation), groups}; }

Tensor Conv2d::forward(const Tensor& x) { return conv2d(x, weight, bias, options()); }

std::string Conv2d::extra_repr() const {
  std::string out = str(in_channels, ", ", out_channels, ", kernel_size=", pair_str(kernel_size), ", stride=",
                        pair_str(stride));
  if (padding.h != 0 || padding.w != 0) out += ", padding=" + pair_str(padding);
  if (dilation.h != 1 || dilation.w != 1) out += ", dilation=" + pair_str(dilation);
  if (groups != 1) out += str(", groups=", groups);
  if (!bias.defined()) out += ", bias=False";
  return out;
}

MaxPool2d::MaxPool2d(Size2 kernel_size, Size2 stride, Size2 padding)
    : Module("MaxPool2d"), kernel_size(kernel_size),
      stride(stride.h == 0 && stride.w == 0 ? kernel_size : stride), padding(padding) {}

Pool2dOptions MaxPool2d::options() const { return {pair(kernel_size), pair(stride), pair(padding)}; }

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, options()); }

std::string MaxPool2d::extra_repr() const {
  return str("kernel_size=", pair_str(kernel_size), ", stride=", pair_str(stride), ", padding=", pair_str(padding));
}

}  // namespace weft::nn
