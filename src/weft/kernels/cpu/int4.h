// Weight-only int4 for linear layers: the weight is stored in 4 bits, activations stay f32.
//
// A weight w [N, K] is kept as
//   packed  u8 [N, ceil(K / 2)]: element (n, k) in byte k / 2, the low nibble for even k and the
//           high nibble for odd k, as a 4-bit two's-complement integer q in [-8, 7];
//   scales  f32 [N, ceil(K / group_size)]: one per run of group_size elements of a row (the
//           last run of a row may be shorter when group_size does not divide K);
// and stands for w[n, k] = scales[n, k / group_size] * q[n, k]. A pad nibble (odd K) is 0.
//
// int4_linear(x, ...) = x @ w^T + bias. At up to kFusedRows rows of x (decoding) it reads each
// weight row in its packed bytes and takes its dot products in L1 (kernels/cpu/weight_only.h);
// at more it expands the weight to f32 on every call (parallel over rows) and runs oneDNN's f32
// GEMM, where int4 buys 8x smaller weights in the file and in memory between calls, not faster
// arithmetic. The reference decodes each nibble inside a plain f64 triple loop.
#pragma once
#include "weft/core/tensor.h"

namespace weft::cpu {

// ShapeError / DTypeError / ValueError unless packed and scales hold a weight of `in_features`
// inputs in groups of group_size; `what` names the caller.
void check_int4_weight(const char* what, const Tensor& packed, const Tensor& scales, int64_t in_features,
                       int64_t group_size);
// q i8 [N, K] with every value in [-8, 7] (ValueError otherwise) → packed u8 [N, ceil(K / 2)].
Tensor pack_int4(const Tensor& q);
// packed u8 [N, ceil(K / 2)] → q i8 [N, K].
Tensor unpack_int4(const Tensor& packed, int64_t in_features);
// → w f32 [N, K]; checks that packed and scales fit K and group_size (ShapeError, DTypeError).
Tensor dequantize_int4(const Tensor& packed, const Tensor& scales, int64_t in_features, int64_t group_size);
// x f32 [M, K], bias f32 [N] or undefined → f32 [M, N].
Tensor int4_linear(const Tensor& x, const Tensor& packed, const Tensor& scales, int64_t group_size, const Tensor& bias);

namespace reference {
Tensor int4_linear(const Tensor& x, const Tensor& packed, const Tensor& scales, int64_t group_size, const Tensor& bias);
}  // namespace reference

}  // namespace weft::cpu
