// Scaled dot-product attention, as torch.nn.functional.scaled_dot_product_attention.
//
// q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv] with the same leading dims -> [..., Tq, Dv]:
// softmax(q k^T * scale) v with scale = 1/sqrt(D) when 0. With causal, query i attends to keys
// 0 .. i + Tk - Tq; a query that sees no key (causal with Tq > Tk) is NaN, as in PyTorch, and so is
// its gradient to q.
//
// scaled_dot_product_attention runs the fused kernel (kernels/cpu/attention.h): it never builds the
// [Tq, Tk] scores, and its backward keeps q, k, v, the output and one f32 log-sum-exp per query
// row, so the memory attention keeps for backward grows with T, not T^2. Under autocast it is on
// the "lower" list: q, k, v become bf16 / f16 and so does the output (scores and softmax are
// computed in f32 inside the kernel).
//
// scaled_dot_product_attention_composed is the same function built from matmul, add and softmax
// (it materialises and keeps the [..., Tq, Tk] scores and probabilities); it is the reference the
// op is tested and benchmarked against, and it broadcasts the leading dims as matmul does.
#pragma once
#include <vector>

#include "weft/core/tensor.h"

namespace weft {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    double scale = 0);

Tensor scaled_dot_product_attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                             double scale = 0);

// Continuous batching's decode step over sequences in slots of shared KV caches: writes each new
// key and value into its slot and attends over the slot's positions (kernels/cpu/attention.h's
// decode_attention, for the shapes and checks; scale 1/sqrt(D)). Inference only: inputs that
// require grad → ValueError.
Tensor decode_attention(const Tensor& q, const Tensor& k_new, const Tensor& v_new, const Tensor& k_cache,
                        const Tensor& v_cache, const std::vector<int64_t>& slots, const std::vector<int64_t>& lengths);

}  // namespace weft
