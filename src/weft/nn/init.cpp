#include "weft/nn/init.h"

#include <cmath>

namespace weft::nn::init {

int64_t fan_in(const Tensor& weight) {
  WEFT_CHECK(weight.dim() >= 2, ShapeError, "fan_in: needs a weight with at least 2 dims, got shape ",
             shape_str(weight.shape()));
  int64_t fan = weight.size(1);
  for (int64_t d = 2; d < weight.dim(); ++d) fan *= weight.size(d);
  return fan;
}

// Draws in f64 and rounds once into t's dtype, so every dtype sees the same sequence of draws.
template <typename Draw>
static Tensor fill(Tensor& t, Draw draw) {
  Tensor values = Tensor::empty(t.shape(), DType::f64);
  double* p = values.data<double>();
  for (int64_t i = 0; i < values.numel(); ++i) p[i] = draw();
  t.copy_(values);
  return t;
}

Tensor uniform_(Tensor t, double low, double high, Generator& gen) {
  return fill(t, [&] { return low + (high - low) * gen.uniform(); });
}

Tensor normal_(Tensor t, double mean, double std, Generator& gen) {
  return fill(t, [&] { return mean + std * gen.normal(); });
}

Tensor zeros_(Tensor t) { return t.fill_(0); }
Tensor ones_(Tensor t) { return t.fill_(1); }

Tensor kaiming_uniform_(Tensor t, double a, Generator& gen) {
  double gain = std::sqrt(2.0 / (1 + a * a));
  double bound = gain * std::sqrt(3.0 / static_cast<double>(fan_in(t)));
  return uniform_(t, -bound, bound, gen);
}

}  // namespace weft::nn::init
