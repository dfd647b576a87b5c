// Parameter-free layers wrapping the functional activations, and Dropout (active only in training).
#pragma once
#include "weft/nn/module.h"
#include "weft/ops/activation.h"

namespace weft::nn {

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::none) : Module("GELU"), approximate(approximate) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const GeluApproximation approximate;
};

// Zeroes elements with probability p and scales the rest by 1 / (1 - p) in training; the identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const double p;
};

}  // namespace weft::nn
