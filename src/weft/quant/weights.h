// Weight quantization: how a trained f32 weight becomes the integers the int8 and int4 kernels
// read (cpu::Int8Linear, cpu::Int8Conv2d, cpu::int4_linear).
//
// int8, per output channel, symmetric: for each slice w[o, ...] the scale is max|w[o]| / 127 and
// q = clamp(round_half_even(w / scale), -127, 127), so the largest weight of every channel maps
// to ±127 and 0 stays 0 (zero point 0, which the int8 kernels assume). The range is kept
// symmetric, [-127, 127], so that negating a weight never saturates.
//
// int4, per group of `group_size` consecutive input features of a row, symmetric: scale =
// max|w[n, group]| / 7 and q = clamp(round_half_even(w / scale), -8, 7), packed two per byte
// (the layout cpu::pack_int4 defines).
//
// A channel or group that is all zeros gets scale 1 (every q is 0). Weights must be finite f32
// (ValueError naming the first bad value otherwise).
#pragma once
#include <cstdint>

#include "weft/core/tensor.h"

namespace weft::quant {

struct Int8Weight {
  Tensor values;  // i8, the weight's shape
  Tensor scales;  // f32 [out]
};
Int8Weight quantize_weight_int8(const Tensor& weight);
// The scales alone, f32 [out] (what QAT's weight fake quantization needs at every step).
Tensor int8_weight_scales(const Tensor& weight);
// values * scales[o] per output channel, in f32 (to measure what quantization lost).
Tensor dequantize_weight_int8(const Int8Weight& weight);

struct Int4Weight {
  Tensor packed;  // u8 [out, ceil(in / 2)]
  Tensor scales;  // f32 [out, ceil(in / group_size)]
  int64_t in_features = 0, group_size = 0;
};
Int4Weight quantize_weight_int4(const Tensor& weight, int64_t group_size = 32);

}  // namespace weft::quant
