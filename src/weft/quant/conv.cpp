#include "weft/quant/conv.h"

#include "weft/quant/weights.h"

namespace weft::quant {

cpu::Conv2dParams conv2d_params(const nn::Conv2d& conv) {
  return {{conv.stride.h, conv.stride.w}, {conv.padding.h, conv.padding.w}, {conv.dilation.h, conv.dilation.w}, conv.groups};
}

QuantizedConv2d::QuantizedConv2d(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias,
                                 const cpu::Conv2dParams& params, const cpu::QuantParams& input)
    : Module("QuantizedConv2d"), params(params), input(input), kernel_(weight, weight_scale, bias, params),
      weight_shape_(weight.shape()) {
  cpu::check_quant_params(input, DType::u8, "QuantizedConv2d input");
  register_buffer("weight", weight);
  register_buffer("weight_scale", weight_scale);
  if (bias.defined()) register_buffer("bias", bias);
  register_buffer("input_scale", Tensor::scalar(input.scale, DType::f32));
  register_buffer("input_zero_point", Tensor::scalar(input.zero_point, DType::i32));
}

std::shared_ptr<QuantizedConv2d> QuantizedConv2d::from_float(const nn::Conv2d& conv, const cpu::QuantParams& input) {
  Int8Weight w = quantize_weight_int8(conv.weight.detach().to(DType::f32));
  Tensor bias = conv.bias.defined() ? conv.bias.detach().to(DType::f32) : Tensor();
  return std::make_shared<QuantizedConv2d>(w.values, w.scales, bias, conv2d_params(conv), input);
}

Tensor QuantizedConv2d::forward(const Tensor& x) {
  WEFT_CHECK(x.defined() && x.dtype() == DType::f32, DTypeError, "QuantizedConv2d: expected an f32 input, got ",
             x.defined() ? dtype_name(x.dtype()) : "an undefined tensor");
  return kernel_.forward(cpu::quantize(x, input, DType::u8), input);
}

std::string QuantizedConv2d::extra_repr() const {
  return str(weight_shape_[1] * params.groups, ", ", weight_shape_[0], ", kernel_size=(", weight_shape_[2], ", ",
             weight_shape_[3], "), stride=(", params.stride[0], ", ", params.stride[1], "), input_scale=", input.scale,
             ", input_zero_point=", input.zero_point);
}

}  // namespace weft::quant
