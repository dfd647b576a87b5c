#include "weft/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/linear.h"

namespace weft {

// The plain ("math") attention, composed of differentiable ops so autograd comes with it. The
// causal mask is a [Tq, Tk] bias of 0 / -inf added to the scores (broadcast over the batch dims),
// so masked keys get exactly zero weight. A query row with every key masked (Tq > Tk) is NaN, as
// in PyTorch.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  WEFT_CHECK(q.defined() && k.defined() && v.defined(), ValueError, "scaled_dot_product_attention: undefined input");
  WEFT_CHECK(q.dim() >= 2 && q.dim() == k.dim() && q.dim() == v.dim() && q.size(-1) == k.size(-1) &&
                 k.size(-2) == v.size(-2),
             ShapeError, "scaled_dot_product_attention: expected q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv], got q ",
             shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  if (scale == 0) scale = 1 / std::sqrt(static_cast<double>(q.size(-1)));
  // Scaling q rather than the scores touches Tq * D elements instead of Tq * Tk.
  Tensor scores = matmul(mul(q, scale), k.transpose(-2, -1));
  if (causal) {
    std::vector<double> bias(static_cast<size_t>(Tq * Tk), 0.0);
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = std::max<int64_t>(0, i + Tk - Tq + 1); j < Tk; ++j)
        bias[i * Tk + j] = -std::numeric_limits<double>::infinity();
    scores = add(scores, Tensor::from_vector(bias, {Tq, Tk}, scores.dtype()));
  }
  return matmul(softmax(scores, -1), v);
}

}  // namespace weft
