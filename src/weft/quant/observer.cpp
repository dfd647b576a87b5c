#include "weft/quant/observer.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace weft::quant {

namespace {

void check_observed(const Tensor& x, const std::string& who) {
  WEFT_CHECK(x.defined() && x.dtype() == DType::f32, DTypeError, who, " observer: expected an f32 tensor, got ",
             x.defined() ? dtype_name(x.dtype()) : "an undefined tensor");
}

}  // namespace

cpu::QuantParams Observer::quant_params(DType dtype) const {
  cpu::MinMax r = range();
  return cpu::choose_quant_params(r.min, r.max, dtype);
}

void MinMaxObserver::observe(const Tensor& x) {
  check_observed(x, describe());
  if (x.numel() == 0) return;
  cpu::MinMax r = cpu::aminmax(x);
  range_ = batches_ == 0 ? r : cpu::MinMax{std::min(range_.min, r.min), std::max(range_.max, r.max)};
  ++batches_;
}

cpu::MinMax MinMaxObserver::range() const {
  WEFT_CHECK(batches_ > 0, ValueError, "minmax observer: no data observed yet; calibrate with at least one batch");
  return range_;
}

PercentileObserver::PercentileObserver(double percentile) : percentile(percentile) {
  WEFT_CHECK(percentile > 50 && percentile <= 100, ValueError,
             "percentile observer: the percentile must lie in (50, 100], got ", percentile);
}

std::string PercentileObserver::describe() const { return str("percentile ", percentile); }

// Nearest rank: the value at sorted position ceil(p n / 100) - 1, found with nth_element.
void PercentileObserver::observe(const Tensor& x) {
  check_observed(x, describe());
  std::vector<float> values = x.to_vector<float>();
  std::erase_if(values, [](float v) { return std::isnan(v); });
  if (values.empty()) return;
  const int64_t n = static_cast<int64_t>(values.size());
  auto rank = [&](double p) { return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(p * n / 100)) - 1, 0, n - 1); };
  const int64_t upper = rank(percentile), lower = rank(100 - percentile);
  std::nth_element(values.begin(), values.begin() + upper, values.end());
  upper_sum_ += values[upper];
  std::nth_element(values.begin(), values.begin() + lower, values.begin() + upper);
  lower_sum_ += values[lower];
  ++batches_;
}

cpu::MinMax PercentileObserver::range() const {
  WEFT_CHECK(batches_ > 0, ValueError, describe(), " observer: no data observed yet; calibrate with at least one batch");
  return {static_cast<float>(lower_sum_ / batches_), static_cast<float>(upper_sum_ / batches_)};
}

MovingAverageObserver::MovingAverageObserver(double averaging) : averaging(averaging) {
  WEFT_CHECK(averaging > 0 && averaging <= 1, ValueError,
             "moving-average observer: the averaging constant must lie in (0, 1], got ", averaging);
}

std::string MovingAverageObserver::describe() const { return str("moving average ", averaging); }

void MovingAverageObserver::observe(const Tensor& x) {
  check_observed(x, describe());
  if (x.numel() == 0) return;
  cpu::MinMax r = cpu::aminmax(x);
  min_ = batches_ == 0 ? r.min : min_ + averaging * (r.min - min_);
  max_ = batches_ == 0 ? r.max : max_ + averaging * (r.max - max_);
  ++batches_;
}

cpu::MinMax MovingAverageObserver::range() const {
  WEFT_CHECK(batches_ > 0, ValueError, describe(), " observer: no data observed yet; run at least one training batch");
  return {static_cast<float>(min_), static_cast<float>(max_)};
}

std::unique_ptr<Observer> make_observer(const std::string& kind, double percentile) {
  if (kind == "minmax") return std::make_unique<MinMaxObserver>();
  if (kind == "percentile") return std::make_unique<PercentileObserver>(percentile);
  throw ValueError(str("unknown observer '", kind, "': expected minmax or percentile"));
}

}  // namespace weft::quant
