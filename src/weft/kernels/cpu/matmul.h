// Matrix products (not differentiable; ops/linear.h builds autograd on top).
//
// matmul(a, b, bias, out_dtype) = a @ b + bias for a [..., M, K] and b [..., K, N], both at least
// 2-d, batch dims broadcast NumPy-style; bias (optional) is [N] and added to every row. The
// result is a new contiguous [batch..., M, N] tensor.
//
//   inputs   out_dtype (default: the inputs')   engine
//   f32      f32                                 oneDNN; 1 to 4 rows against a b whose columns
//                                                are contiguous (a Linear weight): dot products
//                                                here (oneDNN would repack b on every call)
//   bf16     bf16 or f32                         oneDNN (AVX512-BF16 / AMX), f32 accumulation
//   f16      f16 or f32                          inputs widened to f32, then oneDNN f32
//   f64      f64                                 blocked loops here, f64 accumulation
//
// Operands keep their strides: a transposed weight or a batch slice goes to oneDNN as it is.
// Only layouts oneDNN has no fast kernel for (an inner stride that is not 1, a stride-0 matrix
// dim) are copied to contiguous first. Batch dims of stride 0 (expand) are passed as size 1 so
// oneDNN broadcasts them instead of reading repeats, and when b has no batch extent, a's batch
// and row dims are folded into one [batch * M, K] GEMM, which oneDNN runs faster than a batch.
//
// bias may be the inputs' dtype or f32 (bf16 / f16 inputs); for f64, f64.
// reference::matmul is the plain triple loop in f64 that tests compare against.
#pragma once
#include <optional>

#include "weft/core/tensor.h"

namespace weft::cpu {

Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias = {},
              std::optional<DType> out_dtype = std::nullopt);

// t [..., C] as a 2-d [rows, C] tensor: a view when t's leading dims lie at even steps in memory
// (any contiguous tensor, a row slice), otherwise a contiguous copy. Linear layers and weight
// gradients use it to turn every row of a batch into one GEMM.
Tensor fold_rows(const Tensor& t);

namespace reference {
Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias = {},
              std::optional<DType> out_dtype = std::nullopt);
}  // namespace reference

}  // namespace weft::cpu
