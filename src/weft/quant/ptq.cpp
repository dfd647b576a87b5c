#include "weft/quant/ptq.h"

#include <functional>

#include "weft/autograd/grad_mode.h"
#include "weft/nn/conv.h"
#include "weft/nn/linear.h"
#include "weft/quant/conv.h"
#include "weft/quant/linear.h"
#include "weft/quant/observer.h"

namespace weft::quant {

namespace {

// A copy of `model` with each child replaced by convert(child), or kept when it returns null.
// Children with parameters that convert leaves alone would silently stay f32: refused.
std::shared_ptr<nn::Sequential> convert_children(
    const nn::Sequential& model, const std::function<std::shared_ptr<nn::Module>(size_t, nn::Module&)>& convert,
    const char* what) {
  auto out = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i < model.size(); ++i) {
    nn::Module& child = *model[i];
    std::shared_ptr<nn::Module> replaced = convert(i, child);
    WEFT_CHECK(replaced || child.parameters().empty() || dynamic_cast<nn::Conv2d*>(&child), ValueError, what,
               ": cannot quantize child ", i, " (", child.name(), "): only Linear and Conv2d layers with parameters "
               "are supported");
    out->push_back(replaced ? replaced : model[i]);
  }
  return out;
}

}  // namespace

std::shared_ptr<nn::Sequential> quantize_static(const nn::Sequential& model, const std::vector<Tensor>& batches,
                                                const CalibrationOptions& options) {
  WEFT_CHECK(!batches.empty(), ValueError, "quantize_static: no calibration batches; pass at least one");
  std::vector<std::unique_ptr<Observer>> observers(model.size());
  for (size_t i = 0; i < model.size(); ++i)
    if (dynamic_cast<nn::Linear*>(model[i].get()) || dynamic_cast<nn::Conv2d*>(model[i].get()))
      observers[i] = make_observer(options.observer, options.percentile);
  {
    NoGradGuard no_grad;
    std::vector<bool> was_training;
    for (size_t i = 0; i < model.size(); ++i) {
      was_training.push_back(model[i]->is_training());
      model[i]->eval();
    }
    for (const Tensor& batch : batches) {
      Tensor x = batch;
      for (size_t i = 0; i < model.size(); ++i) {
        if (observers[i]) observers[i]->observe(x);
        x = (*model[i])(x);
      }
    }
    for (size_t i = 0; i < model.size(); ++i) model[i]->train(was_training[i]);
  }
  return convert_children(
      model,
      [&](size_t i, nn::Module& child) -> std::shared_ptr<nn::Module> {
        if (auto* linear = dynamic_cast<nn::Linear*>(&child))
          return QuantizedLinear::from_float(*linear, observers[i]->quant_params());
        if (auto* conv = dynamic_cast<nn::Conv2d*>(&child))
          return QuantizedConv2d::from_float(*conv, observers[i]->quant_params());
        return nullptr;
      },
      "quantize_static");
}

std::shared_ptr<nn::Sequential> quantize_dynamic(const nn::Sequential& model) {
  return convert_children(
      model,
      [](size_t, nn::Module& child) -> std::shared_ptr<nn::Module> {
        if (auto* linear = dynamic_cast<nn::Linear*>(&child)) return DynamicQuantizedLinear::from_float(*linear);
        return nullptr;
      },
      "quantize_dynamic");
}

std::shared_ptr<nn::Sequential> quantize_int4(const nn::Sequential& model, int64_t group_size) {
  return convert_children(
      model,
      [&](size_t, nn::Module& child) -> std::shared_ptr<nn::Module> {
        if (auto* linear = dynamic_cast<nn::Linear*>(&child)) return Int4Linear::from_float(*linear, group_size);
        return nullptr;
      },
      "quantize_int4");
}

int64_t quantize_linear_weights(nn::Module& model, int bits, int64_t group_size) {
  WEFT_CHECK(bits == 8 || bits == 4, ValueError, "quantize_linear_weights: bits must be 8 or 4, got ", bits);
  // Every (parent, child name) first: replacing changes the tree named_modules walks.
  struct Found {
    nn::Module* parent;
    std::string name;
    std::shared_ptr<nn::Linear> linear;
  };
  std::vector<Found> linears;
  for (auto& [name, module] : model.named_modules())
    for (const auto& [child_name, child] : module->named_children())
      if (auto linear = std::dynamic_pointer_cast<nn::Linear>(child)) linears.push_back({module, child_name, linear});
  for (const Found& f : linears)
    f.parent->replace_module(f.name, bits == 8 ? std::shared_ptr<nn::Module>(Int8WeightOnlyLinear::from_float(*f.linear))
                                               : Int4Linear::from_float(*f.linear, group_size));
  return static_cast<int64_t>(linears.size());
}

}  // namespace weft::quant
