// Matrix products on oneDNN (f32, bf16) with plain-loop paths for f64 and references for tests.
#pragma once
#include "weft/core/tensor.h"

namespace weft {

// a [..., M, K] @ b [..., K, N] -> [..., M, N]; batch dims broadcast; 1-d operands are treated
// as in torch.matmul. Transposed (strided) operands are passed to oneDNN without copying.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] @ weight[out, in]^T + bias[out] (bias may be undefined), as torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});

}  // namespace weft
