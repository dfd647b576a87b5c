#include "weft/ops/activation.h"

#include "weft/autograd/node.h"
#include "weft/kernels/cpu/elementwise.h"
#include "weft/monitor/profiler.h"

namespace weft {

using autograd::record;
using cpu::Binary;
using cpu::Unary;
using Grads = std::vector<Tensor>;

// The derivative needs the input x (relu, gelu) or is cheaper from the output y (sigmoid, tanh).
static Tensor activation(const char* name, Unary forward, Binary backward, const Tensor& x, bool from_output) {
  monitor::OpScope scope(name, {x});
  Tensor out = cpu::unary(forward, x);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({x, out}));  // one FLOP per element
  Tensor saved = from_output ? out.detach() : x;
  record(name, {x}, {out}, [backward, saved](const Grads& g) { return Grads{cpu::binary(backward, g[0], saved)}; });
  return out;
}

Tensor relu(const Tensor& x) { return activation("relu", Unary::relu, Binary::relu_backward, x, false); }

Tensor gelu(const Tensor& x, GeluApproximation approximation) {
  return approximation == GeluApproximation::tanh
             ? activation("gelu", Unary::gelu_tanh, Binary::gelu_tanh_backward, x, false)
             : activation("gelu", Unary::gelu_erf, Binary::gelu_erf_backward, x, false);
}

Tensor sigmoid(const Tensor& x) { return activation("sigmoid", Unary::sigmoid, Binary::sigmoid_backward, x, true); }
Tensor tanh(const Tensor& x) { return activation("tanh", Unary::tanh, Binary::tanh_backward, x, true); }

}  // namespace weft
