// Affine quantization of activations: the arithmetic every int8 kernel and observer shares.
//
//   real = scale * (q - zero_point)
//   q    = clamp(round_half_even(x / scale) + zero_point, qmin, qmax)
//
// with [qmin, qmax] = [0, 255] for u8 and [-128, 127] for i8, as torch.quantize_per_tensor.
// Invariants: scale is finite and positive and zero_point lies in [qmin, qmax] (ValueError
// otherwise), so real 0 is exactly representable whenever the chosen range contains it;
// quantize rounds in f32 exactly as the reference does, so the two agree bit for bit.
//
// quantize / dequantize / aminmax have a fast path (OpenMP over contiguous chunks, loops the
// compiler vectorises) and a plain reference loop beside it that the tests compare against.
#pragma once
#include <cstdint>

#include "weft/core/tensor.h"

namespace weft::cpu {

struct QuantParams {
  float scale = 1;
  int32_t zero_point = 0;
};

int32_t quant_min(DType dtype);  // u8: 0, i8: -128; DTypeError for other dtypes
int32_t quant_max(DType dtype);  // u8: 255, i8: 127
// Checks the invariants above for `dtype`; `what` names the caller in the message.
void check_quant_params(const QuantParams& p, DType dtype, const char* what);

// The params that map [min, max] (widened to contain 0) onto dtype's whole integer range.
// A range of width 0 gets scale 1 (every value is then 0 and exactly representable).
QuantParams choose_quant_params(float min, float max, DType dtype);

// x f32 (any shape and strides) → a contiguous u8 or i8 tensor of the same shape.
Tensor quantize(const Tensor& x, const QuantParams& p, DType dtype);
// q u8 or i8 → f32.
Tensor dequantize(const Tensor& q, const QuantParams& p);

// The smallest and largest element of an f32 tensor (NaN is ignored; an empty tensor → {0, 0}).
struct MinMax {
  float min = 0, max = 0;
};
MinMax aminmax(const Tensor& x);

namespace reference {
Tensor quantize(const Tensor& x, const QuantParams& p, DType dtype);
Tensor dequantize(const Tensor& q, const QuantParams& p);
MinMax aminmax(const Tensor& x);
}  // namespace reference

}  // namespace weft::cpu
