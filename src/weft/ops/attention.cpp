#include "weft/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "weft/autograd/node.h"
#include "weft/kernels/kernel_table.h"
#include "weft/monitor/profiler.h"
#include "weft/ops/activation.h"
#include "weft/ops/arith.h"
#include "weft/ops/autocast.h"
#include "weft/ops/linear.h"

namespace weft {

using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
  WEFT_CHECK(q.defined() && k.defined() && v.defined(), ValueError, op, ": undefined input");
  WEFT_CHECK(q.dim() >= 2 && q.dim() == k.dim() && q.dim() == v.dim() && q.size(-1) == k.size(-1) &&
                 k.size(-2) == v.size(-2),
             ShapeError, op, ": expected q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv], got q ",
             shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ", shape_str(v.shape()));
}

double resolved_scale(const Tensor& q, double scale) {
  return scale != 0 ? scale : 1 / std::sqrt(static_cast<double>(q.size(-1)));
}

}  // namespace

// The backward saves q, k, v (views of what the caller already holds, such as the qkv projection),
// the output and lse: nothing of size Tq x Tk.
Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal,
                                    double scale) {
  const Op op = Op::scaled_dot_product_attention;
  const Tensor q = autocast(op, q_in), k = autocast(op, k_in), v = autocast(op, v_in);
  check_shapes(q, k, v, op_name(op));
  monitor::OpScope scope(op, {q, k, v});
  scale = resolved_scale(q, scale);
  kernels::AttentionForward f = kernels::of(q).attention_forward(q, k, v, causal, scale);
  record(op_name(op), {q, k, v}, {f.out},
         [q = q.detach(), k = k.detach(), v = v.detach(), out = f.out.detach(), lse = f.lse, causal,
          scale](const Grads& g) {
           kernels::AttentionGrads d = kernels::of(g[0]).attention_backward(g[0], q, k, v, out, lse, causal, scale);
           return Grads{d.dq, d.dk, d.dv};
         });
  if (scope.active()) {
    // The kernel skips the keys a causal row cannot see, so only visible (query, key) pairs count:
    // 2·D for q·k and 2·Dv for p·v each (4·B·H·Tq·Tk·D when D = Dv, without a mask). The backward
    // recomputes q·k and forms dv, dp, dq, dk: 6·D + 4·Dv per pair.
    const int64_t Tq = q.size(-2), Tk = k.size(-2), D = q.size(-1), Dv = v.size(-1);
    double pairs = 0;
    for (int64_t i = 0; i < Tq; ++i) pairs += causal ? std::clamp<int64_t>(i + Tk - Tq + 1, 0, Tk) : Tk;
    pairs *= Tq * D > 0 ? static_cast<double>(q.numel() / (Tq * D)) : 0;
    scope.set_cost(pairs * (2 * D + 2 * Dv), monitor::bytes_of({q, k, v, f.out}));
    autograd::set_backward_cost(f.out, pairs * (6 * D + 4 * Dv), monitor::bytes_of({q, k, v, f.out, f.lse}));
  }
  return f.out;
}

// The causal mask is a [Tq, Tk] bias of 0 / -inf added to the scores (broadcast over the batch
// dims), so masked keys get exactly zero weight.
Tensor scaled_dot_product_attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                             double scale) {
  check_shapes(q, k, v, "scaled_dot_product_attention_composed");
  const int64_t Tq = q.size(-2), Tk = k.size(-2);
  // Scaling q rather than the scores touches Tq * D elements instead of Tq * Tk.
  Tensor scores = matmul(mul(q, resolved_scale(q, scale)), k.transpose(-2, -1));
  if (causal) {
    std::vector<double> bias(static_cast<size_t>(Tq * Tk), 0.0);
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = std::max<int64_t>(0, i + Tk - Tq + 1); j < Tk; ++j)
        bias[i * Tk + j] = -std::numeric_limits<double>::infinity();
    scores = add(scores, Tensor::from_vector(bias, {Tq, Tk}, scores.dtype()));
  }
  return matmul(softmax(scores, -1), v);
}

Tensor decode_attention(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                        const Tensor& v_cache, const std::vector<int64_t>& slots, const std::vector<int64_t>& lengths) {
  WEFT_CHECK(!q.requires_grad() && !k_new.requires_grad() && !v_new.requires_grad(), ValueError,
             "decode_attention: inference only (run it under NoGradGuard)");
  monitor::OpScope scope(Op::decode_attention, {q, k_new, v_new});
  return kernels::of(q).decode_attention(q, k_new, v_new, k_cache, v_cache, slots, lengths, resolved_scale(q, 0));
}

}  // namespace weft
