#include "weft/ops/conv.h"

#include "weft/autograd/grad_mode.h"
#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

// grad x needs the weight, grad weight needs x; the bias gradient (grad_out summed over N, OH, OW)
// comes free with grad weight from oneDNN, and costs one reduction when it is the only one wanted.
static Grads convolution_grads(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const kernels::Conv2dParams& p) {
  const kernels::KernelTable& k = kernels::of(grad_out);
  bool want_bias = bias.defined() && bias.requires_grad();
  Tensor gx, gw, gb;
  if (x.requires_grad()) gx = k.conv2d_backward_input(grad_out, weight, x.shape(), p);
  if (weight.requires_grad()) {
    kernels::Conv2dWeightGrads w = k.conv2d_backward_weight(grad_out, x, weight.shape(), want_bias, p);
    gw = w.weight;
    gb = w.bias;
  } else if (want_bias) {
    gb = k.sum(grad_out, {0, 2, 3}, false);
  }
  return Grads{gx, gw, gb};
}

static kernels::Conv2dParams params(const Conv2dOptions& o) { return {o.stride, o.padding, o.dilation, o.groups}; }

// For the profiler: 2·N·Cout·Hout·Wout·(Cin/groups)·kh·kw, + the bias and the ReLU; backward the
// same per gradient.
static void set_costs(monitor::OpScope& scope, const Tensor& x, const Tensor& weight, const Tensor& bias,
                      const Tensor& out, bool relu, const Tensor& result) {
  const double macs = static_cast<double>(out.numel()) * static_cast<double>(weight.numel() / weight.shape()[0]);
  scope.set_cost(2 * macs + (bias.defined() ? out.numel() : 0) + (relu ? out.numel() : 0),
                 monitor::bytes_of({x, weight, bias, result}));
  const int grads = x.requires_grad() + weight.requires_grad();
  autograd::set_backward_cost(result, 2 * macs * grads, monitor::bytes_of({x, weight}));
}

// With relu, the output (detached) is kept for the backward's mask: output > 0 exactly where the
// convolution's result was, as relu's own backward tests its input.
static Tensor convolution(Op op, const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                          const Conv2dOptions& options, bool relu) {
  const Tensor x = autocast(op, x_in), weight = autocast(op, weight_in), bias = autocast(op, bias_in);
  monitor::OpScope scope(op, {x, weight, bias});
  const kernels::Conv2dParams p = params(options);
  Tensor out = kernels::of(x).conv2d(x, weight, bias, p, relu);
  Tensor mask = relu ? out.detach() : Tensor();
  record(op_name(op), {x, weight, bias}, {out}, [x, weight, bias, p, mask](const Grads& g) {
    return convolution_grads(
        mask.defined() ? kernels::of(g[0]).binary(kernels::Binary::relu_backward, g[0], mask) : g[0], x, weight, bias,
        p);
  });
  if (scope.active()) set_costs(scope, x, weight, bias, out, relu, out);
  return out;
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  return convolution(Op::conv2d, x, weight, bias, options, false);
}

Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  return convolution(Op::conv2d_relu, x, weight, bias, options, true);
}

Tensor conv2d_relu_max_pool2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                              const Conv2dOptions& conv, const Pool2dOptions& pool) {
  const Op op = Op::conv2d_relu_max_pool2d;
  const Tensor x = autocast(op, x_in), weight = autocast(op, weight_in), bias = autocast(op, bias_in);
  monitor::OpScope scope(op, {x, weight, bias});
  const kernels::KernelTable& k = kernels::of(x);
  const kernels::Conv2dParams p = params(conv);
  const kernels::Pool2dParams pp{pool.kernel, pool.effective_stride(), pool.padding};
  Tensor out = k.conv2d(x, weight, bias, p, true);
  const bool needs_grad = is_grad_enabled() && (x.requires_grad() || weight.requires_grad() ||
                                                (bias.defined() && bias.requires_grad()));
  kernels::MaxPool2dResult r = k.max_pool2d(out, pp, needs_grad);
  record(op_name(op), {x, weight, bias}, {r.out},
         [x, weight, bias, p, pp, pooled = r.out.detach(), workspace = r.workspace, shape = out.shape(),
          channels_last = k.is_channels_last(out)](const Grads& g) {
           const kernels::KernelTable& kg = kernels::of(g[0]);
           Tensor grad_pooled = kg.binary(kernels::Binary::relu_backward, g[0], pooled);
           Tensor grad_out = kg.max_pool2d_backward(grad_pooled, workspace, shape, pp, channels_last);
           return convolution_grads(grad_out, x, weight, bias, p);
         });
  if (scope.active()) set_costs(scope, x, weight, bias, out, true, r.out);
  return r.out;
}

}  // namespace weft
