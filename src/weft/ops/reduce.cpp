#include "weft/ops/reduce.h"

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/arith.h"
#include "weft/ops/autocast.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

// The gradient of a reduction: g broadcast back over the reduced dims (a stride-0 view, no copy).
static Tensor expand_back(const Tensor& g, const Shape& input_shape, const std::vector<int64_t>& dims, bool keepdim) {
  Shape keep_shape = input_shape;
  if (dims.empty()) keep_shape.assign(input_shape.size(), 1);
  for (int64_t d : dims) keep_shape[wrap_dim(d, static_cast<int64_t>(input_shape.size()), "sum")] = 1;
  if (keepdim) return g.expand(input_shape);
  Tensor gc = g.contiguous_untracked();
  return gc.as_strided(keep_shape, contiguous_strides(keep_shape), gc.storage_offset()).expand(input_shape);
}

Tensor sum(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autocast(Op::sum, x_in);
  monitor::OpScope scope(Op::sum, {x});
  Tensor out = kernels::of(x).sum(x, dims, keepdim);
  if (scope.active()) scope.set_cost_per_element(x, {x, out});
  record(op_name(Op::sum), {x}, {out}, [shape = x.shape(), dims, keepdim](const Grads& g) {
    return Grads{expand_back(g[0], shape, dims, keepdim)};
  });
  return out;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor total = sum(x, dims, keepdim);
  int64_t count = total.numel() == 0 ? 0 : x.numel() / total.numel();
  return mul(total, 1.0 / static_cast<double>(count));
}

Tensor max(const Tensor& x, int64_t dim, bool keepdim) {
  monitor::OpScope scope(Op::max, {x});
  kernels::MaxResult r = kernels::of(x).max(x, dim, keepdim);
  if (scope.active()) scope.set_cost_per_element(x, {x, r.values, r.indices});
  int64_t d = wrap_dim(dim, x.dim(), "max");
  record(op_name(Op::max), {x}, {r.values}, [shape = x.shape(), d, keepdim, idx = r.indices](const Grads& g) {
    Tensor grad = Tensor::zeros(shape, g[0].dtype());
    Tensor gk = g[0].contiguous_untracked();
    Tensor ik = idx.contiguous_untracked();
    // Walk every output position; its index picks one element along dim d.
    int64_t inner = 1;
    for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
    int64_t n = shape.empty() ? 1 : shape[d];
    int64_t outer = gk.numel() / inner;
    const int64_t* pi = ik.data<int64_t>();
    visit_dtype(grad.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        T* pg = grad.data<T>();
        const T* po = gk.data<T>();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) pg[(o * n + pi[o * inner + i]) * inner + i] = po[o * inner + i];
      } else {
        throw DTypeError(str("max backward: unsupported dtype ", dtype_name(grad.dtype())));
      }
    });
    return Grads{grad};
  });
  return r.values;
}

Tensor max(const Tensor& x) { return max(x.reshape({-1}), 0, false); }

Tensor argmax(const Tensor& x, int64_t dim) { return kernels::of(x).argmax(x, dim); }

}  // namespace weft
