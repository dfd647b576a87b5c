// Scaled dot-product attention, as torch.nn.functional.scaled_dot_product_attention.
#pragma once
#include "weft/core/tensor.h"

namespace weft {

// q [B, H, Tq, D], k / v [B, H, Tk, D] -> [B, H, Tq, D]; softmax(q k^T * scale) v with
// scale = 1/sqrt(D) when 0. With causal, query i attends to keys 0..i (+ Tk - Tq).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    double scale = 0);

}  // namespace weft
