// QuantizedConv2d: static int8 replacement for nn::Conv2d, for inference (no gradient flows).
// Takes f32 x [N, C, H, W] and returns f32 [N, O, OH, OW], like the layer it replaces: x is
// quantized to u8 with the calibrated input scale and zero point, then cpu::Int8Conv2d.
//
// Buffers (what a quantized checkpoint holds for it), never changed after construction:
//   weight            i8 [O, C / groups, kH, kW]
//   weight_scale      f32 [O]           one per output channel, symmetric
//   bias              f32 [O]           (when the layer has one)
//   input_scale       f32 []
//   input_zero_point  i32 []
// Stride, padding, dilation and groups are not buffers: they come from the architecture.
#pragma once
#include <memory>

#include "weft/kernels/cpu/int8.h"
#include "weft/nn/conv.h"
#include "weft/nn/module.h"

namespace weft::quant {

class QuantizedConv2d : public nn::Module {
 public:
  QuantizedConv2d(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias, const cpu::Conv2dParams& params,
                  const cpu::QuantParams& input);
  static std::shared_ptr<QuantizedConv2d> from_float(const nn::Conv2d& conv, const cpu::QuantParams& input);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const cpu::Conv2dParams params;
  const cpu::QuantParams input;

 private:
  cpu::Int8Conv2d kernel_;
  Shape weight_shape_;
};

// The kernel parameters of an nn::Conv2d.
cpu::Conv2dParams conv2d_params(const nn::Conv2d& conv);

}  // namespace weft::quant
