// softmax, log_softmax and dropout (declared in activation.h).
#include <cmath>

#include "weft/autograd/node.h"
#include "weft/core/random.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/activation.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

// Both backward kernels need only the output, so x is not kept alive by the graph.
Tensor softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast(Op::softmax, x_in);
  monitor::OpScope scope(Op::softmax, {x});
  Tensor y = kernels::of(x).softmax(x, dim);
  if (scope.active()) scope.set_cost_per_element(y, {x, y});
  record(op_name(Op::softmax), {x}, {y}, [y = y.detach(), dim](const Grads& g) {
    return Grads{kernels::of(g[0]).softmax_backward(g[0], y, dim)};
  });
  return y;
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast(Op::log_softmax, x_in);
  monitor::OpScope scope(Op::log_softmax, {x});
  Tensor y = kernels::of(x).log_softmax(x, dim);
  if (scope.active()) scope.set_cost_per_element(y, {x, y});
  record(op_name(Op::log_softmax), {x}, {y}, [y = y.detach(), dim](const Grads& g) {
    return Grads{kernels::of(g[0]).log_softmax_backward(g[0], y, dim)};
  });
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  WEFT_CHECK(x.defined(), ValueError, "dropout: undefined tensor");
  WEFT_CHECK(p >= 0 && p <= 1, ValueError, "dropout: probability p must be in [0, 1], got ", p);
  WEFT_CHECK(is_floating(x.dtype()), DTypeError, "dropout: expected a floating-point tensor, got ",
             dtype_name(x.dtype()));
  if (!training || p == 0) return x;
  monitor::OpScope scope(Op::dropout, {x});
  Tensor keep = Tensor::zeros(x.shape(), DType::u8);
  const double scale = p < 1 ? 1.0 / (1.0 - p) : 0.0;  // p = 1 keeps nothing and draws nothing
  if (p < 1) {
    Generator& g = gen ? *gen : default_generator();
    // One draw per element in row-major order, serially: the generator is a single stream, and
    // a fixed order makes a seed reproduce the same mask on any thread count.
    uint8_t* k = keep.data<uint8_t>();
    for (int64_t i = 0; i < keep.numel(); ++i) k[i] = g.uniform() >= p;
  }
  const kernels::KernelTable& k = kernels::of(x);
  Tensor out = k.masked_scale(x, keep, scale);
  if (scope.active()) scope.set_cost_per_element(out, {x, keep, keep, out});  // keep written, read
  record(op_name(Op::dropout), {x}, {out}, [keep, scale](const Grads& grad) {
    return Grads{kernels::of(grad[0]).masked_scale(grad[0], keep, scale)};
  });
  return out;
}

}  // namespace weft
