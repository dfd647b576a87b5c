#include "weft/quant/linear.h"

#include "weft/kernels/cpu/int4.h"
#include "weft/kernels/cpu/matmul.h"
#include "weft/kernels/cpu/weight_only.h"
#include "weft/quant/weights.h"

namespace weft::quant {

namespace {

// f(rows) for x [..., in] folded to rows [M, in]; f's [M, out] result seen as [..., out].
template <typename Fn>
Tensor on_rows(const char* what, const Tensor& x, int64_t in, int64_t out, Fn&& f) {
  WEFT_CHECK(x.defined(), ValueError, what, ": undefined input");
  WEFT_CHECK(x.dtype() == DType::f32, DTypeError, what, ": expected an f32 input, got ", dtype_name(x.dtype()), " ",
             shape_str(x.shape()));
  WEFT_CHECK(x.dim() >= 1 && x.shape().back() == in, ShapeError, what, ": input ", shape_str(x.shape()), " has ",
             x.dim() ? x.shape().back() : 0, " features, expected ", in);
  Tensor y = f(cpu::fold_rows(x));
  Shape shape = x.shape();
  shape.back() = out;
  return y.as_strided(shape, contiguous_strides(shape), y.storage_offset());
}

Tensor f32_bias(const nn::Linear& linear) {
  return linear.bias.defined() ? linear.bias.detach().to(DType::f32) : Tensor();
}

std::string shape_repr(int64_t in, int64_t out, bool bias) {
  return str("in_features=", in, ", out_features=", out, ", bias=", bias ? "True" : "False");
}

}  // namespace

QuantizedLinear::QuantizedLinear(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias,
                                 const cpu::QuantParams& input)
    : Module("QuantizedLinear"),
      in_features(weight.defined() && weight.dim() == 2 ? weight.size(1) : 0),
      out_features(weight.defined() && weight.dim() == 2 ? weight.size(0) : 0),
      input(input),
      kernel_(weight, weight_scale, bias),
      has_bias_(bias.defined()) {
  cpu::check_quant_params(input, DType::u8, "QuantizedLinear input");
  register_buffer("weight", weight);
  register_buffer("weight_scale", weight_scale);
  if (bias.defined()) register_buffer("bias", bias);
  register_buffer("input_scale", Tensor::scalar(input.scale, DType::f32));
  register_buffer("input_zero_point", Tensor::scalar(input.zero_point, DType::i32));
}

std::shared_ptr<QuantizedLinear> QuantizedLinear::from_float(const nn::Linear& linear, const cpu::QuantParams& input) {
  Int8Weight w = quantize_weight_int8(linear.weight.detach().to(DType::f32));
  return std::make_shared<QuantizedLinear>(w.values, w.scales, f32_bias(linear), input);
}

Tensor QuantizedLinear::forward(const Tensor& x) {
  return on_rows("QuantizedLinear", x, in_features, out_features,
                 [&](const Tensor& rows) { return kernel_.forward(cpu::quantize(rows, input, DType::u8), input); });
}

std::string QuantizedLinear::extra_repr() const {
  return str(shape_repr(in_features, out_features, has_bias_), ", input_scale=", input.scale, ", input_zero_point=", input.zero_point);
}

DynamicQuantizedLinear::DynamicQuantizedLinear(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias)
    : Module("DynamicQuantizedLinear"),
      in_features(weight.defined() && weight.dim() == 2 ? weight.size(1) : 0),
      out_features(weight.defined() && weight.dim() == 2 ? weight.size(0) : 0),
      kernel_(weight, weight_scale, bias),
      has_bias_(bias.defined()) {
  register_buffer("weight", weight);
  register_buffer("weight_scale", weight_scale);
  if (bias.defined()) register_buffer("bias", bias);
}

std::shared_ptr<DynamicQuantizedLinear> DynamicQuantizedLinear::from_float(const nn::Linear& linear) {
  Int8Weight w = quantize_weight_int8(linear.weight.detach().to(DType::f32));
  return std::make_shared<DynamicQuantizedLinear>(w.values, w.scales, f32_bias(linear));
}

Tensor DynamicQuantizedLinear::forward(const Tensor& x) {
  return on_rows("DynamicQuantizedLinear", x, in_features, out_features, [&](const Tensor& rows) {
    cpu::MinMax r = cpu::aminmax(rows);
    cpu::QuantParams p = cpu::choose_quant_params(r.min, r.max, DType::u8);
    return kernel_.forward(cpu::quantize(rows, p, DType::u8), p);
  });
}

std::string DynamicQuantizedLinear::extra_repr() const {
  return shape_repr(in_features, out_features, has_bias_);
}

Int8WeightOnlyLinear::Int8WeightOnlyLinear(const Tensor& weight, const Tensor& weight_scale, const Tensor& bias)
    : Module("Int8WeightOnlyLinear"),
      in_features(weight.defined() && weight.dim() == 2 ? weight.size(1) : 0),
      out_features(weight.defined() && weight.dim() == 2 ? weight.size(0) : 0),
      weight_(weight),
      scales_(weight_scale),
      bias_(bias) {
  cpu::check_int8_weight("Int8WeightOnlyLinear", weight, weight_scale, bias, in_features);
  register_buffer("weight", weight);
  register_buffer("weight_scale", weight_scale);
  if (bias.defined()) register_buffer("bias", bias);
}

std::shared_ptr<Int8WeightOnlyLinear> Int8WeightOnlyLinear::from_float(const nn::Linear& linear) {
  Int8Weight w = quantize_weight_int8(linear.weight.detach().to(DType::f32));
  return std::make_shared<Int8WeightOnlyLinear>(w.values, w.scales, f32_bias(linear));
}

Tensor Int8WeightOnlyLinear::forward(const Tensor& x) {
  return on_rows("Int8WeightOnlyLinear", x, in_features, out_features, [&](const Tensor& rows) {
    return cpu::int8_weight_only_linear(rows, weight_, scales_, bias_);
  });
}

std::string Int8WeightOnlyLinear::extra_repr() const { return shape_repr(in_features, out_features, bias_.defined()); }

Int4Linear::Int4Linear(int64_t in_features, int64_t group_size, const Tensor& packed, const Tensor& scales,
                       const Tensor& bias)
    : Module("Int4Linear"),
      in_features(in_features),
      out_features(packed.defined() && packed.dim() == 2 ? packed.size(0) : 0),
      group_size(group_size),
      packed_(packed),
      scales_(scales),
      bias_(bias) {
  cpu::check_int4_weight("Int4Linear", packed, scales, in_features, group_size);
  WEFT_CHECK(!bias.defined() || (bias.dtype() == DType::f32 && bias.shape() == Shape{out_features}), ShapeError,
             "Int4Linear: expected an f32 bias [", out_features, "], got ", dtype_name(bias.dtype()), " ",
             shape_str(bias.shape()));
  register_buffer("weight", packed);
  register_buffer("weight_scale", scales);
  if (bias.defined()) register_buffer("bias", bias);
}

std::shared_ptr<Int4Linear> Int4Linear::from_float(const nn::Linear& linear, int64_t group_size) {
  Int4Weight w = quantize_weight_int4(linear.weight.detach().to(DType::f32), group_size);
  return std::make_shared<Int4Linear>(w.in_features, w.group_size, w.packed, w.scales, f32_bias(linear));
}

Tensor Int4Linear::forward(const Tensor& x) {
  return on_rows("Int4Linear", x, in_features, out_features, [&](const Tensor& rows) {
    return cpu::int4_linear(rows, packed_, scales_, group_size, bias_);
  });
}

std::string Int4Linear::extra_repr() const {
  return str(shape_repr(in_features, out_features, bias_.defined()), ", group_size=", group_size);
}

}  // namespace weft::quant
