// int8 linear and 2-d convolution on oneDNN, accumulating in s32 (AVX512-VNNI, or AMX where the
// CPU has it and oneDNN picks it), producing f32. Not differentiable: inference only.
//
//   linear:  y[m, n]          = xs * (ws[n] * sum_k (xq[m, k] - xz) * wq[n, k]) + bias[n]
//   conv2d:  y[b, o, oh, ow]  = xs * (ws[o] * sum_taps (xq[b, c, ih, iw] - xz) * wq[o, c, kh, kw]) + bias[o]
//
// Activations xq are u8 with one scale xs and zero point xz for the whole tensor (asymmetric, so
// a ReLU output or a normalised image uses all 256 levels); weights wq are i8, symmetric (zero
// point 0), with one scale per output channel; bias and scales are f32. Convolution layouts are
// PyTorch's (x [N, C, H, W], weight [O, C / groups, kH, kW]); taps in the zero padding add
// nothing, which oneDNN gets right by padding with xz.
//
// A kernel object is built once per layer from the quantized weights: it reorders them once into
// the blocked layout oneDNN's int8 kernels want (format_tag::any; the plain layout runs several
// times slower) and keeps one primitive per input shape. The weight scales are baked into the
// primitive; xs, xz and the bias are passed at run time, so one primitive serves static
// quantization (fixed xs, xz) and dynamic quantization (xs, xz measured per batch). Calls are
// thread-safe.
//
// The s32 sum cannot overflow: a weight with more than 65793 products per output (K for linear,
// C / groups * kH * kW for conv) is refused (ValueError).
//
// reference::int8_linear / int8_conv2d are plain loops: the sum over taps is exact in int32, then
// scaled in f64. With power-of-two scales and a bias on the same grid the fast kernels must match
// them bit for bit; otherwise within f32 rounding.
#pragma once
#include <memory>
#include <vector>

#include "weft/core/tensor.h"
#include "weft/kernels/cpu/conv.h"
#include "weft/kernels/cpu/quantize.h"

namespace weft::cpu {

namespace detail {
struct Int8Primitives;  // the primitive and packed-weight caches (int8.cpp)
}

class Int8Linear {
 public:
  // weight i8 [N, K], weight_scale f32 [N] (finite, positive), bias f32 [N] or undefined.
  Int8Linear(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias = {});
  ~Int8Linear();
  // x u8 [M, K] → f32 [M, N]. ShapeError / DTypeError / ValueError on anything else.
  Tensor forward(const Tensor& x, const QuantParams& x_params) const;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
  std::vector<float> weight_scale_;
  std::unique_ptr<detail::Int8Primitives> primitives_;
};

class Int8Conv2d {
 public:
  // weight i8 [O, C / groups, kH, kW], weight_scale f32 [O], bias f32 [O] or undefined.
  Int8Conv2d(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias, const Conv2dParams& params);
  ~Int8Conv2d();
  // x u8 [N, C, H, W] → f32 [N, O, OH, OW].
  Tensor forward(const Tensor& x, const QuantParams& x_params) const;

 private:
  Tensor weight_, bias_;
  std::vector<float> weight_scale_;
  Conv2dParams params_;
  std::unique_ptr<detail::Int8Primitives> primitives_;
};

namespace reference {
Tensor int8_linear(const Tensor& x, const QuantParams& x_params, const Tensor& weight, const Tensor& weight_scale,
                   const Tensor& bias);
Tensor int8_conv2d(const Tensor& x, const QuantParams& x_params, const Tensor& weight, const Tensor& weight_scale,
                   const Tensor& bias, const Conv2dParams& params);
}  // namespace reference

}  // namespace weft::cpu
