// Quantized replacements for nn::Linear, for inference (no gradient flows through them).
// Each takes f32 x [..., in] and returns f32 [..., out], like the layer it replaces.
//
//   QuantizedLinear         static int8: x is quantized to u8 with the scale and zero point that
//                           calibration chose (quant/ptq.h), then cpu::Int8Linear.
//   DynamicQuantizedLinear  dynamic int8: the u8 scale and zero point come from each batch's own
//                           min and max (one extra pass over x), as torch's quantize_dynamic.
//   Int8WeightOnlyLinear    weight-only int8 (per output channel), f32 activations: what a
//                           language model's decoding wants, bound by reading the weights.
//   Int4Linear              weight-only int4 (groups of input features), f32 activations.
//
// What each saves (its buffers, so state_dict() is exactly what a quantized checkpoint holds):
//   weight            i8 [out, in]            (int4: u8 [out, ceil(in / 2)], two per byte)
//   weight_scale      f32 [out]               (int4: f32 [out, ceil(in / group_size)])
//   bias              f32 [out]               (when the layer has one)
//   input_scale       f32 []                  (static only)
//   input_zero_point  i32 []                  (static only)
// The buffers never change after construction, and the kernel packs the weight once then.
#pragma once
#include <memory>

#include "weft/kernels/cpu/int8.h"
#include "weft/nn/linear.h"
#include "weft/nn/module.h"

namespace weft::quant {

class QuantizedLinear : public nn::Module {
 public:
  // weight i8 [out, in], weight_scale f32 [out], bias f32 [out] or undefined.
  QuantizedLinear(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias, const cpu::QuantParams& input);
  // Quantizes `linear`'s weight per output channel; `input` is the calibrated activation range.
  static std::shared_ptr<QuantizedLinear> from_float(const nn::Linear& linear, const cpu::QuantParams& input);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t in_features, out_features;
  const cpu::QuantParams input;

 private:
  cpu::Int8Linear kernel_;
  bool has_bias_;
};

class DynamicQuantizedLinear : public nn::Module {
 public:
  DynamicQuantizedLinear(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias);
  static std::shared_ptr<DynamicQuantizedLinear> from_float(const nn::Linear& linear);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t in_features, out_features;

 private:
  cpu::Int8Linear kernel_;
  bool has_bias_;
};

class Int8WeightOnlyLinear : public nn::Module {
 public:
  // weight i8 [out, in], weight_scale f32 [out], bias f32 [out] or undefined.
  Int8WeightOnlyLinear(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias);
  static std::shared_ptr<Int8WeightOnlyLinear> from_float(const nn::Linear& linear);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t in_features, out_features;

 private:
  Tensor weight_, scales_, bias_;
};

class Int4Linear : public nn::Module {
 public:
  // packed u8 [out, ceil(in / 2)], scales f32 [out, ceil(in / group_size)], bias f32 [out] or undefined.
  Int4Linear(int64_t in_features, int64_t group_size, const Tensor& packed, const Tensor& scales, const Tensor& bias);
  static std::shared_ptr<Int4Linear> from_float(const nn::Linear& linear, int64_t group_size = 32);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const int64_t in_features, out_features, group_size;

 private:
  Tensor packed_, scales_, bias_;
};

}  // namespace weft::quant
