#include "weft/ops/activation.h"

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"

namespace weft {

using autograd::record;
using kernels::Binary;
using kernels::Unary;
using Grads = std::vector<Tensor>;

// The derivative needs the input x (relu, gelu) or is cheaper from the output y (sigmoid, tanh).
static Tensor activation(Op op, Unary forward, Binary backward, const Tensor& x, bool from_output) {
  monitor::OpScope scope(op, {x});
  Tensor out = kernels::of(x).unary(forward, x);
  if (scope.active()) scope.set_cost_per_element(out, {x, out});
  Tensor saved = from_output ? out.detach() : x;
  record(op_name(op), {x}, {out}, [backward, saved](const Grads& g) {
    return Grads{kernels::of(g[0]).binary(backward, g[0], saved)};
  });
  return out;
}

Tensor relu(const Tensor& x) { return activation(Op::relu, Unary::relu, Binary::relu_backward, x, false); }

Tensor gelu(const Tensor& x, GeluApproximation approximation) {
  return approximation == GeluApproximation::tanh
             ? activation(Op::gelu, Unary::gelu_tanh, Binary::gelu_tanh_backward, x, false)
             : activation(Op::gelu, Unary::gelu_erf, Binary::gelu_erf_backward, x, false);
}

Tensor sigmoid(const Tensor& x) { return activation(Op::sigmoid, Unary::sigmoid, Binary::sigmoid_backward, x, true); }
Tensor tanh(const Tensor& x) { return activation(Op::tanh, Unary::tanh, Binary::tanh_backward, x, true); }

}  // namespace weft
