// Observers: what calibration learns about an activation, the range that its quantization
// parameters are then chosen to cover (cpu::choose_quant_params).
//
// MinMaxObserver keeps the smallest and largest value ever seen: nothing is clipped, and one
// outlier can stretch the scale for everything else. PercentileObserver clips the tails: for each
// observed batch it takes the value below which `percentile` % of the batch lies (and the one
// above which the same share lies at the bottom) and reports the mean of those per-batch bounds
// over all batches; so it needs no memory beyond one batch and does not depend on batch order.
// MovingAverageObserver follows each batch's min and max with weight `averaging` (the first batch
// sets them): for quantization-aware training, where the activations drift as the weights train.
//
// Invariants: range() is only defined once something was observed (ValueError before); NaN is
// ignored; an observer sees f32 tensors only (DTypeError otherwise).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "weft/core/tensor.h"
#include "weft/kernels/cpu/quantize.h"

namespace weft::quant {

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void observe(const Tensor& x) = 0;
  virtual cpu::MinMax range() const = 0;
  virtual std::string describe() const = 0;  // "minmax", "percentile 99.99"
  // The params that cover range() in `dtype` (u8: the activations of int8 kernels).
  cpu::QuantParams quant_params(DType dtype = DType::u8) const;
  int64_t batches() const { return batches_; }

 protected:
  int64_t batches_ = 0;
};

class MinMaxObserver : public Observer {
 public:
  void observe(const Tensor& x) override;
  cpu::MinMax range() const override;
  std::string describe() const override { return "minmax"; }

 private:
  cpu::MinMax range_;
};

class PercentileObserver : public Observer {
 public:
  // percentile in (50, 100]; 100 keeps each batch's min and max.
  explicit PercentileObserver(double percentile = 99.99);
  void observe(const Tensor& x) override;
  cpu::MinMax range() const override;
  std::string describe() const override;

  const double percentile;

 private:
  double lower_sum_ = 0, upper_sum_ = 0;
};

class MovingAverageObserver : public Observer {
 public:
  // averaging in (0, 1]: 1 keeps only the last batch's range.
  explicit MovingAverageObserver(double averaging = 0.01);
  void observe(const Tensor& x) override;
  cpu::MinMax range() const override;
  std::string describe() const override;

  const double averaging;

 private:
  double min_ = 0, max_ = 0;
};

// "minmax" or "percentile" (with `percentile`); anything else → ValueError naming the choices.
std::unique_ptr<Observer> make_observer(const std::string& kind, double percentile = 99.99);

}  // namespace weft::quant
