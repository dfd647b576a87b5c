#include "weft/ops/pool.h"

#include "weft/autograd/grad_mode.h"
#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

static kernels::Pool2dParams params(const Pool2dOptions& o) { return {o.kernel, o.effective_stride(), o.padding}; }

// For the profiler: one comparison or addition per window element per output.
static double window_flops(const Tensor& out, const kernels::Pool2dParams& p) {
  return static_cast<double>(out.numel()) * static_cast<double>(p.kernel[0] * p.kernel[1]);
}

// The workspace (which input won each window) is only kept when a backward will read it.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  kernels::Pool2dParams p = params(options);
  monitor::OpScope scope(Op::max_pool2d, {x});
  const kernels::KernelTable& k = kernels::of(x);
  kernels::MaxPool2dResult r = k.max_pool2d(x, p, is_grad_enabled() && x.requires_grad());
  if (scope.active()) scope.set_cost(window_flops(r.out, p), monitor::bytes_of({x, r.out}));
  record(op_name(Op::max_pool2d), {x}, {r.out},
         [shape = x.shape(), workspace = r.workspace, p, channels_last = k.is_channels_last(x)](const Grads& g) {
           return Grads{kernels::of(g[0]).max_pool2d_backward(g[0], workspace, shape, p, channels_last)};
  });
  return r.out;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  kernels::Pool2dParams p = params(options);
  monitor::OpScope scope(Op::avg_pool2d, {x});
  const kernels::KernelTable& k = kernels::of(x);
  Tensor out = k.avg_pool2d(x, p);
  if (scope.active()) scope.set_cost(window_flops(out, p), monitor::bytes_of({x, out}));
  record(op_name(Op::avg_pool2d), {x}, {out}, [shape = x.shape(), p, channels_last = k.is_channels_last(x)](const Grads& g) {
    return Grads{kernels::of(g[0]).avg_pool2d_backward(g[0], shape, p, channels_last)};
  });
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  monitor::OpScope scope(Op::adaptive_avg_pool2d, {x});
  Tensor out = kernels::of(x).adaptive_avg_pool2d(x, output_size);
  if (scope.active()) scope.set_cost_per_element(x, {x, out});
  record(op_name(Op::adaptive_avg_pool2d), {x}, {out}, [shape = x.shape()](const Grads& g) {
    return Grads{kernels::of(g[0]).adaptive_avg_pool2d_backward(g[0], shape)};
  });
  return out;
}

}  // namespace weft
