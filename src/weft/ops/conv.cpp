#include "weft/ops/conv.h"

#include "weft/autograd/node.h"
#include "weft/kernels/cpu/conv.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/kernels/cpu/reduce.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

// grad x needs the weight, grad weight needs x; the bias gradient (grad_out summed over N, OH, OW)
// comes free with grad weight from oneDNN, and costs one reduction when it is the only one wanted.
// With relu, the output (detached) is kept for the backward's mask: output > 0 exactly where the
// convolution's result was, as relu's own backward tests its input.
static Tensor convolution(const char* name, const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                          const Conv2dOptions& options, bool relu) {
  const Tensor x = autocast("conv2d", x_in), weight = autocast("conv2d", weight_in), bias = autocast("conv2d", bias_in);
  monitor::OpScope scope(name, {x, weight, bias});
  cpu::Conv2dParams p{options.stride, options.padding, options.dilation, options.groups};
  Tensor out = cpu::conv2d(x, weight, bias, p, relu);
  Tensor mask = relu ? out.detach() : Tensor();
  record(name, {x, weight, bias}, {out}, [x, weight, bias, p, mask](const Grads& g) {
    const Tensor grad_out = mask.defined() ? cpu::binary(cpu::Binary::relu_backward, g[0], mask) : g[0];
    bool want_bias = bias.defined() && bias.requires_grad();
    Tensor gx, gw, gb;
    if (x.requires_grad()) gx = cpu::conv2d_backward_input(grad_out, weight, x.shape(), p);
    if (weight.requires_grad()) {
      cpu::Conv2dWeightGrads w = cpu::conv2d_backward_weight(grad_out, x, weight.shape(), want_bias, p);
      gw = w.weight;
      gb = w.bias;
    } else if (want_bias) {
      gb = cpu::sum(grad_out, {0, 2, 3}, false);
    }
    return Grads{gx, gw, gb};
  });
  if (scope.active()) {  // 2·N·Cout·Hout·Wout·(Cin/groups)·kh·kw, + the bias; backward the same per gradient
    const double macs = static_cast<double>(out.numel()) * static_cast<double>(weight.numel() / weight.shape()[0]);
    scope.set_cost(2 * macs + (bias.defined() ? out.numel() : 0) + (relu ? out.numel() : 0),
                   monitor::bytes_of({x, weight, bias, out}));
    const int grads = x.requires_grad() + weight.requires_grad();
    autograd::set_backward_cost(out, 2 * macs * grads, monitor::bytes_of({x, weight}));
  }
  return out;
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  return convolution("conv2d", x, weight, bias, options, false);
}

Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  return convolution("conv2d_relu", x, weight, bias, options, true);
}

}  // namespace weft
