#include "weft/quant/qat.h"

#include "weft/ops/conv.h"
#include "weft/ops/linear.h"
#include "weft/quant/conv.h"
#include "weft/quant/fake_quant.h"
#include "weft/quant/linear.h"
#include "weft/quant/weights.h"

namespace weft::quant {

FakeQuantize::FakeQuantize(double averaging) : Module("FakeQuantize"), observer_(averaging) {}

Tensor FakeQuantize::forward(const Tensor& x) {
  if (is_training()) observer_.observe(x.detach().to(DType::f32));
  return fake_quantize(x, quant_params(), cpu::quant_min(DType::u8), cpu::quant_max(DType::u8));
}

std::string FakeQuantize::extra_repr() const {
  if (observer_.batches() == 0) return observer_.describe() + ", nothing observed";
  cpu::MinMax r = observer_.range();
  return str(observer_.describe(), ", range=[", r.min, ", ", r.max, "]");
}

Tensor fake_quantize_weight(const Tensor& weight) {
  return fake_quantize_per_channel(weight, int8_weight_scales(weight.detach().to(DType::f32)), -127, 127);
}

QatLinear::QatLinear(std::shared_ptr<nn::Linear> linear)
    : Module("QatLinear"), linear(std::move(linear)) {
  register_parameter("weight", this->linear->weight);
  if (this->linear->bias.defined()) register_parameter("bias", this->linear->bias);
  register_module("input_quantizer", input_quantizer, std::make_shared<FakeQuantize>());
}

Tensor QatLinear::forward(const Tensor& x) {
  return weft::linear((*input_quantizer)(x), fake_quantize_weight(linear->weight), linear->bias);
}

QatConv2d::QatConv2d(std::shared_ptr<nn::Conv2d> conv)
    : Module("QatConv2d"), conv(std::move(conv)) {
  register_parameter("weight", this->conv->weight);
  if (this->conv->bias.defined()) register_parameter("bias", this->conv->bias);
  register_module("input_quantizer", input_quantizer, std::make_shared<FakeQuantize>());
}

Tensor QatConv2d::forward(const Tensor& x) {
  cpu::Conv2dParams p = conv2d_params(*conv);
  return conv2d((*input_quantizer)(x), fake_quantize_weight(conv->weight), conv->bias,
                {p.stride, p.padding, p.dilation, p.groups});
}

std::shared_ptr<nn::Sequential> prepare_qat(const nn::Sequential& model) {
  auto out = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i < model.size(); ++i) {
    const std::shared_ptr<nn::Module>& child = model[i];
    if (auto linear = std::dynamic_pointer_cast<nn::Linear>(child)) out->push_back(std::make_shared<QatLinear>(linear));
    else if (auto conv = std::dynamic_pointer_cast<nn::Conv2d>(child)) out->push_back(std::make_shared<QatConv2d>(conv));
    else {
      WEFT_CHECK(child->parameters().empty(), ValueError, "prepare_qat: cannot prepare child ", i, " (", child->name(),
                 "): only Linear and Conv2d layers with parameters are supported");
      out->push_back(child);
    }
  }
  out->train(model.is_training());
  return out;
}

std::shared_ptr<nn::Sequential> convert_qat(const nn::Sequential& qat) {
  auto out = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i < qat.size(); ++i) {
    const std::shared_ptr<nn::Module>& child = qat[i];
    if (auto* linear = dynamic_cast<QatLinear*>(child.get()))
      out->push_back(QuantizedLinear::from_float(*linear->linear, linear->input_quantizer->quant_params()));
    else if (auto* conv = dynamic_cast<QatConv2d*>(child.get()))
      out->push_back(QuantizedConv2d::from_float(*conv->conv, conv->input_quantizer->quant_params()));
    else
      out->push_back(child);
  }
  out->eval();
  return out;
}

}  // namespace weft::quant
