// softmax, log_softmax and dropout (declared in activation.h).
#include <cmath>

#include "weft/autograd/node.h"
#include "weft/core/convert.h"
#include "weft/core/random.h"
#include "weft/core/threads.h"
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
  if (scope.active()) scope.set_cost(5.0 * y.numel(), monitor::bytes_of({x, y}));  // max, sub, exp, sum, scale
  record(op_name(Op::softmax), {x}, {y}, [y = y.detach(), dim](const Grads& g) {
    return Grads{kernels::of(g[0]).softmax_backward(g[0], y, dim)};
  });
  return y;
}

Tensor log_softmax(const Tensor& x_in, int64_t dim) {
  const Tensor x = autocast(Op::log_softmax, x_in);
  monitor::OpScope scope(Op::log_softmax, {x});
  Tensor y = kernels::of(x).log_softmax(x, dim);
  if (scope.active()) scope.set_cost(5.0 * y.numel(), monitor::bytes_of({x, y}));  // max, sub, exp, sum, sub
  record(op_name(Op::log_softmax), {x}, {y}, [y = y.detach(), dim](const Grads& g) {
    return Grads{kernels::of(g[0]).log_softmax_backward(g[0], y, dim)};
  });
  return y;
}

// out = x * keep * scale, computed in f32 (f64 for f64) and rounded once: a mask stored in a
// 16-bit format would round 1 / (1 - p) first. keep is u8 with x's shape.
static Tensor apply_mask(const Tensor& x, const Tensor& keep, double scale) {
  Tensor xc = x.contiguous_untracked();
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const uint8_t* k = keep.data<uint8_t>();
  const int64_t n = x.numel();
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (is_half_like<T> || std::is_floating_point_v<T>) {
      using C = compute_type<T>;
      const T* in = xc.data<T>();
      T* o = out.data<T>();
      const C s = static_cast<C>(scale);
#pragma omp parallel for simd if (n >= kParallelGrain)
      for (int64_t i = 0; i < n; ++i) o[i] = convert<T>(k[i] ? static_cast<C>(in[i]) * s : C(0));
    } else {
      throw DTypeError(str("dropout: expected a floating-point tensor, got ", dtype_name(x.dtype())));
    }
  });
  return out;
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
  Tensor out = apply_mask(x, keep, scale);
  if (scope.active()) scope.set_cost(out.numel(), monitor::bytes_of({x, keep, keep, out}));  // keep written, read
  record(op_name(Op::dropout), {x}, {out}, [keep, scale](const Grads& grad) { return Grads{apply_mask(grad[0], keep, scale)}; });
  return out;
}

}  // namespace weft
