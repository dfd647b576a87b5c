// Quantization-aware training: fine-tune a model with the int8 rounding of static quantization
// simulated in its forward pass (quant/fake_quant.h), then convert it to the int8 model that
// rounding describes.
//
//   auto qat = quant::prepare_qat(*model);   // Linear → QatLinear, Conv2d → QatConv2d
//   ... train qat as any model (its parameters are model's own tensors) ...
//   auto int8 = quant::convert_qat(*qat);    // → QuantizedLinear / QuantizedConv2d
//
// A Qat layer fake-quantizes its input to u8 with the range a FakeQuantize observes (a moving
// average of each training batch's min and max; frozen in eval mode) and its weight per output
// channel exactly as quantize_weight_int8 will (symmetric, scale = max|w[o]| / 127, recomputed
// from the current weight at every step), so the converted model computes what the QAT model
// computed in eval mode, up to f32 rounding. Gradients pass straight through the rounding.
//
// prepare_qat shares parameters with the model it is given (training one trains the other);
// parameter-free children are shared as they are; other layers with parameters → ValueError.
#pragma once
#include <memory>

#include "weft/nn/container.h"
#include "weft/nn/conv.h"
#include "weft/nn/linear.h"
#include "weft/quant/observer.h"

namespace weft::quant {

// Fake-quantizes activations to u8: observes in training mode, uses the observed range always.
class FakeQuantize : public nn::Module {
 public:
  explicit FakeQuantize(double averaging = 0.01);
  Tensor forward(const Tensor& x) override;
  cpu::QuantParams quant_params() const { return observer_.quant_params(DType::u8); }
  std::string extra_repr() const override;

 private:
  MovingAverageObserver observer_;
};

class QatLinear : public nn::Module {
 public:
  explicit QatLinear(std::shared_ptr<nn::Linear> linear);
  Tensor forward(const Tensor& x) override;

  const std::shared_ptr<nn::Linear> linear;
  std::shared_ptr<FakeQuantize> input_quantizer;
};

class QatConv2d : public nn::Module {
 public:
  explicit QatConv2d(std::shared_ptr<nn::Conv2d> conv);
  Tensor forward(const Tensor& x) override;

  const std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<FakeQuantize> input_quantizer;
};

// The weight as the int8 kernels will see it: per-output-channel symmetric fake quantization.
Tensor fake_quantize_weight(const Tensor& weight);

std::shared_ptr<nn::Sequential> prepare_qat(const nn::Sequential& model);
// Needs every FakeQuantize to have observed at least one training batch (ValueError otherwise).
std::shared_ptr<nn::Sequential> convert_qat(const nn::Sequential& qat);

}  // namespace weft::quant
