// Fake quantization for quantization-aware training (QAT): the forward pass rounds a tensor to
// the values its int8 version can hold, the backward pass lets the gradient through as if it
// had not (the straight-through estimator), as torch.fake_quantize_per_tensor_affine /
// _per_channel_affine.
//
//   forward   y = (clamp(round_half_even(x / s) + z, qmin, qmax) - z) * s
//   backward  dx = dy * [qmin <= round_half_even(x / s) + z <= qmax]
//
// So the gradient is the identity inside the representable range and zero where the forward
// clipped. x is f32 or f64 (f64 for tests); scales must be finite and positive. The per-channel
// form applies scale[c] with zero point 0 to every element of x[c, ...] (weights, dim 0 = output
// channel). Both are differentiable ops recorded on the autograd tape.
#pragma once
#include <cstdint>

#include "weft/core/tensor.h"
#include "weft/kernels/cpu/quantize.h"

namespace weft::quant {

Tensor fake_quantize(const Tensor& x, const cpu::QuantParams& p, int32_t qmin, int32_t qmax);
// scales: [x.size(0)], f32 or x's dtype; read without gradient (they are measured, not learned).
Tensor fake_quantize_per_channel(const Tensor& x, const Tensor& scales, int32_t qmin, int32_t qmax);

}  // namespace weft::quant
